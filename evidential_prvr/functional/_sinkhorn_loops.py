"""The Sinkhorn iteration loops: eager, compiled by :func:`torch.compile`, or the hand-written kernel (private).

The eager loops run ``n_iters`` Python iterations of a few small tensor operations each; on the release's
problem (128 videos, 5 queries + dustbin by 32 clips, 50 iterations) dispatching them costs most of
:func:`~evidential_prvr.functional.flexible_ot`'s time. Two faster paths run the same iterations:

* the compiled loops: the iterations compiled by :func:`torch.compile` (Inductor: C++ on CPU, Triton on
  CUDA), ten per call, with dynamic sizes, so that neither a new caption count, a new batch size nor a new
  epsilon recompiles (a new ``n_iters`` needs no new graph either: the rest of ten runs one iteration per
  call; only a new dtype or device compiles again);
* the hand-written scaling kernel (:mod:`evidential_prvr.functional._sinkhorn_kernel`, built by
  ``torch.utils.cpp_extension``), kept because it is measured faster than the compiled scaling loop on CPU.

The choice is one process-wide setting, :func:`set_sinkhorn_backend` (default ``"auto"``). A fast path
serves only what it serves exactly like the eager loop: a plan that needs no gradient, plain float32/float64
tensors, outside :func:`torch.compile` tracing and functorch transforms; the compiled loops also need
``tol=None`` and at least two problems, rows and columns. Everything else takes the eager loop, which is the
reference: the other paths differ from it only by the order of floating-point sums.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from evidential_prvr.choices import SINKHORN_BACKENDS, SinkhornBackend
from evidential_prvr.functional._sinkhorn_kernel import kernel_function, kernel_scaling

__all__ = ["SinkhornBackend", "fill_invalid", "set_sinkhorn_backend", "sinkhorn_backend", "sinkhorn_loop"]

_backend: SinkhornBackend = "auto"
_broken: str | None = None  # why compilation failed in this process ("auto" then stays eager)

# single-threaded kernels: the loop's tensors are small, and a parallel region per kernel costs more than it saves
_CPU_OPTIONS: dict[str, str | int | bool | Callable[..., Any]] = {"cpp.threads": 1}


def compile_options(device: torch.device) -> dict[str, str | int | bool | Callable[..., Any]] | None:
    """Inductor's options for the loop on ``device``. Where PyTorch runs its own CPU kernels without vector
    instructions (``torch.backends.cpu.get_cpu_capability() == "DEFAULT"``), Inductor's vectorised C++ does
    not compile, so the loop is generated without them too."""
    if device.type != "cpu":
        return None
    if torch.backends.cpu.get_cpu_capability() == "DEFAULT":
        return {**_CPU_OPTIONS, "cpp.simdlen": 1}
    return _CPU_OPTIONS


def set_sinkhorn_backend(backend: SinkhornBackend) -> None:
    """Choose where the Sinkhorn loop of :func:`~evidential_prvr.functional.sinkhorn`,
    :func:`~evidential_prvr.functional.flexible_ot` and the modules built on them runs, for this process.

    Parameters
    ----------
    backend : {"auto", "kernel", "compiled", "eager"}
        ``"auto"`` (default): on CPU the hand-written scaling kernel (built on first use by
        ``torch.utils.cpp_extension``) for the ``"scaling"`` scheme and the loop compiled by
        :func:`torch.compile` for ``"log"``, the two measured fastest there; the eager loop on other devices
        (until the compiled loop is measured there) and wherever a build or a compilation failed (one warning
        says why, e.g. no C++ compiler). ``"kernel"``: the kernel for the scaling scheme on CPU (raises when it
        cannot be built), the eager loop for everything else. ``"compiled"``: the compiled loops on every device
        (a failing compilation raises). ``"eager"``: the eager loop of tensor operations (the reference).
        Calls that differentiate through the loop always take the eager loop.

    Examples
    --------
    >>> import evidential_prvr
    >>> evidential_prvr.set_sinkhorn_backend("eager")
    >>> evidential_prvr.sinkhorn_backend()
    'eager'
    >>> evidential_prvr.set_sinkhorn_backend("auto")

    References
    ----------
    Holmes (ICML 2026), App. B.5 (the iterations); :func:`torch.compile` (the compiler).
    """
    global _backend
    if backend not in SINKHORN_BACKENDS:
        raise ValueError(f"backend must be one of {SINKHORN_BACKENDS}, got {backend!r}")
    _backend = backend


def sinkhorn_backend() -> SinkhornBackend:
    """The backend :func:`set_sinkhorn_backend` chose (``"auto"`` unless changed).

    Examples
    --------
    >>> import evidential_prvr
    >>> evidential_prvr.sinkhorn_backend()
    'auto'

    References
    ----------
    Holmes (ICML 2026), App. B.5 (the iterations).
    """
    return _backend


def fill_invalid(
    scores: torch.Tensor, valid: torch.Tensor, maybe_empty: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Replace masked entries by the problem's valid minimum; also return the valid min and max."""
    inf = torch.tensor(float("inf"), dtype=scores.dtype, device=scores.device)
    low = torch.where(valid, scores, inf).amin(dim=(1, 2), keepdim=True)
    high = torch.where(valid, scores, -inf).amax(dim=(1, 2), keepdim=True)
    if maybe_empty:  # problems without any valid entry get a harmless range of 0
        low = torch.where(torch.isfinite(low), low, torch.zeros_like(low))
        high = torch.where(torch.isfinite(high), high, low)
    return torch.where(valid, scores, low), low, high


