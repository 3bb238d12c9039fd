"""HUD pieces: probabilistic text embedding, weighted composition, biased similarity and the two losses."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from evidential_prvr.functional import (
    batch_classification_loss,
    biased_max_similarity,
    holistic_atomistic_consistency_loss,
)
from evidential_prvr.probabilistic import (
    BiasedMaxSimilarity,
    ComposeByWeights,
    DiagonalGaussian,
    HolisticAtomisticConsistencyLoss,
    ProbabilisticTextEmbedding,
)
from tests.strategies.gaussian import square_matrices


def loop_biased_similarity(composed: np.ndarray, target: np.ndarray, bias: np.ndarray, paired: bool) -> np.ndarray:
    out = np.zeros((composed.shape[0], target.shape[0]))
    for q in range(composed.shape[0]):
        for t in range(target.shape[0]):
            s = np.empty(composed.shape[1])
            for k in range(composed.shape[1]):
                if paired:
                    s[k] = composed[q, k] @ target[t, k]
                else:
                    s[k] = max(composed[q, k] @ target[t, m] for m in range(target.shape[1]))
            weights = np.exp(s - s.max()) / np.exp(s - s.max()).sum() + bias
            out[q, t] = float((weights * s).sum())
    return out


def loop_rank_loss(h: np.ndarray, a: np.ndarray, tau: float) -> float:
    b = h.shape[0]
    total = 0.0
    for i in range(b):
        logits = [(h[i, j] + a[i, j]) / tau for j in range(b)]
        top = max(logits)
        total -= logits[i] - (top + math.log(sum(math.exp(x - top) for x in logits)))
    return total / b


def loop_consistency(h: np.ndarray, a: np.ndarray, tau: float) -> float:
    b = h.shape[0]
    s_c_h, s_c_a = scipy.special.softmax(h / tau, axis=1), scipy.special.softmax(a / tau, axis=1)
    s_t_h, s_t_a = scipy.special.softmax(h.T / tau, axis=1), scipy.special.softmax(a.T / tau, axis=1)
    total = 0.0
    for i in range(b):
        total += scipy.special.rel_entr(s_t_a[i], s_c_h[i]).sum() + scipy.special.rel_entr(s_t_h[i], s_c_a[i]).sum()
    return total / (2 * b)


def perturb(module: torch.nn.Module, seed: int = 0, scale: float = 0.3) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))


# ---------------------------------------------------------------- ProbabilisticTextEmbedding


def test_text_embedding_with_one_reference_token_matches_eq2():
    """With a single holistic reference token, cross-attention reduces to out_proj(v_proj(F_r^H))."""
    module = ProbabilisticTextEmbedding(6).double()
    perturb(module)
    text = torch.randn(3, 6, dtype=torch.float64)
    ref = torch.randn(3, 1, 6, dtype=torch.float64)

    def context(attn: torch.nn.MultiheadAttention) -> torch.Tensor:
        w_v, b_v = attn.in_proj_weight[12:], attn.in_proj_bias[12:]
        return (ref[:, 0] @ w_v.T + b_v) @ attn.out_proj.weight.T + attn.out_proj.bias

    lin, norm = module.mean_head[0], module.mean_head[2]
    mu = F.layer_norm(torch.sigmoid(lin(context(module.mean_attention) + text)), (6,), norm.weight, norm.bias)
    logvar = module.logvar_head(context(module.logvar_attention) + text).clamp(-6, 2)
    out = module(text, ref)
    assert isinstance(out, DiagonalGaussian)
    torch.testing.assert_close(out.mu, mu)
    torch.testing.assert_close(out.logvar, logvar)


def test_text_embedding_samples_match_the_heads():
    module = ProbabilisticTextEmbedding(4).double()
    perturb(module, scale=1.0)
    out = module(torch.randn(2, 4, dtype=torch.float64), torch.randn(2, 3, 4, dtype=torch.float64))
    n = 40000
    samples = out.sample(n, generator=torch.Generator().manual_seed(3)).detach()
    assert samples.shape == (2, n, 4)
    mu, var = out.mu.detach(), out.logvar.detach().exp()
    assert bool(((samples.mean(dim=1) - mu).abs() <= 5 * (var / n).sqrt()).all())
    assert bool(((samples.var(dim=1) - var).abs() <= 5 * var * math.sqrt(2 / (n - 1))).all())
    again = out.sample(n, generator=torch.Generator().manual_seed(3)).detach()
    assert torch.equal(samples, again)


def test_text_embedding_mask_and_gradcheck(device):
    module = ProbabilisticTextEmbedding(4, num_heads=2).to(device)
    text, ref = torch.randn(2, 4, device=device), torch.randn(2, 3, 4, device=device)
    mask = torch.tensor([[True, False, False], [True, True, True]], device=device)
    out = module(text, ref, mask)
    torch.testing.assert_close(out.mu[0], module(text[:1], ref[:1, :1]).mu[0])
    assert out.mu.device.type == device.type
    m64 = ProbabilisticTextEmbedding(4).double()
    t64 = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    r64 = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: tuple(m64(a, b)), (t64, r64))


def _embedding_by_torch_attention(module, text, ref, mask):
    """Eq. 2 with the module's two ``nn.MultiheadAttention`` called as torch implements them (the reference)."""
    query = text if text.dim() == 3 else text.unsqueeze(1)
    padding = None if mask is None else ~mask
    mean = module.mean_attention(query, ref, ref, key_padding_mask=padding, need_weights=False)[0]
    logvar = module.logvar_attention(query, ref, ref, key_padding_mask=padding, need_weights=False)[0]
    mu, logvar = module.mean_head(mean + query), module.logvar_head(logvar + query).clamp(-6, 2)
    return (mu, logvar) if text.dim() == 3 else (mu.squeeze(1), logvar.squeeze(1))


