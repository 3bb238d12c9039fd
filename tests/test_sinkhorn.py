"""Tests of the batched masked Sinkhorn solver: against POT, its masks and options, half precision and autocast,
and the eager loop under :func:`torch.compile` (the way to fuse it)."""

from __future__ import annotations

import os

import numpy as np
import ot
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from evidential_prvr import FlexibleOT
from evidential_prvr.functional import flexible_ot, scaling_range_bound, select_sinkhorn_method, sinkhorn
from tests.strategies.transport import epsilons, masked_marginal_problems

METHODS = ["log", "scaling"]


def pot_plan(scores: np.ndarray, a: np.ndarray, b: np.ndarray, reg: float) -> np.ndarray:
    """POT's log-Sinkhorn on the valid sub-problem, scattered back into the padded shape."""
    rows, cols = a > 0, b > 0
    plan = ot.sinkhorn(
        a[rows], b[cols], -scores[np.ix_(rows, cols)], reg, method="sinkhorn_log", numItermax=100000, stopThr=1e-13
    )
    full = np.zeros_like(scores)
    full[np.ix_(rows, cols)] = plan
    return full


def converged_plan(problem, epsilon: float, method: str):
    """The problem's ``(scores, a, b)`` and our plan, iterated far past convergence."""
    scores, a, b = problem
    return scores, a, b, sinkhorn(scores, a, b, epsilon, n_iters=20000, tol=1e-12, method=method)


@pytest.mark.parametrize("method", METHODS)
@settings(max_examples=25)
@given(problem=masked_marginal_problems(), epsilon=epsilons)
def test_matches_pot_at_convergence(method, problem, epsilon):
    scores, a, b, plan = converged_plan(problem, epsilon, method)
    for k in range(scores.shape[0]):
        expected = pot_plan(scores[k].numpy(), a[k].numpy(), b[k].numpy(), epsilon)
        np.testing.assert_allclose(plan[k].numpy(), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("method", METHODS)
def test_fixed_iterations_match_pot_batched_solver(method):
    gen = torch.Generator().manual_seed(0)
    scores = torch.rand(4, 6, 9, generator=gen, dtype=torch.float64)
    a = torch.full((4, 6), 1 / 6, dtype=torch.float64)
    b = torch.full((4, 9), 1 / 9, dtype=torch.float64)
    ours = sinkhorn(scores, a, b, 0.1, n_iters=7, method=method)
    theirs = ot.solve_batch(-scores, 0.1, a, b, max_iter=7, tol=0, method="log_sinkhorn", grad="detach").plan
    torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=0)


@pytest.mark.parametrize("method", METHODS)
@settings(max_examples=15)
@given(problem=masked_marginal_problems(), epsilon=epsilons)
def test_marginals_and_masked_entries(method, problem, epsilon):
    scores, a, b, plan = converged_plan(problem, epsilon, method)
    torch.testing.assert_close(plan.sum(dim=1), b, atol=1e-9, rtol=0)
    torch.testing.assert_close(plan.sum(dim=2), a, atol=1e-9, rtol=0)
    masked = (a == 0).unsqueeze(2) | (b == 0).unsqueeze(1)
    assert bool((plan[masked] == 0).all())
    assert bool((plan >= 0).all())


def test_masked_scores_are_ignored_even_nan():
    scores = torch.rand(2, 3, 4, dtype=torch.float64)
    a = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    b = torch.tensor([[0.25] * 4, [0.5, 0.5, 0.0, 0.0]], dtype=torch.float64)
    poisoned = scores.clone()
    poisoned[0, 2] = float("nan")
    poisoned[1, :, 2:] = float("inf")
    torch.testing.assert_close(sinkhorn(poisoned, a, b, 0.1), sinkhorn(scores, a, b, 0.1), rtol=0, atol=0)


def test_problem_without_mass_gets_zero_plan():
    scores = torch.rand(2, 3, 4, dtype=torch.float64)
    a = torch.tensor([[1 / 3] * 3, [0.0] * 3], dtype=torch.float64)
    b = torch.full((2, 4), 0.25, dtype=torch.float64)
    plan = sinkhorn(scores, a, b, 0.1)
    assert bool((plan[1] == 0).all())
    torch.testing.assert_close(plan[0].sum(), torch.tensor(1.0, dtype=torch.float64))


def test_auto_method_selection():
    small = torch.rand(2, 3, 4)
    assert select_sinkhorn_method(small, 0.1) == "scaling"
    assert select_sinkhorn_method(small * 1e3, 1e-3) == "log"
    assert scaling_range_bound(torch.float64) > scaling_range_bound(torch.float32) > 50


