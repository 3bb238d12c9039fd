"""Tests of FlexibleOT against POT's log-domain Sinkhorn on independently built problems."""

from __future__ import annotations

import numpy as np
import ot
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from evidential_prvr import FlexibleOT
from tests.pot_reference import assert_plans_match_pot
from tests.strategies.transport import epsilons, masked_similarity_batches

METHODS = ["log", "scaling"]


def reference_fot(
    sim: np.ndarray,
    qmask: np.ndarray,
    cmask: np.ndarray,
    epsilon: float,
    quantile: float | None = 0.3,
    normalize: str | None = "minmax",
    marginals: str = "release",
    minmax_over: str = "block",
) -> tuple[np.ndarray, np.ndarray]:
    """``(plan [Mq, Mc], dustbin [Mc])`` of one video, from the definition and ``ot.sinkhorn``.

    ``minmax_over="block"`` takes the normalisation's min and max over the whole padded block of the
    video (the release), ``"valid"`` over the valid entries only.
    """
    q_idx, c_idx = np.flatnonzero(qmask), np.flatnonzero(cmask)
    nq, nc = len(q_idx), len(c_idx)
    plan = np.zeros(sim.shape)
    dustbin = np.zeros(sim.shape[1])
    if nq == 0 and quantile is None:
        return plan, dustbin
    s = sim[np.ix_(q_idx, c_idx)].astype(np.float64)
    if normalize == "minmax" and s.size:
        scope = sim.astype(np.float64) if minmax_over == "block" else s
        s = (s - scope.min()) / (scope.max() - scope.min() + 1e-8)
    if quantile is None:
        a = np.full(nq, 1.0 / nq)
        gains = s
    else:
        z = np.sort(s.ravel())[max(1, int(np.floor(quantile * s.size))) - 1] if s.size else 0.0
        gains = np.vstack([s, np.full((1, nc), z)])
        if marginals == "release":
            a = np.append(np.full(nq, 1.0 / (nc + nq)), nc / (nc + nq))
        else:
            a = np.full(nq + 1, 1.0 / (nq + 1))
    b = np.full(nc, 1.0 / nc)
    q = ot.sinkhorn(a, b, -gains, epsilon, method="sinkhorn_log", numItermax=200000, stopThr=1e-13)
    plan[np.ix_(q_idx, c_idx)] = q[:nq]
    if quantile is not None:
        dustbin[c_idx] = q[nq]
    return plan, dustbin


def converged(**kwargs) -> FlexibleOT:
    return FlexibleOT(n_iters=50000, tol=1e-12, **kwargs)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("marginals", ["release", "uniform"])
@pytest.mark.parametrize("minmax_over", ["block", "valid"])
@settings(max_examples=15)
@given(batch=masked_similarity_batches(), epsilon=epsilons, quantile=st.floats(0.05, 0.95))
def test_matches_pot(method, marginals, minmax_over, batch, epsilon, quantile):
    sim, qmask, cmask = batch
    fot = converged(epsilon=epsilon, dustbin_quantile=quantile, marginals=marginals, method=method,
                    minmax_over=minmax_over)
    out = fot(sim, qmask, cmask)
    for k in range(sim.shape[0]):
        plan, dustbin = reference_fot(
            sim[k].numpy(), qmask[k].numpy(), cmask[k].numpy(), epsilon, quantile, "minmax", marginals, minmax_over
        )
        np.testing.assert_allclose(out.plan[k].numpy(), plan, atol=1e-6, rtol=0)
        np.testing.assert_allclose(out.dustbin[k].numpy(), dustbin, atol=1e-6, rtol=0)