@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("n_keys", [1, 4])
@pytest.mark.parametrize("queries", [None, 3])
@pytest.mark.parametrize("masked", [False, True])
def test_text_embedding_equals_torch_attention_values_and_gradients(heads, n_keys, queries, masked):
    """The fused two-attention evaluation (and its one-key shortcut) equals torch's MultiheadAttention modules."""
    module = ProbabilisticTextEmbedding(8, num_heads=heads).double()
    perturb(module, scale=0.5)
    g = torch.Generator().manual_seed(heads + 10 * n_keys)
    text = torch.randn(3, *(() if queries is None else (queries,)), 8, generator=g, dtype=torch.float64)
    ref = torch.randn(3, n_keys, 8, generator=g, dtype=torch.float64)
    mask = None
    if masked:
        mask = torch.ones(3, n_keys, dtype=torch.bool)
        mask[0, 1:] = False
    grads = []
    for outputs in (lambda: tuple(module(text, ref, mask)), lambda: _embedding_by_torch_attention(module, text, ref, mask)):
        module.zero_grad()
        mu, logvar = outputs()
        (mu.sin().sum() + logvar.cos().sum()).backward()
        grads.append(([mu.detach(), logvar.detach()], [p.grad.clone() for p in module.parameters()]))
    (got, got_grads), (expected, expected_grads) = grads
    assert got[0].shape == text.shape
    for a, b in zip(got + got_grads, expected + expected_grads):
        torch.testing.assert_close(a, b)


def test_text_embedding_of_several_queries_equals_one_query_at_a_time():
    module = ProbabilisticTextEmbedding(4, num_heads=2).double()
    perturb(module)
    text, ref = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 5, 4, dtype=torch.float64)
    out = module(text, ref)
    for i in range(3):
        single = module(text[:, i], ref)
        torch.testing.assert_close(out.mu[:, i], single.mu)
        torch.testing.assert_close(out.logvar[:, i], single.logvar)


def test_text_embedding_errors():
    module = ProbabilisticTextEmbedding(4)
    with pytest.raises(ValueError, match="num_heads must divide dim"):
        ProbabilisticTextEmbedding(5, num_heads=2)
    with pytest.raises(ValueError, match="batch size 2"):
        module(torch.randn(2, 4), torch.randn(3, 2, 4))
    with pytest.raises(ValueError, match="reference_tokens must have last dimension 4"):
        module(torch.randn(2, 4), torch.randn(2, 2, 5))
    with pytest.raises(ValueError, match="3-D"):
        module(torch.randn(2, 4), torch.randn(2, 4))


# ---------------------------------------------------------------- ComposeByWeights


def test_compose_by_weights_matches_eq5_per_sample():
    module = ComposeByWeights(4, hidden_dim=7).double()
    reference = torch.randn(2, 4, dtype=torch.float64)
    samples = torch.randn(2, 3, 4, dtype=torch.float64)
    out = module(reference, samples)
    assert out.shape == (2, 3, 4)
    for b in range(2):
        for u in range(3):
            w = module.mlp(torch.cat([reference[b], samples[b, u]]))
            torch.testing.assert_close(out[b, u], w[:4] * samples[b, u] + w[4:] * reference[b])
    torch.testing.assert_close(module(reference, samples[:, 0]), out[:, 0])


# ---------------------------------------------------------------- biased_max_similarity


