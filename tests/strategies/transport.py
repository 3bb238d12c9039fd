"""Hypothesis strategies for the optimal-transport tests: masked similarity batches and marginals."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays


@st.composite
def masked_similarity_batches(
    draw,
    max_batch: int = 3,
    max_queries: int = 5,
    max_clips: int = 7,
    scale: float = 1.0,
    allow_empty_videos: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(sim, query_mask, clip_mask)``: float64 ``[B, Mq, Mc]`` in ``[-scale, scale]`` and bool masks.

    Every video has at least one valid clip; a video may have no valid query when
    ``allow_empty_videos``. Padded entries hold arbitrary large values (they must be ignored).
    """
    batch = draw(st.integers(1, max_batch))
    mq = draw(st.integers(1, max_queries))
    mc = draw(st.integers(1, max_clips))
    elements = st.floats(-scale, scale, allow_nan=False, allow_infinity=False, width=64)
    sim = draw(arrays(np.float64, (batch, mq, mc), elements=elements))
    qmask = draw(arrays(np.bool_, (batch, mq)))
    cmask = draw(arrays(np.bool_, (batch, mc)))
    cmask[:, draw(st.integers(0, mc - 1))] = True
    if not allow_empty_videos:
        qmask[:, draw(st.integers(0, mq - 1))] = True
    valid = qmask[:, :, None] & cmask[:, None, :]
    sim = np.where(valid, sim, 1e6)  # garbage that must not leak into the result
    return torch.from_numpy(sim), torch.from_numpy(qmask), torch.from_numpy(cmask)


@st.composite
def masked_marginal_problems(
    draw, max_batch: int = 3, max_rows: int = 6, max_cols: int = 7, scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(scores, a, b)``: float64 ``[B, n, m]`` gains and balanced marginals with zeros (masked entries).

    Every problem keeps at least one positive entry in ``a`` and in ``b``; both sum to 1.
    """
    batch = draw(st.integers(1, max_batch))
    n = draw(st.integers(1, max_rows))
    m = draw(st.integers(1, max_cols))
    scores = draw(
        arrays(np.float64, (batch, n, m), elements=st.floats(-scale, scale, allow_nan=False, width=64))
    )
    weights = st.one_of(st.just(0.0), st.floats(0.05, 1.0, width=64))
    a = draw(arrays(np.float64, (batch, n), elements=weights))
    b = draw(arrays(np.float64, (batch, m), elements=weights))
    a[np.arange(batch), draw(arrays(np.int64, (batch,), elements=st.integers(0, n - 1)))] = 1.0
    b[np.arange(batch), draw(arrays(np.int64, (batch,), elements=st.integers(0, m - 1)))] = 1.0
    a /= a.sum(axis=1, keepdims=True)
    b /= b.sum(axis=1, keepdims=True)
    return torch.from_numpy(scores), torch.from_numpy(a), torch.from_numpy(b)


epsilons = st.floats(0.05, 1.0, width=64)
"""Regularisations for which float64 Sinkhorn converges to 1e-10 in a few thousand iterations."""
