"""The hand-written Sinkhorn scaling kernel, built by ``torch.utils.cpp_extension`` on first use (private).

The kernel (``_sinkhorn_kernel.cpp``, about 150 lines of C-style C++ needing only libm and pthreads) runs the
scaling iterations of :func:`~evidential_prvr.functional._sinkhorn_loops.eager_scaling` 16 problems at a
time, one per SIMD lane, so that every step is one full-width vector operation and a group's Gibbs matrices
stay in cache for all its iterations. Measured against the loop compiled by :func:`torch.compile` in the same
run (``benchmarks/flexible_ot.py``), it is the faster CPU path of the scaling scheme, which is why it is kept.

PyTorch's extension builder does the work: compiler discovery, the build folder (``TORCH_EXTENSIONS_DIR``,
by default ``~/.cache/torch_extensions``), locking between concurrent builders (``torchrun`` ranks) and
rebuilding when the source or the flags change. The build uses ``-march=native``, so the extension's name
carries a hash of the processor's instruction sets: a cache shared by machines of different processors holds
one build per processor, and none is loaded on a processor that lacks its instructions. A freshly loaded
kernel is checked against the eager loop on a small problem before it is used; if the build, the load or that
check fails, :func:`kernel_function` warns once and returns ``None``; the reason is in :func:`kernel_status`.

It serves only what it can serve exactly like the eager loop: CPU tensors of float32 or float64 that need no
gradient. Problems are solved independently, so a problem's plan does not depend on the batch it is in or on
the number of threads; it differs from the eager plan only by the order of the floating-point sums.
"""

from __future__ import annotations

import ctypes
import hashlib
import platform
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

__all__ = ["kernel_function", "kernel_scaling", "kernel_status"]

_SOURCE = Path(__file__).with_name("_sinkhorn_kernel.cpp")
_FLAGS = ["-O3", "-march=native", "-fopenmp-simd", "-fno-math-errno"]

_LANES = 16  # LANES of the C source
_THREAD_WORK = 4_000_000
_max_threads: int | None = None

#: The loaded kernel: the ctypes function ``evidential_prvr_sinkhorn_scaling`` (it returns the C ``int`` status).
Kernel = Callable[..., int]

_lock = threading.Lock()
_function: Kernel | None = None
_state = "not built"
_build_seconds: float | None = None


def kernel_status() -> dict[str, object]:
    """Kernel state (``"not built"``, ``"ready"`` or why it is unavailable) and build or load time in seconds."""
    return {"state": _state, "build_seconds": _build_seconds}


def _instruction_sets() -> str:
    """What ``-march=native`` depends on: the processor's feature flags (Linux), else the platform and the
    instruction set PyTorch detected."""
    parts = [platform.machine(), torch.backends.cpu.get_cpu_capability()]
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            parts += [line.strip() for line in handle if line.startswith(("flags", "Features"))][:1]
    except OSError:
        parts.append(platform.processor())
    return "\n".join(parts)


def _build() -> str:
    """Build (or find the cached build of) the kernel with torch's extension builder; the library's path."""
    from torch.utils import cpp_extension

    isa = hashlib.sha256(_instruction_sets().encode()).hexdigest()[:12]
    path = cpp_extension.load(name=f"evidential_prvr_sinkhorn_{isa}", sources=[str(_SOURCE)], extra_cflags=_FLAGS,
                              extra_ldflags=["-pthread"], is_python_module=False, verbose=False)
    return str(path)


def _self_check(function: Kernel) -> bool:
    """The loaded kernel solves a small problem like the eager loop (guards against a bad build)."""
    from evidential_prvr.functional._sinkhorn_loops import eager_scaling

    gen = torch.Generator().manual_seed(0)
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12)):
        scores = torch.rand(3, 4, 7, generator=gen, dtype=dtype)
        a = torch.full((3, 4), 1.0 / 4, dtype=dtype)
        b = torch.full((3, 7), 1.0 / 7, dtype=dtype)
        want = eager_scaling(scores, a, b, 0.1, 20, None, 10)
        for stop in (None, 1e-30):  # one call, and the chunks of the convergence checks
            got = kernel_scaling(scores, a, b, 0.1, 20, stop, 10, function)
            if not torch.allclose(got, want, rtol=tol, atol=tol * float(want.abs().max())):
                return False
    return True