@given(
    st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.integers(1, 5), st.integers(1, 6),
    st.integers(0, 2**31 - 1),
)
def test_biased_max_similarity_matches_loop(bq, bt, k, m, d, seed):
    g = torch.Generator().manual_seed(seed)
    composed = torch.randn(bq, k, d, generator=g, dtype=torch.float64)
    target = torch.randn(bt, m, d, generator=g, dtype=torch.float64)
    bias = torch.randn(k, generator=g, dtype=torch.float64)
    out = biased_max_similarity(composed, target, bias)
    expected = loop_biased_similarity(composed.numpy(), target.numpy(), bias.numpy(), paired=False)
    torch.testing.assert_close(out, torch.from_numpy(expected))
    if m == k:
        paired = biased_max_similarity(composed, target, bias, token_matching="paired")
        expected = loop_biased_similarity(composed.numpy(), target.numpy(), bias.numpy(), paired=True)
        torch.testing.assert_close(paired, torch.from_numpy(expected))


def test_max_equals_paired_for_an_extended_holistic_target():
    composed = torch.randn(3, 5, 4, dtype=torch.float64)
    target = torch.randn(2, 1, 4, dtype=torch.float64).expand(2, 5, 4)  # one holistic token, extended to 1 + U
    bias = torch.randn(5, dtype=torch.float64)
    torch.testing.assert_close(
        biased_max_similarity(composed, target, bias), biased_max_similarity(composed, target, bias, token_matching="paired")
    )


def test_biased_similarity_module_gradcheck_and_errors():
    module = BiasedMaxSimilarity(3).double()
    assert torch.equal(module.bias, torch.zeros(3, dtype=torch.float64))
    composed = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    target = torch.randn(2, 2, 4, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(module(composed, target), biased_max_similarity(composed, target, module.bias))
    bias = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(biased_max_similarity, (composed, target, bias))
    with pytest.raises(ValueError, match="bias must have K=3"):
        biased_max_similarity(composed, target, bias[:2])
    with pytest.raises(ValueError, match="same token dimension"):
        biased_max_similarity(composed, target[..., :3], bias)
    with pytest.raises(ValueError, match="paired"):
        biased_max_similarity(composed, target, bias, token_matching="paired")
    with pytest.raises(ValueError, match="token_matching must be one of"):
        BiasedMaxSimilarity(3, token_matching="mean")


# ---------------------------------------------------------------- losses


@given(square_matrices(scale=5.0), square_matrices(scale=5.0), st.floats(0.05, 10.0))
def test_rank_and_consistency_losses_match_loops(h, a, tau):
    if h.shape != a.shape:
        a = a[: h.shape[0], : h.shape[0]] if a.shape[0] >= h.shape[0] else h.flip(0)
    rank = batch_classification_loss(h, a, tau)
    torch.testing.assert_close(rank, torch.tensor(loop_rank_loss(h.numpy(), a.numpy(), tau), dtype=torch.float64))
    reg = holistic_atomistic_consistency_loss(h, a, tau)
    torch.testing.assert_close(reg, torch.tensor(loop_consistency(h.numpy(), a.numpy(), tau), dtype=torch.float64))
    assert float(reg) >= -1e-12


def test_consistency_is_zero_for_equal_symmetric_similarities():
    s = torch.randn(4, 4, dtype=torch.float64)
    s = s + s.T
    torch.testing.assert_close(holistic_atomistic_consistency_loss(s, s), torch.tensor(0.0, dtype=torch.float64))
    assert float(holistic_atomistic_consistency_loss(s, s.roll(1, 0))) > 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_losses_half_precision_finite(dtype):
    h = (30 * torch.randn(6, 6)).to(dtype).requires_grad_()
    a = (30 * torch.randn(6, 6)).to(dtype).requires_grad_()
    total = batch_classification_loss(h, a, 0.01) + holistic_atomistic_consistency_loss(h, a, 0.01)
    assert total.dtype == torch.float32 and bool(torch.isfinite(total))
    total.backward()
    assert bool(torch.isfinite(h.grad.float()).all()) and bool(torch.isfinite(a.grad.float()).all())


def test_loss_errors():
    h = torch.randn(3, 3)
    with pytest.raises(ValueError, match="square"):
        batch_classification_loss(h, torch.randn(3, 4))
    with pytest.raises(ValueError, match="same shape"):
        holistic_atomistic_consistency_loss(h, torch.randn(2, 2))
    with pytest.raises(ValueError, match="tau"):
        HolisticAtomisticConsistencyLoss(0.0)
    with pytest.raises(ValueError, match="atomistic_sim must be finite"):
        batch_classification_loss(h, torch.full((3, 3), float("inf")))
