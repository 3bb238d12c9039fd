"""One-step bridge distillation: the loss, its module and the student of a DAB bridge."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from evidential_prvr.functional import bridge_distillation_loss
from evidential_prvr.probabilistic import BridgeDistillationLoss, ConditionedDistributionBridge, DistributionBridge

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]


def _trained_like(bridge: DistributionBridge, seed: int = 0) -> DistributionBridge:
    """Give the zero-initialised output layer random weights, so the chain moves its input."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in bridge.drift[-1].parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return bridge


def test_the_loss_is_the_squared_distance_in_the_bridge_space() -> None:
    s_mu, s_lv = torch.tensor([[1.0, 2.0], [0.0, 0.0]]), torch.tensor([[0.0, -1.0], [1.0, 1.0]])
    t_mu, t_lv = torch.tensor([[0.0, 2.0], [0.0, 3.0]]), torch.tensor([[0.0, 0.0], [1.0, -1.0]])
    # item 0: 1 + 0 + 0 + 1 = 2; item 1: 0 + 9 + 0 + 4 = 13; mean 7.5
    assert float(bridge_distillation_loss(s_mu, s_lv, t_mu, t_lv)) == 7.5


@given(st.integers(1, 4), st.integers(1, 5), st.integers(0, 10_000))
def test_properties(n: int, d: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    a, b, c, e = (torch.randn(n, d, generator=g, dtype=torch.float64) for _ in range(4))
    loss = bridge_distillation_loss(a, b, c, e)
    assert float(loss) >= 0.0
    assert float(bridge_distillation_loss(a, b, a, b)) == 0.0
    assert float(loss) == pytest.approx(float(bridge_distillation_loss(c, e, a, b)))  # symmetric
    brute = sum(float(((a[i] - c[i]) ** 2).sum() + ((b[i] - e[i]) ** 2).sum()) for i in range(n)) / n
    assert float(loss) == pytest.approx(brute)
    # leading dimensions are items: [n, d] and [1, n, d] give the same mean
    assert float(bridge_distillation_loss(a[None], b[None], c[None], e[None])) == pytest.approx(float(loss))


def test_gradcheck_float64() -> None:
    g = torch.Generator().manual_seed(1)
    inputs = tuple(torch.randn(3, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(4))
    assert torch.autograd.gradcheck(bridge_distillation_loss, inputs)
    assert torch.autograd.gradgradcheck(bridge_distillation_loss, inputs)


def test_half_inputs_compute_in_float32() -> None:
    x = torch.ones(2, 3, dtype=torch.float16)
    assert bridge_distillation_loss(x, x, x * 0, x).dtype == torch.float32


def test_bad_inputs() -> None:
    x = torch.zeros(2, 3)
    with pytest.raises(TypeError, match="student_mu must be a torch.Tensor, got list"):
        bridge_distillation_loss([0.0], x, x, x)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="teacher_logvar"):
        bridge_distillation_loss(x, x, x, torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="student_mu .*student_logvar"):
        bridge_distillation_loss(x, torch.zeros(2, 4), x, x)
    with pytest.raises(ValueError, match="student_mu .*teacher_mu"):
        bridge_distillation_loss(x, x, torch.zeros(3, 3), torch.zeros(3, 3))
    with pytest.raises(ValueError, match="teacher_mu must be finite"):
        bridge_distillation_loss(x, x, torch.full((2, 3), float("nan")), x, validate_args=True)
    with pytest.raises(TypeError, match="student must be a DistributionBridge .* got ConditionedDistributionBridge"):
        BridgeDistillationLoss()(ConditionedDistributionBridge(3, n_steps=2), x, x, x, x)  # type: ignore[arg-type]


@pytest.mark.parametrize("device", DEVICES)
def test_the_student_is_one_step_of_the_teachers_drift(device: str) -> None:
    teacher = _trained_like(DistributionBridge(4, n_steps=6, total_steps=50, step_range=(0.1, 0.5), time_dim=6,
                                               hidden_dim=7)).double().to(device)
    student = teacher.one_step_student()
    assert (student.n_steps, student.dim, student.total_steps, student.hidden_dim) == (1, 4, 50, 7)
    assert student.step_sizes == [0.5] and student.logvar_bounds == teacher.logvar_bounds
    assert next(student.parameters()).device.type == device and next(student.parameters()).dtype == torch.float64
    for mine, theirs in zip(student.drift.parameters(), teacher.drift.parameters()):
        assert torch.equal(mine, theirs) and mine.data_ptr() != theirs.data_ptr()  # a copy, not shared
    mu = torch.randn(5, 4, dtype=torch.float64, device=device)
    logvar = torch.full((5, 4), -2.0, dtype=torch.float64, device=device)
    # by hand: one update at t = 1 with chi = step_range[1]
    t_emb = student.time_embeddings[0].expand(5, -1)
    d_mu, d_logvar = teacher.drift(torch.cat([mu, logvar, t_emb], dim=-1)).chunk(2, dim=-1)
    landed = student(mu, logvar)
    torch.testing.assert_close(landed.mu, mu - 0.5 * d_mu)
    torch.testing.assert_close(landed.logvar, (logvar - 0.5 * d_logvar).clamp(-6.0, 2.0))


@pytest.mark.parametrize("device", DEVICES)
def test_distilling_brings_the_student_to_the_chains_end(device: str) -> None:
    torch.manual_seed(0)
    teacher = _trained_like(DistributionBridge(6, n_steps=8, time_dim=8)).to(device)
    student = teacher.one_step_student()
    start = torch.randn(256, 6, device=device), torch.full((256, 6), -2.0, device=device)
    with torch.no_grad():
        target = teacher(*start)
    loss_fn = BridgeDistillationLoss()
    with torch.no_grad():
        before = float(loss_fn(student, *start, *target))
    optimizer = torch.optim.Adam(student.parameters(), lr=3e-3)
    for _ in range(300):
        loss = loss_fn(student, *start, *target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        after = float(loss_fn(student, *start, *target))
    assert before > 0.0 and after < 0.2 * before
    assert all(p.grad is None for p in teacher.parameters())  # the teacher is not trained
