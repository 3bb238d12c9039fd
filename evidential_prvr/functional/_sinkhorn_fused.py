"""Fused Sinkhorn scaling iterations: one compiled call instead of ~400 small tensor operations (private).

The eager scaling loop of :func:`evidential_prvr.functional.sinkhorn` (``_iterate_scaling``) costs
eight tensor operations per iteration; on the release's problem (128 videos, 5 queries + dustbin by
32 clips, 50 iterations) they are too small to amortise their dispatch, and the loop takes about
three quarters of :func:`~evidential_prvr.functional.flexible_ot`'s time. This module runs the same
iterations in one call of a small C kernel, 16 problems at a time, one per SIMD lane, so that every
step is one full-width vector operation and a group's Gibbs matrices stay in cache for all its iterations.

The kernel (:data:`_KERNEL_SOURCE`, about 150 lines of C needing only libm and pthreads) is built
with the system's C compiler (``$CC``, ``cc``, ``gcc`` or ``clang``) on first use, in well under a
second, and cached per user, compiler, processor and source (``$XDG_CACHE_HOME/evidential_prvr`` or
``~/.cache/evidential_prvr``; a temporary folder where that is not writable). A freshly loaded kernel
is checked against the eager loop on a small problem before it is used. Without a compiler, or when
the build, the load or that check fails, every call takes the eager path (the reference), silently:
:func:`fused_status` says why.

It serves only what it can serve exactly like the eager loop: CPU tensors of float32 or float64
that need no gradient (``grad="detach"``, or no grad mode), outside :func:`torch.compile` tracing
and functorch transforms. Everything else (CUDA, autodiff through the iterations, ``"log"``) takes
the eager path unchanged, so gradients are the eager path's. Problems are solved independently, so
a problem's plan does not depend on the batch it is in or on the number of threads; it differs from
the eager plan only by the order of the floating-point sums (a few units in the last place).

The kernel is opt-in: the eager loop stays the default until the native path has been reviewed and
measured on more machines (it compiles code at run time with ``-march=native``, which a library should
not do behind its users' backs). ``EVIDENTIAL_PRVR_SINKHORN=auto`` in the environment turns it on
wherever it is available and eligible (``fused``: always, raising when it cannot be built; ``eager``, the
default: never). Tests and benchmarks switch with :func:`_set_mode` / :func:`_forced_mode`.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

import torch

__all__: list[str] = []

MODES = ("auto", "eager", "fused")
#: Environment variable that turns the kernel on (``auto``: wherever it is available and eligible).
MODE_VARIABLE = "EVIDENTIAL_PRVR_SINKHORN"


def _initial_mode() -> str:
    mode = os.environ.get(MODE_VARIABLE, "eager").strip().lower() or "eager"
    if mode not in MODES:
        raise ValueError(f"{MODE_VARIABLE} must be one of {MODES}, got {mode!r}")
    return mode


_mode = _initial_mode()

_KERNEL_SOURCE = r"""
/* Fused Sinkhorn scaling iterations for evidential_prvr (private; built on first use by _sinkhorn_fused.py).
 *
 * One call runs `iters` scaling iterations of every problem of a batch and writes the plan. The problems
 * are taken LANES at a time, one per SIMD lane: a group's Gibbs matrices are laid out [n * m][LANES] in a
 * small buffer (built from the log-Gibbs values when `shift` is given), so every step of the iteration is
 * one full-width vector operation with no horizontal reduction, and the group stays in cache for all its
 * iterations. The arithmetic is the eager reference's (evidential_prvr/functional/_sinkhorn.py,
 * _iterate_scaling), with sums taken in index order:
 *
 *     vt = v / max(v);  u_i = a_i / sum_j K_ij vt_j;  v_j = b_j / sum_i K_ij u_i;  P_ij = (u_i K_ij) v_j
 *
 * starting from v = 1 (or from the u, v passed in when `resume` is set). A lane never reads another, so a
 * problem's result does not depend on the batch it is solved in or on the number of threads; it differs from
 * the eager loop only by the order of the floating-point sums.
 */
#include <math.h>
#include <pthread.h>
#include <stddef.h>

