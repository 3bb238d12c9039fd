"""Tests of the Sinkhorn backends (:func:`evidential_prvr.set_sinkhorn_backend`) against the eager loop (the
reference), POT and autograd: the hand-written scaling kernel and the loop compiled by :func:`torch.compile`.

Each fast path must give the eager plan to a few units in the last place of the compute dtype, POT's plan to
1e-6, leave every gradient to the eager path, fall back to the eager path when it cannot be built, and the
compiled loop must not recompile for a new caption count, batch size, iteration count or epsilon.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import ot
import pytest
import torch

import evidential_prvr
from evidential_prvr import FlexibleOT
from evidential_prvr.functional import _sinkhorn_kernel as kernel
from evidential_prvr.functional import _sinkhorn_loops as loops
from evidential_prvr.functional import flexible_ot, sinkhorn
from tests.pot_reference import assert_plans_match_pot


@contextlib.contextmanager
def backend(name: str) -> Iterator[None]:
    previous = evidential_prvr.sinkhorn_backend()
    evidential_prvr.set_sinkhorn_backend(name)  # type: ignore[arg-type]
    try:
        yield
    finally:
        evidential_prvr.set_sinkhorn_backend(previous)


needs_kernel = pytest.mark.skipif(kernel.kernel_function() is None, reason=f"kernel {kernel.kernel_status()['state']}")
FAST = [pytest.param("kernel", marks=needs_kernel), "compiled"]


def _tolerance(dtype: torch.dtype, scale: float) -> float:
    """A few hundred units in the last place of ``scale`` in ``dtype`` (50 iterations of sums in another order)."""
    return 256 * torch.finfo(dtype).eps * scale


def _masked_batch(dtype: torch.dtype, seed: int = 0, batch: int = 9, mq: int = 5, mc: int = 12):
    gen = torch.Generator().manual_seed(seed)
    sim = (torch.rand(batch, mq, mc, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype)
    qmask = torch.rand(batch, mq, generator=gen) > 0.3
    cmask = torch.rand(batch, mc, generator=gen) > 0.25
    qmask[0] = False  # a video without queries
    cmask[:, 0] = True
    return sim, qmask, cmask


@pytest.mark.parametrize("fast", FAST)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("preset", ["release", "paper"])
def test_fast_path_equals_eager(fast, dtype, preset):
    sim, qmask, cmask = _masked_batch(dtype)
    # the paper preset without normalisation takes the log scheme at a small epsilon
    overrides = {"method": "log", "epsilon": 0.02} if preset == "paper" else {}
    fot = FlexibleOT.from_preset(preset, dataset="tvr", **overrides)
    with backend("eager"):
        eager = fot(sim, qmask, cmask)
    with backend(fast):
        fast_out = fot(sim, qmask, cmask)
    for name in ("plan", "dustbin", "assignment"):
        want, got = getattr(eager, name), getattr(fast_out, name)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=0, atol=_tolerance(dtype, float(want.abs().max())))
    assert torch.equal(fast_out.plan == 0, eager.plan == 0)  # padded entries exactly 0 on every path
    assert torch.equal(fast_out.similarity, eager.similarity)


@needs_kernel
def test_kernel_with_early_stopping_equals_eager():
    sim, qmask, cmask = _masked_batch(torch.float64)
    fot = FlexibleOT(tol=1e-6, n_iters=500)
    with backend("eager"):
        eager = fot(sim, qmask, cmask).plan
    with backend("kernel"):
        fast = fot(sim, qmask, cmask).plan
    torch.testing.assert_close(fast, eager, rtol=0, atol=_tolerance(torch.float64, float(eager.max())))


def test_auto_takes_the_kernel_for_scaling_and_the_compiled_loop_for_log(monkeypatch):
    taken = []
    monkeypatch.setattr(loops, "kernel_scaling", lambda *args: taken.append("kernel") or loops.eager_scaling(*args))
    x = torch.rand(4, 3, 8)
    with backend("auto"):
        chosen_log = loops.sinkhorn_loop("log", x, None, False)
        flexible_ot(x)
    assert chosen_log is loops._COMPILED["log"]
    assert taken == (["kernel"] if kernel.kernel_function() is not None else [])


@pytest.mark.parametrize("fast", FAST)
def test_fast_path_matches_pot(fast):
    sim, qmask, cmask = _masked_batch(torch.float64, seed=3)
    fot = FlexibleOT(n_iters=3000, marginals="uniform", method="scaling")
    with backend(fast):
        out = fot(sim, qmask, cmask)
    assert_plans_match_pot(fot, out, sim, qmask, cmask)


@pytest.mark.parametrize("fast", FAST)
def test_fixed_iterations_match_pot_batched(fast):
    gen = torch.Generator().manual_seed(4)
    sim = torch.rand(16, 5, 32, generator=gen)
    out = flexible_ot(sim, return_dustbin_value=True)
    scores = torch.cat([out.similarity, out.dustbin_value.view(16, 1, 1).expand(16, 1, 32)], dim=1)
    a = torch.cat([torch.full((16, 5), 1 / 37), torch.full((16, 1), 32 / 37)], dim=1)
    b = torch.full((16, 32), 1 / 32)
    with backend(fast):
        ours = sinkhorn(scores, a, b, 0.1, 50, grad="detach")
    pot = ot.solve_batch(-scores, 0.1, a, b, max_iter=50, tol=0, method="log_sinkhorn", grad="detach").plan
    assert float((ours - pot).abs().max()) <= 1e-6


def test_compiled_loop_does_not_recompile_for_new_sizes_iterations_or_epsilon():
    from torch._dynamo.utils import counters

    gen = torch.Generator().manual_seed(7)
    fot = FlexibleOT.from_preset("release", dataset="tvr")
    with backend("compiled"):
        fot(torch.rand(8, 4, 16, generator=gen))  # compiled (or loaded from the compiler's cache) here
        frames = counters["stats"]["unique_graphs"]
        for batch, captions, clips in [(8, 2, 16), (5, 6, 16), (12, 3, 20), (7, 9, 32), (8, 4, 16)]:
            sim = torch.rand(batch, captions, clips, generator=gen)
            qmask = torch.rand(batch, captions, generator=gen) > 0.3
            for settings in ({}, {"n_iters": 30}, {"epsilon": 0.05}):
                out = FlexibleOT(**settings)(sim, qmask)
                assert out.plan.shape == (batch, captions, clips)
    assert counters["stats"]["unique_graphs"] == frames


@pytest.mark.parametrize("fast", FAST)
def test_batch_does_not_change_a_problem(fast):
    sim = torch.rand(40, 6, 32, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    with backend(fast):
        whole = flexible_ot(sim).plan
        part = flexible_ot(sim[17:30]).plan
    torch.testing.assert_close(whole[17:30], part, rtol=0, atol=_tolerance(torch.float64, 1.0))


@needs_kernel
def test_kernel_threads_do_not_change_a_problem(monkeypatch):
    sim = torch.rand(300, 6, 32, generator=torch.Generator().manual_seed(2))
    with backend("kernel"):
        monkeypatch.setattr(kernel, "_THREAD_WORK", 0)
        whole = flexible_ot(sim).plan
        monkeypatch.setattr(kernel, "_max_threads", 1)
        one_thread = flexible_ot(sim).plan
    assert torch.equal(whole, one_thread)


@pytest.mark.parametrize("fast", FAST)
def test_gradients_stay_on_the_eager_path(fast):
    sim, qmask, cmask = _masked_batch(torch.float64, seed=5, batch=3, mq=3, mc=5)
    sim.requires_grad_(True)
    fot = FlexibleOT(grad="autodiff", method="scaling", n_iters=20)

    def plan(x):
        return fot(x, qmask, cmask).plan

    with backend(fast):
        assert torch.autograd.gradcheck(plan, (sim,))
        (fast_grad,) = torch.autograd.grad(plan(sim).square().sum(), sim)
    with backend("eager"):
        (eager_grad,) = torch.autograd.grad(plan(sim).square().sum(), sim)
    assert torch.equal(fast_grad, eager_grad)


@pytest.mark.parametrize("fast", FAST)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fast_path_under_autocast_in_a_training_step(fast, dtype):
    emb = torch.randn(6, 4, 16, requires_grad=True)
    clips = torch.randn(6, 12, 16)
    fot = FlexibleOT.from_preset("release", dataset="tvr")
    with backend(fast), torch.autocast("cpu", dtype=dtype):
        sim = torch.nn.functional.normalize(emb, dim=-1) @ torch.nn.functional.normalize(clips, dim=-1).transpose(1, 2)
        out = fot(sim)
        loss = (out.similarity * out.assignment).sum()
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(emb.grad).all() and torch.isfinite(out.plan).all()


def test_ineligible_calls_take_the_eager_path():
    x = torch.rand(2, 3, 4)
    with backend("compiled"):
        assert loops.sinkhorn_loop("scaling", x, None, True) is loops.eager_scaling  # differentiating
        assert loops.sinkhorn_loop("scaling", x, 1e-6, False) is loops.eager_scaling  # early stopping
        assert loops.sinkhorn_loop("log", torch.rand(1, 3, 4), None, False) is loops.eager_log  # a size of 1
        assert loops.sinkhorn_loop("log", x.half(), None, False) is loops.eager_log
        assert loops.sinkhorn_loop("log", x, None, False) is loops._COMPILED["log"]
    with backend("eager"):
        assert loops.sinkhorn_loop("scaling", x, None, False) is loops.eager_scaling


def test_a_failing_compilation_falls_back_to_eager_with_one_warning(monkeypatch):
    def broken(*args):
        raise RuntimeError("no working C++ compiler")

    monkeypatch.setattr(loops, "_broken", None)
    monkeypatch.setattr(loops._COMPILED["log"], "compiled", broken)
    sim, qmask, cmask = _masked_batch(torch.float32, seed=6)
    fot = FlexibleOT(method="log")
    with backend("eager"):
        eager = fot(sim, qmask, cmask).plan
    with backend("auto"), pytest.warns(RuntimeWarning, match="no working C.. compiler"):
        auto = fot(sim, qmask, cmask).plan
    assert torch.equal(auto, eager)
    assert loops.sinkhorn_loop("log", sim, None, False) is loops.eager_log  # no second try, no second warning
    monkeypatch.setattr(loops, "_broken", None)
    with backend("compiled"), pytest.raises(RuntimeError, match="compiler"):
        fot(sim, qmask, cmask)


def test_a_failing_kernel_build_falls_back(monkeypatch):
    def broken():
        raise RuntimeError("Error building extension 'evidential_prvr_sinkhorn'")

    monkeypatch.setattr(kernel, "_function", None)
    monkeypatch.setattr(kernel, "_state", "not built")
    monkeypatch.setattr(kernel, "_build", broken)
    sim, qmask, cmask = _masked_batch(torch.float32, seed=6)
    with backend("auto"), pytest.warns(RuntimeWarning, match="Sinkhorn kernel is unavailable"):
        auto = flexible_ot(sim, qmask, cmask).plan
    assert str(kernel.kernel_status()["state"]).startswith("unavailable")
    with backend("eager"):
        eager = flexible_ot(sim, qmask, cmask).plan
    torch.testing.assert_close(auto, eager, rtol=0, atol=_tolerance(torch.float32, 1.0))
    with backend("kernel"), pytest.raises(RuntimeError, match="unavailable"):
        flexible_ot(sim, qmask, cmask)


def test_the_kernel_cache_key_names_the_instruction_sets(monkeypatch):
    names = []
    monkeypatch.setattr("torch.utils.cpp_extension.load", lambda name, **kwargs: names.append(name) or "")
    kernel._build()
    monkeypatch.setattr(kernel, "_instruction_sets", lambda: "x86_64\nflags: sse2")
    kernel._build()
    assert names[0].startswith("evidential_prvr_sinkhorn_") and names[0] != names[1]


def test_backend_setting_checks_its_argument():
    with pytest.raises(ValueError, match=r"backend must be one of \('auto', 'kernel', 'compiled', 'eager'\), got 'fast'"):
        evidential_prvr.set_sinkhorn_backend("fast")  # type: ignore[arg-type]
    assert evidential_prvr.sinkhorn_backend() == "auto"


def test_import_needs_no_environment_and_starts_on_auto():
    code = "import evidential_prvr; print(evidential_prvr.sinkhorn_backend())"
    root = str(Path(__file__).resolve().parents[1])
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": root}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout.split() == ["auto"], done.stderr


@pytest.mark.parametrize("fast", ["eager", "compiled", pytest.param("kernel", marks=needs_kernel)])
def test_flexible_ot_reaches_the_loop_three_calls_below_forward(monkeypatch, fast):
    import inspect

    method = "log" if fast == "compiled" else "scaling"
    real = {"eager": loops.eager_scaling, "compiled": loops._COMPILED["log"], "kernel": loops.kernel_scaling}[fast]
    stacks = []

    def spy(*args):
        stacks.append([frame.function for frame in inspect.stack(context=0)])
        return real(*args)

    monkeypatch.setattr(loops, "sinkhorn_loop", lambda *args: spy)
    monkeypatch.setattr("evidential_prvr.functional._sinkhorn.sinkhorn_loop", lambda *args: spy)
    with backend(fast):
        FlexibleOT(method=method)(torch.rand(4, 3, 8), torch.rand(4, 3) > 0.3)
    (stack,) = stacks
    assert stack[:4] == ["spy", "_sinkhorn", "_flexible_ot", "forward"]
