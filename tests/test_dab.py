"""DAB heads, distribution bridge, PAC loss and the composed DABAlignment module."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from torch.distributions import Independent, Normal, kl_divergence

from evidential_prvr.functional import bridge_step_sizes, pac_loss, pairwise_gaussian_kl, sinusoidal_time_embedding
from evidential_prvr.probabilistic import (
    DABAlignment,
    DABAlignmentOutput,
    DiagonalGaussian,
    DistributionBridge,
    GaussianEmbeddingHead,
    ProbabilisticAlignmentContrastiveLoss,
    TokenUncertaintyHead,
)
from tests.strategies.gaussian import square_matrices, temperatures


def loop_pac(cost: np.ndarray, tau: float) -> float:
    """PAC written out term by term, as in DAB's formula."""
    b = cost.shape[0]
    total = 0.0
    for i in range(b):
        row = sum(math.exp(-cost[i, j] / tau) for j in range(b))
        col = sum(math.exp(-cost[j, i] / tau) for j in range(b))
        total += math.log(math.exp(-cost[i, i] / tau) / row) + math.log(math.exp(-cost[i, i] / tau) / col)
    return -total / b


def perturb(module: torch.nn.Module, seed: int = 0, scale: float = 0.3) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))


# ---------------------------------------------------------------- PAC


@given(square_matrices(scale=20.0), temperatures)
def test_pac_matches_loop(cost, tau):
    if tau < 0.5:  # keep the loop reference (plain exp, no log-sum-exp) inside float64 range
        tau = 0.5
    torch.testing.assert_close(pac_loss(cost, tau), torch.tensor(loop_pac(cost.numpy(), tau), dtype=torch.float64))