#define LANES 16

#define DEFINE_SCALING(NAME, T, EXP) \
    static void NAME##_groups(const T *K, const T *shift, const T *a, const T *b, T *u, T *v, T *plan, T *buf, \
                              long first, long last, long batch, long n, long m, long iters, int resume, \
                              int write_plan) { \
        T *G = buf; \
        T *U = G + n * m * LANES; \
        T *A = U + n * LANES; \
        T *V = A + n * LANES; \
        T *Bm = V + m * LANES; \
        T *VT = Bm + m * LANES; \
        T *COL = VT + m * LANES; \
        T vmax[LANES], s[LANES]; \
        for (long g = first; g < last; ++g) { \
            long k0 = g * LANES; \
            long count = batch - k0 < LANES ? batch - k0 : LANES; \
            for (long l = 0; l < LANES; ++l) { /* spare lanes repeat the group's first problem */ \
                long k = k0 + (l < count ? l : 0); \
                const T *Kk = K + k * n * m; \
                if (shift) { \
                    for (long e = 0; e < n * m; ++e) G[e * LANES + l] = EXP(Kk[e] - shift[k]); \
                } else { \
                    for (long e = 0; e < n * m; ++e) G[e * LANES + l] = Kk[e]; \
                } \
                for (long i = 0; i < n; ++i) { \
                    A[i * LANES + l] = a[k * n + i]; \
                    U[i * LANES + l] = resume ? u[k * n + i] : a[k * n + i]; \
                } \
                for (long j = 0; j < m; ++j) { \
                    Bm[j * LANES + l] = b[k * m + j]; \
                    V[j * LANES + l] = resume ? v[k * m + j] : (T)1; \
                } \
            } \
            for (long it = 0; it < iters; ++it) { \
                for (long l = 0; l < LANES; ++l) vmax[l] = V[l]; \
                for (long j = 1; j < m; ++j) { \
                    _Pragma("omp simd") \
                    for (long l = 0; l < LANES; ++l) { \
                        T x = V[j * LANES + l]; \
                        vmax[l] = (x > vmax[l] || x != x) ? x : vmax[l]; \
                    } \
                } \
                for (long j = 0; j < m; ++j) { \
                    _Pragma("omp simd") \
                    for (long l = 0; l < LANES; ++l) VT[j * LANES + l] = V[j * LANES + l] / vmax[l]; \
                } \
                for (long i = 0; i < n; ++i) { \
                    const T *Gi = G + i * m * LANES; \
                    for (long l = 0; l < LANES; ++l) s[l] = (T)0; \
                    for (long j = 0; j < m; ++j) { \
                        _Pragma("omp simd") \
                        for (long l = 0; l < LANES; ++l) s[l] += Gi[j * LANES + l] * VT[j * LANES + l]; \
                    } \
                    _Pragma("omp simd") \
                    for (long l = 0; l < LANES; ++l) U[i * LANES + l] = A[i * LANES + l] / s[l]; \
                } \
                for (long e = 0; e < m * LANES; ++e) COL[e] = (T)0; \
                for (long i = 0; i < n; ++i) { \
                    const T *Gi = G + i * m * LANES; \
                    const T *Ui = U + i * LANES; \
                    for (long j = 0; j < m; ++j) { \
                        _Pragma("omp simd") \
                        for (long l = 0; l < LANES; ++l) COL[j * LANES + l] += Gi[j * LANES + l] * Ui[l]; \
                    } \
                } \
                _Pragma("omp simd") \
                for (long e = 0; e < m * LANES; ++e) V[e] = Bm[e] / COL[e]; \
            } \
            for (long l = 0; l < count; ++l) { \
                long k = k0 + l; \
                for (long i = 0; i < n; ++i) u[k * n + i] = U[i * LANES + l]; \
                for (long j = 0; j < m; ++j) v[k * m + j] = V[j * LANES + l]; \
                if (write_plan) { \
                    T *Pk = plan + k * n * m; \
                    for (long i = 0; i < n; ++i) \
                        for (long j = 0; j < m; ++j) \
                            Pk[i * m + j] = (U[i * LANES + l] * G[(i * m + j) * LANES + l]) * V[j * LANES + l]; \
                } \
            } \
        } \
    }

