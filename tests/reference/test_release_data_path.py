"""The loader on untrimmed BigFile data (``benchmarks/untrimmed_sets.py``) gives the inputs the MS-SL-style releases
build: frames in ``video2frames`` order whatever the row order of ``feature.bin``, long videos averaged to 128 frames
and every video to 32 clips with the releases' boundaries, short videos padded and masked, captions cut to 30
tokens after normalising each token. The expected values are computed here from the raw files with plain loops."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from reference_models.holmes.data import load_split
from reference_models.holmes.data.loaders import build_train_batch, build_video_batch

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "benchmarks" / "untrimmed_sets.py"


@pytest.fixture(scope="module")
def untrimmed_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("untrimmed")
    args = ("--train-videos 12 --val-videos 4 --test-videos 4 --captions 3 --topics 5 --visual-dim 16 --text-dim 8 "
            "--median-length 200 --max-length 300 --short-fraction 0.3").split()
    run = subprocess.run([sys.executable, str(GENERATOR), "--root", str(root), "--seed", "3", *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return root


def _raw_frames(root: Path) -> dict[str, np.ndarray]:
    """Every video's frames in time order, read from the BigFile parts without the project's reader."""
    folder = root / "tvr" / "FeatureData" / "synthetic"
    n, dim = (int(x) for x in (folder / "shape.txt").read_text().split())
    rows = np.fromfile(folder / "feature.bin", dtype="<f4").reshape(n, dim)
    index = {name: i for i, name in enumerate((folder / "id.txt").read_text().split())}
    video2frames = ast.literal_eval((folder / "video2frames.txt").read_text())
    return {vid: rows[[index[name] for name in names]] for vid, names in video2frames.items()}


def _release_average(frames: np.ndarray, m: int) -> np.ndarray:
    """Average into ``m`` segments between boundaries round(i n / m), clamped to n - 1 (an empty one takes a frame)."""
    n = frames.shape[0]
    bounds = [min(int(np.round(i * n / m)), n - 1) for i in range(m + 1)]
    out = [frames[s:e].mean(axis=0) if s < e else frames[s] for s, e in zip(bounds[:-1], bounds[1:])]
    return np.stack(out)


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / (np.linalg.norm(x, axis=-1, keepdims=True) + 1e-5)


def test_the_set_is_untrimmed_with_rows_out_of_time_order(untrimmed_root):
    folder = untrimmed_root / "tvr" / "FeatureData" / "synthetic"
    lengths = [len(v) for v in ast.literal_eval((folder / "video2frames.txt").read_text()).values()]
    assert max(lengths) > 128 and min(lengths) < 32
    first = ast.literal_eval((folder / "video2frames.txt").read_text())["train_v00000"]
    names = (folder / "id.txt").read_text().split()[: len(first)]
    assert sorted(names) == sorted(first) and names != first  # the same rows, stored in another order


def test_clips_frames_and_masks_follow_the_release_rules(untrimmed_root):
    raw = _raw_frames(untrimmed_root)
    split = load_split(untrimmed_root, "tvr", "synthetic", "train")
    batch = build_video_batch(split, list(range(split.num_videos)))
    for i, vid in enumerate(batch.video_ids):
        frames = raw[vid]
        n = frames.shape[0]
        np.testing.assert_allclose(batch.clip_feats[i].numpy(), _normalise(_release_average(frames, 32)), atol=2e-6)
        sampled = frames if n <= 128 else _release_average(frames, 128)
        kept = min(n, 128)
        np.testing.assert_allclose(batch.frame_feats[i, :kept].numpy(), _normalise(sampled), atol=2e-6)
        assert batch.frame_mask[i].sum() == kept and bool(batch.frame_mask[i, :kept].all())
        assert float(batch.frame_feats[i, kept:].abs().sum()) == 0.0


def test_captions_are_normalised_per_token_then_cut_to_30(untrimmed_root):
    split = load_split(untrimmed_root, "tvr", "synthetic", "train", max_query_len=30)
    batch = build_train_batch(split, list(range(split.num_videos)))
    with h5py.File(untrimmed_root / "tvr" / "TextData" / "roberta_tvr_query_feat.hdf5", "r") as f:
        tokens = {cap: np.asarray(f[cap]) for cap in batch.caption_ids}
    assert max(t.shape[0] for t in tokens.values()) > 30
    for q, cap in enumerate(batch.caption_ids):
        expected = _normalise(tokens[cap])[:30]
        np.testing.assert_allclose(batch.query_feats[q, : len(expected)].numpy(), expected, atol=2e-6)
        assert int(batch.query_mask[q].sum()) == len(expected)
        assert split.video_ids[int(batch.query_video[q])] == cap.split("#")[0]