def test_pac_module_equals_functional_and_gradcheck():
    cost = torch.rand(5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 10
    module = ProbabilisticAlignmentContrastiveLoss(tau=2.0)
    torch.testing.assert_close(module(cost), pac_loss(cost, 2.0))
    assert "tau=2.0" in repr(module)
    assert torch.autograd.gradcheck(lambda c: pac_loss(c, 2.0), (cost.requires_grad_(),))


def test_pac_extreme_costs_and_half_precision():
    cost = torch.tensor([[0.0, 6e4], [6e4, 3e4]], dtype=torch.float16)
    out = pac_loss(cost.requires_grad_(), tau=0.01)
    assert out.dtype == torch.float32 and bool(torch.isfinite(out))
    out.backward()
    assert bool(torch.isfinite(cost.grad.float()).all())


def test_pac_errors():
    with pytest.raises(ValueError, match="square"):
        pac_loss(torch.zeros(3, 4), 1.0)
    with pytest.raises(ValueError, match="tau must be a finite number > 0"):
        pac_loss(torch.zeros(3, 3), 0.0)
    with pytest.raises(ValueError, match="tau"):
        ProbabilisticAlignmentContrastiveLoss(-1.0)
    with pytest.raises(ValueError, match="cost must be finite"):
        pac_loss(torch.full((2, 2), float("nan")), 1.0)


# ---------------------------------------------------------------- GaussianEmbeddingHead


def test_gaussian_head_matches_manual_computation():
    head = GaussianEmbeddingHead(6, 4).double()
    perturb(head)
    x = torch.randn(5, 6, dtype=torch.float64)
    out = head(x)
    assert isinstance(out, DiagonalGaussian)
    x_hat = x / x.norm(dim=1, keepdim=True)
    mu = F.layer_norm(x_hat, (6,), head.mean_norm.weight, head.mean_norm.bias) @ head.mean.weight.T + head.mean.bias
    lv = F.layer_norm(x_hat, (6,), head.logvar_norm.weight, head.logvar_norm.bias) @ head.logvar.weight.T
    lv = (lv + head.logvar.bias).clamp(-6.0, 2.0)
    torch.testing.assert_close(out.mu, mu)
    torch.testing.assert_close(out.logvar, lv)
    # L2 normalisation: the scale of the input does not matter
    torch.testing.assert_close(head(7.0 * x).mu, out.mu)


def test_gaussian_head_initial_bias_and_bounds():
    head = GaussianEmbeddingHead(8, 5, logvar_weight_init="pytorch")  # random weights, scaled up to the bounds
    assert torch.equal(head.logvar.bias, torch.full((5,), -2.0))
    with torch.no_grad():
        head.logvar.weight.mul_(1e4)
    lv = head(torch.randn(64, 8)).logvar.detach()
    assert float(lv.min()) == -6.0 and float(lv.max()) == 2.0


def test_gaussian_head_shapes_dtypes_devices(device):
    head = GaussianEmbeddingHead(8, 3).to(device)
    out = head(torch.randn(2, 5, 8, device=device, dtype=torch.float16))
    assert out.mu.shape == (2, 5, 3) and out.mu.dtype == torch.float32 and out.mu.device.type == device.type


def test_gaussian_head_errors():
    with pytest.raises(ValueError, match="last dimension 8"):
        GaussianEmbeddingHead(8, 3)(torch.randn(2, 7))
    with pytest.raises(ValueError, match="logvar_bounds"):
        GaussianEmbeddingHead(8, 3, logvar_bounds=(2.0, -6.0))
    with pytest.raises(ValueError, match="dim_out must be >= 1"):
        GaussianEmbeddingHead(8, 0)


# ---------------------------------------------------------------- TokenUncertaintyHead


def test_token_head_combines_with_base_logvar():
    head = TokenUncertaintyHead(6, 4).double()
    perturb(head)
    tokens = torch.randn(3, 5, 6, dtype=torch.float64)
    base = torch.empty(3, 4, dtype=torch.float64).uniform_(-6, 2)
    token_lv = head(tokens)
    torch.testing.assert_close(head(tokens, base_logvar=base), 0.5 * (base + token_lv))
    assert bool((token_lv >= -6).all() and (token_lv <= 2).all())


def test_token_head_matches_manual_single_head_attention():
    head = TokenUncertaintyHead(6, 4).double()
    perturb(head)
    tokens = torch.randn(2, 5, 6, dtype=torch.float64)
    x = tokens / tokens.norm(dim=-1, keepdim=True)
    wq, wk, wv = head.attention.in_proj_weight.chunk(3)
    bq, bk, bv = head.attention.in_proj_bias.chunk(3)
    q, k, v = x @ wq.T + bq, x @ wk.T + bk, x @ wv.T + bv
    attn = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(6), dim=-1) @ v
    attn = attn @ head.attention.out_proj.weight.T + head.attention.out_proj.bias
    pooled = (x + attn).mean(dim=1)
    expected = (head.logvar(head.norm(pooled))).clamp(-6, 2)
    torch.testing.assert_close(head(tokens), expected)


def test_token_head_mask_ignores_padding():
    head = TokenUncertaintyHead(6, 4).double()
    perturb(head)
    tokens = torch.randn(2, 5, 6, dtype=torch.float64)
    mask = torch.tensor([[True, True, True, False, False], [True] * 5])
    out = head(tokens, mask=mask)
    garbage = tokens.clone()
    garbage[0, 3:] = 1e3 * torch.randn(2, 6, dtype=torch.float64)
    torch.testing.assert_close(head(garbage, mask=mask), out)
    torch.testing.assert_close(out[0], head(tokens[:1, :3])[0])


def test_token_head_errors():
    head = TokenUncertaintyHead(6, 4)
    tokens = torch.randn(2, 3, 6)
    with pytest.raises(ValueError, match="3-D"):
        head(tokens[0])
    with pytest.raises(ValueError, match="at least one valid"):
        head(tokens, mask=torch.tensor([[False] * 3, [True] * 3]))
    with pytest.raises(TypeError, match="bool"):
        head(tokens, mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match="base_logvar must have shape"):
        head(tokens, base_logvar=torch.zeros(2, 5))


# ---------------------------------------------------------------- bridge


