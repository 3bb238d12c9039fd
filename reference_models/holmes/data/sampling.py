"""Fixed-length pooling of variable-length frame features (clip and frame branches).

The MS-SL / GMMFormer / Holmes releases turn a video of ``n`` frame features into ``M`` segment
features by averaging the frames between ``M + 1`` rounded, uniformly spaced boundaries
``b_i = round(i * n / M)``. A segment whose start equals its end (possible when ``n < M``) takes the
single frame at its start. The releases also clamp every boundary to ``n - 1``, so the last segment
never includes the last frame (unless it is empty); ``boundaries="release"`` reproduces that and
``boundaries="inclusive"`` keeps the last boundary at ``n`` (every frame is used).

Pooling is vectorised with a cumulative sum, so its cost does not depend on a Python loop over frames.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BOUNDARY_MODES", "segment_boundaries", "pool_segments", "sample_frames", "l2_normalize"]

BOUNDARY_MODES = ("release", "inclusive")

# The releases add this to the norm (not to its square) before dividing.
_L2_EPS = 1e-5


def segment_boundaries(n: int, n_segments: int, boundaries: str = "release") -> np.ndarray:
    """The ``n_segments + 1`` integer boundaries splitting ``n`` frames into uniform segments.

    Parameters
    ----------
    n : int
        Number of frames (>= 1).
    n_segments : int
        Number of segments (>= 1).
    boundaries : {"release", "inclusive"}
        ``"release"`` clamps every boundary to ``n - 1`` as the MS-SL/GMMFormer code does;
        ``"inclusive"`` keeps them in ``[0, n]``.

    Returns
    -------
    numpy.ndarray
        ``int64`` array of shape ``[n_segments + 1]``, non-decreasing.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1 frame, got {n}")
    if n_segments < 1:
        raise ValueError(f"n_segments must be >= 1, got {n_segments}")
    if boundaries not in BOUNDARY_MODES:
        raise ValueError(f"boundaries must be one of {BOUNDARY_MODES}, got {boundaries!r}")
    # round-half-to-even like torch.round / np.round in the releases; n / n_segments is exact for
    # power-of-two segment counts, so linspace and the release's arange(...) / M * n agree.
    idx = np.round(np.linspace(0.0, float(n), n_segments + 1)).astype(np.int64)
    if boundaries == "release":
        np.minimum(idx, n - 1, out=idx)
    return idx


def pool_segments(frames: np.ndarray, n_segments: int, boundaries: str = "release") -> np.ndarray:
    """Average ``frames [n, D]`` into ``n_segments`` uniform segments (an empty segment takes one frame).

    Returns a ``float32`` array ``[n_segments, D]``. Not normalised.
    """
    if frames.ndim != 2:
        raise ValueError(f"frames must be a 2-D array [n, D], got shape {frames.shape}")
    n = frames.shape[0]
    idx = segment_boundaries(n, n_segments, boundaries)
    start, end = idx[:-1], idx[1:]
    cums = np.zeros((n + 1, frames.shape[1]), dtype=np.float64)
    np.cumsum(frames, axis=0, dtype=np.float64, out=cums[1:])
    count = end - start
    empty = count <= 0
    sums = cums[end] - cums[start]
    means = sums / np.maximum(count, 1)[:, None]
    # start can equal n only in "inclusive" mode with n < n_segments rounding up; clamp to a real frame.
    single = frames[np.minimum(start, n - 1)]
    out = np.where(empty[:, None], single, means)
    return out.astype(np.float32, copy=False)


def sample_frames(frames: np.ndarray, max_len: int, boundaries: str = "release") -> np.ndarray:
    """Frame-branch sampling: pool uniformly to ``max_len`` when longer, otherwise return as is.

    Returns ``float32 [min(n, max_len), D]``; the caller pads and masks shorter videos.
    """
    if frames.shape[0] <= max_len:
        return np.asarray(frames, dtype=np.float32)
    return pool_segments(frames, max_len, boundaries)


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Divide the last axis by its Euclidean norm plus ``1e-5`` (the releases' convention).

    An all-zero row stays zero instead of becoming NaN.
    """
    x = np.asarray(x, dtype=np.float32)
    return x / (np.linalg.norm(x, axis=-1, keepdims=True) + np.float32(_L2_EPS))
