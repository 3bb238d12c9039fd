"""Benchmark FlexibleOT against POT's batched log-Sinkhorn and a loop of ``ot.sinkhorn``.

The problem is the release's intra-video transport: B videos, Mq queries plus the dustbin row
against Mc clips, 50 iterations, float32, CPU. For each size it prints the time of

* ``FlexibleOT`` (release preset: min-max normalisation, dustbin quantile, transport, assignment),
  on the automatic path (the fused scaling kernel where it is available) and forced to the eager loop,
* the library's solver alone (:func:`evidential_prvr.functional.sinkhorn`, auto path) on the
  prepared problem, fused and eager,
* ``ot.solve_batch(M, reg, a, b, max_iter=50, tol=0, method="log_sinkhorn", grad="detach")``,
* a Python loop of ``ot.sinkhorn(a, b, M, reg, method="sinkhorn_log")`` over the videos (main size only),

the time ratios, and the largest absolute differences between the library's and POT's plans and between
the fused and the eager plans. The timed calls are interleaved (one call of each per round, ``repeats``
rounds), so that a load from other processes falls on all of them alike; every figure is a median, every
ratio one of medians from the same run. The fused kernel's build time (or the load time of the cached
build) is printed first.

Run ``python benchmarks/flexible_ot.py`` (main size, then scaling in B and Mc) or add ``--quick``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks._timing import median_ms, set_threads
from evidential_prvr import FlexibleOT
from evidential_prvr.functional import _sinkhorn_fused, select_sinkhorn_method, sinkhorn


def make_problem(batch: int, queries: int, clips: int, seed: int = 0):
    """Cosine similarities of random embeddings and the matching transport problem (release settings)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(batch, queries, 384, generator=gen), dim=-1)
    c = torch.nn.functional.normalize(torch.randn(batch, clips, 384, generator=gen), dim=-1)
    sim = torch.bmm(q, c.transpose(1, 2))
    fot = FlexibleOT.from_preset("release", dataset="tvr")
    out = fot(sim, return_dustbin_value=True)
    scores = torch.cat([out.similarity, out.dustbin_value.view(batch, 1, 1).expand(batch, 1, clips)], dim=1)
    a = torch.cat([torch.full((batch, queries), 1.0 / (clips + queries)),
                   torch.full((batch, 1), clips / (clips + queries))], dim=1)
    b = torch.full((batch, clips), 1.0 / clips)
    return fot, sim, scores, a, b


def interleaved_medians_ms(fns: dict, repeats: int) -> dict:
    """Median wall time in ms of each function, timed one call of each per round (after one warm-up call each)."""
    for fn in fns.values():
        fn()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(values) for name, values in samples.items()}


