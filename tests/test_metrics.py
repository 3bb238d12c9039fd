"""Recall at K against a brute-force rank count in numpy; the one recall of 1-based ranks behind every R@K."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from evidential_prvr import metrics
from tests.strategies.retrieval import ranking_problems


def brute_force_recall(scores: np.ndarray, gt: np.ndarray, ks) -> dict[str, float]:
    ranks = []
    for q in range(scores.shape[0]):
        target = scores[q, gt[q]]
        ranks.append(1 + sum(1 for v in range(scores.shape[1]) if v != gt[q] and scores[q, v] >= target))
    ranks = np.array(ranks)
    out = {f"R@{k}": 100.0 * float(np.mean(ranks <= k)) for k in ks}
    out["SumR"] = sum(out[f"R@{k}"] for k in ks)
    return out


@given(ranking_problems(), st.integers(1, 50), st.sampled_from([(1, 5, 10, 100), (1,), (3, 2)]))
def test_recall_matches_brute_force(problem, chunk, ks):
    scores, gt = problem
    got = metrics.recall_at_k(torch.from_numpy(scores), torch.from_numpy(gt), ks, query_chunk=chunk)
    expected = brute_force_recall(scores, gt, ks)
    assert list(got) == [f"R@{k}" for k in ks] + ["SumR"]
    for key, value in expected.items():
        assert got[key] == pytest.approx(value)


def test_ties_count_against_the_model():
    scores = np.array([[1.0, 1.0, 0.0], [0.5, 0.5, 0.5], [0.0, 2.0, 1.0]])
    gt = np.array([0, 2, 2])
    ranks = metrics.ranks_of_ground_truth(torch.from_numpy(scores), torch.from_numpy(gt))
    assert ranks.tolist() == [2, 3, 2]
    got = metrics.recall_at_k(scores, gt, ks=(1, 2))
    assert got == {"R@1": 0.0, "R@2": pytest.approx(200 / 3), "SumR": pytest.approx(200 / 3)}


def test_default_keys_and_perfect_scores(device):
    scores = torch.eye(4, device=device)
    out = metrics.recall_at_k(scores, torch.arange(4, device=device))
    assert out == {"R@1": 100.0, "R@5": 100.0, "R@10": 100.0, "R@100": 100.0, "SumR": 400.0}


@pytest.mark.parametrize(
    "scores, gt, ks, error, match",
    [
        (torch.rand(3), torch.zeros(3, dtype=torch.long), (1,), ValueError, "scores"),
        (torch.rand(3, 2), torch.zeros(2, dtype=torch.long), (1,), ValueError, "gt"),
        (torch.rand(3, 2), torch.tensor([0, 2, 1]), (1,), ValueError, r"\[0, 2\)"),
        (torch.rand(3, 2), torch.zeros(3), (1,), TypeError, "integer"),
        (torch.tensor([[float("nan"), 0.0]]), torch.tensor([0]), (1,), ValueError, "finite"),
        (torch.rand(1, 2), torch.tensor([0]), (0,), ValueError, "ks"),
        (torch.rand(1, 2), torch.tensor([0]), (1, 1), ValueError, "distinct"),
        (torch.rand(1, 2), torch.tensor([0]), (), ValueError, "ks must hold at least one"),
        (torch.rand(1, 2), torch.tensor([0]), 5, TypeError, "ks must be a sequence"),
        (torch.rand(1, 2), torch.tensor([0]), (1.0,), TypeError, "ks must hold ints"),
        ([[0.1, 0.2]], torch.tensor([0]), (1,), TypeError, "scores"),
    ],
)
def test_bad_input_raises(scores, gt, ks, error, match):
    with pytest.raises(error, match=match):
        metrics.recall_at_k(scores, gt, ks)


@given(st.lists(st.integers(1, 200), min_size=1, max_size=80), st.sampled_from([(1, 5, 10, 100), (1,), (3, 2), (50,)]))
def test_recall_from_ranks_matches_a_count(ranks, ks):
    got = metrics.recall_from_ranks(torch.tensor(ranks), ks)
    assert list(got) == [f"R@{k}" for k in ks] + ["SumR"]
    for k in ks:
        assert got[f"R@{k}"] == pytest.approx(100.0 * sum(r <= k for r in ranks) / len(ranks), rel=1e-15)
    assert got["SumR"] == pytest.approx(sum(got[f"R@{k}"] for k in ks), rel=1e-15)
    # numpy arrays and lists give the same figures, to the bit
    assert metrics.recall_from_ranks(np.asarray(ranks), ks) == got == metrics.recall_from_ranks(ranks, ks)


@given(ranking_problems(), st.sampled_from([(1, 5, 10, 100), (1,), (3, 2)]))
def test_every_recall_is_the_recall_of_the_ranks(problem, ks):
    """The score-matrix recall, the search result's and the comparison statistics' are the figures of
    recall_from_ranks on the same ranks, bit for bit (one definition, one order of operations)."""
    from evidential_prvr.search import gallery_search

    scores, gt = problem
    scores_t, gt_t = torch.from_numpy(scores), torch.from_numpy(gt)
    ranks = metrics.ranks_of_ground_truth(scores_t, gt_t)
    expected = metrics.recall_from_ranks(ranks, ks)
    assert metrics.recall_at_k(scores_t, gt_t, ks) == expected
    for k in ks:
        assert float(metrics.run_metric(ranks, f"R@{k}", ks=ks)) == expected[f"R@{k}"]
    assert float(metrics.run_metric(ranks, "SumR", ks=ks)) == pytest.approx(expected["SumR"], rel=1e-15)
    # a search over a gallery of clip bags, keeping every video and a shorter list: the recall of its target ranks,
    # a target beyond the list counting as a miss
    num_queries, num_videos = scores.shape
    generator = torch.Generator().manual_seed(num_queries * 1000 + num_videos)
    queries = torch.randn(num_queries, 4, generator=generator, dtype=torch.float64)
    clips = torch.randn(num_videos, 3, 4, generator=generator, dtype=torch.float64)
    full = gallery_search(queries, clips, k=num_videos, target=gt_t)
    assert full.recall_at_k(ks) == metrics.recall_from_ranks(full.target_ranks(), ks)
    if num_videos > max(ks) + 1:
        short = gallery_search(queries, clips, k=max(ks) + 1, target=gt_t)
        assert short.recall_at_k(ks) == full.recall_at_k(ks)


def test_default_ks_is_the_prvr_protocol_everywhere():
    import inspect

    from evidential_prvr.search import SearchResult

    assert metrics.DEFAULT_KS == (1, 5, 10, 100)
    for function in (metrics.recall_at_k, metrics.recall_from_ranks, metrics.run_metric, metrics.hierarchical_bootstrap,
                     metrics.compare_runs, SearchResult.recall_at_k):
        assert inspect.signature(function).parameters["ks"].default is metrics.DEFAULT_KS, function.__name__


@pytest.mark.parametrize("ranks, ks, error, match", [
    (torch.tensor([0, 1, 2]), (1,), ValueError, r"1-based \(>= 1; add 1 to 0-based ranks\), got a minimum of 0"),
    (torch.tensor([[1, 2]]), (1,), ValueError, r"ranks must be \[Q\]"),
    (torch.tensor([], dtype=torch.long), (1,), ValueError, r"ranks must be \[Q\] with Q >= 1"),
    (torch.tensor([1.0, 2.0]), (1,), TypeError, "integer dtype"),
    ("12", (1,), TypeError, "ranks must be"),
    (torch.tensor([1, 2]), (1, 1), ValueError, "distinct"),
    (torch.tensor([1, 2]), (0, 1), ValueError, "ks must hold cut-offs >= 1"),
    (torch.tensor([1, 2]), (True,), TypeError, "ks must hold ints"),
])
def test_recall_from_ranks_bad_input(ranks, ks, error, match):
    with pytest.raises(error, match=match):
        metrics.recall_from_ranks(ranks, ks)
