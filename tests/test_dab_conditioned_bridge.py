"""DAB's video-conditioned distribution bridge and its contraction bound (Key Design 2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from evidential_prvr.functional import bounded_contraction
from evidential_prvr.probabilistic import ConditionedDistributionBridge
from tests.strategies.gaussian import gaussian_sets


def perturb(module: torch.nn.Module, seed: int = 0, scale: float = 0.5) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))


def joint_distance(mu, logvar, target_mu, target_logvar) -> np.ndarray:
    """Euclidean distance in [mu, logvar], with NumPy (an independent computation)."""
    a = np.concatenate([np.asarray(mu), np.asarray(logvar)], axis=-1)
    b = np.concatenate([np.asarray(target_mu), np.asarray(target_logvar)], axis=-1)
    return np.sqrt(((a - b) ** 2).sum(-1))


# ---------------------------------------------------------------- bounded_contraction


@given(st.integers(1, 5), st.integers(1, 6), st.floats(0.05, 1.0), st.data())
def test_contraction_bound_holds_and_keeps_updates_inside_the_ball(n, d, rate, data):
    new = data.draw(gaussian_sets(n, d, mu_scale=5.0))
    old = data.draw(gaussian_sets(n, d))
    target = data.draw(gaussian_sets(n, d))
    mu, logvar = bounded_contraction(*new, *old, *target, rate)
    before = joint_distance(*old, *target)
    proposed = joint_distance(*new, *target)
    after = joint_distance(mu.numpy(), logvar.numpy(), *target)
    assert np.all(after <= rate * before * (1 + 1e-12) + 1e-12)
    # rows within rounding of the ball's edge (or at distances that underflow when squared) are only bound-checked
    margin = 1e-9 * (1 + rate * before)
    inside = proposed < rate * before - margin
    np.testing.assert_array_equal(mu.numpy()[inside], new[0].numpy()[inside])  # an update in the ball is kept
    # outside it, the result is on the segment target -> proposal, at the allowed radius
    outside = proposed > rate * before + margin
    expected = target[0].numpy() + (rate * before / np.maximum(proposed, 1e-300))[:, None] * (
        new[0].numpy() - target[0].numpy())
    np.testing.assert_allclose(mu.numpy()[outside], expected[outside], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(after[outside], rate * before[outside], rtol=1e-9, atol=1e-12)


def test_contraction_keeps_clipped_log_variances_in_range():
    g = torch.Generator().manual_seed(1)
    target = torch.randn(50, 4, generator=g), torch.empty(50, 4).uniform_(-6, 2, generator=g)
    old = torch.randn(50, 4, generator=g) * 4, torch.empty(50, 4).uniform_(-6, 2, generator=g)
    new = torch.randn(50, 4, generator=g) * 9, torch.empty(50, 4).uniform_(-6, 2, generator=g)
    _, logvar = bounded_contraction(*new, *old, *target, 0.3)
    assert float(logvar.min()) >= -6.0 and float(logvar.max()) <= 2.0


def test_contraction_broadcasts_pairs_and_handles_a_state_at_its_target():
    text = torch.randn(3, 1, 4, dtype=torch.float64), torch.zeros(3, 1, 4, dtype=torch.float64)
    video = torch.randn(1, 5, 4, dtype=torch.float64), torch.zeros(1, 5, 4, dtype=torch.float64)
    mu, logvar = bounded_contraction(text[0] * 3, text[1], *text, *video, 0.5)
    assert mu.shape == logvar.shape == (3, 5, 4)
    # already at the target: it must stay there, with finite gradients
    at = video[0][0].clone().requires_grad_(), video[1][0].clone()
    mu, _ = bounded_contraction(at[0] + 1.0, at[1], at[0], at[1], video[0][0], video[1][0], 0.5)
    torch.testing.assert_close(mu, video[0][0])
    mu.sum().backward()
    assert bool(torch.isfinite(at[0].grad).all())


def test_contraction_gradcheck():
    g = torch.Generator().manual_seed(2)
    args = [torch.randn(4, 3, generator=g, dtype=torch.float64).requires_grad_() for _ in range(6)]
    args[0] = (args[0].detach() * 3).requires_grad_()  # most rows leave the ball
    assert torch.autograd.gradcheck(lambda *a: bounded_contraction(*a, rate=0.6), tuple(args))


def test_contraction_errors():
    z = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"rate must lie in \(0.0, 1.0\]"):
        bounded_contraction(z, z, z, z, z, z, 1.5)
    with pytest.raises(ValueError, match="mu and logvar must have the same shape"):
        bounded_contraction(z, torch.zeros(2, 4), z, z, z, z, 0.8)
    with pytest.raises(ValueError, match="must broadcast to one shape"):
        bounded_contraction(z, z, z, z, torch.zeros(4, 3), torch.zeros(4, 3), 0.8)
    with pytest.raises(TypeError, match="target_mu must be a torch.Tensor"):
        bounded_contraction(z, z, z, z, [0.0], z, 0.8)


# ---------------------------------------------------------------- ConditionedDistributionBridge


def loop_bridge(bridge: ConditionedDistributionBridge, mu, logvar, target_mu, target_logvar):
    """The chain pair by pair, from the formulas (time embedding, step sizes and bound written out)."""
    n, d = bridge.n_steps, bridge.dim
    half = bridge.time_embeddings.shape[1] // 2
    lo, hi = bridge.logvar_bounds
    rate = bridge.contraction ** (1 / n) if bridge.contraction is not None else None
    out_mu, out_logvar = [], []
    for m, v, tm, tv in zip(mu, logvar, target_mu, target_logvar):
        v, tv = v.clamp(lo, hi), tv.clamp(lo, hi)
        for t in range(n, 0, -1):
            chi = 0.2 + 0.4 * (t - 1) / (n - 1)
            freq = [float(bridge.total_steps) ** (-k / half) for k in range(half)]
            emb = torch.tensor([math.cos(t * f) for f in freq] + [math.sin(t * f) for f in freq], dtype=m.dtype)
            delta = bridge.drift(torch.cat([m, v, tm, tv, emb]))
            new_m, new_v = m - chi * delta[:d], (v - chi * delta[d:]).clamp(lo, hi)
            if rate is not None:
                before = torch.cat([m - tm, v - tv]).norm()
                after = torch.cat([new_m - tm, new_v - tv]).norm()
                if after > rate * before:
                    scale = rate * before / after
                    new_m, new_v = tm + scale * (new_m - tm), tv + scale * (new_v - tv)
            m, v = new_m, new_v
        out_mu.append(m)
        out_logvar.append(v)
    return torch.stack(out_mu), torch.stack(out_logvar)


@pytest.mark.parametrize("contraction", [0.8, 0.05, None])
def test_conditioned_bridge_matches_a_loop_over_pairs(contraction):
    bridge = ConditionedDistributionBridge(3, n_steps=4, total_steps=40, contraction=contraction, time_dim=6).double()
    perturb(bridge)
    g = torch.Generator().manual_seed(3)
    text = torch.randn(2, 1, 3, generator=g, dtype=torch.float64), torch.rand(2, 1, 3, generator=g).double() - 2
    video = torch.randn(1, 4, 3, generator=g, dtype=torch.float64), torch.rand(1, 4, 3, generator=g).double() - 1
    out = bridge(*text, *video)
    pairs = [torch.broadcast_to(x, (2, 4, 3)).reshape(8, 3) for x in (*text, *video)]
    mu, logvar = loop_bridge(bridge, *pairs)
    torch.testing.assert_close(out.mu.reshape(8, 3), mu)
    torch.testing.assert_close(out.logvar.reshape(8, 3), logvar)
    if contraction is not None:  # the whole chain contracts at rate at most `contraction`
        before = joint_distance(pairs[0], pairs[1], pairs[2], pairs[3])
        after = joint_distance(mu.detach(), logvar.detach(), pairs[2], pairs[3])
        assert np.all(after <= contraction * before * (1 + 1e-9))


def test_conditioned_bridge_is_identity_at_init_and_depends_on_the_target():
    bridge = ConditionedDistributionBridge(4, n_steps=3, contraction=None)
    text = torch.randn(2, 1, 4), torch.zeros(2, 1, 4)
    video = torch.randn(1, 3, 4), torch.zeros(1, 3, 4)
    out = bridge(*text, *video)
    torch.testing.assert_close(out.mu, text[0].expand(2, 3, 4), rtol=0, atol=0)
    perturb(bridge)
    out = bridge(*text, *video)
    assert not torch.allclose(out.mu[:, 0], out.mu[:, 1])  # each video steers its own chain


def test_conditioned_bridge_gradcheck_and_half_inputs():
    bridge = ConditionedDistributionBridge(2, n_steps=3, time_dim=4).double()
    perturb(bridge)
    g = torch.Generator().manual_seed(4)
    args = tuple(torch.randn(2, 2, generator=g, dtype=torch.float64).requires_grad_() for _ in range(4))
    assert torch.autograd.gradcheck(lambda *a: tuple(bridge(*a)), args)
    half = ConditionedDistributionBridge(4, n_steps=2)
    out = half(torch.randn(3, 4).half(), torch.zeros(3, 4).half(), torch.randn(3, 4).bfloat16(), torch.zeros(3, 4))
    assert out.mu.dtype == torch.float32 and bool(torch.isfinite(out.mu).all())


def test_conditioned_bridge_devices(device):
    bridge = ConditionedDistributionBridge(4, n_steps=2).to(device)
    perturb(bridge)
    out = bridge(torch.randn(3, 1, 4, device=device), torch.zeros(3, 1, 4, device=device),
                 torch.randn(1, 2, 4, device=device), torch.zeros(1, 2, 4, device=device))
    assert out.mu.device.type == torch.device(device).type and out.mu.shape == (3, 2, 4)


def test_conditioned_bridge_errors():
    bridge = ConditionedDistributionBridge(4)
    z = torch.zeros(2, 4)
    with pytest.raises(ValueError, match="target_mu .* last dimension 4"):
        bridge(z, z, torch.zeros(2, 5), torch.zeros(2, 5))
    with pytest.raises(ValueError, match="must broadcast to one shape"):
        bridge(z, z, torch.zeros(3, 4), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="target_logvar must be finite"):
        bridge(z, z, z, torch.full((2, 4), float("nan")))
    with pytest.raises(ValueError, match=r"contraction must lie in \(0.0, 1.0\]"):
        ConditionedDistributionBridge(4, contraction=0.0)
    with pytest.raises(ValueError, match="n_steps must be <= total_steps"):
        ConditionedDistributionBridge(4, n_steps=10, total_steps=5)
