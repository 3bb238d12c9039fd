"""Tests of the flat-batch to per-video regrouping, against a plain loop over videos."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from evidential_prvr import build_intra_video_batch


def loop_reference(query_emb, query_video, clip_emb, clip_mask, cosine=True):
    """The same regrouping with a Python loop: queries of each video in their flat-batch order."""
    n_videos, n_clips, _ = clip_emb.shape
    groups = [[i for i in range(len(query_video)) if query_video[i] == v] for v in range(n_videos)]
    mq = max(1, max(len(g) for g in groups))
    sim = np.zeros((n_videos, mq, n_clips))
    index = -np.ones((n_videos, mq), dtype=np.int64)
    for v, group in enumerate(groups):
        for slot, i in enumerate(group):
            index[v, slot] = i
            for c in range(n_clips):
                if clip_mask[v, c]:
                    q, k = query_emb[i], clip_emb[v, c]
                    if cosine:
                        q, k = q / max(np.linalg.norm(q), 1e-12), k / max(np.linalg.norm(k), 1e-12)
                    sim[v, slot, c] = q @ k
    return sim, index


@st.composite
def flat_batches(draw):
    n_videos = draw(st.integers(1, 4))
    n_clips = draw(st.integers(1, 5))
    dim = draw(st.integers(1, 6))
    n_queries = draw(st.integers(0, 9))
    floats = st.floats(-2, 2, allow_nan=False, width=64)
    query_emb = draw(arrays(np.float64, (n_queries, dim), elements=floats))
    query_video = draw(arrays(np.int64, (n_queries,), elements=st.integers(0, n_videos - 1)))
    clip_emb = draw(arrays(np.float64, (n_videos, n_clips, dim), elements=floats))
    clip_mask = draw(arrays(np.bool_, (n_videos, n_clips)))
    return query_emb, query_video, clip_emb, clip_mask


@settings(max_examples=30)
@given(batch=flat_batches(), cosine=st.booleans())
def test_matches_loop_reference(batch, cosine):
    query_emb, query_video, clip_emb, clip_mask = batch
    out = build_intra_video_batch(
        torch.from_numpy(query_emb), torch.from_numpy(query_video), torch.from_numpy(clip_emb),
        torch.from_numpy(clip_mask), cosine=cosine,
    )
    sim, index = loop_reference(query_emb, query_video, clip_emb, clip_mask, cosine)
    np.testing.assert_array_equal(out.query_index.numpy(), index)
    np.testing.assert_array_equal(out.query_mask.numpy(), index >= 0)
    np.testing.assert_array_equal(out.clip_mask.numpy(), clip_mask)
    np.testing.assert_allclose(out.sim.numpy(), sim, atol=1e-12)
    for v, slot in zip(*np.nonzero(index >= 0)):
        np.testing.assert_array_equal(out.queries[v, slot].numpy(), query_emb[index[v, slot]])
    assert bool((out.queries[~out.query_mask] == 0).all())


def test_gradients_reach_both_embeddings():
    query_emb = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    clip_emb = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    video = torch.tensor([1, 0, 1, 1, 0])
    assert torch.autograd.gradcheck(lambda q, c: build_intra_video_batch(q, video, c).sim, (query_emb, clip_emb))


def test_max_queries_pads_further_and_is_checked():
    query_emb, clip_emb = torch.randn(3, 4), torch.randn(2, 5, 4)
    video = torch.tensor([0, 0, 1])
    out = build_intra_video_batch(query_emb, video, clip_emb, max_queries=4)
    assert out.sim.shape == (2, 4, 5) and out.query_mask.sum().item() == 3
    with pytest.raises(ValueError, match="max_queries"):
        build_intra_video_batch(query_emb, video, clip_emb, max_queries=1)


def test_bad_inputs():
    q, c = torch.randn(3, 4), torch.randn(2, 5, 4)
    with pytest.raises(ValueError, match="video indices"):
        build_intra_video_batch(q, torch.tensor([0, 2, 1]), c)
    with pytest.raises(TypeError, match="query_video must be an integer"):
        build_intra_video_batch(q, torch.tensor([0.0, 1.0, 1.0]), c)
    with pytest.raises(ValueError, match=r"query_video must have shape \(3,\)"):
        build_intra_video_batch(q, torch.tensor([0, 1]), c)
    with pytest.raises(ValueError, match="feature size"):
        build_intra_video_batch(q, torch.tensor([0, 1, 1]), torch.randn(2, 5, 3))
    with pytest.raises(ValueError, match="clip_mask must have shape"):
        build_intra_video_batch(q, torch.tensor([0, 1, 1]), c, torch.ones(5, 2, dtype=torch.bool))


def test_device(device):
    q = torch.randn(4, 3, device=device)
    c = torch.randn(2, 6, 3, device=device)
    out = build_intra_video_batch(q, torch.tensor([1, 1, 0, 1], device=device), c)
    assert out.sim.device.type == device.type and out.query_index.device.type == device.type
