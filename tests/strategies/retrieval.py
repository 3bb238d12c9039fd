"""Hypothesis strategies for in-batch retrieval problems: score matrices with each query's video index."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st


@st.composite
def query_video_assignments(draw, max_videos: int = 6, max_queries_per_video: int = 4) -> np.ndarray:
    """Video index of each query; every video has at least one query (as in a PRVR training batch)."""
    num_videos = draw(st.integers(1, max_videos))
    counts = draw(st.lists(st.integers(1, max_queries_per_video), min_size=num_videos, max_size=num_videos))
    labels = np.repeat(np.arange(num_videos), counts)
    if draw(st.booleans()):
        labels = labels[draw(st.permutations(range(labels.size)))]
    return np.asarray(labels, dtype=np.int64)


@st.composite
def score_problems(draw, low: float = -1.0, high: float = 1.0, max_videos: int = 6, ties: bool = False):
    """``(scores [Q, V] float64, query_video [Q] int64)``; ``ties=True`` draws scores from a coarse grid."""
    labels = draw(query_video_assignments(max_videos=max_videos))
    num_videos = int(labels.max()) + 1
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    if ties:
        scores = rng.integers(-2, 3, size=(labels.size, num_videos)).astype(np.float64)
    else:
        scores = rng.uniform(low, high, size=(labels.size, num_videos))
    return scores, labels


@st.composite
def ranking_problems(draw, max_queries: int = 40, max_videos: int = 30):
    """``(scores [Nq, Nv] float, gt [Nq] int64)`` with many ties when the grid is coarse."""
    num_queries = draw(st.integers(1, max_queries))
    num_videos = draw(st.integers(1, max_videos))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    levels = draw(st.sampled_from([2, 3, 10, 0]))
    if levels:
        scores = rng.integers(0, levels, size=(num_queries, num_videos)).astype(np.float32)
    else:
        scores = rng.standard_normal((num_queries, num_videos)).astype(np.float32)
    gt = rng.integers(0, num_videos, size=num_queries).astype(np.int64)
    return scores, gt
