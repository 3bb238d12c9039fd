"""Selective-retrieval metrics against an independent NumPy implementation and hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from evidential_prvr.metrics import augrc, aurc, e_aurc, risk_coverage, selective_recall
from tests.strategies.selective import selective_problems

# --- independent reference: one threshold per unique value, explicit loops -----------------------------------


def np_points(confidence: np.ndarray, correct: np.ndarray):
    """(coverage, selective risk, generalised risk) at each unique threshold, by increasing coverage."""
    n = len(confidence)
    coverage, risk, grisk = [], [], []
    for t in sorted(set(confidence.tolist()), reverse=True):
        accepted = confidence >= t
        wrong = int(np.sum(accepted & ~correct))
        coverage.append(accepted.sum() / n)
        risk.append(wrong / accepted.sum())
        grisk.append(wrong / n)
    return np.array(coverage), np.array(risk), np.array(grisk)


def np_area(x: np.ndarray, y: np.ndarray, first_y: float) -> float:
    """Trapezoidal area from x = 0 (where the curve starts at ``first_y``) through the points."""
    xs = np.concatenate([[0.0], x])
    ys = np.concatenate([[first_y], y])
    return float(sum((xs[i + 1] - xs[i]) * (ys[i + 1] + ys[i]) / 2 for i in range(len(x))))


def np_aurc(confidence, correct):
    cov, risk, _ = np_points(confidence, correct)
    return np_area(cov, risk, risk[0])


def np_augrc(confidence, correct):
    cov, _, grisk = np_points(confidence, correct)
    return np_area(cov, grisk, 0.0)


def np_e_aurc(confidence, correct):
    n, n_correct = len(correct), int(correct.sum())
    ideal = np.concatenate([np.arange(n_correct, 0, -1) + n, np.arange(n - n_correct, 0, -1)]).astype(float)
    ideal_correct = np.array([True] * n_correct + [False] * (n - n_correct))
    return np_aurc(confidence, correct) - np_aurc(ideal, ideal_correct)


def np_selective_recall(confidence, correct, coverage):
    """Expected hit rate when exactly coverage * n queries are answered, ties broken uniformly at random."""
    n = len(confidence)
    m = coverage * n
    hits = 0.0
    taken = 0.0
    for t in sorted(set(confidence.tolist()), reverse=True):
        group = confidence == t
        size = group.sum()
        take = min(size, m - taken)
        hits += take * correct[group].mean()
        taken += take
        if taken >= m - 1e-12:
            break
    return 100.0 * hits / m


def t(x, dtype=torch.float64):
    return torch.as_tensor(x, dtype=dtype)


@given(selective_problems())
def test_curve_and_areas_match_numpy(problem):
    confidence, correct = problem
    conf, corr = torch.from_numpy(confidence), torch.from_numpy(correct)
    cov, risk = risk_coverage(conf, corr)
    ref_cov, ref_risk, _ = np_points(confidence, correct)
    np.testing.assert_allclose(cov.numpy(), ref_cov, rtol=0, atol=1e-12)
    np.testing.assert_allclose(risk.numpy(), ref_risk, rtol=0, atol=1e-12)
    assert float(aurc(conf, corr)) == pytest.approx(np_aurc(confidence, correct), abs=1e-12)
    assert float(augrc(conf, corr)) == pytest.approx(np_augrc(confidence, correct), abs=1e-12)
    assert float(e_aurc(conf, corr)) == pytest.approx(np_e_aurc(confidence, correct), abs=1e-12)


@given(selective_problems(), st.sampled_from([(0.5, 0.8), (0.05, 1.0), (0.33,)]))
def test_selective_recall_matches_numpy(problem, coverages):
    confidence, correct = problem
    got = selective_recall(torch.from_numpy(confidence), torch.from_numpy(correct), coverages)
    expected = [np_selective_recall(confidence, correct, c) for c in coverages]
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10, atol=1e-9)


@given(selective_problems(), st.integers(0, 2**31 - 1))
def test_invariant_to_input_order_and_monotone_maps(problem, seed):
    confidence, correct = problem
    perm = np.random.default_rng(seed).permutation(len(confidence))
    conf, corr = torch.from_numpy(confidence), torch.from_numpy(correct)
    for f in (aurc, augrc, e_aurc):
        base = float(f(conf, corr))
        assert float(f(conf[perm], corr[perm])) == pytest.approx(base, abs=1e-12)
        assert float(f(torch.exp(3 * conf), corr)) == pytest.approx(base, abs=1e-12)  # only the order matters


@given(selective_problems())
def test_excess_aurc_is_nonnegative_without_ties_and_zero_for_the_ideal_order(problem):
    confidence, correct = problem
    conf, corr = torch.from_numpy(confidence), torch.from_numpy(correct)
    if len(set(confidence.tolist())) == len(confidence):  # with ties it may dip below 0 (see the docstring)
        assert float(e_aurc(conf, corr)) >= -1e-12
    ideal = corr.double() * 10 + torch.linspace(0, 1, len(corr), dtype=torch.float64)
    assert float(e_aurc(ideal, corr)) == pytest.approx(0.0, abs=1e-12)
    assert 0.0 <= float(augrc(conf, corr)) <= 0.5 + 1e-12
    assert 0.0 <= float(aurc(conf, corr)) <= 1.0 + 1e-12


def test_hand_computed_curve():
    # thresholds 0.9, 0.8, 0.1: accept 1, 3 (the two 0.8 together), 4 queries
    cov, risk = risk_coverage(t([0.9, 0.8, 0.8, 0.1]), torch.tensor([True, True, False, False]))
    assert cov.tolist() == [0.25, 0.75, 1.0]
    assert risk.tolist() == pytest.approx([0.0, 1 / 3, 0.5])
    # AURC = 0.25*0 + 0.5*(0 + 1/3)/2 + 0.25*(1/3 + 1/2)/2 = 1/12 + 5/48 = 3/16
    assert float(aurc(t([0.9, 0.8, 0.8, 0.1]), torch.tensor([True, True, False, False]))) == pytest.approx(3 / 16)
    # AUGRC: g = 0, 1/4, 1/2: 0.25*0/2 + 0.5*(0 + 1/4)/2 + 0.25*(1/4 + 1/2)/2 = 1/16 + 3/32 = 5/32
    assert float(augrc(t([0.9, 0.8, 0.8, 0.1]), torch.tensor([True, True, False, False]))) == pytest.approx(5 / 32)


def test_excess_aurc_can_dip_below_zero_on_a_plateau():
    # points (0.2, 0), (0.6, 2/3), (1, 0.8): 0.4 * (1/3) + 0.4 * (2/3 + 0.8) / 2 = 32/75; ideal 0.4633...
    conf, correct = t([1.0, 0.5, 0.5, 0.0, 0.0]), torch.tensor([True, False, False, False, False])
    assert float(aurc(conf, correct)) == pytest.approx(32 / 75)
    ideal = 0.2 * (0.5 / 2 + (0.5 + 2 / 3) / 2 + (2 / 3 + 0.75) / 2 + (0.75 + 0.8) / 2)
    assert float(e_aurc(conf, correct)) == pytest.approx(32 / 75 - ideal) and 32 / 75 < ideal


def test_hand_computed_excess_and_ties():
    correct = torch.tensor([True, False, True, False])
    # all tied: one point (1, 1/2): AURC = 1/2, AUGRC = 1/4
    same = t([0.3, 0.3, 0.3, 0.3])
    assert float(aurc(same, correct)) == pytest.approx(0.5)
    assert float(augrc(same, correct)) == pytest.approx(0.25)
    # ideal order (two right, then two wrong): risks 0, 0, 1/3, 1/2 at 1/4..1
    # AURC* = 0 + 0 + 0.25*(1/3)/2 + 0.25*(1/3 + 1/2)/2 = 1/24 + 5/48 = 7/48
    assert float(e_aurc(same, correct)) == pytest.approx(0.5 - 7 / 48)
    # worst order: wrong ones first: risks 1, 1, 2/3, 1/2
    worst = t([0.1, 0.9, 0.2, 0.8])
    expected = 0.25 * 1 + 0.25 * 1 + 0.25 * (1 + 2 / 3) / 2 + 0.25 * (2 / 3 + 1 / 2) / 2
    assert float(aurc(worst, correct)) == pytest.approx(expected)


def test_selective_recall_hand_computed_with_a_tie_at_the_boundary():
    conf = t([0.9, 0.5, 0.5, 0.5, 0.1])
    correct = torch.tensor([True, True, False, False, True])
    # 40 %: 2 answers = the 0.9 one + 1 of the three tied (1/3 of them right on average): (1 + 1/3) / 2
    got = selective_recall(conf, correct, (0.2, 0.4, 1.0))
    assert got.tolist() == pytest.approx([100.0, 100 * (1 + 1 / 3) / 2, 60.0])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_confidence(dtype, device):
    conf = torch.tensor([0.9, 0.2, 0.5, 0.5], dtype=dtype, device=device)
    correct = torch.tensor([1, 0, 1, 0], device=device)  # 0/1 integers are accepted as a mask
    value = aurc(conf, correct)
    assert value.device.type == device.type and math.isfinite(float(value))
    assert float(value) == pytest.approx(np_aurc(conf.float().cpu().numpy(), correct.cpu().numpy().astype(bool)))


@pytest.mark.parametrize(
    "confidence, correct, error, match",
    [
        ([0.1, 0.2], torch.tensor([True, False]), TypeError, "confidence"),
        (torch.tensor([1, 2]), torch.tensor([True, False]), TypeError, "confidence"),
        (torch.rand(2, 2), torch.ones(2, 2, dtype=torch.bool), ValueError, "confidence"),
        (torch.rand(0), torch.ones(0, dtype=torch.bool), ValueError, "confidence"),
        (torch.rand(3), torch.ones(2, dtype=torch.bool), ValueError, "correct"),
        (torch.rand(2), torch.tensor([0.0, 0.5]), ValueError, "correct"),
        (torch.tensor([float("nan"), 1.0]), torch.tensor([True, False]), ValueError, "confidence must be finite"),
        (torch.rand(2), torch.ones(2, dtype=torch.bool, device="meta"), ValueError, "confidence and correct"),
    ],
)
def test_bad_input_names_the_argument(confidence, correct, error, match):
    for f in (risk_coverage, aurc, e_aurc, augrc, selective_recall):
        with pytest.raises(error, match=match):
            f(confidence, correct)


def test_value_checks_follow_validate_args():
    conf, correct = torch.tensor([float("nan"), 1.0]), torch.tensor([True, False])
    with pytest.raises(ValueError, match="finite"):
        aurc(conf, correct, validate_args=True)
    aurc(conf, correct, validate_args=False)  # no host-synchronising value check


@pytest.mark.parametrize("coverages", [(0.0,), (1.5,), (), "0.5", (True,)])
def test_bad_coverages(coverages):
    with pytest.raises((TypeError, ValueError), match="coverages"):
        selective_recall(torch.rand(4), torch.ones(4, dtype=torch.bool), coverages)
