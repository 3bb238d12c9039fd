"""Tests of the fused Sinkhorn scaling kernel against the eager loop (the reference), POT and autograd.

The fused path (:mod:`evidential_prvr.functional._sinkhorn_fused`) must give the eager plan to a few units in
the last place of the compute dtype, POT's plan to 1e-6, leave every gradient to the eager path, and fall
back to the eager path when no kernel can be built.
"""

from __future__ import annotations

import os

import ot
import pytest
import torch

from evidential_prvr import FlexibleOT
from evidential_prvr.functional import _sinkhorn_fused as fused
from evidential_prvr.functional import flexible_ot, sinkhorn
from evidential_prvr.functional._sinkhorn import _iterate_scaling
from tests.pot_reference import assert_plans_match_pot

pytestmark = pytest.mark.skipif(fused._load() is None, reason=f"fused kernel {fused.fused_status()['state']}")


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("preset", ["release", "paper"])
@pytest.mark.parametrize("tol", [None, 1e-6])
def test_fused_equals_eager(dtype, preset, tol):
    sim, qmask, cmask = _masked_batch(dtype)
    overrides = {"method": "scaling"} if preset == "paper" else {}
    fot = FlexibleOT.from_preset(preset, dataset="tvr", tol=tol, **overrides)
    with fused._forced_mode("eager"):
        eager = fot(sim, qmask, cmask)
    with fused._forced_mode("fused"):
        fast = fot(sim, qmask, cmask)
    for name in ("plan", "dustbin", "assignment"):
        want, got = getattr(eager, name), getattr(fast, name)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=0, atol=_tolerance(dtype, float(want.abs().max())))
    assert torch.equal(fast.plan == 0, eager.plan == 0)  # padded entries exactly 0 on both paths
    assert torch.equal(fast.similarity, eager.similarity)


def test_auto_takes_the_fused_path(monkeypatch):
    calls = []
    real = fused.fused_iterate_scaling
    monkeypatch.setattr(fused, "fused_iterate_scaling", lambda *args: calls.append(1) or real(*args))
    with fused._forced_mode("auto"):
        flexible_ot(torch.rand(4, 3, 8))
    assert calls == [1]


def test_solver_fused_equals_eager_and_iterations():
    gen = torch.Generator().manual_seed(1)
    gibbs = torch.rand(6, 4, 9, generator=gen, dtype=torch.float64) + 1e-3
    a = torch.full((6, 4), 0.25, dtype=torch.float64)
    b = torch.full((6, 9), 1 / 9, dtype=torch.float64)
    function = fused._load()
    for iters in (1, 2, 7, 50):
        want = _iterate_scaling(gibbs, a, b, iters, None, 10)
        got = fused._run(function, gibbs, a, b, iters, None, 10)
        torch.testing.assert_close(got, want, rtol=0, atol=_tolerance(torch.float64, float(want.max())))


def test_batch_and_threads_do_not_change_a_problem(monkeypatch):
    sim = torch.rand(300, 6, 32, generator=torch.Generator().manual_seed(2))
    with fused._forced_mode("fused"):
        monkeypatch.setattr(fused, "_THREAD_WORK", 0)
        whole = flexible_ot(sim).plan
        monkeypatch.setattr(fused, "_max_threads", 1)
        one_thread = flexible_ot(sim).plan
        part = flexible_ot(sim[17:40]).plan
    assert torch.equal(whole, one_thread)
    assert torch.equal(whole[17:40], part)


@pytest.mark.parametrize("marginals", ["release", "uniform"])
def test_fused_matches_pot(marginals):
    sim, qmask, cmask = _masked_batch(torch.float64, seed=3)
    fot = FlexibleOT(n_iters=50000, tol=1e-12, marginals=marginals, method="scaling")
    with fused._forced_mode("fused"):
        out = fot(sim, qmask, cmask)
    assert_plans_match_pot(fot, out, sim, qmask, cmask)