def run_size(batch: int, queries: int, clips: int, iters: int, repeats: int, loop: bool) -> dict:
    import ot

    fot, sim, scores, a, b = make_problem(batch, queries, clips)
    fot.n_iters = iters
    cost = -scores
    row = {"B": batch, "Mc": clips, "path": select_sinkhorn_method(scores, fot.epsilon, a, b)}

    def forced(mode, fn):
        def call():
            with _sinkhorn_fused._forced_mode(mode):
                return fn()
        return call

    def solver():
        return sinkhorn(scores, a, b, fot.epsilon, iters, grad="detach")

    def pot_batched():
        return ot.solve_batch(cost, fot.epsilon, a, b, max_iter=iters, tol=0, method="log_sinkhorn", grad="detach")

    # "auto": the opt-in fused kernel wherever it is eligible (EVIDENTIAL_PRVR_SINKHORN=auto does the same)
    fns = {"module_ms": forced("auto", lambda: fot(sim)), "module_eager_ms": forced("eager", lambda: fot(sim)),
           "solver_ms": forced("auto", solver), "solver_eager_ms": forced("eager", solver),
           "pot_batch_ms": pot_batched}
    row.update(interleaved_medians_ms(fns, repeats))
    ours = forced("auto", solver)()
    row["max_diff"] = float((ours - pot_batched().plan).abs().max())
    row["max_diff_eager"] = float((ours - forced("eager", solver)()).abs().max())
    if loop:

        def pot_loop():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return [
                    ot.sinkhorn(a[k], b[k], cost[k], fot.epsilon, method="sinkhorn_log", numItermax=iters, stopThr=0.0)
                    for k in range(batch)
                ]

        row["pot_loop_ms"] = median_ms(pot_loop, max(1, repeats // 5))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=128, help="videos per batch (default 128)")
    parser.add_argument("--queries", type=int, default=5, help="queries per video, without the dustbin (default 5)")
    parser.add_argument("--clips", type=int, default=32, help="clips per video (default 32)")
    parser.add_argument("--iters", type=int, default=50, help="Sinkhorn iterations (default 50)")
    parser.add_argument("--repeats", type=int, default=20, help="timed repetitions per measurement (default 20)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--quick", action="store_true", help="few repetitions, small scaling sweep")
    parser.add_argument("--no-scaling", action="store_true", help="only the main size")
    args = parser.parse_args()
    set_threads(args.threads)
    repeats = 7 if args.quick else args.repeats
    start = time.perf_counter()
    _sinkhorn_fused._load()
    status = _sinkhorn_fused.fused_status()
    print(f"fused kernel: {status['state']} ({time.perf_counter() - start:.2f} s to build or load it)")

    main_row = run_size(args.batch, args.queries, args.clips, args.iters, repeats, loop=True)
    print(f"FlexibleOT, B={args.batch}, {args.queries} queries + dustbin x {args.clips} clips, "
          f"{args.iters} iterations, float32, {torch.get_num_threads()} CPU threads, path={main_row['path']}, "
          f"medians of {repeats} interleaved rounds")
    print(f"  FlexibleOT module (release preset):  {main_row['module_ms']:8.2f} ms")
    print(f"  FlexibleOT module, eager loop:       {main_row['module_eager_ms']:8.2f} ms")
    print(f"  library solver (same problem):       {main_row['solver_ms']:8.2f} ms")
    print(f"  library solver, eager loop:          {main_row['solver_eager_ms']:8.2f} ms")
    print(f"  POT ot.solve_batch (log_sinkhorn):   {main_row['pot_batch_ms']:8.2f} ms")
    print(f"  POT loop of ot.sinkhorn:             {main_row['pot_loop_ms']:8.2f} ms")
    print(f"  module / POT batched:                {main_row['module_ms'] / main_row['pot_batch_ms']:8.3f}x")
    print(f"  module eager / POT batched:          {main_row['module_eager_ms'] / main_row['pot_batch_ms']:8.3f}x")
    print(f"  solver / POT batched:                {main_row['solver_ms'] / main_row['pot_batch_ms']:8.3f}x")
    print(f"  module / module eager:               {main_row['module_ms'] / main_row['module_eager_ms']:8.3f}x")
    print(f"  POT loop / module (speed-up):        {main_row['pot_loop_ms'] / main_row['module_ms']:8.1f}x")
    print(f"  max |plan - POT batched plan|:       {main_row['max_diff']:.2e}")
    print(f"  max |plan - eager plan|:             {main_row['max_diff_eager']:.2e}")
    if args.no_scaling:
        return
    sizes_b = [128, 512] if args.quick else [128, 256, 512, 1024, 2048, 4096]
    sizes_c = [32, 64] if args.quick else [32, 64, 128, 256]
    print("\nscaling (module and solver, fused and eager, vs POT batched, ms):")
    print(f"{'B':>6} {'Mc':>5} {'path':>7} {'module':>8} {'eager':>8} {'solver':>8} {'eager':>8} {'POT':>8} "
          f"{'module/POT':>11} {'eager/POT':>10} {'max diff':>9}")
    for batch, clips in [(b, args.clips) for b in sizes_b] + [(args.batch, c) for c in sizes_c[1:]]:
        row = run_size(batch, args.queries, clips, args.iters, max(3, repeats // 2), loop=False)
        print(f"{row['B']:>6} {row['Mc']:>5} {row['path']:>7} {row['module_ms']:>8.2f} {row['module_eager_ms']:>8.2f} "
              f"{row['solver_ms']:>8.2f} {row['solver_eager_ms']:>8.2f} {row['pot_batch_ms']:>8.2f} "
              f"{row['module_ms'] / row['pot_batch_ms']:>11.3f} {row['module_eager_ms'] / row['pot_batch_ms']:>10.3f} "
              f"{row['max_diff']:>9.1e}")


if __name__ == "__main__":
    main()
