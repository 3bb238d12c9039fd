"""The two ways of scoring (query, candidate video) pairs in re-ranking, against a brute-force einsum."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from evidential_prvr import _rerank_kernels as kernels
from evidential_prvr.search import SearchScoring, rerank_candidates, token_norms


def _brute(queries, tokens, candidates, mask=None, fill=None, normalize=True):
    """Every pair's max over its video's tokens, from the full [Q, V, M] cosine tensor."""
    t = torch.nn.functional.normalize(tokens, dim=-1) if normalize else tokens
    dots = torch.einsum("qd,vmd->qvm", queries, t)
    if mask is not None:
        dots = dots.masked_fill(~mask.unsqueeze(0), torch.finfo(dots.dtype).min if fill is None else fill)
    full = dots.amax(-1)
    return full.gather(1, candidates.clamp_min(0))


def _case(videos, tokens, queries, count, seed, hub=False):
    gen = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(queries, 5, generator=gen, dtype=torch.float64), dim=-1)
    t = torch.randn(videos, tokens, 5, generator=gen, dtype=torch.float64)
    cand = torch.randint(-1, videos, (queries, count), generator=gen)
    if hub:
        cand[:, 0] = videos - 1  # every query holds the last video: more queries than one lane takes
    mask = torch.rand(videos, tokens, generator=gen) < 0.6
    mask[:, 0] = True
    return q, t, cand, mask


@settings(max_examples=30, deadline=None)
@given(videos=st.integers(1, 40), tokens=st.integers(1, 6), queries=st.integers(1, 90), count=st.integers(1, 9),
       chunk=st.integers(1, 17), hub=st.booleans(), masked=st.booleans(), seed=st.integers(0, 2**16))
def test_sweep_and_gather_equal_brute_force(videos, tokens, queries, count, chunk, hub, masked, seed):
    q, t, cand, mask = _case(videos, tokens, queries, count, seed, hub)
    mask = mask if masked else None
    norms = token_norms(t)
    want = _brute(q, t, cand, mask, fill=-0.25)
    swept = kernels.swept_max(q, t, cand, norms=norms, mask=mask, fill=-0.25, dtype=torch.float64, video_chunk=chunk)
    gathered = kernels.gathered_max(q, t, cand, norms=norms, mask=mask, fill=-0.25, dtype=torch.float64, buffer=[])
    torch.testing.assert_close(swept, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gathered, want, rtol=1e-12, atol=1e-12)


def test_sweep_gives_a_hub_video_several_lanes():
    q, t, cand, _ = _case(videos=6, tokens=3, queries=3 * kernels._LANE + 5, count=2, seed=1, hub=True)
    swept = kernels.swept_max(q, t, cand, dtype=torch.float64, video_chunk=4)
    torch.testing.assert_close(swept, _brute(q, t, cand, normalize=False), rtol=1e-12, atol=1e-12)


def test_pair_max_chooses_by_the_number_of_pairs(monkeypatch):
    q, t, cand, _ = _case(videos=40, tokens=3, queries=4, count=3, seed=2)
    calls = []
    for name in ("swept_max", "gathered_max"):
        real = getattr(kernels, name)
        monkeypatch.setattr(kernels, name, lambda *a, _r=real, _n=name, **k: calls.append(_n) or _r(*a, **k))
    kernels.pair_max(q, t, cand, dtype=torch.float64, buffer=[], memory_budget=2**20)  # 12 pairs < 20: gather
    kernels.pair_max(q, t, torch.cat([cand, cand], 1), dtype=torch.float64, buffer=[], memory_budget=2**20)  # 24 >= 20
    # 12 pairs, but their 12 x 3 x 5 float64 tokens (1440 bytes) exceed a 1 KiB budget: sweep
    kernels.pair_max(q, t, cand, dtype=torch.float64, buffer=[], memory_budget=2**10)
    assert calls == ["gathered_max", "swept_max", "swept_max"]


@pytest.mark.parametrize("budget", [1, 2**10, 2**26])
def test_rerank_with_many_pairs_equals_brute_force(budget):
    """Many candidates per query (the sweep) with frames and a mask: the same ranking and scores as brute force."""
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(30, 6, generator=gen, dtype=torch.float64)
    clips = torch.randn(25, 4, 6, generator=gen, dtype=torch.float64)
    frames = torch.randn(25, 7, 6, generator=gen, dtype=torch.float64)
    mask = torch.rand(25, 7, generator=gen) < 0.7
    mask[:, 0] = True
    cand = torch.stack([torch.randperm(25, generator=gen)[:12] for _ in range(30)])
    target = torch.randint(0, 25, (30,), generator=gen)
    res = rerank_candidates(q, cand, clips, frames, mask, k=5, scoring=SearchScoring(clip_weight=0.6, frame_weight=0.4),
                            target=target, memory_budget=budget)
    qn = torch.nn.functional.normalize(q, dim=-1)
    clip = _brute(qn, clips, cand)
    frame = _brute(qn, frames, cand, mask)
    score = 0.4 * frame + 0.6 * clip
    top = score.topk(5, dim=1)
    assert torch.equal(res.indices, cand.gather(1, top.indices))
    torch.testing.assert_close(res.scores, top.values, rtol=1e-12, atol=1e-12)
    full_clip = _brute(qn, clips, target[:, None])[:, 0]
    full_frame = _brute(qn, frames, target[:, None], mask)[:, 0]
    torch.testing.assert_close(res.target_scores, 0.4 * full_frame + 0.6 * full_clip, rtol=1e-12, atol=1e-12)
