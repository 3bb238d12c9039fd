"""Tests of the evidential MSE loss L_U (Holmes Eq. 17) against scipy's Dirichlet moments and Monte Carlo."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from evidential_prvr.functional import dirichlet_mse_loss
from tests.strategies.evidential import dirichlet_alphas


def _scipy_loss(alpha: np.ndarray, y: np.ndarray) -> np.ndarray:
    rows = []
    for a, t in zip(alpha, y):
        if len(a) == 1:  # scipy.stats.dirichlet needs K >= 2; Dir(a) with K = 1 is the point mass p = 1
            rows.append((t[0] - 1.0) ** 2)
            continue
        d = stats.dirichlet(a)
        rows.append(float(((t - d.mean()) ** 2 + d.var()).sum()))
    return np.asarray(rows)


@given(dirichlet_alphas(max_log_evidence=12.0), st.data())
def test_matches_scipy_moments_with_soft_targets(alpha, data):
    k = alpha.shape[-1]
    raw = data.draw(st.lists(st.floats(0.0, 1.0), min_size=alpha.numel(), max_size=alpha.numel()))
    y = torch.tensor(raw, dtype=torch.float64).reshape(alpha.shape)
    y = y / y.sum(-1, keepdim=True).clamp_min(1e-12)
    per_row = dirichlet_mse_loss(alpha, y, reduction="none")
    np.testing.assert_allclose(per_row.numpy(), _scipy_loss(alpha.numpy(), y.numpy()), rtol=1e-9, atol=1e-12)
    assert per_row.shape == alpha.shape[:-1] and k >= 1


def test_matches_monte_carlo():
    rng = np.random.default_rng(1)
    alpha = np.array([3.0, 1.5, 7.0, 1.0])
    y = np.array([0.1, 0.0, 0.7, 0.2])
    p = stats.dirichlet(alpha).rvs(size=200_000, random_state=rng)
    sq = ((y - p) ** 2).sum(-1)
    value = dirichlet_mse_loss(torch.tensor(alpha), torch.tensor(y), reduction="none").item()
    assert abs(value - sq.mean()) < 5 * sq.std() / np.sqrt(len(sq))


def test_reductions_and_leading_dims():
    alpha = 1 + torch.rand(2, 3, 5, dtype=torch.float64) * 4
    y = torch.softmax(torch.randn(2, 3, 5, dtype=torch.float64), -1)
    none = dirichlet_mse_loss(alpha, y, reduction="none")
    assert none.shape == (2, 3)
    assert torch.allclose(dirichlet_mse_loss(alpha, y, reduction="sum"), none.sum())
    assert torch.allclose(dirichlet_mse_loss(alpha, y), none.mean())


def test_gradcheck():
    alpha = (1 + torch.rand(3, 4, dtype=torch.float64) * 5).requires_grad_()
    y = torch.softmax(torch.randn(3, 4, dtype=torch.float64), -1).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, t: dirichlet_mse_loss(a, t, "none"), (alpha, y))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_finite(dtype):
    alpha = (1 + torch.rand(4, 6) * 1e3).to(dtype).requires_grad_()
    y = torch.eye(6)[:4].to(dtype)
    loss = dirichlet_mse_loss(alpha, y)
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss) and torch.isfinite(alpha.grad).all()


@pytest.mark.parametrize("dtype,big", [(torch.float32, 1e18), (torch.float64, 1e150)])
def test_huge_evidence_finite(dtype, big):
    alpha = torch.tensor([[big, 1.0, big], [1.0, 1.0, 1.0]], dtype=dtype, requires_grad=True)
    y = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=dtype)
    loss = dirichlet_mse_loss(alpha, y)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(alpha.grad).all()
    assert loss.item() == pytest.approx(0.5 * (0.5 + 6 / 9 + 3 / 18), rel=1e-5)


def test_device(device):
    alpha = 1 + torch.rand(3, 4, device=device)
    y = torch.eye(4, device=device)[:3]
    assert dirichlet_mse_loss(alpha, y).device.type == device.type


def test_errors():
    alpha = 1 + torch.rand(3, 4)
    with pytest.raises(ValueError, match="target"):
        dirichlet_mse_loss(alpha, torch.rand(3, 5))
    with pytest.raises(TypeError, match="target"):
        dirichlet_mse_loss(alpha, torch.ones(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="target"):
        dirichlet_mse_loss(alpha, torch.full((3, 4), float("nan")))
    with pytest.raises(ValueError, match="reduction"):
        dirichlet_mse_loss(alpha, torch.rand(3, 4), reduction="avg")
    with pytest.raises(ValueError, match="alpha"):
        dirichlet_mse_loss(torch.zeros(3, 4), torch.rand(3, 4))
    with pytest.raises(ValueError, match="alpha"):
        dirichlet_mse_loss(torch.ones(0, 4), torch.ones(0, 4))
