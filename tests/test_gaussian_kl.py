"""Pairwise Gaussian KL / W2, KL margin and reparameterised sampling against independent references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import given
from torch.distributions import Independent, Normal, kl_divergence

from evidential_prvr.functional import (
    kl_margin,
    paired_gaussian_kl,
    paired_wasserstein2,
    pairwise_gaussian_kl,
    pairwise_gaussian_kl_prepared,
    pairwise_wasserstein2,
    prepare_kl_sources,
    reparameterised_sample,
)
from evidential_prvr.probabilistic import DiagonalGaussian, KLSources
from tests.strategies.gaussian import gaussian_pairs


def reference_kl(s_mu, s_lv, t_mu, t_lv):
    """KL via torch.distributions, broadcasting [N_s, 1, D] against [1, N_t, D]."""
    source = Independent(Normal(s_mu[:, None, :], torch.exp(0.5 * s_lv)[:, None, :]), 1)
    target = Independent(Normal(t_mu[None, :, :], torch.exp(0.5 * t_lv)[None, :, :]), 1)
    return kl_divergence(source, target)


def random_gaussians(n, d, *, seed, low=-6.0, high=2.0, mu_scale=1.0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    mu = mu_scale * torch.randn(n, d, generator=g, dtype=dtype)
    logvar = low + (high - low) * torch.rand(n, d, generator=g, dtype=dtype)
    return mu, logvar


# ---------------------------------------------------------------- pairwise_gaussian_kl


def prepared_kl(s_mu, s_lv, t_mu, t_lv):
    return pairwise_gaussian_kl_prepared(prepare_kl_sources(s_mu, s_lv), t_mu, t_lv)


#: The KL of every pair, in one call or with the sources prepared first.
PAIRWISE_KL = [pytest.param(pairwise_gaussian_kl, id="direct"), pytest.param(prepared_kl, id="prepared")]


@pytest.mark.parametrize("d", [1, 7, 1024])
def test_kl_matches_torch_distributions(d):
    s = random_gaussians(5, d, seed=1)
    t = random_gaussians(4, d, seed=2)
    torch.testing.assert_close(pairwise_gaussian_kl(*s, *t), reference_kl(*s, *t), atol=1e-6, rtol=1e-12)


@pytest.mark.parametrize("source_lv,target_lv", [(-6.0, -6.0), (-6.0, 2.0), (2.0, -6.0), (2.0, 2.0)])
def test_kl_matches_torch_distributions_at_bounds(source_lv, target_lv):
    d = 1024
    s_mu, _ = random_gaussians(3, d, seed=3, mu_scale=5.0)
    t_mu, _ = random_gaussians(6, d, seed=4, mu_scale=5.0)
    s_lv = torch.full_like(s_mu, source_lv)
    t_lv = torch.full_like(t_mu, target_lv)
    # a mixture of both bounds in one row too
    t_lv[0, ::2] = -6.0 if target_lv == 2.0 else 2.0
    out = pairwise_gaussian_kl(s_mu, s_lv, t_mu, t_lv)
    torch.testing.assert_close(out, reference_kl(s_mu, s_lv, t_mu, t_lv), atol=1e-6, rtol=1e-12)


@given(gaussian_pairs())
def test_kl_matches_reference_property(pair):
    out = pairwise_gaussian_kl(*pair)
    assert out.shape == (pair[0].shape[0], pair[2].shape[0])
    assert bool((out >= 0).all())
    torch.testing.assert_close(out, reference_kl(*pair), atol=1e-6, rtol=1e-10)


@given(gaussian_pairs(max_n=5, max_d=16, mu_scale=100.0))
def test_kl_of_a_gaussian_with_itself_is_zero(pair):
    mu, logvar = pair[0], pair[1]
    out = pairwise_gaussian_kl(mu, logvar, mu, logvar)
    torch.testing.assert_close(out.diagonal(), torch.zeros(mu.shape[0], dtype=mu.dtype), atol=1e-7, rtol=0)


def test_kl_is_directional():
    s = random_gaussians(3, 4, seed=5)
    t = random_gaussians(3, 4, seed=6)
    forward = pairwise_gaussian_kl(*s, *t)
    backward = pairwise_gaussian_kl(*t, *s)
    assert not torch.allclose(forward, backward.T)
    torch.testing.assert_close(backward.T, reference_kl(*t, *s).T, atol=1e-6, rtol=1e-12)


def test_kl_float32_is_accurate_for_realistic_sizes():
    s = random_gaussians(64, 512, seed=7, dtype=torch.float32)
    t = random_gaussians(32, 512, seed=8, dtype=torch.float32)
    out = pairwise_gaussian_kl(*s, *t)
    ref = reference_kl(*(x.double() for x in (*s, *t)))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-2)


@pytest.mark.parametrize("kl", PAIRWISE_KL)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_kl_half_precision_is_upcast_and_finite(dtype, kl):
    s = random_gaussians(8, 1024, seed=9, dtype=dtype)
    t = random_gaussians(8, 1024, seed=10, dtype=dtype)
    t[1].fill_(-6.0)
    s_mu, s_lv = (x.clone().requires_grad_() for x in s)
    out = kl(s_mu, s_lv, *t)
    assert out.dtype == torch.float32
    assert bool(torch.isfinite(out).all())
    ref = reference_kl(*(x.double() for x in (*s, *t)))
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-1)
    out.sum().backward()
    assert bool(torch.isfinite(s_mu.grad.float()).all()) and bool(torch.isfinite(s_lv.grad.float()).all())


def test_kl_gradients_finite_at_bounds_d1024():
    d = 1024
    s_mu, _ = random_gaussians(4, d, seed=11)
    t_mu, _ = random_gaussians(4, d, seed=12)
    s_lv = torch.full((4, d), 2.0, dtype=torch.float64)
    t_lv = torch.full((4, d), -6.0, dtype=torch.float64)
    leaves = [x.clone().float().requires_grad_() for x in (s_mu, s_lv, t_mu, t_lv)]
    out = pairwise_gaussian_kl(*leaves)
    assert bool(torch.isfinite(out).all())
    out.sum().backward()
    assert all(bool(torch.isfinite(x.grad).all()) for x in leaves)


@pytest.mark.parametrize("kl", PAIRWISE_KL)
def test_kl_gradcheck(kl):
    leaves = [x.requires_grad_() for x in (*random_gaussians(3, 4, seed=13), *random_gaussians(2, 4, seed=14))]
    assert torch.autograd.gradcheck(kl, leaves)


@pytest.mark.parametrize("kl", PAIRWISE_KL)
def test_kl_device(device, kl):
    s = [x.to(device) for x in random_gaussians(3, 5, seed=15)]
    t = [x.to(device) for x in random_gaussians(4, 5, seed=16)]
    out = kl(*s, *t)
    assert out.device.type == device.type
    torch.testing.assert_close(out.cpu(), reference_kl(*(x.cpu() for x in (*s, *t))), atol=1e-6, rtol=1e-12)


def test_kl_errors():
    mu, lv = random_gaussians(3, 4, seed=17)
    with pytest.raises(ValueError, match="embedding dimension"):
        pairwise_gaussian_kl(mu, lv, mu[:, :3], lv[:, :3])
    with pytest.raises(ValueError, match="source_mu and source_logvar"):
        pairwise_gaussian_kl(mu, lv[:2], mu, lv)
    with pytest.raises(ValueError, match="target_logvar must be finite"):
        pairwise_gaussian_kl(mu, lv, mu, torch.where(lv > 0, float("inf"), lv))
    with pytest.raises(ValueError, match="source_logvar must be finite"):
        pairwise_gaussian_kl(mu, lv.clone().fill_(float("nan")), mu, lv)
    with pytest.raises(ValueError, match="2-D"):
        pairwise_gaussian_kl(mu[0], lv[0], mu, lv)
    with pytest.raises(TypeError, match="floating"):
        pairwise_gaussian_kl(mu.long(), lv, mu, lv)
    with pytest.raises(TypeError, match="torch.Tensor"):
        pairwise_gaussian_kl(mu.numpy(), lv, mu, lv)


# ---------------------------------------------------------------- prepare_kl_sources / pairwise_gaussian_kl_prepared


@given(gaussian_pairs(max_n=8, max_d=12, mu_scale=50.0))
def test_prepared_kl_matches_torch_distributions_property(pair):
    out = prepared_kl(*pair)
    assert out.shape == (pair[0].shape[0], pair[2].shape[0]) and bool((out >= 0).all())
    torch.testing.assert_close(out, reference_kl(*pair), atol=1e-6, rtol=1e-10)


@pytest.mark.parametrize("source_lv,target_lv", [(-6.0, 2.0), (2.0, -6.0)])
def test_prepared_kl_at_bounds_d1024(source_lv, target_lv):
    s_mu, _ = random_gaussians(3, 1024, seed=40, mu_scale=5.0)
    t_mu, _ = random_gaussians(6, 1024, seed=41, mu_scale=5.0)
    s_lv, t_lv = torch.full_like(s_mu, source_lv), torch.full_like(t_mu, target_lv)
    torch.testing.assert_close(prepared_kl(s_mu, s_lv, t_mu, t_lv), reference_kl(s_mu, s_lv, t_mu, t_lv),
                               atol=1e-6, rtol=1e-12)


def test_prepared_sources_serve_many_target_batches():
    s = random_gaussians(40, 32, seed=42, dtype=torch.float32)
    t = random_gaussians(9, 32, seed=43, dtype=torch.float32)
    sources = prepare_kl_sources(*s)
    assert isinstance(sources, KLSources) and sources.features.shape == (40, 64) and sources.shift.shape == (1, 32)
    assert prepare_kl_sources(*(x.half() for x in s)).features.dtype == torch.float32
    whole = pairwise_gaussian_kl_prepared(sources, *t)
    parts = torch.cat([pairwise_gaussian_kl_prepared(sources, t[0][i : i + 3], t[1][i : i + 3]) for i in (0, 3, 6)], 1)
    ref = reference_kl(*(x.double() for x in (*s, *t)))
    torch.testing.assert_close(whole.double(), ref, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(parts, whole, rtol=1e-6, atol=1e-4)
    torch.testing.assert_close(whole, pairwise_gaussian_kl(*s, *t), rtol=1e-5, atol=1e-3)


def test_prepared_kl_of_a_query_does_not_depend_on_a_far_batch_companion():
    """pairwise_gaussian_kl centres on the targets' mean, so a far-away query in the batch costs the others
    float32 digits; the prepared sources are centred once, on themselves."""
    s = random_gaussians(16, 64, seed=44, dtype=torch.float32)
    t_mu, t_lv = random_gaussians(2, 64, seed=45, dtype=torch.float32)
    t_mu[1] += 1e4
    ref = reference_kl(*(x.double() for x in (*s, t_mu[:1], t_lv[:1])))[:, 0]
    prepared = prepared_kl(*s, t_mu, t_lv)[:, 0].double()
    torch.testing.assert_close(prepared, ref, rtol=1e-5, atol=1e-3)
    shifted_error = (pairwise_gaussian_kl(*s, t_mu, t_lv)[:, 0].double() - ref).abs().max()
    assert (prepared - ref).abs().max() * 100 < shifted_error


def test_prepared_kl_promotes_float32_sources_to_float64_targets():
    s = random_gaussians(4, 6, seed=48, dtype=torch.float32)
    t = random_gaussians(3, 6, seed=49)
    out = pairwise_gaussian_kl_prepared(prepare_kl_sources(*s), *t)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, reference_kl(*(x.double() for x in s), *t), atol=1e-5, rtol=1e-6)


def test_prepared_kl_errors():
    mu, lv = random_gaussians(3, 4, seed=54)
    sources = prepare_kl_sources(mu, lv)
    with pytest.raises(TypeError, match="sources must be a KLSources"):
        pairwise_gaussian_kl_prepared((mu, lv), mu, lv)
    with pytest.raises(ValueError, match="sources' dimension D = 4"):
        pairwise_gaussian_kl_prepared(sources, mu[:, :3], lv[:, :3])
    with pytest.raises(ValueError, match="target_mu and target_logvar"):
        pairwise_gaussian_kl_prepared(sources, mu, lv[:2])
    with pytest.raises(ValueError, match="target_logvar must be finite"):
        pairwise_gaussian_kl_prepared(sources, mu, lv.clone().fill_(float("inf")))
    with pytest.raises(ValueError, match="source_mu must be finite"):
        prepare_kl_sources(mu.clone().fill_(float("nan")), lv)
    with pytest.raises(ValueError, match="2-D"):
        prepare_kl_sources(mu[0], lv[0])
    with pytest.raises(TypeError, match="floating"):
        prepare_kl_sources(mu.long(), lv)


# ---------------------------------------------------------------- pairwise_wasserstein2


def reference_w2_squared(s_mu, s_lv, t_mu, t_lv):
    """General Gaussian W2^2 (Bures form with matrix square roots), pair by pair with scipy."""
    out = np.zeros((s_mu.shape[0], t_mu.shape[0]))
    for i in range(s_mu.shape[0]):
        for j in range(t_mu.shape[0]):
            cov_s = np.diag(np.exp(s_lv[i].numpy()))
            cov_t = np.diag(np.exp(t_lv[j].numpy()))
            root_t = scipy.linalg.sqrtm(cov_t).real
            cross = scipy.linalg.sqrtm(root_t @ cov_s @ root_t).real
            out[i, j] = np.sum((s_mu[i].numpy() - t_mu[j].numpy()) ** 2) + np.trace(cov_s + cov_t - 2 * cross)
    return torch.from_numpy(out)


@given(gaussian_pairs(max_n=4, max_d=5))
def test_w2_matches_bures_closed_form(pair):
    ref = reference_w2_squared(*pair)
    torch.testing.assert_close(pairwise_wasserstein2(*pair), ref, atol=1e-8, rtol=1e-8)
    torch.testing.assert_close(pairwise_wasserstein2(*pair, squared=False), ref.clamp_min(1e-12).sqrt(), atol=1e-6, rtol=1e-7)


def test_w2_is_symmetric_and_zero_on_identical():
    s = random_gaussians(4, 6, seed=18)
    t = random_gaussians(3, 6, seed=19)
    torch.testing.assert_close(pairwise_wasserstein2(*s, *t), pairwise_wasserstein2(*t, *s).T)
    torch.testing.assert_close(pairwise_wasserstein2(*s, *s).diagonal(), torch.zeros(4, dtype=torch.float64), atol=1e-12, rtol=0)


@pytest.mark.parametrize("squared", [True, False])
def test_w2_gradcheck(squared):
    leaves = [x.requires_grad_() for x in (*random_gaussians(3, 4, seed=20), *random_gaussians(2, 4, seed=21))]
    assert torch.autograd.gradcheck(lambda *a: pairwise_wasserstein2(*a, squared=squared), leaves)


def test_w2_sqrt_gradient_finite_on_identical_gaussians():
    mu, lv = (x.requires_grad_() for x in random_gaussians(3, 4, seed=22))
    pairwise_wasserstein2(mu, lv, mu, lv, squared=False).sum().backward()
    assert bool(torch.isfinite(mu.grad).all()) and bool(torch.isfinite(lv.grad).all())


def test_w2_errors():
    mu, lv = random_gaussians(3, 4, seed=23)
    with pytest.raises(TypeError, match="squared"):
        pairwise_wasserstein2(mu, lv, mu, lv, squared=1)
    with pytest.raises(ValueError, match="embedding dimension"):
        pairwise_wasserstein2(mu, lv, mu[:, :2], lv[:, :2])


# ---------------------------------------------------------------- kl_margin


@given(gaussian_pairs(max_n=6, max_d=4))
def test_kl_margin_matches_sorted_rows(pair):
    cost = pairwise_gaussian_kl(*pair)
    if cost.shape[1] < 2:
        return
    ordered = np.sort(cost.numpy(), axis=1)
    torch.testing.assert_close(kl_margin(cost), torch.from_numpy(ordered[:, 1] - ordered[:, 0]))


def test_kl_margin_scales_with_inverse_query_variance():
    """In the text->video cost C = KL(video || text).T, e^(-logvar_t) is a per-query inverse temperature."""
    g = torch.Generator().manual_seed(24)
    video_mu = torch.randn(10, 16, generator=g, dtype=torch.float64)
    # equal video entropies: every video's log-variance is a permutation of one vector
    one_logvar = torch.linspace(-6.0, 2.0, 16, dtype=torch.float64)
    video_lv = torch.stack([one_logvar[torch.randperm(16, generator=g)] for _ in range(10)])
    text_mu = torch.randn(3, 16, generator=g, dtype=torch.float64)
    base = torch.tensor([-3.0, -1.0, 0.5], dtype=torch.float64)[:, None].expand(3, 16)
    cost_a = pairwise_gaussian_kl(video_mu, video_lv, text_mu, base).T
    cost_b = pairwise_gaussian_kl(video_mu, video_lv, text_mu, base + 1.5).T
    # every query's margin shrinks by exactly e^(-1.5) when its variance grows by e^(1.5) ...
    ratio = kl_margin(cost_b) / kl_margin(cost_a)
    torch.testing.assert_close(ratio, torch.full((3,), math.exp(-1.5), dtype=torch.float64))
    # ... and the ranking of the videos does not change
    assert torch.equal(cost_a.argsort(dim=1), cost_b.argsort(dim=1))
    # with unequal video entropies the entropy term is an offset the query variance does not scale
    video_lv_free = -6.0 + 8.0 * torch.rand(10, 16, generator=g, dtype=torch.float64)
    entropy = 0.5 * video_lv_free.sum(dim=1)
    for s in (-3.0, 0.5):
        cost = pairwise_gaussian_kl(video_mu, video_lv_free, text_mu, torch.full((3, 16), s, dtype=torch.float64)).T
        a = 0.5 * ((video_mu[None] - text_mu[:, None]) ** 2 + video_lv_free.exp()[None]).sum(-1)
        offset = cost - (math.exp(-s) * a - entropy[None, :])
        torch.testing.assert_close(offset, offset[:, :1].expand_as(offset))


def test_kl_margin_gradcheck_and_errors():
    cost = torch.tensor([[0.3, 1.2, 2.0], [4.0, 0.1, 0.2]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(kl_margin, (cost,))
    with pytest.raises(ValueError, match="at least 2 columns"):
        kl_margin(torch.zeros(3, 1))
    with pytest.raises(ValueError, match="cost must be finite"):
        kl_margin(torch.tensor([[0.0, float("nan")]]))
    with pytest.raises(ValueError, match="2-D"):
        kl_margin(torch.zeros(3))


def test_kl_margin_half_precision():
    cost = torch.tensor([[1000.0, 1001.0, 5.0]], dtype=torch.float16)
    out = kl_margin(cost)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([995.0]))


# ---------------------------------------------------------------- reparameterised sampling


def test_reparameterised_sample_statistics():
    mu = torch.tensor([[0.5, -2.0, 3.0], [0.0, 1.0, -1.0]], dtype=torch.float64)
    logvar = torch.tensor([[-6.0, 0.0, 2.0], [-1.0, 1.0, -3.0]], dtype=torch.float64)
    n = 40000
    samples = reparameterised_sample(mu, logvar, n, generator=torch.Generator().manual_seed(0))
    assert samples.shape == (2, n, 3)
    var = logvar.exp()
    # 5 standard errors for the mean; for the variance the standard error is var * sqrt(2 / (n - 1))
    assert bool(((samples.mean(dim=1) - mu).abs() <= 5 * (var / n).sqrt()).all())
    assert bool(((samples.var(dim=1) - var).abs() <= 5 * var * math.sqrt(2 / (n - 1))).all())


def test_reparameterised_sample_is_deterministic_given_generator(device):
    mu = torch.zeros(2, 4, device=device)
    logvar = torch.zeros(2, 4, device=device)
    a = DiagonalGaussian(mu, logvar).sample(3, generator=torch.Generator(device=device).manual_seed(7))
    b = DiagonalGaussian(mu, logvar).sample(3, generator=torch.Generator(device=device).manual_seed(7))
    c = DiagonalGaussian(mu, logvar).sample(3, generator=torch.Generator(device=device).manual_seed(8))
    assert a.device.type == device.type
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_reparameterised_sample_gradcheck_and_errors():
    mu, lv = (x.requires_grad_() for x in random_gaussians(2, 3, seed=26))

    def fn(m, v):
        return reparameterised_sample(m, v, 4, generator=torch.Generator().manual_seed(1))

    assert torch.autograd.gradcheck(fn, (mu, lv))
    with pytest.raises(ValueError, match="n must be >= 1"):
        reparameterised_sample(mu, lv, 0)
    with pytest.raises(TypeError, match="n must be an int"):
        reparameterised_sample(mu, lv, 2.0)
    with pytest.raises(ValueError, match="logvar must be finite"):
        reparameterised_sample(mu, torch.full_like(lv, float("inf")), 2)
    with pytest.raises(ValueError, match="same shape"):
        reparameterised_sample(mu, lv[:1], 2)


# ---------------------------------------------------------------- paired_gaussian_kl / paired_wasserstein2


@given(gaussian_pairs())
def test_paired_kl_matches_torch_distributions_on_broadcast_pairs(pair):
    s_mu, s_lv, t_mu, t_lv = pair
    out = paired_gaussian_kl(s_mu[:, None, :], s_lv[:, None, :], t_mu[None], t_lv[None])
    assert out.shape == (s_mu.shape[0], t_mu.shape[0]) and bool((out >= 0).all())
    torch.testing.assert_close(out, reference_kl(*pair), atol=1e-6, rtol=1e-10)


def test_paired_kl_of_matched_pairs_is_the_pairwise_diagonal():
    s, t = random_gaussians(6, 9, seed=40), random_gaussians(6, 9, seed=41)
    torch.testing.assert_close(paired_gaussian_kl(*s, *t), pairwise_gaussian_kl(*s, *t).diagonal(), atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(paired_gaussian_kl(*s, *s), torch.zeros(6, dtype=torch.float64), atol=0, rtol=0)


@given(gaussian_pairs(max_n=4, max_d=5))
def test_paired_w2_matches_bures_closed_form(pair):
    s_mu, s_lv, t_mu, t_lv = pair
    ref = reference_w2_squared(*pair)
    broadcast = (s_mu[:, None, :], s_lv[:, None, :], t_mu[None], t_lv[None])
    torch.testing.assert_close(paired_wasserstein2(*broadcast), ref, atol=1e-8, rtol=1e-8)
    torch.testing.assert_close(paired_wasserstein2(*broadcast, squared=False), ref.clamp_min(1e-12).sqrt(),
                               atol=1e-6, rtol=1e-7)


@pytest.mark.parametrize("fn", [paired_gaussian_kl, paired_wasserstein2])
def test_paired_costs_gradcheck(fn):
    leaves = [x.requires_grad_() for x in (*random_gaussians(3, 4, seed=42), *random_gaussians(3, 4, seed=43))]
    assert torch.autograd.gradcheck(fn, leaves)


def test_paired_costs_half_precision_is_upcast():
    s, t = random_gaussians(4, 8, seed=44, dtype=torch.float16), random_gaussians(4, 8, seed=45, dtype=torch.float16)
    assert paired_gaussian_kl(*s, *t).dtype == torch.float32 and paired_wasserstein2(*s, *t).dtype == torch.float32


@pytest.mark.parametrize("fn", [paired_gaussian_kl, paired_wasserstein2])
def test_paired_costs_errors(fn):
    mu, lv = random_gaussians(3, 4, seed=46)
    with pytest.raises(ValueError, match="embedding dimension"):
        fn(mu, lv, mu[:, :2], lv[:, :2])
    with pytest.raises(ValueError, match="broadcast"):
        fn(mu, lv, mu[:2], lv[:2])
    with pytest.raises(ValueError, match="source_logvar"):
        fn(mu, lv[:, :3], mu, lv)
    bad = lv.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="target_logvar"):
        fn(mu, lv, mu, bad, validate_args=True)
    with pytest.raises(TypeError, match="source_mu"):
        fn(mu.numpy(), lv, mu, lv)