def test_step_sizes_and_time_embedding():
    chis = bridge_step_sizes(32, (0.2, 0.6))
    assert len(chis) == 32 and chis[0] == pytest.approx(0.6) and chis[-1] == pytest.approx(0.2)
    np.testing.assert_allclose(np.diff(chis), -0.4 / 31)
    assert bridge_step_sizes(1) == [0.6]
    emb = sinusoidal_time_embedding(torch.tensor([0.0, 3.0, 10.0], dtype=torch.float64), 5, max_period=100.0)
    freqs = [100.0 ** (-k / 2) for k in range(2)]
    expected = [[math.cos(t * f) for f in freqs] + [math.sin(t * f) for f in freqs] + [0.0] for t in (0.0, 3.0, 10.0)]
    torch.testing.assert_close(emb, torch.tensor(expected, dtype=torch.float64))
    with pytest.raises(ValueError, match="chi_min <= chi_max"):
        bridge_step_sizes(4, (0.6, 0.2))
    with pytest.raises(ValueError, match=r"step_range\[1\]"):
        bridge_step_sizes(4, (0.2, 1.5))


def test_bridge_is_identity_at_init():
    bridge = DistributionBridge(8)
    mu = torch.randn(5, 8)
    logvar = torch.empty(5, 8).uniform_(-6, 2)
    out = bridge(mu, logvar)
    assert torch.equal(out.mu, mu) and torch.equal(out.logvar, logvar)
    mu_out, logvar_out = out  # a (mu, logvar) pair, as the API promises
    assert mu_out is out.mu and logvar_out is out.logvar


def test_bridge_matches_loop_of_the_update_rule():
    bridge = DistributionBridge(4, n_steps=5, total_steps=50, step_range=(0.1, 0.5), time_dim=6).double()
    perturb(bridge)
    mu = torch.randn(3, 4, dtype=torch.float64)
    logvar = torch.empty(3, 4, dtype=torch.float64).uniform_(-6, 2)
    m, v = mu.clone(), logvar.clone()
    for t in range(5, 0, -1):  # t = T', ..., 1
        chi = 0.1 + 0.4 * (t - 1) / 4
        half = 3
        emb = [math.cos(t * 50.0 ** (-k / half)) for k in range(half)] + [
            math.sin(t * 50.0 ** (-k / half)) for k in range(half)
        ]
        emb_t = torch.tensor(emb, dtype=torch.float64).expand(3, 6)
        delta = bridge.drift(torch.cat([m, v, emb_t], dim=1))
        m = m - chi * delta[:, :4]
        v = (v - chi * delta[:, 4:]).clamp(-6, 2)
    out = bridge(mu, logvar)
    torch.testing.assert_close(out.mu, m)
    torch.testing.assert_close(out.logvar, v)


@pytest.mark.parametrize("direction", [1.0, -1.0])
def test_bridge_keeps_bounds_after_training_steps(direction):
    torch.manual_seed(0)
    bridge = DistributionBridge(6, n_steps=4, hidden_dim=8, time_dim=4)
    optimiser = torch.optim.Adam(bridge.parameters(), lr=0.3)
    mu, logvar = torch.randn(16, 6), torch.empty(16, 6).uniform_(-5.9, 1.9)
    for _ in range(3):
        out = bridge(mu, logvar)
        loss = -direction * out.logvar.sum() + 0.1 * out.mu.square().sum()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    with torch.no_grad():
        out = bridge(mu, logvar)
    assert bool(torch.isfinite(out.mu).all())
    assert float(out.logvar.min()) >= -6.0 and float(out.logvar.max()) <= 2.0
    # the training pushed against a bound, so the clipping is what keeps the values inside
    bound = 2.0 if direction > 0 else -6.0
    assert bool((out.logvar == bound).any())


def test_bridge_is_deterministic_and_handles_extra_dims(device):
    bridge = DistributionBridge(4, n_steps=3).to(device)
    perturb(bridge)
    mu = torch.randn(2, 3, 4, device=device)
    logvar = torch.zeros(2, 3, 4, device=device, dtype=torch.bfloat16)
    a, b = bridge(mu, logvar), bridge(mu, logvar)
    assert torch.equal(a.mu, b.mu) and a.mu.shape == (2, 3, 4) and a.logvar.dtype == torch.float32
    torch.testing.assert_close(a.mu[1], bridge(mu[1], logvar[1]).mu)


