"""Clip/frame pooling and normalisation of the reference data pipeline against direct loop references."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from reference_models.holmes.data.sampling import l2_normalize, pool_segments, sample_frames, segment_boundaries
from tests.strategies.reference_data import boundary_modes, frame_arrays, segment_counts


def loop_pool(frames: np.ndarray, m: int, clamp_last: bool) -> np.ndarray:
    """Direct reference: boundaries round(i * n / m) (half to even), optionally clamped to n - 1;
    mean of frames[s:e], or frames[s] when the segment is empty."""
    n = len(frames)
    bounds = [round(i * n / m) for i in range(m + 1)]  # Python's round is half-to-even like np.round
    if clamp_last:
        bounds = [min(b, n - 1) for b in bounds]
    out = []
    for i in range(m):
        s, e = bounds[i], bounds[i + 1]
        if s < e:
            out.append(frames[s:e].astype(np.float64).mean(axis=0))
        else:
            out.append(frames[min(s, n - 1)].astype(np.float64))
    return np.stack(out)


def loop_sample_frames(frames: np.ndarray, max_len: int, clamp_last: bool) -> np.ndarray:
    return frames if len(frames) <= max_len else loop_pool(frames, max_len, clamp_last)


def frames_of(n: int, d: int = 5, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


EDGE_LENGTHS = [1, 2, 31, 32, 33, 64, 127, 128, 129, 10_000]


@pytest.mark.parametrize("n", EDGE_LENGTHS)
@pytest.mark.parametrize("mode", ["release", "inclusive"])
def test_clip_pooling_matches_loop_at_edge_lengths(n, mode):
    x = frames_of(n, seed=n)
    got = pool_segments(x, 32, mode)
    assert got.shape == (32, 5) and got.dtype == np.float32
    np.testing.assert_allclose(got, loop_pool(x, 32, mode == "release"), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", EDGE_LENGTHS)
@pytest.mark.parametrize("mode", ["release", "inclusive"])
def test_frame_sampling_matches_loop_at_edge_lengths(n, mode):
    x = frames_of(n, seed=n + 1)
    got = sample_frames(x, 128, mode)
    assert got.shape == (min(n, 128), 5)
    np.testing.assert_allclose(got, loop_sample_frames(x, 128, mode == "release"), rtol=1e-5, atol=1e-6)


def test_short_video_frames_pass_through_unchanged():
    x = frames_of(128)
    np.testing.assert_array_equal(sample_frames(x, 128), x)


def test_release_boundaries_drop_the_last_frame_and_inclusive_keeps_it():
    # 64 frames into 32 segments: the release's last segment is frames [62, 63) only.
    x = np.arange(64, dtype=np.float32)[:, None]
    assert pool_segments(x, 32, "release")[-1, 0] == 62.0
    assert pool_segments(x, 32, "inclusive")[-1, 0] == 62.5


def test_single_frame_video_repeats_that_frame():
    x = frames_of(1)
    np.testing.assert_array_equal(pool_segments(x, 32), np.repeat(x, 32, axis=0))


def test_segment_boundaries_are_rounded_linspace():
    np.testing.assert_array_equal(segment_boundaries(10, 4, "inclusive"), [0, 2, 5, 8, 10])  # 2.5 -> 2, 7.5 -> 8
    np.testing.assert_array_equal(segment_boundaries(10, 4, "release"), [0, 2, 5, 8, 9])


@pytest.mark.parametrize("bad", [{"n": 0}, {"n_segments": 0}, {"boundaries": "nearest"}])
def test_segment_boundaries_reject_bad_arguments(bad):
    kwargs = {"n": 5, "n_segments": 4, "boundaries": "release", **bad}
    with pytest.raises(ValueError, match=next(iter(bad))):
        segment_boundaries(**kwargs)


def test_pool_segments_rejects_non_2d():
    with pytest.raises(ValueError, match="frames"):
        pool_segments(np.zeros(5, dtype=np.float32), 4)


@given(frames_arr=frame_arrays(), m=segment_counts, mode=boundary_modes)
def test_pooling_matches_loop_property(frames_arr, m, mode):
    ref = loop_pool(frames_arr, m, mode == "release")
    scale = max(1.0, float(np.abs(frames_arr).max()))
    np.testing.assert_allclose(pool_segments(frames_arr, m, mode), ref, rtol=1e-5, atol=1e-6 * scale)


def test_l2_normalize_matches_release_convention_and_keeps_zero_rows():
    x = np.array([[3.0, 4.0], [0.0, 0.0]], dtype=np.float32)
    got = l2_normalize(x)
    np.testing.assert_allclose(got[0], np.array([3.0, 4.0]) / (5.0 + 1e-5), rtol=1e-6)
    np.testing.assert_array_equal(got[1], [0.0, 0.0])
    assert np.isfinite(got).all()
