"""Tests of evidence (Eq. 3), opinions (Eq. 4-5), label consistency (Eq. 7) and aleatoric uncertainty (Eq. 9)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy import integrate, special, stats

from evidential_prvr.functional import (
    correctly_matched,
    evidence,
    expected_entropy,
    label_consistency,
    opinion,
    positive_mask,
)
from tests.strategies.evidential import dirichlet_alphas, multi_hot_targets, similarity_batches

# --- evidence (Eq. 3) -------------------------------------------------------------------------------


def test_evidence_matches_numpy_both_scalings():
    s = np.linspace(-1.0, 1.0, 11)
    x = torch.from_numpy(s)
    np.testing.assert_allclose(evidence(x, 0.1, "inside").numpy(), np.exp(np.tanh(s / 0.1)), rtol=1e-12)
    np.testing.assert_allclose(evidence(x, 0.05, "outside").numpy(), np.exp(np.tanh(s) / 0.05), rtol=1e-12)


@given(similarity_batches(scale=1e3), st.floats(0.01, 2.0), st.sampled_from(["inside", "outside"]))
def test_evidence_range_and_finite(batch, tau, scaling):
    sim = batch[0]
    e = evidence(sim, tau, scaling)
    assert torch.isfinite(e).all()
    bound = 1.0 if scaling == "inside" else 1.0 / tau
    assert (e >= math.exp(-bound) * (1 - 1e-12)).all()
    assert (e <= math.exp(bound) * (1 + 1e-12)).all()


def test_evidence_exponent_cap_keeps_float32_finite():
    sim = torch.tensor([[1e3, -1e3, 0.0]], dtype=torch.float32)
    e = evidence(sim, 1e-3, "outside")
    assert torch.isfinite(e).all()
    assert torch.isfinite(e * e).all()  # products of two evidences (DS fusion) stay finite too


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_evidence_half_precision_is_upcast(dtype):
    sim = torch.tensor([[0.9, -0.9, 0.1]], dtype=dtype)
    e = evidence(sim, 0.04, "outside")  # e^25 overflows float16
    assert e.dtype == torch.float32 and torch.isfinite(e).all()


def test_evidence_under_autocast_cpu():
    sim = torch.randn(4, 5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        e = evidence(sim.bfloat16(), 0.1)
    assert torch.isfinite(e).all()


def test_evidence_device(device):
    sim = torch.randn(3, 4, device=device)
    assert evidence(sim).device.type == device.type


@pytest.mark.parametrize("scaling", ["inside", "outside"])
def test_evidence_gradcheck(scaling):
    sim = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s: evidence(s, 0.3, scaling), (sim,))


def test_evidence_errors():
    sim = torch.randn(2, 3)
    with pytest.raises(ValueError, match="tau"):
        evidence(sim, 0.0)
    with pytest.raises(ValueError, match="tau"):
        evidence(sim, -1.0)
    with pytest.raises(ValueError, match="tanh_scaling"):
        evidence(sim, 0.1, "middle")
    with pytest.raises(ValueError, match="sim"):
        evidence(torch.tensor([float("nan")]), 0.1)
    with pytest.raises(TypeError, match="sim"):
        evidence(torch.ones(2, dtype=torch.long))
    with pytest.raises(TypeError, match="sim"):
        evidence([0.1, 0.2])


# --- opinion (Eq. 4-5) ------------------------------------------------------------------------------


@given(dirichlet_alphas(max_log_evidence=20.0))
def test_opinion_invariants(alpha):
    op = opinion(alpha)
    b, u, s = op.belief, op.uncertainty, op.strength
    assert torch.allclose(b.sum(-1) + u, torch.ones_like(u), atol=1e-12)
    assert (b >= 0).all() and (u > 0).all() and (u <= 1).all()
    np.testing.assert_allclose(s.numpy(), alpha.numpy().sum(-1), rtol=1e-12)
    np.testing.assert_allclose(u.numpy(), alpha.shape[-1] / alpha.numpy().sum(-1), rtol=1e-12)


def test_opinion_named_fields_and_k1():
    op = opinion(torch.tensor([[3.0]], dtype=torch.float64))
    assert op.belief.item() == pytest.approx(2 / 3)
    assert op.uncertainty.item() == pytest.approx(1 / 3)
    assert op.strength.item() == pytest.approx(3.0)


def test_opinion_gradcheck():
    alpha = (1 + torch.rand(3, 4, dtype=torch.float64) * 5).requires_grad_()
    assert torch.autograd.gradcheck(lambda a: opinion(a).belief, (alpha,))
    assert torch.autograd.gradcheck(lambda a: opinion(a).uncertainty, (alpha,))


def test_opinion_errors():
    with pytest.raises(ValueError, match="alpha"):
        opinion(torch.tensor([0.5, 2.0]))
    with pytest.raises(ValueError, match="alpha"):
        opinion(torch.tensor([float("inf"), 2.0]))
    with pytest.raises(ValueError, match="alpha"):
        opinion(torch.empty(0, 3))
    with pytest.raises(ValueError, match="alpha"):
        opinion(torch.tensor(2.0))


# --- expected entropy (Eq. 9) -----------------------------------------------------------------------


def _beta_expected_entropy(a: float, b: float) -> float:
    def integrand(p: float) -> float:
        h = -special.xlogy(p, p) - special.xlogy(1 - p, 1 - p)
        return stats.beta.pdf(p, a, b) * h

    return integrate.quad(integrand, 0.0, 1.0, limit=200)[0]


@pytest.mark.parametrize("a,b", [(1.0, 1.0), (2.0, 5.0), (1.3, 40.0), (9.0, 9.5), (1.0, 300.0)])
def test_expected_entropy_k2_vs_quadrature(a, b):
    xi = expected_entropy(torch.tensor([a, b], dtype=torch.float64)).item()
    assert xi == pytest.approx(_beta_expected_entropy(a, b), rel=1e-7, abs=1e-9)


@pytest.mark.parametrize("alpha", [[1.0, 1.0, 1.0], [2.0, 7.0, 1.5, 3.0], [30.0, 1.0, 1.0, 1.0, 1.0]])
def test_expected_entropy_vs_monte_carlo(alpha):
    rng = np.random.default_rng(0)
    p = stats.dirichlet(np.asarray(alpha)).rvs(size=200_000, random_state=rng)
    h = -special.xlogy(p, p).sum(-1)
    xi = expected_entropy(torch.tensor(alpha, dtype=torch.float64)).item()
    assert abs(xi - h.mean()) < 5 * h.std() / math.sqrt(len(h))


@given(dirichlet_alphas(max_log_evidence=25.0))
def test_expected_entropy_bounds(alpha):
    xi = expected_entropy(alpha)
    k = alpha.shape[-1]
    assert torch.isfinite(xi).all()
    assert (xi >= -1e-9).all() and (xi < math.log(k) + 1e-9).all()


def test_expected_entropy_k1_is_zero_and_accepts_alpha_below_one():
    assert expected_entropy(torch.tensor([[5.0]], dtype=torch.float64)).item() == pytest.approx(0.0, abs=1e-12)
    assert torch.isfinite(expected_entropy(torch.tensor([0.5, 0.2])))
    with pytest.raises(ValueError, match="alpha"):
        expected_entropy(torch.tensor([0.0, 1.0]))


def test_expected_entropy_gradcheck():
    alpha = (1 + torch.rand(3, 4, dtype=torch.float64) * 5).requires_grad_()
    assert torch.autograd.gradcheck(expected_entropy, (alpha,))


# --- label consistency (Eq. 7) and targets ------------------------------------------------------------


def test_label_consistency_index_and_multi_hot():
    sim = torch.tensor([[0.2, 0.8, -0.1], [0.5, -0.4, 0.3], [-0.6, 0.1, 0.9]], dtype=torch.float64)
    c = label_consistency(sim, torch.tensor([1, 1, 0]))
    np.testing.assert_allclose(c.numpy(), [0.8, 0.0, 0.0])
    multi = torch.tensor([[1, 1, 0], [1, 0, 1], [0, 1, 1]], dtype=torch.float64)
    c = label_consistency(sim, multi)
    np.testing.assert_allclose(c.numpy(), [0.5, 0.4, 0.5])  # mean over positives, clipped at 0


@given(similarity_batches(scale=2.0), st.data())
def test_label_consistency_is_clipped_mean_over_positives(batch, data):
    sim = batch[0]
    target = data.draw(multi_hot_targets(sim.shape[0], sim.shape[1]))
    c = label_consistency(sim, target).numpy()
    m = target.numpy().astype(bool)
    expected = [max(0.0, float(sim.numpy()[i][m[i]].mean())) for i in range(len(m))]
    np.testing.assert_allclose(c, expected, rtol=1e-12, atol=1e-12)


def test_label_consistency_gradcheck():
    sim = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s: label_consistency(s, torch.tensor([0, 1, 2, 3])), (sim,))


def test_correctly_matched_any_positive_and_ties():
    sim = torch.tensor([[0.1, 0.9, 0.9], [0.5, 0.2, 0.1], [0.3, 0.3, 0.3]])
    mask = positive_mask(torch.tensor([[0, 0, 1], [0, 1, 0], [0, 1, 0]]), 3, 3)
    assert correctly_matched(sim, mask).tolist() == [True, False, True]


def test_target_errors():
    sim = torch.randn(3, 4)
    with pytest.raises(ValueError, match=r"query_video.*\[0, 4\)"):
        label_consistency(sim, torch.tensor([0, 4, 1]))
    with pytest.raises(ValueError, match=r"query_video.*-1"):
        label_consistency(sim, torch.tensor([0, -1, 1]))
    with pytest.raises(ValueError, match=r"query_video.*\[3\]"):
        label_consistency(sim, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"query_video.*\[3, 4\]"):
        label_consistency(sim, torch.ones(3, 5))
    with pytest.raises(ValueError, match="query_video.*0 and 1"):
        label_consistency(sim, torch.full((3, 4), 0.5))
    with pytest.raises(ValueError, match="query_video.*at least one positive"):
        label_consistency(sim, torch.zeros(3, 4))
    with pytest.raises(TypeError, match="query_video"):
        label_consistency(sim, torch.tensor([0.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match="sim"):
        label_consistency(torch.randn(3), torch.tensor([0, 1, 2]))