def problem(
    scores: torch.Tensor, a: torch.Tensor, b: torch.Tensor, epsilon: float | torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``C = scores / epsilon`` with masked entries filled, its valid maximum, the marginals (problems with
    nothing to transport become a dummy uniform problem) and the entries the plan keeps."""
    batch, n, m = scores.shape
    row_valid, col_valid = a > 0, b > 0
    valid = row_valid.unsqueeze(2) & col_valid.unsqueeze(1)
    solvable = (row_valid.any(dim=1) & col_valid.any(dim=1)).view(batch, 1, 1)
    x = torch.where(valid, scores, torch.zeros((), dtype=scores.dtype, device=scores.device))
    a = torch.where(solvable.view(batch, 1), a, torch.full_like(a, 1.0 / n))
    b = torch.where(solvable.view(batch, 1), b, torch.full_like(b, 1.0 / m))
    log_gibbs, _, high = fill_invalid(x / epsilon, valid | ~solvable, maybe_empty=False)
    return log_gibbs, high.detach(), a, b, valid & solvable


def eager_scaling(scores: torch.Tensor, a: torch.Tensor, b: torch.Tensor, epsilon: float, n_iters: int,
                  tol: float | None, check_every: int) -> torch.Tensor:
    """Scaling iterations :math:`u = a / K\\tilde v`, :math:`v = b / K^\\top u` with batched products.

    The Gibbs matrix holds :math:`e^{C - \\max C} \\in [e^{-R}, 1]`. The column scaling is divided by its
    maximum before each row update; the plan :math:`\\mathrm{diag}(u) K \\mathrm{diag}(v)` does not
    depend on that scale, and with it :math:`K\\tilde v \\in [e^{-R}, m]`, so :math:`u` and :math:`v`
    stay within :math:`e^{\\pm R}` times ratios of the marginals and never overflow or vanish.
    """
    log_gibbs, high, a, b, keep = problem(scores, a, b, epsilon)
    gibbs = torch.exp(log_gibbs - high)
    # u as a column [B, n, 1] and v as a row [B, 1, m]: both products are broadcast-multiply-sums.
    # The gradient through the normaliser max(v) sums to zero (the plan does not depend on it).
    a_col, b_row = a.unsqueeze(2), b.unsqueeze(1)
    v = torch.ones_like(b_row)
    u = a_col
    for it in range(1, n_iters + 1):
        u, v = _scaling_step(gibbs, a_col, b_row, v)
        if tol is not None and it % check_every == 0 and it < n_iters:
            row_mass = u * (gibbs * v).sum(dim=2, keepdim=True)
            if _converged(row_mass.squeeze(2), a, tol):
                break
    return torch.where(keep, u * gibbs * v, torch.zeros_like(gibbs))


def eager_log(scores: torch.Tensor, a: torch.Tensor, b: torch.Tensor, epsilon: float, n_iters: int,
              tol: float | None, check_every: int) -> torch.Tensor:
    """Log-domain iterations: every log-sum-exp runs over the full ``[B, n, m]`` tensor."""
    log_gibbs, _, a, b, keep = problem(scores, a, b, epsilon)
    log_a, log_b = torch.log(a), torch.log(b)
    f = torch.zeros_like(log_a)
    g = torch.zeros_like(log_b)
    for it in range(1, n_iters + 1):
        f, g = _log_step(log_gibbs, log_a, log_b, g)
        if tol is not None and it % check_every == 0 and it < n_iters:
            row_mass = torch.exp(f + torch.logsumexp(log_gibbs + g.unsqueeze(1), dim=2))
            if _converged(row_mass, a, tol):
                break
    plan = torch.exp(log_gibbs + f.unsqueeze(2) + g.unsqueeze(1))
    return torch.where(keep, plan, torch.zeros_like(plan))


def _scaling_step(gibbs: torch.Tensor, a_col: torch.Tensor, b_row: torch.Tensor,
                  v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    u = a_col / (gibbs * (v / v.amax(dim=2, keepdim=True))).sum(dim=2, keepdim=True)
    return u, b_row / (gibbs * u).sum(dim=1, keepdim=True)


def _log_step(log_gibbs: torch.Tensor, log_a: torch.Tensor, log_b: torch.Tensor,
              g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    f = log_a - torch.logsumexp(log_gibbs + g.unsqueeze(1), dim=2)
    return f, log_b - torch.logsumexp(log_gibbs + f.unsqueeze(2), dim=1)


def _converged(row_mass: torch.Tensor, a: torch.Tensor, tol: float) -> bool:
    """Largest L1 violation of the row marginals over the batch is within ``tol`` (one host sync)."""
    return float((row_mass - a).abs().sum(dim=1).max()) <= tol


def _scaling_steps(gibbs: torch.Tensor, a_col: torch.Tensor, b_row: torch.Tensor, v: torch.Tensor,
                   steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``steps`` scaling iterations on the problems' last dimension (``gibbs [n, m, B]``, the function that is
    compiled): every sum is over a leading dimension, one vector lane per problem, without horizontal reductions
    (measured faster than ``[B, n, m]``)."""
    u = a_col
    for _ in range(steps):
        u = a_col / (gibbs * (v / v.amax(dim=1, keepdim=True))).sum(dim=1, keepdim=True)
        v = b_row / (gibbs * u).sum(dim=0, keepdim=True)
    return u, v


def _log_steps(log_gibbs: torch.Tensor, log_a: torch.Tensor, log_b: torch.Tensor, g: torch.Tensor,
               steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``steps`` log-domain iterations (the function that is compiled)."""
    f = log_a
    for _ in range(steps):
        f, g = _log_step(log_gibbs, log_a, log_b, g)
    return f, g


_LOOPS = {"scaling": (eager_scaling, _scaling_steps), "log": (eager_log, _log_steps)}

_CHUNK = 10
"""Iterations per call of the compiled steps (the rest one at a time): two graphs per method, dtype and device."""


Loop = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float, int, "float | None", int], torch.Tensor]
"""A Sinkhorn solver: ``(scores, a, b, epsilon, n_iters, tol, check_every) -> plan`` (0 at masked entries)."""


class _CompiledLoop:
    """The iterations of one method compiled on first use, ``_CHUNK`` per call; on a failing compilation under
    ``"auto"``, one warning and the eager loop from then on.

    The steps are unrolled Python loops rather than one ``while_loop``: PyTorch's compiler caches their code on
    disk (it cannot cache a ``while_loop``), so only the first process on a machine compiles them."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.eager, self.compilable = _LOOPS[method]
        self.compiled: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None

    def __call__(self, scores: torch.Tensor, a: torch.Tensor, b: torch.Tensor, epsilon: float, n_iters: int,
                 tol: float | None, check_every: int) -> torch.Tensor:
        global _broken
        device = scores.device
        if self.compiled is None:
            self.compiled = torch.compile(self.compilable, dynamic=True, options=compile_options(device))
        try:
            with torch.autocast(device.type, enabled=False):
                log_gibbs, high, a, b, keep = problem(scores, a, b, epsilon)
                chunks = [_CHUNK] * (n_iters // _CHUNK) + [1] * (n_iters % _CHUNK)
                if self.method == "scaling":
                    gibbs = torch.exp(log_gibbs - high).permute(1, 2, 0).contiguous()
                    a_col, b_row = a.t().unsqueeze(1).contiguous(), b.t().unsqueeze(0).contiguous()
                    v = torch.ones_like(b_row)
                    for steps in chunks:
                        u, v = self.compiled(gibbs, a_col, b_row, v, steps)
                    plan = (u * gibbs * v).permute(2, 0, 1)
                else:
                    log_a, log_b = torch.log(a), torch.log(b)
                    g = torch.zeros_like(log_b)
                    for steps in chunks:
                        f, g = self.compiled(log_gibbs, log_a, log_b, g, steps)
                    plan = torch.exp(log_gibbs + f.unsqueeze(2) + g.unsqueeze(1))
                return torch.where(keep, plan, torch.zeros_like(plan))
        except Exception as exc:  # no usable compiler (or a compiler bug): the eager loop serves from now on
            if _backend == "compiled":
                raise
            message = str(exc).strip().splitlines()
            _broken = f"{type(exc).__name__}: {message[0] if message else ''}"
            warnings.warn(f"the compiled Sinkhorn loop is unavailable ({_broken}); using the eager loop "
                          "(evidential_prvr.set_sinkhorn_backend('eager') silences this)", RuntimeWarning,
                          stacklevel=4)
            return self.eager(scores, a, b, epsilon, n_iters, tol, check_every)


_COMPILED = {method: _CompiledLoop(method) for method in _LOOPS}


def sinkhorn_loop(method: str, scores: torch.Tensor, tol: float | None, differentiating: bool) -> Loop:
    """The solver of ``method`` for the ``scores`` of this call, per :func:`set_sinkhorn_backend` and what each
    path serves exactly like the eager loop (see the module documentation)."""
    eager = _LOOPS[method][0]
    if _backend == "eager" or differentiating or torch.compiler.is_compiling() or type(scores) is not torch.Tensor:
        return eager
    if scores.dtype not in (torch.float32, torch.float64) or torch._C._functorch.is_functorch_wrapped_tensor(scores):
        return eager
    on_cpu = scores.device.type == "cpu"
    if method == "scaling" and on_cpu and _backend in ("auto", "kernel"):
        if _backend == "kernel" or kernel_function() is not None:
            return kernel_scaling
    if _backend == "kernel" or (_backend == "auto" and (_broken is not None or not on_cpu)):
        return eager
    if tol is not None or min(scores.shape) < 2:
        return eager  # a size of 1 would be specialised by the compiler: a second graph for a tiny problem
    return _COMPILED[method]