def kernel_function() -> Kernel | None:
    """The kernel's C function, building it on first use; ``None`` when unavailable (the reason in
    :func:`kernel_status`)."""
    global _function, _state, _build_seconds
    if _function is not None or _state != "not built":
        return _function
    with _lock:
        if _function is not None or _state != "not built":
            return _function
        start = time.perf_counter()
        try:
            function = ctypes.CDLL(_build()).evidential_prvr_sinkhorn_scaling
            function.restype = ctypes.c_int
            function.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 8 + [ctypes.c_long] * 4 + [ctypes.c_int] * 3
            if not _self_check(function):
                raise RuntimeError("the built kernel disagrees with the eager loop")
        except Exception as exc:  # any failure: the caller takes another path
            _state = f"unavailable: {type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[-1]}"
            _build_seconds = time.perf_counter() - start
            warnings.warn(f"the Sinkhorn kernel is {_state}; the Sinkhorn loop takes another path "
                          "(evidential_prvr.set_sinkhorn_backend chooses one)", RuntimeWarning, stacklevel=2)
            return None
        _function, _state = function, "ready"
        _build_seconds = time.perf_counter() - start
        return _function


def _buffer_elements(n: int, m: int) -> int:
    """Elements of the kernel's per-thread buffer (``evidential_prvr_sinkhorn_buffer`` of the C source)."""
    return (n * m + 2 * n + 4 * m) * _LANES


def kernel_scaling(scores: torch.Tensor, a: torch.Tensor, b: torch.Tensor, epsilon: float, n_iters: int,
                   tol: float | None, check_every: int, function: Kernel | None = None) -> torch.Tensor:
    """:func:`~evidential_prvr.functional._sinkhorn_loops.eager_scaling` by the kernel: the plan
    ``diag(u) K diag(v)`` after the scaling iterations, 0 at masked entries. The kernel builds the Gibbs matrix
    ``K = exp(C - max C)`` itself (with ``tol``, ``K`` is built here once: the convergence check reads it)."""
    from evidential_prvr.functional._sinkhorn_loops import problem  # that module imports this one

    function = function or kernel_function()
    if function is None:
        raise RuntimeError(f"the Sinkhorn kernel is {_state}")
    gibbs, shift, a, b, keep = problem(scores, a, b, epsilon)
    gibbs, a, b = gibbs.contiguous(), a.contiguous(), b.contiguous()
    batch, n, m = gibbs.shape
    threads = max(1, min(torch.get_num_threads(), batch // (4 * _LANES) or 1, _max_threads or batch))
    if batch * n * m * max(n_iters, 1) < _THREAD_WORK:
        threads = 1  # too little work to pay for starting a thread
    u = torch.empty_like(a)
    v = torch.empty_like(b)
    plan = torch.empty_like(gibbs)
    work = torch.empty(_buffer_elements(n, m) * threads, dtype=gibbs.dtype)
    is_double = int(gibbs.dtype == torch.float64)
    shift = shift.reshape(batch).contiguous()
    rest = [t.data_ptr() for t in (a, b, u, v, plan, work)]

    def call(source: torch.Tensor, shift_at: int | None, iters: int, resume: bool, write_plan: bool) -> None:
        status = function(is_double, source.data_ptr(), shift_at, *rest, batch, n, m, iters, int(resume),
                          int(write_plan), threads)
        if status != 0:
            raise RuntimeError(f"Sinkhorn kernel failed ({status})")

    if tol is None:
        call(gibbs, shift.data_ptr(), n_iters, False, True)
    else:
        gibbs = torch.exp(gibbs - shift.view(batch, 1, 1))  # the convergence check below reads K
        done = 0
        while done < n_iters:  # convergence checked every check_every iterations, as in the eager loop
            step = min(check_every, n_iters - done)
            call(gibbs, None, step, done > 0, False)
            done += step
            if done < n_iters and done % check_every == 0:
                row_mass = u * (gibbs * v.unsqueeze(1)).sum(dim=2)
                if float((row_mass - a).abs().sum(dim=1).max()) <= tol:
                    break
        call(gibbs, None, 0, True, True)
    return torch.where(keep, plan, torch.zeros_like(plan))