def test_fixed_iterations_match_pot_batched():
    gen = torch.Generator().manual_seed(4)
    sim = torch.rand(16, 5, 32, generator=gen)
    out = flexible_ot(sim, return_dustbin_value=True)
    scores = torch.cat([out.similarity, out.dustbin_value.view(16, 1, 1).expand(16, 1, 32)], dim=1)
    a = torch.cat([torch.full((16, 5), 1 / 37), torch.full((16, 1), 32 / 37)], dim=1)
    b = torch.full((16, 32), 1 / 32)
    with fused._forced_mode("fused"):
        ours = sinkhorn(scores, a, b, 0.1, 50, grad="detach")
    pot = ot.solve_batch(-scores, 0.1, a, b, max_iter=50, tol=0, method="log_sinkhorn", grad="detach").plan
    assert float((ours - pot).abs().max()) <= 1e-6


def test_gradients_stay_on_the_eager_path():
    sim, qmask, cmask = _masked_batch(torch.float64, seed=5, batch=3, mq=3, mc=5)
    sim.requires_grad_(True)
    fot = FlexibleOT(grad="autodiff", method="scaling", n_iters=20)

    def plan(x):
        return fot(x, qmask, cmask).plan

    with fused._forced_mode("fused"):
        assert torch.autograd.gradcheck(plan, (sim,))
        (fused_grad,) = torch.autograd.grad(plan(sim).square().sum(), sim)
    with fused._forced_mode("eager"):
        (eager_grad,) = torch.autograd.grad(plan(sim).square().sum(), sim)
    assert torch.equal(fused_grad, eager_grad)


def test_ineligible_calls_take_the_eager_path():
    x = torch.rand(2, 3, 4)
    with fused._forced_mode("auto"):
        assert fused.fused_scaling_function(x.requires_grad_(True), x.detach()[..., 0], x.detach()[:, 0]) is None
        with torch.no_grad():
            assert fused.fused_scaling_function(x, x[..., 0], x[:, 0]) is not None
        half = torch.rand(2, 3, 4, dtype=torch.float16)
        assert fused.fused_scaling_function(half, half[..., 0], half[:, 0]) is None
    with fused._forced_mode("eager"):
        assert fused.fused_scaling_function(x.detach(), x.detach()[..., 0], x.detach()[:, 0]) is None


@pytest.mark.parametrize("failure", ["no compiler", "compile error"])
def test_falls_back_to_eager_without_a_kernel(monkeypatch, failure):
    monkeypatch.setattr(fused, "_function", None)
    monkeypatch.setattr(fused, "_state", "not built")
    if failure == "no compiler":
        monkeypatch.setattr(fused, "_compiler", lambda: None)
    else:
        def broken(*args):
            raise RuntimeError("compiler cc failed: error: something")
        monkeypatch.setattr(fused, "_compile", broken)
    sim, qmask, cmask = _masked_batch(torch.float32, seed=6)
    with fused._forced_mode("auto"):
        auto = flexible_ot(sim, qmask, cmask).plan
    assert fused.fused_status()["state"].startswith("unavailable")
    with fused._forced_mode("eager"):
        eager = flexible_ot(sim, qmask, cmask).plan
    assert torch.equal(auto, eager)
    with fused._forced_mode("fused"), pytest.raises(RuntimeError, match="unavailable"):
        flexible_ot(sim, qmask, cmask)


def test_fresh_build_in_an_empty_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(fused, "_function", None)
    monkeypatch.setattr(fused, "_state", "not built")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert fused._load() is not None
    status = fused.fused_status()
    assert status["state"] == "ready" and status["build_seconds"] < 60
    assert len(list((tmp_path / "evidential_prvr").glob("*.so"))) == 1


def test_mode_switch_checks_its_argument():
    with pytest.raises(ValueError, match="mode"):
        fused._set_mode("compiled")


def test_the_kernel_is_off_unless_the_environment_turns_it_on():
    import subprocess
    import sys

    code = ("from evidential_prvr.functional import _sinkhorn_fused as f; import torch; "
            "from evidential_prvr.functional import flexible_ot; flexible_ot(torch.rand(4, 3, 8)); "
            "print(f.fused_status()['mode'], f.fused_status()['state'])")
    env = {k: v for k, v in os.environ.items() if k != fused.MODE_VARIABLE}
    default = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert default.stdout.split() == ["eager", "not", "built"], default.stderr
    bad = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**env, fused.MODE_VARIABLE: "fast"})
    assert bad.returncode != 0 and "EVIDENTIAL_PRVR_SINKHORN must be one of" in bad.stderr
