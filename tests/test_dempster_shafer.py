"""Tests of Dempster-Shafer fusion (Holmes Eq. 16) against a brute-force Dempster rule over focal sets."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from evidential_prvr import DempsterShaferFusion, DempsterShaferOutput
from evidential_prvr.functional import ds_combine, ds_conflict, evidence
from tests.strategies.evidential import dirichlet_alphas


def _masses(alpha: np.ndarray) -> dict[frozenset, float]:
    """Mass function of a Dirichlet opinion: singletons get the beliefs, the frame Θ the uncertainty."""
    k = len(alpha)
    s = alpha.sum()
    m = {frozenset([i]): (alpha[i] - 1.0) / s for i in range(k)}
    m[frozenset(range(k))] = k / s
    return m


def _dempster(alpha_a: np.ndarray, alpha_b: np.ndarray) -> tuple[np.ndarray, float]:
    """Dempster's rule by enumerating all pairs of focal sets; returns (fused alpha, conflict). Needs K >= 2."""
    k = len(alpha_a)
    combined: dict[frozenset, float] = {}
    conflict = 0.0
    for (set_a, mass_a), (set_b, mass_b) in itertools.product(_masses(alpha_a).items(), _masses(alpha_b).items()):
        inter = set_a & set_b
        if not inter:
            conflict += mass_a * mass_b
        else:
            combined[inter] = combined.get(inter, 0.0) + mass_a * mass_b
    norm = 1.0 - conflict
    theta = frozenset(range(k))
    u = combined.get(theta, 0.0) / norm
    beliefs = np.array([combined.get(frozenset([i]), 0.0) / norm for i in range(k)])
    strength = k / u
    return beliefs * strength + 1.0, conflict


@st.composite
def alpha_pairs(draw, max_log_evidence: float = 6.0, min_cols: int = 1):
    a = draw(dirichlet_alphas(min_cols=min_cols, max_log_evidence=max_log_evidence))
    log_e = draw(st.lists(st.floats(-30.0, max_log_evidence), min_size=a.numel(), max_size=a.numel()))
    b = 1.0 + torch.tensor(log_e, dtype=torch.float64).reshape(a.shape).exp()
    return a, b


@given(alpha_pairs(min_cols=2))
def test_matches_brute_force_dempster(pair):
    a, b = pair
    fused = ds_combine(a, b).numpy()
    conflict = ds_conflict(a, b).numpy()
    for i in range(a.shape[0]):
        expected_alpha, expected_conflict = _dempster(a[i].numpy(), b[i].numpy())
        np.testing.assert_allclose(fused[i], expected_alpha, rtol=1e-8)
        np.testing.assert_allclose(conflict[i], expected_conflict, rtol=1e-8, atol=1e-12)


def test_k1_single_class():
    # With K = 1 the singleton and Θ coincide as sets, so subjective logic keeps b and u apart:
    # b = u = 1/2 for alpha = 2, Eq. 16 gives b^o = 3/4, u^o = 1/4 (no conflict), hence alpha^o = 3/4 * 4 + 1.
    a = torch.tensor([[2.0]], dtype=torch.float64)
    assert ds_combine(a, a).item() == pytest.approx(4.0)
    assert ds_conflict(a, a).item() == pytest.approx(0.0, abs=1e-12)


@given(alpha_pairs(max_log_evidence=20.0))
def test_fused_opinion_valid_and_commutative(pair):
    a, b = pair
    out = DempsterShaferFusion()(a, b)
    assert isinstance(out, DempsterShaferOutput)
    assert torch.allclose(out.belief.sum(-1) + out.uncertainty, torch.ones_like(out.uncertainty), atol=1e-10)
    assert (out.belief >= 0).all() and (out.uncertainty > 0).all()
    assert (out.conflict >= 0).all() and (out.conflict < 1).all()
    assert torch.allclose(ds_combine(a, b), ds_combine(b, a), rtol=1e-12)


def test_module_equals_functional():
    a = 1 + torch.rand(2, 3, 5, dtype=torch.float64) * 10
    b = 1 + torch.rand(2, 3, 5, dtype=torch.float64) * 10
    out = DempsterShaferFusion()(a, b)
    torch.testing.assert_close(out.alpha, ds_combine(a, b))
    torch.testing.assert_close(out.conflict, ds_conflict(a, b))
    s = out.alpha.sum(-1)
    torch.testing.assert_close(out.uncertainty, 5 / s)


def test_gradcheck():
    a = (1 + torch.rand(3, 4, dtype=torch.float64) * 5).requires_grad_()
    b = (1 + torch.rand(3, 4, dtype=torch.float64) * 5).requires_grad_()
    assert torch.autograd.gradcheck(ds_combine, (a, b))
    assert torch.autograd.gradcheck(ds_conflict, (a, b))


def test_extreme_evidence_stays_finite_float32():
    sim = torch.tensor([[1.0, -1.0, 0.99], [1e3, 1e3, 1e3]], requires_grad=True)
    alpha = evidence(sim, 1e-3, "outside") + 1  # evidence at its cap
    out = DempsterShaferFusion()(alpha, alpha)
    assert torch.isfinite(out.alpha).all() and torch.isfinite(out.uncertainty).all()
    out.alpha.sum(-1).log().sum().backward()
    assert torch.isfinite(sim.grad).all()


def test_device_and_half(device):
    a = (1 + torch.rand(3, 4, device=device) * 3).half()
    b = (1 + torch.rand(3, 4, device=device) * 3).half()
    fused = ds_combine(a, b)
    assert fused.device.type == device.type and fused.dtype == torch.float32


def test_errors():
    with pytest.raises(ValueError, match="alpha_a and alpha_b"):
        ds_combine(torch.ones(2, 3), torch.ones(2, 4))
    with pytest.raises(ValueError, match="alpha_b"):
        ds_combine(torch.ones(2, 3), torch.zeros(2, 3))
    with pytest.raises(TypeError, match="alpha_a"):
        ds_combine(np.ones((2, 3)), torch.ones(2, 3))
