"""Hypothesis strategies for retrieval-time uncertainty: selective-retrieval problems and gallery scores."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st


@st.composite
def selective_problems(draw, max_queries: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """``(confidence float64 [n], correct bool [n])``; a coarse grid of confidences makes ties common."""
    n = draw(st.integers(1, max_queries))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    levels = draw(st.sampled_from([1, 2, 3, 5, 0]))
    if levels:
        confidence = rng.integers(0, levels, size=n).astype(np.float64) / max(levels - 1, 1)
    else:
        confidence = rng.standard_normal(n)
    correct = rng.random(n) < draw(st.sampled_from([0.0, 0.3, 0.5, 0.9, 1.0]))
    return confidence, correct


@st.composite
def gallery_scores(
    draw, max_queries: int = 9, max_videos: int = 12, scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(frame [Q, V], clip [Q, V], ranking [Q, V], target [Q])``: float64 scores in ``[-scale, scale]``.

    Scores come from a grid with many levels, so ties are possible but the top-k order is usually unique.
    """
    q = draw(st.integers(1, max_queries))
    v = draw(st.integers(1, max_videos))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    frame = rng.uniform(-scale, scale, size=(q, v))
    clip = rng.uniform(-scale, scale, size=(q, v))
    ranking = 0.4 * frame + 0.6 * clip
    target = rng.integers(0, v, size=q)
    return (torch.from_numpy(frame), torch.from_numpy(clip), torch.from_numpy(ranking),
            torch.from_numpy(target.astype(np.int64)))


@st.composite
def identification_features(draw, max_queries: int = 30) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(u, c, xi)`` float64 ``[Q]`` with values on a coarse grid (ties between queries are common)."""
    q = draw(st.integers(1, max_queries))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    u = rng.integers(0, 6, size=q) / 5.0
    c = rng.integers(0, 6, size=q) / 5.0
    xi = rng.integers(0, 6, size=q) / 2.5
    return torch.from_numpy(u), torch.from_numpy(c), torch.from_numpy(xi)
