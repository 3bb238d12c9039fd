"""Retrieval-time query identification: the fixed-threshold rule, the threshold fits and the paper's batch rule."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from evidential_prvr import QueryType
from evidential_prvr.functional import (
    batch_rule_query_types,
    fit_query_thresholds,
    gallery_opinion,
    identify_query_types,
    macro_f1,
)
from evidential_prvr.uncertainty import QueryTypeThresholds
from tests.strategies.selective import gallery_scores, identification_features

P, N, U = int(QueryType.PRECISE), int(QueryType.POLYSEMOUS), int(QueryType.UNDERDETERMINED)


def np_rule(u, c, xi, beta_u, beta_p, beta_xi, r=None, beta_r=math.inf):
    r = np.full(len(u), -np.inf) if r is None else r
    return np.array([U if u[i] > beta_u else P if (c[i] >= beta_p and xi[i] < beta_xi and r[i] < beta_r) else N
                     for i in range(len(u))])


def np_macro_f1(pred, true):
    scores = []
    for t in range(3):
        tp = np.sum((pred == t) & (true == t))
        denominator = np.sum(pred == t) + np.sum(true == t)
        if denominator:
            scores.append(2 * tp / denominator)
    return float(np.mean(scores)) if scores else math.nan


def test_type_codes_follow_query_type():
    from evidential_prvr.functional import _query_types

    assert (_query_types.PRECISE, _query_types.POLYSEMOUS, _query_types.UNDERDETERMINED) == (P, N, U)


@given(identification_features(), st.sampled_from([0.0, 0.4, 1.0, math.inf]), st.sampled_from([-math.inf, 0.2, 0.6]),
       st.sampled_from([0.0, 0.8, 2.0, math.inf]), st.sampled_from([0.1, 0.5, math.inf]))
def test_rule_matches_numpy(features, beta_u, beta_p, beta_xi, beta_r):
    u, c, xi = features
    r = c.flip(0) * 0.7
    got = identify_query_types(u, c, xi, QueryTypeThresholds(beta_u, beta_p, beta_xi, beta_r), runner_up=r)
    expected = np_rule(u.numpy(), c.numpy(), xi.numpy(), beta_u, beta_p, beta_xi, r.numpy(), beta_r)
    np.testing.assert_array_equal(got.numpy(), expected)
    assert got.dtype == torch.int64
    if beta_r == math.inf:  # without the runner-up test the feature is optional
        np.testing.assert_array_equal(identify_query_types(u, c, xi, QueryTypeThresholds(beta_u, beta_p, beta_xi)),
                                      expected)


@given(st.lists(st.integers(0, 2), min_size=1, max_size=30), st.integers(0, 2**31 - 1))
def test_macro_f1_matches_numpy(true, seed):
    true = np.array(true)
    pred = np.random.default_rng(seed).integers(0, 3, size=len(true))
    assert macro_f1(torch.from_numpy(pred), torch.from_numpy(true)) == pytest.approx(np_macro_f1(pred, true))


def test_macro_f1_hand_computed():
    # precise: TP 1, FP 1, FN 0 -> 2/3; polysemous: TP 1, FN 1 -> 2/3; under-determined: 1
    assert macro_f1(torch.tensor([0, 0, 1, 2]), torch.tensor([0, 1, 1, 2])) == pytest.approx((2 / 3 + 2 / 3 + 1) / 3)
    assert macro_f1(torch.tensor([1, 1]), torch.tensor([1, 1])) == 1.0  # absent types are left out


def _np_grid(x, grid, disabled):
    """Midpoint of the widest gap in each of ``grid`` runs of neighbouring distinct values, then ``disabled``."""
    if x is None or len(x) == 0:
        return np.array([disabled])
    values = np.unique(x)
    gaps = [(values[j + 1] - values[j], j) for j in range(len(values) - 1)]
    if len(gaps) <= grid:
        chosen = [j for _, j in gaps]
    else:
        runs = {}
        for gap, j in gaps:
            runs.setdefault(j * grid // len(gaps), []).append((-gap, j))
        chosen = [min(run)[1] for _, run in sorted(runs.items())]
    mids = [values[j] + 0.5 * (values[j + 1] - values[j]) for j in chosen]
    return np.array(([disabled] + mids) if disabled < 0 else (mids + [disabled]))


@given(identification_features(max_queries=20), st.integers(0, 2**31 - 1), st.sampled_from([2, 3, 4]),
       st.booleans())
def test_macro_f1_fit_is_the_grid_optimum(features, seed, grid, with_runner_up):
    u, c, xi = features
    rng = np.random.default_rng(seed)
    types = rng.integers(0, 3, size=len(u))
    r = torch.from_numpy(rng.integers(0, 4, size=len(u)) / 3.0) if with_runner_up else None
    th = fit_query_thresholds(u, c, xi, runner_up=r, query_types=torch.from_numpy(types), grid=grid)
    rn = None if r is None else r.numpy()
    fitted = np_macro_f1(np_rule(u.numpy(), c.numpy(), xi.numpy(), th.uncertainty, th.consistency, th.aleatoric, rn,
                                 th.runner_up), types)
    grids = [_np_grid(u.numpy(), grid, math.inf), _np_grid(c.numpy(), grid, -math.inf),
             _np_grid(xi.numpy(), grid, math.inf), _np_grid(rn, grid, math.inf) if rn is not None else [math.inf]]
    best = max(np_macro_f1(np_rule(u.numpy(), c.numpy(), xi.numpy(), a, b, d, rn, e), types)
               for a, b, d, e in itertools.product(*grids))
    assert fitted == pytest.approx(best)
    assert th.uncertainty in set(grids[0].tolist()) and th.runner_up in set(list(grids[3]))


def test_macro_f1_fit_recovers_separable_types():
    gen = torch.Generator().manual_seed(0)
    types = torch.randint(0, 3, (300,), generator=gen)
    u = torch.where(types == U, 0.8, 0.2) + 0.05 * torch.rand(300, generator=gen)
    xi = torch.where(types == N, 1.5, 0.5) + 0.1 * torch.rand(300, generator=gen)
    c = torch.rand(300, generator=gen)
    th = fit_query_thresholds(u, c, xi, query_types=types)
    assert torch.equal(identify_query_types(u, c, xi, th), types)


def np_youden(feature, correct, keep_above, candidates):
    if correct.all() or (~correct).all():
        return int(np.argmax(np.abs(candidates)))  # the disabling (infinite) value
    scores = []
    for t in candidates:
        kept = feature >= t if keep_above else feature < t
        scores.append(np.mean(kept[correct]) - np.mean(kept[~correct]))
    return int(np.argmax(scores))


@given(identification_features(), st.integers(0, 2**31 - 1))
def test_correctness_fit_matches_sequential_youden(features, seed):
    u, c, xi = (x.numpy() for x in features)
    rng = np.random.default_rng(seed)
    correct = rng.random(len(u)) < 0.5
    r = rng.integers(0, 5, size=len(u)) / 4.0
    grid = 9
    tu = _np_grid(u, grid, math.inf)
    beta_u = tu[np_youden(-u, correct, True, -tu)]
    kept = u <= beta_u
    tc = _np_grid(c[kept], grid, -math.inf)
    beta_p = tc[np_youden(c[kept], correct[kept], True, tc)]
    kept &= c >= beta_p
    tr = _np_grid(r[kept], grid, math.inf)
    beta_r = tr[np_youden(r[kept], correct[kept], False, tr)]
    kept &= r < beta_r
    tx = _np_grid(xi[kept], grid, math.inf)
    beta_xi = tx[np_youden(xi[kept], correct[kept], False, tx)] if kept.any() else math.inf
    th = fit_query_thresholds(*features, runner_up=torch.from_numpy(r), correct=torch.from_numpy(correct), grid=grid)
    assert (th.uncertainty, th.consistency, th.runner_up, th.aleatoric) == pytest.approx(
        (beta_u, beta_p, beta_r, beta_xi))


def np_batch_branch(u, c, xi, matched, beta):
    beta_u = min(max(u[matched]), 1 - beta) if matched.any() else 1 - beta
    beta_p = max(beta, min(c[matched])) if matched.any() else beta
    under = u > beta_u
    cand = ~under & (c >= beta_p)
    med = np.median(xi[cand]) if cand.any() else np.nan
    precise = cand & (xi < med)
    return np.where(under, U, np.where(precise, P, N))


@given(gallery_scores(), st.sampled_from([0.3, 0.0, 1.0]))
def test_batch_rule_matches_numpy(problem, beta):
    frame, clip, ranking, target = problem
    op = gallery_opinion(frame, clip, ranking=ranking, target=target, k=4, tau=0.3, tanh_scaling="outside")
    expected = np.maximum(*[
        np_batch_branch(b.uncertainty.numpy(), b.label_consistency.numpy(), b.aleatoric.numpy(), op.correct.numpy(),
                        beta)
        for b in (op.frame, op.clip)
    ])
    np.testing.assert_array_equal(batch_rule_query_types(op, beta=beta).numpy(), expected)


def test_batch_rule_needs_labels():
    op = gallery_opinion(torch.rand(3, 4), torch.rand(3, 4))
    with pytest.raises(ValueError, match="target"):
        batch_rule_query_types(op)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda u: identify_query_types(u, u[:2], u, QueryTypeThresholds()), ValueError, "consistency"),
        (lambda u: identify_query_types(u, u, u, (0.1, 0.2, 0.3)), TypeError, "thresholds"),
        (lambda u: identify_query_types(u.long(), u, u, QueryTypeThresholds()), TypeError, "uncertainty"),
        (lambda u: identify_query_types(u, u, u.to("meta"), QueryTypeThresholds()), ValueError, "uncertainty and"),
        (lambda u: fit_query_thresholds(u, u, u), ValueError, "query_types or correct"),
        (lambda u: fit_query_thresholds(u, u, u, query_types=torch.tensor([0, 1, 3])), ValueError, "query_types"),
        (lambda u: fit_query_thresholds(u, u, u, query_types=torch.tensor([0.0, 1, 2])), TypeError, "query_types"),
        (lambda u: fit_query_thresholds(u, u, u, correct=torch.tensor([True])), ValueError, "correct"),
        (lambda u: fit_query_thresholds(u, u, u, correct=torch.ones(3, dtype=torch.bool), grid=1), ValueError, "grid"),
        (lambda u: identify_query_types(torch.tensor([math.nan, 0, 0]), u, u, QueryTypeThresholds()), ValueError,
         "finite"),
        (lambda u: QueryTypeThresholds(math.nan), ValueError, "uncertainty"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call(torch.tensor([0.1, 0.5, 0.9]))