def test_auto_method_selection_halves_the_range_when_the_plan_is_differentiated():
    bound = scaling_range_bound(torch.float32)
    scores = torch.zeros(1, 2, 3)
    scores[0, 0, 0] = 0.75 * bound * 0.1  # range / epsilon = 0.75 x the bound at epsilon 0.1
    assert select_sinkhorn_method(scores, 0.1) == "scaling"
    assert select_sinkhorn_method(scores, 0.1, differentiating=True) == "log"


def test_forced_scaling_beyond_safe_range_is_refused():
    scores = torch.rand(1, 3, 4) * 1e3
    a, b = torch.full((1, 3), 1 / 3), torch.full((1, 4), 0.25)
    with pytest.raises(ValueError, match="method='scaling'"):
        sinkhorn(scores, a, b, 1e-3, method="scaling")


@pytest.mark.parametrize("method", ["auto", "log"])
def test_extreme_inputs_stay_finite(method):
    gen = torch.Generator().manual_seed(1)
    scores = (torch.rand(3, 5, 8, generator=gen) * 2 - 1) * 1e3
    a, b = torch.full((3, 5), 0.2), torch.full((3, 8), 0.125)
    plan = sinkhorn(scores, a, b, 1e-3, n_iters=50, method=method)
    assert bool(torch.isfinite(plan).all())
    # potentials of size ~1e6 leave float32 about 1e-7 * 1e6 of log-precision: mass is right to a few %
    torch.testing.assert_close(plan.sum(dim=(1, 2)), torch.ones(3), atol=0.05, rtol=0)


@pytest.mark.parametrize("method", METHODS)
def test_gradcheck_autodiff(method):
    gen = torch.Generator().manual_seed(2)
    scores = torch.rand(2, 3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    a = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    b = torch.tensor([[0.25] * 4, [0.4, 0.0, 0.3, 0.3]], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda s: sinkhorn(s, a, b, 0.3, n_iters=15, method=method), (scores,))


def test_detach_mode_has_no_gradient():
    scores = torch.rand(1, 2, 3, requires_grad=True)
    plan = sinkhorn(scores, torch.full((1, 2), 0.5), torch.full((1, 3), 1 / 3), 0.1, grad="detach")
    assert not plan.requires_grad


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_computed_in_float32(dtype):
    scores = torch.rand(2, 4, 8)
    a, b = torch.full((2, 4), 0.25), torch.full((2, 8), 0.125)  # exact in half precision
    plan = sinkhorn(scores.to(dtype), a.to(dtype), b.to(dtype), 0.05)
    assert plan.dtype == torch.float32
    reference = sinkhorn(scores.to(dtype).float(), a, b, 0.05)
    torch.testing.assert_close(plan, reference)


def test_device(device):
    scores = torch.rand(2, 3, 4, device=device)
    plan = sinkhorn(scores, torch.full((2, 3), 1 / 3, device=device), torch.full((2, 4), 0.25, device=device), 0.1)
    assert plan.device.type == device.type


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"n_iters": 0}, "n_iters"),
        ({"method": "fast"}, "method"),
        ({"grad": "none"}, "grad"),
        ({"tol": -1.0}, "tol"),
    ],
)
def test_bad_options_are_refused(kwargs, match):
    args = {"epsilon": 0.1}
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        sinkhorn(torch.rand(1, 2, 3), torch.full((1, 2), 0.5), torch.full((1, 3), 1 / 3), **args)


def test_bad_tensors_are_refused():
    s = torch.rand(1, 2, 3)
    a, b = torch.full((1, 2), 0.5), torch.full((1, 3), 1 / 3)
    with pytest.raises(ValueError, match="scores"):
        sinkhorn(torch.rand(2, 3), a, b, 0.1)
    with pytest.raises(ValueError, match="a must have shape"):
        sinkhorn(s, torch.full((1, 3), 1 / 3), b, 0.1)
    with pytest.raises(ValueError, match="non-negative"):
        sinkhorn(s, torch.tensor([[1.5, -0.5]]), b, 0.1)
    with pytest.raises(ValueError, match="same total mass"):
        sinkhorn(s, torch.full((1, 2), 1.0), b, 0.1)
    bad = s.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        sinkhorn(bad, a, b, 0.1)


@given(st.integers(1, 3))
def test_single_cell_problem(batch):
    plan = sinkhorn(torch.randn(batch, 1, 1), torch.ones(batch, 1), torch.ones(batch, 1), 0.1)
    torch.testing.assert_close(plan, torch.ones(batch, 1, 1))