DEFINE_SCALING(scaling_f32, float, expf)
DEFINE_SCALING(scaling_f64, double, exp)

typedef struct {
    int is_double;
    const void *K, *shift, *a, *b;
    void *u, *v, *plan, *buf;
    long first, last, batch, n, m, iters;
    int resume, write_plan;
} job_t;

static void run_job(const job_t *j) {
    if (j->is_double)
        scaling_f64_groups((const double *)j->K, (const double *)j->shift, (const double *)j->a,
                           (const double *)j->b, (double *)j->u, (double *)j->v, (double *)j->plan,
                           (double *)j->buf, j->first, j->last, j->batch, j->n, j->m, j->iters, j->resume,
                           j->write_plan);
    else
        scaling_f32_groups((const float *)j->K, (const float *)j->shift, (const float *)j->a,
                           (const float *)j->b, (float *)j->u, (float *)j->v, (float *)j->plan,
                           (float *)j->buf, j->first, j->last, j->batch, j->n, j->m, j->iters, j->resume,
                           j->write_plan);
}

static void *thread_main(void *arg) {
    run_job((const job_t *)arg);
    return NULL;
}

#define MAX_THREADS 64

/* The number of buffer elements one thread needs. */
long evidential_prvr_sinkhorn_buffer(long n, long m) { return (n * m + 2 * n + 4 * m) * LANES; }

/* Returns 0 on success. `buf` holds evidential_prvr_sinkhorn_buffer(n, m) elements per thread. Threads split
 * the groups of LANES problems in contiguous ranges. */
int evidential_prvr_sinkhorn_scaling(int is_double, const void *K, const void *shift, const void *a, const void *b,
                                     void *u, void *v, void *plan, void *buf, long batch, long n, long m, long iters,
                                     int resume, int write_plan, int threads) {
    long groups = (batch + LANES - 1) / LANES;
    if (threads < 1) threads = 1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > groups) threads = (int)groups;
    size_t elem = is_double ? sizeof(double) : sizeof(float);
    size_t per_thread = (size_t)evidential_prvr_sinkhorn_buffer(n, m) * elem;
    job_t jobs[MAX_THREADS];
    pthread_t ids[MAX_THREADS];
    int started[MAX_THREADS];
    for (int t = 0; t < threads; ++t) {
        job_t j = {is_double, K, shift, a, b, u, v, plan, (char *)buf + (size_t)t * per_thread,
                   groups * t / threads, groups * (t + 1) / threads, batch, n, m, iters, resume, write_plan};
        jobs[t] = j;
        started[t] = 0;
    }
    for (int t = 1; t < threads; ++t) started[t] = pthread_create(&ids[t], NULL, thread_main, &jobs[t]) == 0;
    run_job(&jobs[0]);
    for (int t = 1; t < threads; ++t) {
        if (started[t])
            pthread_join(ids[t], NULL);
        else
            run_job(&jobs[t]); /* no thread could be started: run its share here */
    }
    return 0;
}
"""

_FLAGS = ("-O3", "-fPIC", "-shared", "-pthread", "-fopenmp-simd", "-fno-math-errno")
_LIBS = ("-lm",)
_NATIVE = ("-march=native",)

_LANES = 16  # LANES of the C source
_THREAD_WORK = 4_000_000
_max_threads: int | None = None

#: The loaded kernel: the ctypes function ``evidential_prvr_sinkhorn_scaling`` (it returns the C ``int`` status).
Kernel = Callable[..., int]

_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_function: Kernel | None = None
_state = "not built"
_build_seconds: float | None = None


def _set_mode(mode: str) -> str:
    """Force ``"eager"`` or ``"fused"``, or go back to ``"auto"``; returns the previous mode (tests, benchmarks)."""
    global _mode
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    previous, _mode = _mode, mode
    return previous


@contextlib.contextmanager
def _forced_mode(mode: str) -> Iterator[None]:
    """Context manager form of :func:`_set_mode`."""
    previous = _set_mode(mode)
    try:
        yield
    finally:
        _set_mode(previous)


def fused_status() -> dict[str, object]:
    """Mode, kernel state (``"not built"``, ``"ready"`` or why it is unavailable) and build time in seconds."""
    return {"mode": _mode, "state": _state, "build_seconds": _build_seconds}


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name:
            path = shutil.which(name)
            if path:
                return path
    return None


def _cpu_signature() -> str:
    """What ``-march=native`` depends on: the processor's model and feature flags (Linux), else the platform."""
    parts = [platform.machine(), platform.processor()]
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith(("flags", "model name", "Features", "CPU part")):
                    parts.append(line.strip())
                if len(parts) > 6:
                    break
    except OSError:
        pass
    return "\n".join(parts)


