"""Basic retrieval losses (Holmes App. B.1, Eq. 22-23) against loop references written here."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

import evidential_prvr as ep
from evidential_prvr import functional as EF
from tests.strategies.retrieval import score_problems

# ---------------------------------------------------------------- loop references (plain Python, float64)


def ref_triplet(scores, labels, margin, neg_video_rule, neg_query_rule):
    """Loop triplet loss; ``neg_*_rule(candidates) -> list of allowed negatives`` (averaged = expectation)."""
    num_queries, num_videos = scores.shape
    t2v = 0.0
    for q in range(num_queries):
        negatives = [v for v in range(num_videos) if v != labels[q]]
        if not negatives:
            continue
        allowed = neg_video_rule(sorted(negatives, key=lambda v: -scores[q, v]))
        t2v += sum(max(0.0, margin + scores[q, v] - scores[q, labels[q]]) for v in allowed) / len(allowed)
    v2t, with_queries = 0.0, 0
    for v in range(num_videos):
        own = [q for q in range(num_queries) if labels[q] == v]
        if not own:
            continue
        with_queries += 1
        negatives = [q for q in range(num_queries) if labels[q] != v]
        if not negatives:
            continue
        pos = sum(scores[q, v] for q in own) / len(own)
        allowed = neg_query_rule(sorted(negatives, key=lambda q: -scores[q, v]))
        v2t += sum(max(0.0, margin + scores[q, v] - pos) for q in allowed) / len(allowed)
    return t2v / num_queries + v2t / max(with_queries, 1)


def ref_info_nce(scores, labels, video_to_text):
    num_queries, num_videos = scores.shape
    t2v = 0.0
    for q in range(num_queries):
        denom = sum(math.exp(scores[q, v]) for v in range(num_videos))
        t2v += -math.log(math.exp(scores[q, labels[q]]) / denom)
    t2v /= num_queries
    v2t = 0.0
    if video_to_text == "release":
        count = 0
        for v in range(num_videos):
            own = [q for q in range(num_queries) if labels[q] == v]
            if not own:
                continue
            count += 1
            num = sum(math.exp(scores[q, v]) for q in own)
            den = sum(math.exp(scores[q, v]) for q in range(num_queries))
            v2t += -math.log(num / den)
        v2t /= count
    else:
        for q in range(num_queries):
            v = labels[q]
            neg = sum(math.exp(scores[k, v]) for k in range(num_queries) if labels[k] != v)
            pos = math.exp(scores[q, v])
            v2t += -math.log(pos / (pos + neg))
        v2t /= num_queries
    return t2v + v2t


def ref_diversity(emb, labels, alpha, delta, lam):
    total = 0.0
    n = emb.shape[0]
    for i in range(n):
        for j in range(n):
            if i == j or labels[i] != labels[j]:
                continue
            cos = float(emb[i] @ emb[j] / (np.linalg.norm(emb[i]) * np.linalg.norm(emb[j])))
            total += (1 + cos) ** lam * math.log1p(math.exp(alpha * (cos + delta)))
    return total / n


def _t(x, dtype=torch.float64):
    return torch.as_tensor(x, dtype=dtype)


# ---------------------------------------------------------------- triplet


@given(score_problems(), st.floats(0.05, 0.5))
def test_triplet_hardest_matches_loop(problem, margin):
    scores, labels = problem
    got = EF.triplet_ranking_loss(_t(scores), torch.as_tensor(labels), margin, hard_negative_topk=1)
    expected = ref_triplet(scores, labels, margin, lambda c: c[:1], lambda c: c[:1])
    assert got.item() == pytest.approx(expected, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("topk", [None, 2])
@pytest.mark.parametrize("video_negative", ["hardest", "pool"])
def test_triplet_random_negatives_expectation(topk, video_negative):
    """Averaged over many draws, the loss converges to the loop average over the allowed negatives."""
    rng = np.random.default_rng(0)
    labels = np.array([0, 0, 1, 2, 2, 2, 3, 4])
    scores = rng.uniform(-1, 1, size=(labels.size, 5))
    gen = torch.Generator().manual_seed(1)
    draws = torch.stack(
        [
            EF.triplet_ranking_loss(
                _t(scores), torch.as_tensor(labels), 0.3, topk, generator=gen, video_negative=video_negative
            )
            for _ in range(3000)
        ]
    )
    pool = (lambda c: c) if topk is None else (lambda c: c[:topk])
    query_pool = (lambda c: c) if topk is None else (pool if video_negative == "pool" else (lambda c: c[:1]))
    expected = ref_triplet(scores, labels, 0.3, pool, query_pool)
    sem = draws.std().item() / math.sqrt(draws.numel())
    assert abs(draws.mean().item() - expected) < 5 * sem + 1e-9


def test_triplet_random_negative_is_uniform_over_pool():
    """One query, distinct negative scores: which negative was drawn is readable from the loss."""
    scores = torch.tensor([[0.0, 0.1, 0.2, 0.3, 0.4, 0.5]], dtype=torch.float64)
    labels = torch.tensor([0])
    gen = torch.Generator().manual_seed(0)
    for topk, allowed in ((None, [1, 2, 3, 4, 5]), (3, [5, 4, 3])):
        picks = []
        for _ in range(2000):
            loss = EF.triplet_ranking_loss(scores, labels, 1.0, topk, generator=gen)
            # t2v = 1 + s_neg; v2t side has no negative query (only one query) -> 0
            picks.append(round((loss.item() - 1.0) * 10))
        counts = np.array([picks.count(v) for v in allowed])
        assert counts.sum() == len(picks)
        assert stats.chisquare(counts).pvalue > 1e-3


def test_triplet_video_side_uses_mean_of_positive_queries():
    # video 0 has queries with scores 0.9 and 0.1 (mean 0.5); negative query 2 scores 0.45
    scores = torch.tensor([[0.9, -1.0], [0.1, -1.0], [0.45, 0.0]], dtype=torch.float64)
    labels = torch.tensor([0, 0, 1])
    loss = EF.triplet_ranking_loss(scores, labels, margin=0.1, hard_negative_topk=1)
    t2v = (0 + max(0, 0.1 - 1.0 - 0.1) + max(0, 0.1 + 0.45 - 0.0)) / 3
    v2t = (max(0, 0.1 + 0.45 - 0.5) + max(0, 0.1 + (-1.0) - 0.0)) / 2
    assert loss.item() == pytest.approx(t2v + v2t)


def test_triplet_single_video_batch_is_zero():
    loss = EF.triplet_ranking_loss(torch.rand(3, 1), torch.zeros(3, dtype=torch.long), 0.2)
    assert loss.item() == 0.0


def test_triplet_gradcheck():
    scores = torch.rand(7, 4, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 0, 1, 2, 2, 3, 3])

    def fn(s):
        return EF.triplet_ranking_loss(s, labels, 0.5, 2, generator=torch.Generator().manual_seed(3))

    assert torch.autograd.gradcheck(fn, (scores,))


# ---------------------------------------------------------------- InfoNCE


@given(score_problems(low=-5, high=5), st.sampled_from(["release", "paper"]))
def test_info_nce_matches_loop(problem, mode):
    scores, labels = problem
    got = EF.info_nce_loss(_t(scores), torch.as_tensor(labels), video_to_text=mode)
    expected = ref_info_nce(scores, labels, mode)
    assert got.item() == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_info_nce_extreme_logits_finite():
    scores = torch.tensor([[1e4, -1e4, 0.0], [-1e4, 1e4, 3e4]], requires_grad=True)
    labels = torch.tensor([0, 2])
    for mode in ("release", "paper"):
        loss = EF.info_nce_loss(scores, labels, video_to_text=mode)
        (grad,) = torch.autograd.grad(loss, scores)
        assert torch.isfinite(loss) and torch.isfinite(grad).all()


def test_info_nce_videos_without_queries_have_finite_gradient():
    scores = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 0, 3])
    for mode in ("release", "paper"):
        loss = EF.info_nce_loss(scores, labels, video_to_text=mode)
        (grad,) = torch.autograd.grad(loss, scores)
        assert torch.isfinite(grad).all()
        assert loss.item() == pytest.approx(ref_info_nce(scores.detach().numpy(), labels.numpy(), mode))


@pytest.mark.parametrize("mode", ["release", "paper"])
def test_info_nce_gradcheck(mode):
    scores = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 1, 1, 2, 3, 3])
    assert torch.autograd.gradcheck(lambda s: EF.info_nce_loss(s, labels, video_to_text=mode), (scores,))


# ---------------------------------------------------------------- query diversity


@given(score_problems(), st.floats(1.0, 40.0), st.floats(0.0, 0.3), st.sampled_from([0.0, 0.5, 1.0, 2.0]))
def test_diversity_matches_loop(problem, alpha, delta, lam):
    _, labels = problem
    rng = np.random.default_rng(labels.size)
    emb = rng.standard_normal((labels.size, 5))
    got = EF.query_diversity_loss(_t(emb), torch.as_tensor(labels), alpha, delta, lam)
    assert got.item() == pytest.approx(ref_diversity(emb, labels, alpha, delta, lam), rel=1e-9, abs=1e-12)


def test_diversity_extreme_and_identical_queries_finite():
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 0.0]], requires_grad=True)
    labels = torch.tensor([0, 0, 0, 0])
    for lam in (0.0, 0.5, 1.0):
        loss = EF.query_diversity_loss(emb, labels, alpha=1000.0, delta=0.2, lam=lam)
        (grad,) = torch.autograd.grad(loss, emb)
        assert torch.isfinite(loss) and torch.isfinite(grad).all()


def test_diversity_gradcheck():
    emb = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 0, 1, 1, 1, 2])
    assert torch.autograd.gradcheck(lambda e: EF.query_diversity_loss(e, labels, 8.0, 0.2, 1.0), (emb,))


# ---------------------------------------------------------------- dtype, device, validation


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_upcast(device, dtype):
    gen = torch.Generator(device=device).manual_seed(0)
    scores = torch.rand(8, 4, device=device).to(dtype).requires_grad_()
    emb = torch.randn(8, 16, device=device).to(dtype).requires_grad_()
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3], device=device)
    losses = [
        EF.triplet_ranking_loss(scores, labels, 0.2, 20, generator=gen),
        EF.info_nce_loss(scores * 100, labels),
        EF.query_diversity_loss(emb, labels),
    ]
    for loss in losses:
        assert loss.dtype == torch.float32 and loss.device.type == device.type
        assert torch.isfinite(loss)
    grads = torch.autograd.grad(sum(losses), (scores, emb))
    assert all(torch.isfinite(g.float()).all() for g in grads)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: EF.triplet_ranking_loss(torch.rand(3), torch.zeros(3, dtype=torch.long)), ValueError, "sim"),
        (lambda: EF.triplet_ranking_loss(torch.rand(3, 2), torch.zeros(4, dtype=torch.long)), ValueError, r"\[3\]"),
        (lambda: EF.triplet_ranking_loss(torch.rand(3, 2), torch.tensor([0, 1, 2])), ValueError, r"\[0, 2\)"),
        (lambda: EF.triplet_ranking_loss(torch.rand(3, 2), torch.zeros(3)), TypeError, "integer"),
        (lambda: EF.triplet_ranking_loss(torch.rand(2, 2), torch.tensor([0, 1]), margin=-1.0), ValueError, "margin"),
        (lambda: EF.triplet_ranking_loss(torch.rand(2, 2), torch.tensor([0, 1]), 0.2, 0), ValueError, "topk"),
        (lambda: EF.info_nce_loss(torch.rand(2, 2), torch.tensor([0, 1]), video_to_text="x"), ValueError, "video"),
        (lambda: EF.info_nce_loss(torch.rand(0, 2), torch.tensor([], dtype=torch.long)), ValueError, "at least"),
        (lambda: EF.query_diversity_loss(torch.rand(3, 2), torch.tensor([0, 1])), ValueError, "query_video"),
        (lambda: EF.query_diversity_loss(torch.rand(2, 2), torch.tensor([0, 1]), lam=-1.0), ValueError, "lam"),
        (lambda: EF.query_diversity_loss(torch.rand(2, 2), torch.tensor([0, 1]), alpha=0.0), ValueError, "alpha"),
    ],
)
def test_bad_input_raises(call, error, match):
    with pytest.raises(error, match=match):
        call()


# ---------------------------------------------------------------- modules


def _batch(seed=0):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.tensor([0, 0, 1, 2, 2, 2, 3])
    return (
        torch.rand(7, 4, generator=gen) * 2 - 1,
        torch.rand(7, 4, generator=gen) * 2 - 1,
        torch.randn(7, 8, generator=gen),
        labels,
    )


def test_modules_equal_functional():
    clip, frame, emb, labels = _batch()
    trip = ep.TripletRankingLoss(margin=0.3, hard_negative_topk=2, use_hard_negatives=True, video_negative="pool")
    expected = EF.triplet_ranking_loss(
        clip, labels, 0.3, 2, generator=torch.Generator().manual_seed(5), video_negative="pool"
    )
    assert torch.equal(trip(clip, labels, torch.Generator().manual_seed(5)), expected)
    assert torch.equal(ep.InfoNCELoss("paper")(clip, labels), EF.info_nce_loss(clip, labels, video_to_text="paper"))
    div = ep.QueryDiversityLoss(alpha=16, delta=0.15, lam=2)
    assert torch.equal(div(emb, labels), EF.query_diversity_loss(emb, labels, 16, 0.15, 2))


def test_base_loss_total_is_weighted_sum_of_terms():
    clip, frame, emb, labels = _batch()
    loss = ep.BaseRetrievalLoss.from_preset("release", dataset="tvr")
    assert loss.margin == 0.1 and loss.div_delta == 0.15 and loss.div_weight == 8e-5
    loss.use_hard_negatives = True
    out = loss.details(frame, clip, emb, labels, clip_logits=clip * 5, generator=torch.Generator().manual_seed(0))
    assert isinstance(out, ep.BaseRetrievalLossDetails)
    gen = torch.Generator().manual_seed(0)
    frame_trip = EF.triplet_ranking_loss(frame, labels, 0.1, 20, generator=gen)
    clip_trip = EF.triplet_ranking_loss(clip, labels, 0.1, 20, generator=gen)
    expected = (
        clip_trip
        + frame_trip
        + 0.05 * EF.info_nce_loss(clip * 5, labels)
        + 0.04 * EF.info_nce_loss(frame, labels)
        + 8e-5 * EF.query_diversity_loss(emb, labels, 32, 0.15, 1)
    )
    assert torch.allclose(out.loss, expected)
    assert torch.equal(out.clip_triplet, clip_trip)
    again = loss(frame, clip, emb, labels, clip_logits=clip * 5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again, out.loss)


def test_base_loss_presets_and_validation():
    assert ep.BaseRetrievalLoss.from_preset("release", dataset="activitynet").margin == 0.2
    assert ep.BaseRetrievalLoss.from_preset("release", "cha", margin=0.3).margin == 0.3
    assert repr(ep.BaseRetrievalLoss.from_preset("paper", "tvr")) == repr(ep.BaseRetrievalLoss.from_preset("release", "tvr"))
    with pytest.raises(ValueError, match="dataset"):
        ep.BaseRetrievalLoss.from_preset("release", "msrvtt")
    assert repr(ep.BaseRetrievalLoss.from_preset("paper")) == repr(ep.BaseRetrievalLoss.from_preset("paper", "tvr"))
    with pytest.raises(TypeError, match="'marginn'"):
        ep.BaseRetrievalLoss.from_preset("release", "tvr", marginn=0.3)
    assert ep.TripletRankingLoss.from_preset("release", "tvr").margin == 0.1
    assert ep.QueryDiversityLoss.from_preset("release", "act").delta == 0.2
    assert ep.InfoNCELoss.from_preset("release", "cha").video_to_text == "release"


def _base_section(**changes):
    return dataclasses.replace(ep.presets.holmes_settings("release", "tvr").base, **changes)


@pytest.mark.parametrize("build, error, match", [
    (lambda: ep.QueryDiversityLoss(delta=2.5), ValueError, "^delta"),
    (lambda: _base_section(div_delta=2.5), ValueError, "^div_delta"),
    (lambda: _base_section(div_lambda=65.0), ValueError, "^div_lambda"),
    (lambda: ep.BaseRetrievalLoss(div_alpha=0.0), ValueError, "^div_alpha"),
    (lambda: EF.base_retrieval_loss(torch.eye(2), torch.eye(2), torch.eye(2), torch.arange(2), div_alpha=0.0),
     ValueError, "^div_alpha"),
    (lambda: ep.TripletRankingLoss(hard_negative_topk=None), TypeError, "^hard_negative_topk"),
    (lambda: _base_section(hard_negative_topk=None), TypeError, "^hard_negative_topk"),
    (lambda: _base_section(margin=0.0), ValueError, "^margin"),
])
def test_shared_hyperparameter_checks_name_each_callers_parameter(build, error, match):
    """One check serves the functionals, the modules and the settings: each reports its own name, and only the
    functional reads ``hard_negative_topk=None`` as random negatives."""
    with pytest.raises(error, match=match):
        build()


def test_triplet_functional_accepts_no_pool_for_random_negatives():
    sim, labels = torch.tensor([[0.9, 0.2], [0.3, 0.8]]), torch.tensor([0, 1])
    assert torch.isfinite(EF.triplet_ranking_loss(sim, labels, 0.2, None))


def test_base_loss_backward(device):
    clip, frame, emb, labels = (x.to(device) for x in _batch())
    clip.requires_grad_()
    emb.requires_grad_()
    out = ep.BaseRetrievalLoss()(frame, clip, emb, labels)
    out.backward()
    assert torch.isfinite(clip.grad).all() and torch.isfinite(emb.grad).all()