def test_scaling_path_at_the_edge_of_its_range_matches_the_log_path():
    gen = torch.Generator().manual_seed(3)
    bound = scaling_range_bound(torch.float32)
    scores = torch.rand(4, 6, 64, generator=gen)
    low, high = scores.amin((1, 2), keepdim=True), scores.amax((1, 2), keepdim=True)
    scores = (scores - low) / (high - low)
    epsilon = 1.0 / (bound - 0.5)  # range of scores/epsilon just below the bound
    a = torch.cat([torch.full((4, 5), 1 / 69), torch.full((4, 1), 64 / 69)], dim=1)
    b = torch.full((4, 64), 1 / 64)
    assert select_sinkhorn_method(scores, epsilon, a, b) == "scaling"
    scaling = sinkhorn(scores, a, b, epsilon, n_iters=50, method="scaling")
    log = sinkhorn(scores, a, b, epsilon, n_iters=50, method="log")
    assert bool(torch.isfinite(scaling).all())
    torch.testing.assert_close(scaling, log, atol=1e-6, rtol=1e-3)


@pytest.mark.parametrize("method", METHODS)
def test_a_problem_does_not_depend_on_its_batch(method):
    sim = torch.rand(40, 6, 32, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    whole = flexible_ot(sim, method=method).plan
    part = flexible_ot(sim[17:30], method=method).plan
    torch.testing.assert_close(whole[17:30], part, rtol=0, atol=256 * torch.finfo(torch.float64).eps)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_flexible_ot_under_autocast_in_a_training_step(dtype):
    emb = torch.randn(6, 4, 16, requires_grad=True)
    clips = torch.randn(6, 12, 16)
    fot = FlexibleOT.from_preset("release", dataset="tvr")
    with torch.autocast("cpu", dtype=dtype):
        sim = torch.nn.functional.normalize(emb, dim=-1) @ torch.nn.functional.normalize(clips, dim=-1).transpose(1, 2)
        out = fot(sim)
        loss = (out.similarity * out.assignment).sum()
    loss.backward()
    assert out.plan.dtype == torch.float32
    assert torch.isfinite(loss) and torch.isfinite(emb.grad).all() and torch.isfinite(out.plan).all()


def _compile_case():
    gen = torch.Generator().manual_seed(0)
    sim = torch.rand(4, 3, 8, generator=gen) * 2 - 1
    qmask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0], [1, 1, 0]], dtype=torch.bool)  # a video without queries
    cmask = torch.rand(4, 8, generator=gen) > 0.3
    cmask[:, 0] = True
    return sim, qmask, cmask


# Measured with torch 2.13.0: under ATEN_CPU_CAPABILITY=default Inductor picks no vector ISA yet still emits
# at::vec::VecMask code for the masked reductions without including its header, so g++ fails ("'at::vec' has not
# been declared"). CI's first pass (this processor's kernels) runs this test; the scalar-kernel pass cannot.
@pytest.mark.skipif(os.environ.get("ATEN_CPU_CAPABILITY") == "default",
                    reason="torch 2.13's Inductor emits uncompilable C++ under ATEN_CPU_CAPABILITY=default")
def test_torch_compile_of_flexible_ot_gives_the_eager_plan():
    """The documented way to fuse the loop: ``torch.compile(FlexibleOT(...))``, one graph (Inductor), the eager
    plan to float32 rounding (the release preset: min-max normalisation, so ``"auto"`` takes the scaling loop
    without reading the data; five iterations keep the compilation to a few seconds)."""
    torch.compiler.reset()
    sim, qmask, cmask = _compile_case()
    fot = FlexibleOT.from_preset("release", dataset="tvr", n_iters=5, validate_args=False)
    got = torch.compile(fot, fullgraph=True, dynamic=False)(sim, qmask, cmask)
    want = fot(sim, qmask, cmask)
    for name in ("plan", "dustbin", "assignment"):
        torch.testing.assert_close(getattr(got, name), getattr(want, name), rtol=0, atol=1e-6)
    assert torch.equal(got.plan == 0, want.plan == 0)  # padded entries exactly 0


def test_the_log_loop_traces_into_one_graph():
    torch.compiler.reset()
    sim, qmask, cmask = _compile_case()

    def plan(x):
        return flexible_ot(x, qmask, cmask, epsilon=0.02, normalize=None, method="log", n_iters=5,
                           validate_args=False).plan

    torch.testing.assert_close(torch.compile(plan, fullgraph=True, backend="aot_eager")(sim), plan(sim))