@pytest.mark.parametrize("method", METHODS)
@settings(max_examples=10)
@given(batch=masked_similarity_batches(scale=3.0), epsilon=st.floats(0.5, 2.0))
def test_matches_pot_without_normalisation_and_without_dustbin(method, batch, epsilon):
    sim, qmask, cmask = batch
    for quantile in (0.3, None):
        out = converged(epsilon=epsilon, dustbin_quantile=quantile, normalize=None, method=method)(sim, qmask, cmask)
        for k in range(sim.shape[0]):
            plan, _ = reference_fot(sim[k].numpy(), qmask[k].numpy(), cmask[k].numpy(), epsilon, quantile, None)
            np.testing.assert_allclose(out.plan[k].numpy(), plan, atol=1e-6, rtol=0)


@settings(max_examples=10)
@given(batch=masked_similarity_batches(), marginals=st.sampled_from(["release", "uniform"]))
def test_pot_problem_reproduces_plan(batch, marginals):
    sim, qmask, cmask = batch
    fot = converged(marginals=marginals, minmax_over="valid")
    out = fot(sim, qmask, cmask)
    assert_plans_match_pot(fot, out, sim, qmask, cmask)


@settings(max_examples=15)
@given(batch=masked_similarity_batches(), marginals=st.sampled_from(["release", "uniform"]))
def test_marginals_padding_and_assignment(batch, marginals):
    sim, qmask, cmask = batch
    out = converged(marginals=marginals)(sim, qmask, cmask)
    nq = qmask.sum(1, keepdim=True).double()
    nc = cmask.sum(1, keepdim=True).double()
    # clips: 1/Mc each, split between queries and dustbin
    clip_mass = out.plan.sum(1) + out.dustbin
    torch.testing.assert_close(clip_mass, cmask.double() / nc, atol=1e-9, rtol=0)
    query_mass = 1.0 / (nc + nq) if marginals == "release" else 1.0 / (nq + 1)
    torch.testing.assert_close(out.plan.sum(2), qmask.double() * query_mass, atol=1e-9, rtol=0)
    padded = ~(qmask.unsqueeze(2) & cmask.unsqueeze(1))
    for tensor in (out.plan, out.assignment, out.similarity):
        assert bool((tensor[padded] == 0).all())
    assert bool((out.dustbin[~cmask] == 0).all())
    torch.testing.assert_close(out.assignment.sum(2), qmask.double(), atol=1e-12, rtol=0)


@settings(max_examples=10)
@given(batch=masked_similarity_batches(allow_empty_videos=False), data=st.data())
def test_permutation_equivariance(batch, data):
    sim, qmask, cmask = batch
    mq, mc = sim.shape[1:]
    qperm = torch.tensor(data.draw(st.permutations(range(mq))))
    cperm = torch.tensor(data.draw(st.permutations(range(mc))))
    fot = converged()
    out = fot(sim, qmask, cmask)
    permuted = fot(sim[:, qperm][:, :, cperm], qmask[:, qperm], cmask[:, cperm])
    torch.testing.assert_close(permuted.plan, out.plan[:, qperm][:, :, cperm], atol=1e-10, rtol=0)
    torch.testing.assert_close(permuted.dustbin, out.dustbin[:, cperm], atol=1e-10, rtol=0)


def test_dustbin_absorbs_clips_below_the_dustbin_value():
    # 2 queries x 10 clips: clips 0-2 relevant (1.0), clips 3-9 irrelevant (<= 0.1)
    sim = torch.zeros(1, 2, 10, dtype=torch.float64)
    sim[0, :, :3] = 1.0
    sim[0, :, 3:] = torch.linspace(0.0, 0.1, 7, dtype=torch.float64)
    out = converged(epsilon=0.01)(sim, return_dustbin_value=True)
    z = float(out.dustbin_value[0])
    assert z <= 0.1 / (1.0 + 1e-8) + 1e-12  # 0.3 quantile of 20 entries: among the irrelevant ones
    # irrelevant clips send all their mass (1/10) to the dustbin, none to the queries
    torch.testing.assert_close(out.dustbin[0, 3:], torch.full((7,), 0.1, dtype=torch.float64), atol=1e-6, rtol=0)
    assert float(out.plan[0, :, 3:].sum()) < 1e-6
    assert float(out.assignment[0, :, :3].sum()) > 2 - 1e-6


