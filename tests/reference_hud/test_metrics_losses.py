"""WebVid-CoVR recalls (brute force) and CoVR's hard-negative NCE (brute-force loop, InfoNCE at beta = 0)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from evidential_prvr.metrics import recall_from_ranks
from reference_models.hud.losses import HardNegativeNCE, hard_negative_nce
from reference_models.hud.metrics import RECALL_KS, covr_recalls, target_ranks


def loop_hn_nce(q, t, temp, alpha, beta):
    n = q.shape[0]
    s = [[float(q[i] @ t[j]) / temp for j in range(n)] for i in range(n)]
    total = 0.0
    for direction in (s, [list(col) for col in zip(*s)]):
        for i in range(n):
            neg = sum(math.exp(beta * direction[i][k]) for k in range(n) if k != i)
            denom = sum((alpha if j == i else (n - 1) * math.exp(beta * direction[i][j]) / neg) * math.exp(direction[i][j])
                        for j in range(n))
            total += (math.log(denom) - direction[i][i]) / n
    return total


@given(st.integers(2, 6), st.floats(0.05, 1.0), st.floats(0.5, 2.0), st.floats(0.0, 1.0), st.integers(0, 2**31 - 1))
def test_hard_negative_nce_matches_loop(n, temp, alpha, beta, seed):
    g = torch.Generator().manual_seed(seed)
    q, t = torch.randn(n, 5, generator=g, dtype=torch.float64), torch.randn(n, 5, generator=g, dtype=torch.float64)
    assert math.isclose(float(hard_negative_nce(q, t, temp, alpha, beta)), loop_hn_nce(q, t, temp, alpha, beta),
                        rel_tol=1e-6, abs_tol=1e-6)


def test_beta_zero_is_bidirectional_info_nce_and_errors():
    q, t = torch.randn(5, 4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    logits = q @ t.T / 0.07
    labels = torch.arange(5)
    expected = torch.nn.functional.cross_entropy(logits, labels) + torch.nn.functional.cross_entropy(logits.T, labels)
    torch.testing.assert_close(HardNegativeNCE(beta=0.0)(q, t), expected)
    with pytest.raises(ValueError, match="same shape"):
        hard_negative_nce(q, t[:3], 0.1)
    with pytest.raises(ValueError, match="temperature"):
        HardNegativeNCE(temperature=0.0)


def test_ranks_exclude_the_reference_and_count_ties_against():
    scores = torch.tensor([[0.9, 0.5, 0.5, 0.1], [0.2, 0.8, 0.9, 0.3]])
    target = torch.tensor([1, 1])
    excluded = torch.tensor([[True, False, False, False], [False, False, False, False]])
    # 1-based: row 0's tie at 0.5 counts against the target, its 0.9 is the excluded reference
    assert target_ranks(scores, target, excluded).tolist() == [2, 2]
    r = covr_recalls(torch.tensor([1, 4, 8, 21, 61]))
    assert r["R@1"] == 20.0 and r["R@5"] == 40.0 and r["R@10"] == 60.0 and r["R@50"] == 80.0
    assert r["mean"] == pytest.approx(50.0)


@given(st.lists(st.integers(1, 80), min_size=1, max_size=60))
def test_covr_recalls_are_the_library_recalls_and_their_mean(ranks):
    """The task's recalls are the library's at WebVid-CoVR's cut-offs, and, counted by brute force, the share of
    1-based ranks within each cut-off (HUD's figures before the task moved onto the library's recall)."""
    got = covr_recalls(torch.tensor(ranks))
    library = recall_from_ranks(torch.tensor(ranks), RECALL_KS)
    assert {key: got[key] for key in library if key != "SumR"} == {k: v for k, v in library.items() if k != "SumR"}
    assert got["mean"] == library["SumR"] / 4
    for k in RECALL_KS:
        assert got[f"R@{k}"] == pytest.approx(100.0 * sum(r <= k for r in ranks) / len(ranks), rel=1e-15)
