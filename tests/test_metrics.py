"""Recall at K against a brute-force rank count in numpy."""

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
        (torch.rand(1, 2), torch.tensor([0]), (), TypeError, "ks"),
        ([[0.1, 0.2]], torch.tensor([0]), (1,), TypeError, "scores"),
    ],
)
def test_bad_input_raises(scores, gt, ks, error, match):
    with pytest.raises(error, match=match):
        metrics.recall_at_k(scores, gt, ks)