def _cache_dirs() -> list[str]:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    return [os.path.join(base, "evidential_prvr"), os.path.join(tempfile.gettempdir(), f"evidential_prvr_{user}")]


def _compile(cc: str, out_dir: str, stem: str) -> str:
    """Build the kernel into ``out_dir`` (native flags first, then portable ones); return the library path."""
    os.makedirs(out_dir, exist_ok=True)
    target = os.path.join(out_dir, stem + ".so")
    if os.path.isfile(target):
        return target
    fd, source = tempfile.mkstemp(suffix=".c", dir=out_dir)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(_KERNEL_SOURCE)
    partial = source[:-2] + ".so.partial"
    try:
        error = ""
        for extra in (_NATIVE, ()):
            result = subprocess.run([cc, *_FLAGS, *extra, source, *_LIBS, "-o", partial], capture_output=True, text=True,
                                    timeout=120)
            if result.returncode == 0:
                os.replace(partial, target)  # atomic: concurrent builders (torchrun ranks) never see half a file
                return target
            last_line = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["failed"]
            error = last_line[0]
        raise RuntimeError(f"compiler {cc} failed: {error}")
    finally:
        for path in (source, partial):
            with contextlib.suppress(OSError):
                os.remove(path)


def _self_check(function: Kernel) -> bool:
    """The loaded kernel solves a small masked-free problem like the eager loop (guards against a bad build)."""
    from evidential_prvr.functional._sinkhorn import _iterate_scaling

    gen = torch.Generator().manual_seed(0)
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12)):
        gibbs = torch.rand(3, 4, 7, generator=gen, dtype=dtype) + 0.05
        a = torch.full((3, 4), 1.0 / 4, dtype=dtype)
        b = torch.full((3, 7), 1.0 / 7, dtype=dtype)
        want = _iterate_scaling(gibbs, a, b, 20, None, 10)
        got = _run(function, gibbs, a, b, 20, None, 10)
        from_log = _run(function, torch.log(gibbs) + 1.5, a, b, 20, None, 10, torch.full((3,), 1.5, dtype=dtype))
        for plan in (got, from_log):
            if not torch.allclose(plan, want, rtol=tol, atol=tol * float(want.abs().max())):
                return False
    return True


def _load() -> Kernel | None:
    """The kernel's C function, building it on first use; ``None`` when unavailable (the reason in ``_state``)."""
    global _library, _function, _state, _build_seconds
    if _function is not None or _state not in ("not built",):
        return _function
    with _lock:
        if _function is not None or _state != "not built":
            return _function
        start = time.perf_counter()
        try:
            cc = _compiler()
            if cc is None:
                raise RuntimeError("no C compiler found ($CC, cc, gcc, clang)")
            version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
            key = "\n".join([_KERNEL_SOURCE, " ".join(_FLAGS + _NATIVE + _LIBS), cc, version, _cpu_signature(),
                             sys.platform])
            stem = "sinkhorn_fused_" + hashlib.sha256(key.encode()).hexdigest()[:20]
            errors = []
            path = None
            for folder in _cache_dirs():
                try:
                    path = _compile(cc, folder, stem)
                    break
                except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
                    errors.append(str(exc))
            if path is None:
                raise RuntimeError("; ".join(errors))
            library = ctypes.CDLL(path)
            function = library.evidential_prvr_sinkhorn_scaling
            function.restype = ctypes.c_int
            function.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 8 + [ctypes.c_long] * 4 + [ctypes.c_int] * 3
            if not _self_check(function):
                raise RuntimeError("the built kernel disagrees with the eager loop")
        except Exception as exc:  # any failure: the eager path serves every call
            _state = f"unavailable: {exc}"
            _build_seconds = time.perf_counter() - start
            return None
        _library, _function, _state = library, function, "ready"
        _build_seconds = time.perf_counter() - start
        return _function


