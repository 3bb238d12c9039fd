"""HUDObjective: HUD's composition (Eq. 2-9), alignment (Eq. 10-11), loss (Eq. 12-15) and Table 4's switches.

References are independent of the objective's code paths: the library's per-token module calls, brute-force loops
over tokens and queries (as in ``tests/test_hud.py``), and float64 gradient checks.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from evidential_prvr.functional import biased_max_similarity
from evidential_prvr.probabilistic import (
    HUD_DERIVATIVES,
    HUDObjective,
    HUDObjectiveOutput,
    HUDSwitches,
    QueryTokenAttention,
)
from tests.test_hud import loop_consistency, loop_rank_loss, perturb


def make(dim=6, holistic=5, tokens=3, **overrides) -> HUDObjective:
    torch.manual_seed(0)
    hud = HUDObjective.from_preset("paper", dim=dim, holistic_dim=holistic, num_reference_tokens=tokens, **overrides).double()
    perturb(hud, seed=1, scale=0.2)
    return hud


def inputs(b=4, t=3, n=5, m=4, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(b, t, d, generator=g, dtype=torch.float64)
    text = torch.randn(b, n, d, generator=g, dtype=torch.float64)
    target = torch.randn(b, m, d, generator=g, dtype=torch.float64)
    mask = torch.ones(b, n, dtype=torch.bool)
    mask[0, 2:] = False
    return ref, text, target, mask


def loop_similarity(composed: np.ndarray, target: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """Eq. 10-11 by loops; ``bias=None``: the mean of the per-token best matches (D#7)."""
    out = np.zeros((composed.shape[0], target.shape[0]))
    for q in range(composed.shape[0]):
        for t in range(target.shape[0]):
            s = np.array([max(composed[q, k] @ target[t, j] for j in range(target.shape[1])) for k in range(composed.shape[1])])
            if bias is None:
                out[q, t] = s.mean()
            else:
                w = np.exp(s - s.max()) / np.exp(s - s.max()).sum() + bias
                out[q, t] = (w * s).sum()
    return out


def test_preset_holds_the_paper_settings():
    hud = make()
    assert (hud.num_samples, hud.tau, hud.kappa) == (8, 0.1, 0.5)
    assert hud.switches == HUDSwitches()
    assert hud.holistic_similarity.bias.shape == (9,) and hud.atomistic_similarity.bias.shape == (6,)
    assert HUDObjective.from_preset("paper", "webvid-covr", dim=4, holistic_dim=4, num_reference_tokens=2).num_samples == 8


def test_from_preset_is_the_one_of_every_module_with_presets():
    """HUD's presets are in the registry (``hud_settings``) and its ``from_preset`` is :class:`PresetModule`'s: the
    backbone's sizes are the constructor's arguments (positional ones too), ``derivative`` a constructor keyword."""
    from evidential_prvr import PresetModule
    from evidential_prvr.choices import HUD_DATASETS, HUD_PRESETS
    from evidential_prvr.presets import hud_settings

    assert issubclass(HUDObjective, PresetModule) and "from_preset" not in vars(HUDObjective)
    assert (HUD_PRESETS, HUD_DATASETS) == (("paper",), ("webvid-covr",))
    paper = hud_settings("paper")
    hud = HUDObjective.from_preset("paper", None, 4, 4, 2, num_samples=3)
    assert (hud.num_samples, hud.tau, hud.kappa) == (3, paper.tau, paper.kappa)
    assert HUDObjective(4, 4, 2, derivative=7).switches == HUDSwitches().derivative(7)
    with pytest.raises(ValueError, match="dataset must be one of 'webvid-covr'"):
        HUDObjective.from_preset("paper", "tvr", dim=4, holistic_dim=4, num_reference_tokens=2)


def test_detail_gaussian_equals_the_module_on_each_token():
    """Eq. 6 on all tokens at once equals ProbabilisticTextEmbedding called with each token as its single query."""
    hud = make()
    ref, text, _, mask = inputs()
    detail = hud.compose(ref, text, text_mask=mask).detail
    assert detail.mu.shape == ref.shape
    for i in range(ref.shape[1]):
        single = hud.detail_embedding(ref[:, i], text, mask)
        torch.testing.assert_close(detail.mu[:, i], single.mu)
        torch.testing.assert_close(detail.logvar[:, i], single.logvar)


def test_holistic_tokens_follow_eq2_to_eq5():
    hud = make()
    ref, text, _, mask = inputs()
    query = hud.compose(ref, text, text_mask=mask, generator=torch.Generator().manual_seed(5))
    ref_h = hud.video_projection(ref.mean(1))
    valid = mask.double().unsqueeze(-1)
    text_h = hud.text_projection((text * valid).sum(1) / valid.sum(1))
    gaussian = hud.text_embedding(text_h, ref_h.unsqueeze(1))
    torch.testing.assert_close(query.text.mu, gaussian.mu)
    samples = gaussian.sample(8, generator=torch.Generator().manual_seed(5))
    expected = torch.cat([hud.holistic_composition(ref_h, text_h).unsqueeze(1), hud.holistic_composition(ref_h, samples)], 1)
    torch.testing.assert_close(query.holistic, F.normalize(expected, dim=-1))
    assert query.atomistic.shape == (4, 6, 5)


def test_loss_and_similarity_match_loops():
    hud = make()
    ref, text, target, mask = inputs()
    out = hud(ref, text, target, text_mask=mask, generator=torch.Generator().manual_seed(2))
    assert isinstance(out, HUDObjectiveOutput)
    q, t = out.query, out.targets
    s_h = loop_similarity(q.holistic.detach().numpy(), t.holistic.detach().numpy(), hud.holistic_similarity.bias.detach().numpy())
    s_a = loop_similarity(q.atomistic.detach().numpy(), t.atomistic.detach().numpy(), hud.atomistic_similarity.bias.detach().numpy())
    torch.testing.assert_close(out.holistic_similarity.detach(), torch.from_numpy(s_h))
    torch.testing.assert_close(out.atomistic_similarity.detach(), torch.from_numpy(s_a))
    rank, reg = loop_rank_loss(s_h, s_a, 0.1), loop_consistency(s_h, s_a, 0.1)
    assert math.isclose(float(out.rank.detach()), rank, rel_tol=1e-9)
    assert math.isclose(float(out.consistency.detach()), reg, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(float(out.total.detach()), rank + 0.5 * reg, rel_tol=1e-9)
    torch.testing.assert_close(hud.similarity(q, t), out.holistic_similarity + out.atomistic_similarity)


def test_padded_target_tokens_do_not_count():
    hud = make()
    ref, text, target, mask = inputs()
    target_mask = torch.ones(4, 4, dtype=torch.bool)
    target_mask[1, 2:] = False
    query = hud.compose(ref, text, text_mask=mask, generator=torch.Generator().manual_seed(0))
    padded = hud.similarity(query, hud.embed_targets(target, target_mask))
    garbage = target.clone()
    garbage[1, 2:] = 100.0
    torch.testing.assert_close(padded, hud.similarity(query, hud.embed_targets(garbage, target_mask)))
    only_valid = hud.similarity(query, hud.embed_targets(target[1:2, :2]))
    torch.testing.assert_close(padded[:, 1:2], only_valid)


@pytest.mark.parametrize("number", sorted(HUD_DERIVATIVES))
def test_each_derivative_removes_its_part(number):
    hud = make(derivative=number)
    ref, text, target, mask = inputs()
    out = hud(ref, text, target, text_mask=mask, generator=torch.Generator().manual_seed(3))
    name, field = HUD_DERIVATIVES[number]
    assert getattr(hud.switches, field) is False and name in hud.extra_repr()
    q = out.query
    if number == 1:
        assert q.holistic.shape[1] == 1 and q.text is None
    if number == 2:
        ref_h = hud.video_projection(ref.mean(1))
        valid = mask.double().unsqueeze(-1)
        text_h = hud.text_projection((text * valid).sum(1) / valid.sum(1))
        torch.testing.assert_close(q.holistic[:, 0], F.normalize(ref_h + text_h, dim=-1))
    if number in (3, 6):
        gone = "holistic" if number == 3 else "atomistic"
        assert getattr(q, gone) is None and getattr(out, f"{gone}_similarity") is None
        kept = out.atomistic_similarity if number == 3 else out.holistic_similarity
        assert math.isclose(float(out.total.detach()), loop_rank_loss(kept.detach().numpy(), 0 * kept.detach().numpy(), 0.1), rel_tol=1e-9)
        assert float(out.consistency) == 0.0
    if number == 4:
        assert q.atomistic.shape[1] == 3 and q.detail is None
    if number == 5:
        assert not any(p.grad is not None for p in hud.qformer.parameters())
    if number == 7:
        expected = loop_similarity(q.atomistic.detach().numpy(), out.targets.atomistic.detach().numpy(), None)
        torch.testing.assert_close(out.atomistic_similarity.detach(), torch.from_numpy(expected))
    if number == 8:
        torch.testing.assert_close(out.total, out.rank)
    if number == 9:
        assert float(out.rank) == 0.0
        torch.testing.assert_close(out.total, 0.5 * out.consistency)
    out.total.backward()
    assert all(torch.isfinite(p.grad).all() for p in hud.parameters() if p.grad is not None)


@given(st.integers(1, 5), st.integers(1, 6), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_gallery_order_and_size_do_not_matter(n_queries, n_gallery, m, seed):
    hud = make()
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(n_queries, 3, 6, generator=g, dtype=torch.float64)
    text = torch.randn(n_queries, 4, 6, generator=g, dtype=torch.float64)
    gallery = torch.randn(n_gallery, m, 6, generator=g, dtype=torch.float64)
    query = hud.compose(ref, text, generator=torch.Generator().manual_seed(1))
    scores = hud.similarity(query, hud.embed_targets(gallery))
    perm = torch.randperm(n_gallery, generator=g)
    assert scores.shape == (n_queries, n_gallery) and bool(torch.isfinite(scores).all())
    torch.testing.assert_close(hud.similarity(query, hud.embed_targets(gallery[perm])), scores[:, perm])


def test_bfloat16_autocast_is_finite():
    hud = HUDObjective.from_preset("paper", dim=8, holistic_dim=8, num_reference_tokens=4)
    ref, text, target = torch.randn(6, 4, 8), torch.randn(6, 5, 8), torch.randn(6, 3, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = hud(ref, text, target)
    out.total.backward()
    assert bool(torch.isfinite(out.total)) and all(torch.isfinite(p.grad).all() for p in hud.parameters() if p.grad is not None)


def test_query_token_attention_masks_and_queries():
    torch.manual_seed(0)
    qformer = QueryTokenAttention(8, num_queries=3, num_heads=2)
    text, visual = torch.randn(2, 4, 8), torch.randn(2, 5, 8)
    text_mask = torch.tensor([[True, True, False, False], [True] * 4])
    out = qformer(text=text, text_mask=text_mask, visual=visual)
    assert out.shape == (2, 3, 8)
    changed = text.clone()
    changed[0, 2:] = 50.0
    torch.testing.assert_close(qformer(text=changed, text_mask=text_mask, visual=visual), out)
    torch.testing.assert_close(qformer(text=text[:1, :2], visual=visual[:1])[0], out[0])
    with pytest.raises(ValueError, match="queries must be given"):
        QueryTokenAttention(8)(text=text)
    with pytest.raises(ValueError, match="visual must have batch size 2"):
        qformer(text=text, visual=visual[:1])


@pytest.mark.parametrize("with_text", [True, False])
@pytest.mark.parametrize("with_visual", [True, False])
def test_query_groups_equal_one_call_per_group(with_text, with_visual):
    """Groups that do not attend to each other equal the groups stacked on the batch (separate calls)."""
    torch.manual_seed(0)
    qformer = QueryTokenAttention(8, num_heads=2, num_layers=2).double()
    perturb(qformer, scale=0.3)
    g = torch.Generator().manual_seed(1)
    queries = torch.randn(2, 3 * 4, 8, generator=g, dtype=torch.float64, requires_grad=True)
    text = torch.randn(2, 5, 8, generator=g, dtype=torch.float64) if with_text else None
    text_mask = torch.tensor([[True, True, False, False, False], [True] * 5]) if with_text else None
    visual = torch.randn(2, 6, 8, generator=g, dtype=torch.float64) if with_visual else None
    grouped = qformer(queries=queries, text=text, text_mask=text_mask, visual=visual, query_groups=3)
    expected = torch.cat([qformer(queries=part, text=text, text_mask=text_mask, visual=visual)
                          for part in queries.split(4, dim=1)], dim=1)
    torch.testing.assert_close(grouped, expected)
    weights = torch.randn(grouped.shape, generator=g, dtype=torch.float64)
    grads = [torch.autograd.grad((out * weights).sum(), queries)[0] for out in (grouped, expected)]
    torch.testing.assert_close(grads[0], grads[1])
    with pytest.raises(ValueError, match="query_groups=5 must divide"):
        qformer(queries=queries, text=text, query_groups=5)


def test_padded_reference_tokens_are_filled_within_each_query_set():
    """With a reference mask, each of the 2T composed tokens' padded positions copies its own set's first valid token."""
    hud = make()
    ref, text, _, mask = inputs()
    reference_mask = torch.tensor([[False, True, True]] + [[True, True, True]] * 3)
    q = hud.compose(ref, text, reference_mask, mask, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(q.atomistic[0, 0], q.atomistic[0, 1])  # original tokens: token 0 <- token 1
    torch.testing.assert_close(q.atomistic[0, 3], q.atomistic[0, 4])  # detail samples: token 3 <- token 4
    assert not torch.allclose(q.atomistic[0, 0], q.atomistic[0, 3])


def test_max_gradient_at_a_tie_from_duplicated_target_tokens_reaches_the_same_source():
    """torch.max sends a tie's gradient to one copy; summed back onto the duplicated token it equals amax's split."""
    g = torch.Generator().manual_seed(0)
    composed = torch.randn(3, 4, 5, generator=g, dtype=torch.float64, requires_grad=True)
    source = torch.randn(2, 3, 5, generator=g, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(4, generator=g, dtype=torch.float64)
    target = torch.cat([source, source[:, :1]], dim=1)  # token 3 duplicates token 0: exact ties
    grads = []
    for sim in (lambda: biased_max_similarity(composed, target, bias),
                lambda: amax_similarity(composed, target, bias)):
        grads.append(torch.autograd.grad(sim().square().sum(), (composed, source)))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def amax_similarity(composed, target, bias):
    """Eq. 10-11 with ``amax`` (gradient split among tied target tokens), the former implementation."""
    token_sim = torch.einsum("qkd,tmd->qtkm", composed, target).amax(dim=-1)
    return ((torch.softmax(token_sim, dim=-1) + bias) * token_sim).sum(dim=-1)


def test_errors_name_the_argument():
    hud = make()
    ref, text, target, _ = inputs()
    with pytest.raises(ValueError, match="num_reference_tokens=3"):
        hud(ref[:, :2], text, target)
    with pytest.raises(ValueError, match="reference_tokens must be a 3-D"):
        hud(ref[0], text, target)
    with pytest.raises(ValueError, match="target_tokens must have batch size 4"):
        hud(ref, text, target[:2])
    with pytest.raises(ValueError, match="text_tokens must have last dimension 6"):
        hud(ref, text[..., :5], target)
    with pytest.raises(ValueError, match="reference_tokens must be finite"):
        hud(ref.masked_fill(torch.ones_like(ref, dtype=torch.bool), float("nan")), text, target)
    with pytest.raises(TypeError, match="missing 2 required positional arguments: 'holistic_dim' and "
                                        "'num_reference_tokens'"):
        HUDObjective.from_preset("paper", dim=4)
    with pytest.raises(TypeError, match="'not_a_setting'"):
        HUDObjective.from_preset("paper", dim=4, holistic_dim=4, num_reference_tokens=2, not_a_setting=1)
    with pytest.raises(ValueError, match="preset"):
        HUDObjective.from_preset("release", dim=4, holistic_dim=4, num_reference_tokens=2)
    with pytest.raises(ValueError, match="derivative must be one of"):
        HUDSwitches().derivative(10)
    with pytest.raises(ValueError, match="at least one of holistic_level"):
        HUDSwitches(holistic_level=False, atomistic_level=False)
    with pytest.raises(ValueError, match="rank_loss=False"):
        HUDSwitches(rank_loss=False, atomistic_level=False)
    with pytest.raises(TypeError, match="query and targets must come from"):
        hud.similarity(torch.zeros(2, 2), torch.zeros(2, 2))