@pytest.mark.parametrize("normalize", ["minmax", None])
@pytest.mark.parametrize("method", METHODS)
def test_gradcheck_autodiff(normalize, method):
    gen = torch.Generator().manual_seed(3)
    sim = torch.rand(2, 2, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    qmask = torch.tensor([[True, True], [True, False]])
    cmask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    fot = FlexibleOT(epsilon=0.5, n_iters=10, normalize=normalize, grad="autodiff", method=method)

    def outputs(s):
        out = fot(s, qmask, cmask)
        return out.plan, out.dustbin, out.assignment

    assert torch.autograd.gradcheck(outputs, (sim,))


def test_detach_mode_keeps_gradient_of_the_similarity_only():
    sim = torch.rand(2, 3, 4, requires_grad=True)
    out = FlexibleOT()(sim)
    assert not out.plan.requires_grad and not out.assignment.requires_grad and not out.dustbin.requires_grad
    assert out.similarity.requires_grad


def test_padded_values_do_not_matter_and_minmax_uses_valid_entries_only():
    gen = torch.Generator().manual_seed(4)
    sim = torch.rand(2, 3, 5, generator=gen)
    qmask = torch.tensor([[True, True, False], [True, True, True]])
    cmask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    poisoned = sim.clone()
    poisoned[0, 2] = float("nan")
    poisoned[1, :, 3:] = 1e4
    fot = FlexibleOT(minmax_over="valid")
    a, b = fot(sim, qmask, cmask), fot(poisoned, qmask, cmask)
    torch.testing.assert_close(a.plan, b.plan, rtol=0, atol=0)
    valid = qmask.unsqueeze(2) & cmask.unsqueeze(1)
    assert float(a.similarity[0][valid[0]].max()) == pytest.approx(1.0, abs=1e-6)
    assert float(a.similarity[0][valid[0]].min()) == 0.0


@pytest.mark.parametrize("method", ["auto", "log"])
def test_extreme_epsilon_and_similarity_stay_finite(method):
    gen = torch.Generator().manual_seed(5)
    sim = (torch.rand(3, 4, 6, generator=gen) * 2 - 1) * 1e3
    for normalize in ("minmax", None):
        out = FlexibleOT(epsilon=1e-3, normalize=normalize, method=method)(sim)
        for tensor in (out.plan, out.dustbin, out.assignment):
            assert bool(torch.isfinite(tensor).all())
        torch.testing.assert_close(out.assignment.sum(2), torch.ones(3, 4), atol=1e-5, rtol=0)


@pytest.mark.parametrize("shape", [(3, 1, 1), (2, 1, 5), (2, 4, 1)])
def test_single_query_or_clip(shape):
    sim = torch.randn(*shape, dtype=torch.float64)
    out = converged()(sim)
    for k in range(shape[0]):
        plan, dustbin = reference_fot(sim[k].numpy(), np.ones(shape[1], bool), np.ones(shape[2], bool), 0.1)
        np.testing.assert_allclose(out.plan[k].numpy(), plan, atol=1e-6, rtol=0)
        np.testing.assert_allclose(out.dustbin[k].numpy(), dustbin, atol=1e-6, rtol=0)
    torch.testing.assert_close(out.assignment.sum(2), torch.ones(shape[:2], dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_are_computed_in_float32(dtype):
    sim = torch.rand(2, 3, 8).to(dtype)
    out = FlexibleOT()(sim)
    assert out.plan.dtype == torch.float32
    raw = FlexibleOT(normalize=None)
    torch.testing.assert_close(raw(sim).plan, raw(sim.float()).plan)
    # min-max with the half dtype's machine epsilon, so the gradient stays representable in that dtype
    x = sim.float()
    low, high = x.amin(dim=(1, 2), keepdim=True), x.amax(dim=(1, 2), keepdim=True)
    expected = (x - low) / (high - low + torch.finfo(dtype).eps)
    torch.testing.assert_close(out.similarity, expected)


def test_device(device):
    sim = torch.rand(2, 3, 4, device=device)
    qmask = torch.tensor([[True, False, True], [True, True, True]], device=device)
    out = FlexibleOT()(sim, qmask)
    assert out.plan.device.type == device.type and out.dustbin.device.type == device.type


def test_tolerance_stops_close_to_convergence():
    sim = torch.rand(4, 5, 8, dtype=torch.float64)
    full = converged()(sim)
    early = FlexibleOT(n_iters=50000, tol=1e-6)(sim)
    torch.testing.assert_close(early.plan, full.plan, atol=1e-5, rtol=0)


def test_presets():
    for dataset in ("tvr", "activitynet", "charades", "act", "cha"):
        release = FlexibleOT.from_preset("release", dataset=dataset)
        assert (release.epsilon, release.n_iters, release.dustbin_quantile, release.normalize) == (0.1, 50, 0.3, "minmax")
        assert (release.marginals, release.tol, release.grad, release.minmax_over) == ("release", None, "detach", "block")
    paper = FlexibleOT.from_preset("paper")
    assert (paper.normalize, paper.marginals, paper.dustbin_quantile) == (None, "uniform", 0.3)
    assert repr(FlexibleOT.from_preset("paper", dataset="tvr")) == repr(paper)
    assert FlexibleOT.from_preset("release", dataset="tvr", epsilon=0.05).epsilon == 0.05
    with pytest.raises(ValueError, match="preset"):
        FlexibleOT.from_preset("best")
    assert repr(FlexibleOT.from_preset("release")) == repr(FlexibleOT.from_preset("release", "tvr"))
    with pytest.raises(TypeError, match="'eps'"):
        FlexibleOT.from_preset("release", dataset="tvr", eps=0.1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"dustbin_quantile": 0.0}, "dustbin_quantile"),
        ({"dustbin_quantile": 1.0}, "dustbin_quantile"),
        ({"n_iters": 0}, "n_iters"),
        ({"normalize": "zscore"}, "normalize"),
        ({"marginals": "superglue"}, "marginals"),
        ({"grad": "envelope"}, "grad"),
        ({"tol": 0.0}, "tol"),
        ({"method": "fast"}, "method"),
    ],
)
def test_bad_hyperparameters(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        FlexibleOT(**kwargs)


def test_bad_inputs():
    fot = FlexibleOT()
    sim = torch.rand(2, 3, 4)
    with pytest.raises(ValueError, match="sim must be a 3-D"):
        fot(torch.rand(3, 4))
    with pytest.raises(TypeError, match="sim"):
        fot(torch.ones(2, 3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"query_mask must have shape \(2, 3\)"):
        fot(sim, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"clip_mask must have shape \(2, 4\)"):
        fot(sim, None, torch.ones(4, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="clip_mask must mark at least one valid clip"):
        fot(sim, None, torch.tensor([[True] * 4, [False] * 4]))
    with pytest.raises(ValueError, match="query_mask must hold only 0 and 1"):
        fot(sim, torch.full((2, 3), 0.5))
    bad = sim.clone()
    bad[1, 2, 3] = float("inf")
    with pytest.raises(ValueError, match="finite"):
        fot(bad)


@pytest.mark.parametrize("ragged", [False, True])
def test_dustbin_value_is_the_same_on_the_differentiable_path(ragged):
    # with and without gradient tracking, the k-th smallest valid similarity
    gen = torch.Generator().manual_seed(6)
    sim = torch.rand(4, 3, 7, generator=gen, dtype=torch.float64)
    qmask = torch.tensor([[True, True, True], [True, False, True], [False, False, True], [True] * 3])
    qmask = qmask if ragged else torch.ones(4, 3, dtype=torch.bool)
    fot = FlexibleOT(grad="autodiff", dustbin_quantile=0.45)
    plain = fot(sim, qmask, return_dustbin_value=True)
    tracked = fot(sim.clone().requires_grad_(True), qmask, return_dustbin_value=True)
    torch.testing.assert_close(tracked.dustbin_value.detach(), plain.dustbin_value, rtol=0, atol=0)
    expected = []
    for k in range(4):
        s = plain.similarity[k][qmask[k]].flatten().sort().values
        expected.append(s[max(1, int(0.45 * s.numel())) - 1])
    torch.testing.assert_close(plain.dustbin_value, torch.stack(expected), rtol=0, atol=0)


def test_unmasked_fast_path_equals_all_true_masks_and_is_differentiable():
    gen = torch.Generator().manual_seed(7)
    sim = torch.rand(3, 4, 6, generator=gen, dtype=torch.float64)
    ones_q, ones_c = torch.ones(3, 4, dtype=torch.bool), torch.ones(3, 6, dtype=torch.bool)
    for normalize in ("minmax", None):
        fot = FlexibleOT(normalize=normalize)
        dense, masked = fot(sim, return_dustbin_value=True), fot(sim, ones_q, ones_c, return_dustbin_value=True)
        for name in ("plan", "dustbin", "assignment", "similarity", "dustbin_value"):
            torch.testing.assert_close(getattr(dense, name), getattr(masked, name), rtol=0, atol=1e-15)
    fot = FlexibleOT(epsilon=0.5, n_iters=10, grad="autodiff")
    leaf = sim[:2, :2, :3].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda s: fot(s).plan, (leaf,))


@settings(max_examples=10)
@given(batch=masked_similarity_batches(), marginals=st.sampled_from(["release", "uniform"]))
def test_plan_does_not_depend_on_the_dustbin_value(batch, marginals):
    # balanced problem, constant dustbin row: z * (dustbin mass) is a constant of the objective
    sim, qmask, cmask = batch
    low = converged(dustbin_quantile=0.1, marginals=marginals)(sim, qmask, cmask)
    high = converged(dustbin_quantile=0.9, marginals=marginals)(sim, qmask, cmask)
    torch.testing.assert_close(low.plan, high.plan, atol=1e-9, rtol=0)
    torch.testing.assert_close(low.dustbin, high.dustbin, atol=1e-9, rtol=0)


def test_release_minmax_reads_the_whole_padded_block():
    # the release normalises over the padded caption slots too (zero embeddings: cosine 0)
    sim = torch.tensor([[[0.5, 0.9, 0.7], [0.0, 0.0, 0.0]]], dtype=torch.float64)
    qmask = torch.tensor([[True, False]])
    block = FlexibleOT(minmax_over="block")(sim, qmask)
    valid = FlexibleOT(minmax_over="valid")(sim, qmask)
    expected_block = sim[0, 0] / (0.9 + 1e-8)  # min 0 comes from the padded slot
    expected_valid = (sim[0, 0] - 0.5) / (0.4 + 1e-8)
    torch.testing.assert_close(block.similarity[0, 0], expected_block, rtol=0, atol=1e-15)
    torch.testing.assert_close(valid.similarity[0, 0], expected_valid, rtol=0, atol=1e-15)
    assert float((block.assignment - valid.assignment).abs().max()) > 1e-3
    unpadded = sim[:, :1]
    torch.testing.assert_close(FlexibleOT(minmax_over="block")(unpadded).plan,
                               FlexibleOT(minmax_over="valid")(unpadded).plan, rtol=0, atol=1e-15)


def test_block_scope_needs_finite_padded_entries():
    sim = torch.rand(1, 2, 3)
    sim[0, 1] = float("nan")
    qmask = torch.tensor([[True, False]])
    FlexibleOT(minmax_over="valid")(sim, qmask)
    with pytest.raises(ValueError, match="sim must be finite"):
        FlexibleOT(minmax_over="block")(sim, qmask)


def test_dustbin_value_only_on_request():
    sim = torch.rand(2, 3, 4)
    assert FlexibleOT()(sim).dustbin_value is None
    assert FlexibleOT()(sim, return_dustbin_value=True).dustbin_value.shape == (2,)