def _eligible(*tensors: torch.Tensor) -> bool:
    """Plain CPU float32/float64 tensors without gradient, outside compile tracing and functorch transforms."""
    if torch.compiler.is_compiling() or torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    wrapped = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", None)
    for t in tensors:
        if type(t) is not torch.Tensor or t.device.type != "cpu" or t.dtype not in (torch.float32, torch.float64):
            return False
        if wrapped is not None and wrapped(t):
            return False
    return len({t.dtype for t in tensors}) == 1


def fused_scaling_function(gibbs: torch.Tensor, *others: torch.Tensor) -> Kernel | None:
    """The kernel when this call should take the fused path (per the mode and eligibility), else ``None``."""
    if _mode == "eager" or not _eligible(gibbs, *others):
        return None
    function = _load()
    if function is None and _mode == "fused":
        raise RuntimeError(f"the fused Sinkhorn kernel is {_state}")
    return function


def _buffer_elements(n: int, m: int) -> int:
    """Elements of the kernel's per-thread buffer (``evidential_prvr_sinkhorn_buffer`` of the C source)."""
    return (n * m + 2 * n + 4 * m) * _LANES


def _run(function: Kernel, gibbs: torch.Tensor, a: torch.Tensor, b: torch.Tensor, n_iters: int, tol: float | None,
         check_every: int, shift: torch.Tensor | None = None) -> torch.Tensor:
    """The plan ``diag(u) K diag(v)`` after the scaling iterations, as ``_iterate_scaling`` computes it.

    With ``shift`` (``[B]``, or anything of ``B`` elements), ``gibbs`` holds log-Gibbs values ``C`` and the kernel
    builds ``K = exp(C - shift)`` itself (with ``tol``, ``K`` is built here once: the convergence check reads it).
    """
    gibbs = gibbs.contiguous()
    a = a.contiguous()
    b = b.contiguous()
    batch, n, m = gibbs.shape
    threads = max(1, min(torch.get_num_threads(), batch // (4 * _LANES) or 1, _max_threads or batch))
    if batch * n * m * max(n_iters, 1) < _THREAD_WORK:
        threads = 1  # too little work to pay for starting a thread
    u = torch.empty_like(a)
    v = torch.empty_like(b)
    plan = torch.empty_like(gibbs)
    work = torch.empty(_buffer_elements(n, m) * threads, dtype=gibbs.dtype)
    is_double = int(gibbs.dtype == torch.float64)
    shift_ptr = None
    if shift is not None:
        shift = shift.detach().reshape(batch).contiguous()
        shift_ptr = shift.data_ptr()
    rest = [t.data_ptr() for t in (a, b, u, v, plan, work)]

    def call(source: torch.Tensor, shift_at: int | None, iters: int, resume: bool, write_plan: bool) -> None:
        status = function(is_double, source.data_ptr(), shift_at, *rest, batch, n, m, iters, int(resume),
                          int(write_plan), threads)
        if status != 0:
            raise RuntimeError(f"fused Sinkhorn kernel failed ({status})")

    if tol is None:
        call(gibbs, shift_ptr, n_iters, False, True)
        return plan
    if shift is not None:  # the chunks below iterate on K, which the convergence check reads too
        gibbs = torch.exp(gibbs - shift.view(batch, 1, 1))
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
    return plan


def fused_iterate_scaling(function: Kernel, gibbs: torch.Tensor, a: torch.Tensor, b: torch.Tensor, n_iters: int,
                          tol: float | None, check_every: int, shift: torch.Tensor | None = None) -> torch.Tensor:
    """Run :func:`_run` with the kernel returned by :func:`fused_scaling_function` (``shift``: see :func:`_run`)."""
    return _run(function, gibbs, a, b, n_iters, tol, check_every, shift)
