"""The uncertainty diagnostics (reference_models.dab.diagnostics) on small inputs with known answers, and the
multi-positive ranks."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from evidential_prvr.functional import pairwise_gaussian_kl, pairwise_wasserstein2
from evidential_prvr.metrics import ranks_of_ground_truth
from evidential_prvr.probabilistic import DiagonalGaussian
from reference_models.dab.data import load_t2v_split
from reference_models.dab.diagnostics import (
    benchmark_labels,
    cost_parts,
    format_diagnostics,
    gaussian_diagnostics,
    model_diagnostics,
)
from reference_models.dab.evaluate import multi_positive_ranks
from reference_models.dab.model import T2VModel
from tests.reference_dab.conftest import TINY_CONFIG


def _gaussian(mu: list[list[float]], var: list[list[float]]) -> DiagonalGaussian:
    return DiagonalGaussian(torch.tensor(mu), torch.tensor(var).log())


def test_known_variances_displacement_and_share() -> None:
    # two 2-d videos with variances 4 (1 event) and 2 (3 events); two texts of variance 0.5, bridged to 1
    video = _gaussian([[0.0, 0.0], [4.0, 0.0]], [[4.0, 4.0], [2.0, 2.0]])
    text = _gaussian([[2.0, 0.0], [4.0, 2.0]], [[0.5, 0.5], [0.5, 0.5]])
    bridged = _gaussian([[1.0, 0.0], [4.0, 2.0]], [[1.0, 1.0], [1.0, 1.0]])  # query 0 halfway, query 1 stays
    d = gaussian_diagnostics(text, bridged, video, torch.tensor([0, 1]), video_events=[1, 3],
                             query_kinds=["specific", "generic"])
    assert d["sigma2"] == pytest.approx({"text": 0.5, "bridged": 1.0, "video": 3.0})
    assert d["ordering"] == "video > bridged > text"
    assert d["video_sigma2_by_events"] == pytest.approx({"1": 4.0, "3": 2.0})
    assert d["text_sigma2_by_kind"] == pytest.approx({"generic": 0.5, "specific": 0.5})
    b = d["bridge"]
    assert b["shift"] == pytest.approx(0.5)  # (1 + 0) / 2
    assert b["distance_before"] == pytest.approx(2.0) and b["distance_after"] == pytest.approx(1.5)
    assert b["closed_fraction"] == pytest.approx(0.25)  # (0.5 + 0) / 2
    assert b["cosine_to_own"] == pytest.approx(1.0)  # only query 0 moves, straight toward its video
    # own costs by hand: KL(N(0, 4I) || N(1, I)) = 0.5 * (1 + 4 + 4 - 2 log 4 - 2)
    own0_after = 0.5 * (1 + 4 + 4 - 2 * math.log(4) - 2)
    own1_after = 0.5 * (4 + 2 + 2 - 2 * math.log(2) - 2)
    assert b["own_cost_after"] == pytest.approx((own0_after + own1_after) / 2)
    own0_before = 0.5 * (4 / 0.5 + 2 * (8 - math.log(8) - 1))
    own1_before = 0.5 * (4 / 0.5 + 2 * (4 - math.log(4) - 1))
    assert b["own_cost_before"] == pytest.approx((own0_before + own1_before) / 2)
    own_variance = 0.5 * 2 * (4 - math.log(4) - 1) + 0.5 * 2 * (2 - math.log(2) - 1)
    assert d["variance_share"]["own_pairs"] == pytest.approx(own_variance / (own0_after + own1_after))
    cost = pairwise_gaussian_kl(video.mu, video.logvar, bridged.mu, bridged.logvar).T
    mean, variance = cost_parts(video.mu, video.logvar, bridged.mu, bridged.logvar)
    assert torch.allclose(mean + variance, cost, atol=1e-5)
    assert d["variance_share"]["all_pairs"] == pytest.approx(float(variance.sum() / cost.sum()), rel=1e-5)
    text_lines = format_diagnostics(d)
    assert "video > bridged > text" in text_lines and "closed 25.0 %" in text_lines


def test_w2_parts_sum_to_the_w2_cost_and_equal_gaussians_have_no_cost() -> None:
    g = torch.Generator().manual_seed(0)
    video = DiagonalGaussian(torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g))
    text = DiagonalGaussian(torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g))
    mean, variance = cost_parts(*video, *text, cost="w2")
    assert torch.allclose(mean + variance, pairwise_wasserstein2(*video, *text).T, atol=1e-5)
    assert (variance >= 0).all() and (mean >= 0).all()
    same = gaussian_diagnostics(video, video, video, torch.arange(5))  # the text is its video, no bridge
    assert same["bridge"]["shift"] == 0 and same["bridge"]["own_cost_after"] == pytest.approx(0.0, abs=1e-6)
    assert same["bridge"]["closed_fraction"] == 0.0 and same["variance_share"]["own_pairs"] == 0.0
    with pytest.raises(ValueError, match="cost"):
        cost_parts(*video, *text, cost="cosine")


def test_model_diagnostics_of_a_model_and_the_labels_of_the_benchmark(tiny_root: Path) -> None:
    split = load_t2v_split(tiny_root, "test_all", max_frames=6)
    video_events, kinds = benchmark_labels(tiny_root, split)
    assert video_events is not None and len(video_events) == split.num_videos and set(video_events) <= {1, 2, 3}
    assert kinds is not None and set(kinds) == {"specific", "generic"}
    torch.manual_seed(0)
    model = T2VModel(12, 10, TINY_CONFIG)
    d = model_diagnostics(model, split, video_events=video_events, query_kinds=kinds)
    assert d is not None and d["queries"] == split.num_queries and d["videos"] == split.num_videos
    # at initialisation the bridge is the identity: no shift, the same text and bridged variances
    assert d["bridge"]["shift"] == 0 and d["sigma2"]["text"] == pytest.approx(d["sigma2"]["bridged"])
    assert set(d["video_sigma2_by_events"]) == {str(e) for e in video_events}
    assert 0 <= d["variance_share"]["all_pairs"] <= 1
    base = T2VModel(12, 10, TINY_CONFIG.replace(head={"variant": "base"}))
    assert model_diagnostics(base, split) is None
    xpool = T2VModel(12, 10, TINY_CONFIG.replace(backbone={"pooling": "xpool"}))
    d = model_diagnostics(xpool, split, video_events=video_events)
    assert d is not None and set(d["variance_share"]) == {"own_pairs"} and d["videos"] == split.num_videos
    assert benchmark_labels(tiny_root / "nowhere", split) == (None, None)


def test_multi_positive_ranks() -> None:
    scores = torch.tensor([[0.9, 0.5, 0.7, 0.1], [0.2, 0.3, 0.3, 0.8]])
    positives = torch.tensor([[False, True, True, False], [True, False, True, False]])
    # query 0: best positive 0.7, one negative above -> 2; query 1: best positive 0.3 tied with a negative -> 3
    assert multi_positive_ranks(scores, positives).tolist() == [2, 3]
    one = torch.zeros_like(positives)
    one[0, 2] = one[1, 0] = True
    assert multi_positive_ranks(scores, one).tolist() == ranks_of_ground_truth(scores, torch.tensor([2, 0])).tolist()
    with pytest.raises(ValueError, match="at least one positive"):
        multi_positive_ranks(scores, torch.zeros_like(positives))


def _brute_rank(scores: list[float], own: int) -> int:
    return 1 + sum(1 for j, s in enumerate(scores) if j != own and s >= scores[own])


def test_how_much_the_variance_part_moves_each_ranking_against_brute_force() -> None:
    g = torch.Generator().manual_seed(4)
    q, v, d = 9, 6, 3
    text = DiagonalGaussian(torch.randn(q, d, generator=g), 0.5 * torch.randn(q, d, generator=g))
    video = DiagonalGaussian(torch.randn(v, d, generator=g), 0.5 * torch.randn(v, d, generator=g))
    query_video = torch.randint(0, v, (q,), generator=g)
    kinds = ["specific", "generic", "specific"] * 3
    result = gaussian_diagnostics(text, text, video, query_video, query_kinds=kinds, chunk=4)
    full, by_mean = [], []
    for i in range(q):  # the mean part: the KL with the text's variance on both sides
        t_mu, t_var = text.mu[i].double(), text.logvar[i].double().exp()
        mean_part = [0.5 * float(((video.mu[j].double() - t_mu) ** 2 / t_var).sum()) for j in range(v)]
        whole = [float(c) for c in pairwise_gaussian_kl(video.mu.double(), video.logvar.double(), text.mu[i:i + 1].double(),
                                                        text.logvar[i:i + 1].double())[:, 0]]
        full.append(_brute_rank([-c for c in whole], int(query_video[i])))
        by_mean.append(_brute_rank([-c for c in mean_part], int(query_video[i])))
    moves = result["variance_moves"]
    changes = [a - b for a, b in zip(full, by_mean)]
    assert moves["changed"] == pytest.approx(sum(c != 0 for c in changes) / q)
    assert moves["mean_abs_change"] == pytest.approx(sum(abs(c) for c in changes) / q)
    assert moves["helped"] == pytest.approx(sum(c < 0 for c in changes) / q)
    assert moves["hurt"] == pytest.approx(sum(c > 0 for c in changes) / q)
    assert moves["top1_full"] == pytest.approx(sum(r == 1 for r in full) / q)
    specific = [i for i, k in enumerate(kinds) if k == "specific"]
    assert moves["by_kind.specific"]["top1_mean_part"] == pytest.approx(
        sum(by_mean[i] == 1 for i in specific) / len(specific))
    assert result["scale"]["text_mean_norm"] == pytest.approx(float(text.mu.norm(dim=-1).mean()), rel=1e-6)