def test_bridge_errors():
    bridge = DistributionBridge(4)
    with pytest.raises(ValueError, match="last dimension 4"):
        bridge(torch.zeros(2, 5), torch.zeros(2, 5))
    with pytest.raises(ValueError, match="input_logvar must be finite"):
        bridge(torch.zeros(2, 4), torch.full((2, 4), float("nan")))
    with pytest.raises(ValueError, match="same shape"):
        bridge(torch.zeros(2, 4), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="n_steps must be <= total_steps"):
        DistributionBridge(4, n_steps=10, total_steps=5)


# ---------------------------------------------------------------- DABAlignment


def reference_cost(video: DiagonalGaussian, text: DiagonalGaussian) -> torch.Tensor:
    """C[i, j] = KL(video_j || text_i) via torch.distributions."""
    v = Independent(Normal(video.mu[None], torch.exp(0.5 * video.logvar)[None]), 1)
    t = Independent(Normal(text.mu[:, None], torch.exp(0.5 * text.logvar)[:, None]), 1)
    return kl_divergence(v, t)


def test_dab_alignment_output_matches_its_parts():
    torch.manual_seed(0)
    model = DABAlignment(12, 6, tau=5.0, n_steps=4).double()
    perturb(model.bridge)
    text, tokens = torch.randn(5, 12, dtype=torch.float64), torch.randn(5, 3, 12, dtype=torch.float64)
    out = model(text, tokens)
    assert isinstance(out, DABAlignmentOutput)
    g = out.gaussians
    torch.testing.assert_close(out.cost, reference_cost(g.video, g.bridged_text))
    torch.testing.assert_close(out.loss, torch.tensor(loop_pac(out.cost.detach().numpy(), 5.0), dtype=torch.float64))
    # heads: shared Gaussian head, video log-variance averaged with the token head
    base = model.text_head(tokens.mean(dim=1))
    torch.testing.assert_close(g.video.mu, base.mu)
    torch.testing.assert_close(g.video.logvar, 0.5 * (base.logvar + model.token_head(tokens)))
    torch.testing.assert_close(g.bridged_text.mu, model.bridge(*model.text_head(text)).mu)
    # retrieval cost for Q != V
    cost = model.cost(text[:2], tokens)
    assert cost.shape == (2, 5)
    torch.testing.assert_close(cost, out.cost[:2])


def test_dab_alignment_trains_and_gradients_reach_every_parameter():
    torch.manual_seed(1)
    model = DABAlignment(8, 4, tau=2.0, n_steps=4, share_head=False)
    text, tokens = torch.randn(6, 8), torch.randn(6, 3, 8)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = None
    for _ in range(15):
        loss = model(text, tokens).loss
        first = float(loss.detach()) if first is None else first
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    assert all(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in model.parameters())
    assert float(loss.detach()) < first
    assert sum(p.numel() for p in DABAlignment(8, 4, tau=2.0).parameters()) < sum(
        p.numel() for p in model.parameters()
    )


def test_dab_alignment_finite_at_bounds_with_d1024():
    mu = torch.randn(4, 1024)
    video_lv = torch.full((4, 1024), 2.0, requires_grad=True)
    text_lv = torch.full((4, 1024), -6.0, requires_grad=True)
    bridge = DistributionBridge(1024, n_steps=2)
    bridged = bridge(mu, text_lv)
    cost = pairwise_gaussian_kl(mu, video_lv, *bridged).T
    loss = pac_loss(cost, tau=1000.0)
    loss.backward()
    assert bool(torch.isfinite(loss))
    assert bool(torch.isfinite(video_lv.grad).all()) and bool(torch.isfinite(text_lv.grad).all())


def test_dab_alignment_mask_and_errors():
    model = DABAlignment(8, 4, tau=1.0, n_steps=2)
    text, tokens = torch.randn(3, 8), torch.randn(3, 4, 8)
    mask = torch.tensor([[True, True, False, False]] * 3)
    out = model(text, tokens, mask)
    torch.testing.assert_close(out.cost, model(text, tokens[:, :2]).cost)
    with pytest.raises(ValueError, match="same batch size"):
        model(text[:2], tokens)
    with pytest.raises(ValueError, match="video_mask"):
        model(text, tokens, mask[:, :3])
    with pytest.raises(TypeError, match="share_head"):
        DABAlignment(8, 4, tau=1.0, share_head="yes")
    with pytest.raises(ValueError, match="tau"):
        DABAlignment(8, 4, tau=0.0)
