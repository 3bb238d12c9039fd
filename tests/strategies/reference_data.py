"""Hypothesis strategies for the Holmes reference-model data pipeline (frame arrays of any length)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st


@st.composite
def frame_arrays(draw, max_frames: int = 600, max_dim: int = 6) -> np.ndarray:
    """A float32 ``[n, D]`` array of frame features with ``1 <= n <= max_frames``, values of mixed scale."""
    n = draw(st.integers(1, max_frames))
    d = draw(st.integers(1, max_dim))
    seed = draw(st.integers(0, 2**32 - 1))
    scale = draw(st.sampled_from([1e-3, 1.0, 1e3]))
    return (np.random.default_rng(seed).standard_normal((n, d)) * scale).astype(np.float32)


segment_counts = st.sampled_from([1, 2, 3, 7, 32, 128])
boundary_modes = st.sampled_from(["release", "inclusive"])
