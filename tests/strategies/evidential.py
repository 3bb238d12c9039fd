"""Hypothesis strategies for the inter-video evidential tests: similarities, Dirichlet parameters, targets."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays


@st.composite
def similarity_batches(
    draw, min_rows: int = 1, max_rows: int = 12, min_cols: int = 1, max_cols: int = 10, scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(frame_sim, clip_sim, target)`` with float64 similarities in ``[-scale, scale]`` and index targets."""
    rows = draw(st.integers(min_rows, max_rows))
    cols = draw(st.integers(min_cols, max_cols))
    elements = st.floats(-scale, scale, allow_nan=False, allow_infinity=False, width=64)
    frame = draw(arrays(np.float64, (rows, cols), elements=elements))
    clip = draw(arrays(np.float64, (rows, cols), elements=elements))
    target = draw(arrays(np.int64, (rows,), elements=st.integers(0, cols - 1)))
    return torch.from_numpy(frame), torch.from_numpy(clip), torch.from_numpy(target)


@st.composite
def multi_hot_targets(draw, rows: int, cols: int) -> torch.Tensor:
    """A ``{0, 1}`` float64 matrix ``[rows, cols]`` with at least one positive per row."""
    mask = draw(arrays(np.bool_, (rows, cols)))
    first = draw(arrays(np.int64, (rows,), elements=st.integers(0, cols - 1)))
    mask[np.arange(rows), first] = True
    return torch.from_numpy(mask.astype(np.float64))


@st.composite
def dirichlet_alphas(
    draw, min_rows: int = 1, max_rows: int = 6, min_cols: int = 1, max_cols: int = 8, max_log_evidence: float = 8.0
) -> torch.Tensor:
    """Float64 Dirichlet parameters ``alpha = 1 + evidence`` with evidence spanning ``[0, e^max_log_evidence]``."""
    rows = draw(st.integers(min_rows, max_rows))
    cols = draw(st.integers(min_cols, max_cols))
    log_e = draw(
        arrays(np.float64, (rows, cols), elements=st.floats(-30.0, max_log_evidence, allow_nan=False, width=64))
    )
    return torch.from_numpy(1.0 + np.exp(log_e))
