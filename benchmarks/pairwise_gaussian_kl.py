"""Benchmark: pairwise diagonal-Gaussian KL by matrix-product expansion vs the naive broadcast.

The library's :func:`evidential_prvr.functional.pairwise_gaussian_kl` never forms an ``[N, N, D]``
tensor; the naive implementation broadcasts ``[N, 1, D]`` against ``[1, N, D]``. At the full size
(N = 4096, D = 512, float32) the naive ``[N, N, D]`` tensor alone is 32 GiB, more than this
machine's RAM, so the naive method is measured on **row chunks** of ``--naive-rows`` source rows
against all N targets, and its full-size time and peak memory are extrapolated linearly in the
number of rows (both are linear in rows: every chunk does the same work and allocates the same
temporaries). The expanded method is measured at the full size.

Peak memory is the growth of the process's peak resident set size (Linux ``VmHWM``, reset through
``/proc/self/clear_refs`` before each measurement) over the resident size before the call, i.e. the
memory the call itself allocated; where ``clear_refs`` is not writable the script falls back to
the sizes of the tensors each method must allocate and says so.

Usage::

    python benchmarks/pairwise_gaussian_kl.py            # 4096 x 4096 x 512
    python benchmarks/pairwise_gaussian_kl.py --quick    # 512 x 512 x 64, a few seconds
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a source checkout

from benchmarks._timing import set_threads, time_samples_ms  # noqa: E402
from evidential_prvr.functional import pairwise_gaussian_kl  # noqa: E402


def naive_pairwise_kl(s_mu: torch.Tensor, s_lv: torch.Tensor, t_mu: torch.Tensor, t_lv: torch.Tensor) -> torch.Tensor:
    """KL(source_i || target_j) by broadcasting to [N_s, N_t, D]."""
    diff = s_mu[:, None, :] - t_mu[None, :, :]
    ratio = (diff.square() + s_lv.exp()[:, None, :]) * torch.exp(-t_lv)[None, :, :]
    return 0.5 * (ratio - s_lv[:, None, :] + t_lv[None, :, :] - 1.0).sum(dim=-1)


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_memory_mib(fn) -> float | None:
    """Peak extra resident memory (MiB) of ``fn()``, or None where the peak cannot be reset."""
    gc.collect()
    if not _reset_peak():
        return None
    before = _status_kib("VmRSS")
    fn()
    peak = _status_kib("VmHWM")
    return None if before is None or peak is None else (peak - before) / 1024


def best_time(fn, repeats: int) -> float:
    """Best wall time in seconds of ``repeats`` calls (after one warm-up call)."""
    return min(time_samples_ms(fn, repeats, collect_garbage=True)) / 1e3


def make_inputs(n: int, d: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    s_mu, t_mu = torch.randn(n, d, generator=g), torch.randn(n, d, generator=g)
    s_lv, t_lv = -6 + 8 * torch.rand(n, d, generator=g), -6 + 8 * torch.rand(n, d, generator=g)
    return s_mu, s_lv, t_mu, t_lv


def memory_in_fresh_process(method: str, n: int, d: int, rows: int) -> float | None:
    """Run one memory measurement in a fresh interpreter, so no freed-but-retained memory is reused."""
    import subprocess

    cmd = [sys.executable, os.path.abspath(__file__), "--n", str(n), "--d", str(d), "--naive-rows", str(rows)]
    cmd += ["--threads", str(torch.get_num_threads())]
    out = subprocess.run([*cmd, "--memory-only", method], capture_output=True, text=True, check=True).stdout.strip()
    return None if out == "None" else float(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=4096, help="number of source and of target Gaussians (default 4096)")
    parser.add_argument("--d", type=int, default=512, help="embedding dimension (default 512)")
    parser.add_argument("--naive-rows", type=int, default=64, help="source rows per naive chunk (default 64)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repetitions, best is reported (default 3)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: unchanged)")
    parser.add_argument("--quick", action="store_true", help="small sanity run: n=512, d=64, naive-rows=64, repeats=1")
    parser.add_argument("--memory-only", choices=["expanded", "naive"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.n, args.d, args.naive_rows, args.repeats = 512, 64, 64, 1
    set_threads(args.threads)
    n, d, rows = args.n, args.d, min(args.naive_rows, args.n)
    s_mu, s_lv, t_mu, t_lv = make_inputs(n, d)
    chunk = (s_mu[:rows], s_lv[:rows], t_mu, t_lv)

    with torch.no_grad():
        if args.memory_only:  # child process: print one number and exit
            fn = (lambda: pairwise_gaussian_kl(s_mu, s_lv, t_mu, t_lv)) if args.memory_only == "expanded" else (
                lambda: naive_pairwise_kl(*chunk)
            )
            tiny = make_inputs(4, d)  # load kernels and thread pools first so one-off set-up is not counted
            pairwise_gaussian_kl(*tiny), naive_pairwise_kl(*tiny)
            print(peak_memory_mib(fn))
            return
        check = tuple(x[: min(rows, 8)] for x in chunk[:2]) + chunk[2:]  # float64 reference on a few rows only
        ref = naive_pairwise_kl(*(x.double() for x in check))
        fast = pairwise_gaussian_kl(*check).double()
        rel_err = float(((fast - ref).abs() / ref.abs().clamp_min(1.0)).max())
        del ref, fast
        fast_time = best_time(lambda: pairwise_gaussian_kl(s_mu, s_lv, t_mu, t_lv), args.repeats)
        naive_chunk_time = best_time(lambda: naive_pairwise_kl(*chunk), args.repeats)
    fast_mem = memory_in_fresh_process("expanded", n, d, rows)
    naive_chunk_mem = memory_in_fresh_process("naive", n, d, rows)

    scale = n / rows
    naive_time = naive_chunk_time * scale
    f32 = 4 / 2**20
    analytic_fast = (2 * n * 2 * d + 2 * n * n) * f32  # two [N, 2D] feature matrices, [N, N] product and result
    analytic_naive = 3 * n * n * d * f32  # at least three live [N, N, D] temporaries in the broadcast form
    print(f"pairwise Gaussian KL, N_source = N_target = {n}, D = {d}, float32, {torch.get_num_threads()} threads")
    print(f"max relative error vs float64 naive on {min(rows, 8)} rows: {rel_err:.2e}")
    print(f"time, expanded (library), full size: {fast_time * 1e3:10.1f} ms")
    print(
        f"time, naive broadcast, {rows}-row chunk: {naive_chunk_time * 1e3:10.1f} ms"
        f" -> x{scale:g} = {naive_time * 1e3:10.1f} ms (extrapolated to {n} rows)"
    )
    print(f"time ratio naive / expanded: {naive_time / fast_time:.1f}x")
    if fast_mem is not None and naive_chunk_mem is not None:
        naive_mem = naive_chunk_mem * scale
        print(f"peak extra RSS, expanded, full size: {fast_mem:10.1f} MiB")
        print(
            f"peak extra RSS, naive, {rows}-row chunk: {naive_chunk_mem:10.1f} MiB"
            f" -> x{scale:g} = {naive_mem:10.1f} MiB (extrapolated to {n} rows)"
        )
        print(f"peak memory ratio naive / expanded: {naive_mem / max(fast_mem, 0.1):.1f}x (measured, fresh process each)")
    else:
        print("peak RSS not measurable here (/proc/self/clear_refs not writable); see the tensor-size estimate")
    print(
        f"tensor-size estimate: expanded {analytic_fast:.1f} MiB, naive {analytic_naive:.1f} MiB,"
        f" ratio {analytic_naive / analytic_fast:.1f}x"
    )


if __name__ == "__main__":
    main()
