"""Benchmark FlexibleOT against POT's batched log-Sinkhorn and a loop of ``ot.sinkhorn``.

The problem is the release's intra-video transport: B videos, Mq queries plus the dustbin row
against Mc clips, 50 iterations, float32, CPU. For each size it prints the time of

* ``FlexibleOT`` (release preset: min-max normalisation, dustbin quantile, transport, assignment), eager,
* the same module under ``torch.compile(module, fullgraph=True)`` (built with ``validate_args=False``: the value
  checks read tensors on the host, which a full graph cannot),
* the library's solver alone (:func:`evidential_prvr.functional.sinkhorn`) on the prepared problem,
* ``ot.solve_batch(M, reg, a, b, max_iter=50, tol=0, method="log_sinkhorn", grad="detach")``,
* the module forced to the log-domain scheme, eager (main size only),
* a Python loop of ``ot.sinkhorn(a, b, M, reg, method="sinkhorn_log")`` over the videos (main size only),

the time ratios against POT's batched solver, and the largest absolute differences between the library's
and POT's plans and between the compiled and the eager module's plans. The timed calls are interleaved
(one call of each per round, ``repeats`` rounds), so that a load from other processes falls on all of them
alike; every figure is a median, every ratio one of medians from the same run. The time of the compiled
module's first call (compilation, or loading from the compiler's cache) is printed with each size.
``--device cuda`` runs it on a GPU (there ``torch.compile`` generates Triton code).

Run ``python benchmarks/flexible_ot.py`` (main size, then scaling in B and Mc) or add ``--quick``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks._timing import median_ms, set_threads
from evidential_prvr import FlexibleOT
from evidential_prvr.functional import select_sinkhorn_method, sinkhorn


def make_problem(batch: int, queries: int, clips: int, seed: int = 0, device: str = "cpu"):
    """Cosine similarities of random embeddings and the matching transport problem (release settings)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(batch, queries, 384, generator=gen), dim=-1)
    c = torch.nn.functional.normalize(torch.randn(batch, clips, 384, generator=gen), dim=-1)
    sim = torch.bmm(q, c.transpose(1, 2)).to(device)
    fot = FlexibleOT.from_preset("release", dataset="tvr")
    out = fot(sim, return_dustbin_value=True)
    scores = torch.cat([out.similarity, out.dustbin_value.view(batch, 1, 1).expand(batch, 1, clips)], dim=1)
    a = torch.cat([torch.full((batch, queries), 1.0 / (clips + queries)),
                   torch.full((batch, 1), clips / (clips + queries))], dim=1).to(device)
    b = torch.full((batch, clips), 1.0 / clips).to(device)
    return fot, sim, scores, a, b


def synchronized(fn, device: str):
    def call():
        out = fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return out
    return call


def interleaved_medians_ms(fns: dict, repeats: int) -> dict:
    """Median wall time in ms of each function, timed one call of each per round (after one warm-up call each),
    in an order rotated from round to round."""
    for fn in fns.values():
        fn()
    samples = {name: [] for name in fns}
    names = list(fns)
    for round_ in range(repeats):  # each round starts one further down the list: no call always follows the same one
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            fn = fns[name]
            start = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(values) for name, values in samples.items()}


def run_size(batch: int, queries: int, clips: int, iters: int, repeats: int, loop: bool, device: str = "cpu") -> dict:
    import ot

    fot, sim, scores, a, b = make_problem(batch, queries, clips, device=device)
    fot.n_iters = iters
    cost = -scores
    row = {"B": batch, "Mc": clips, "path": select_sinkhorn_method(scores, fot.epsilon, a, b)}
    unchecked = FlexibleOT.from_preset("release", dataset="tvr", n_iters=iters, validate_args=False)
    compiled = torch.compile(unchecked, fullgraph=True)
    start = time.perf_counter()
    synchronized(lambda: compiled(sim), device)()
    row["compile_s"] = time.perf_counter() - start

    def solver():
        return sinkhorn(scores, a, b, fot.epsilon, iters, grad="detach")

    def pot_batched():
        return ot.solve_batch(cost, fot.epsilon, a, b, max_iter=iters, tol=0, method="log_sinkhorn", grad="detach")

    fns = {"module_eager_ms": lambda: fot(sim), "module_compiled_ms": lambda: compiled(sim), "solver_ms": solver,
           "pot_batch_ms": pot_batched}
    if loop:  # the log scheme too (the scheme of unnormalised scores beyond the scaling bound)
        log_fot = FlexibleOT.from_preset("release", dataset="tvr", method="log", n_iters=iters)
        fns["log_eager_ms"] = lambda: log_fot(sim)
    row.update(interleaved_medians_ms({key: synchronized(fn, device) for key, fn in fns.items()}, repeats))
    row["max_diff"] = float((solver() - pot_batched().plan).abs().max())
    row["max_diff_compiled"] = float((compiled(sim).plan - fot(sim).plan).abs().max())
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
    parser.add_argument("--device", default="cpu", help="torch device (default cpu; e.g. cuda)")
    args = parser.parse_args()
    set_threads(args.threads)
    repeats = 7 if args.quick else args.repeats
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average (1 min) at start: {load:.2f} on {os.cpu_count()} CPUs")

    main_row = run_size(args.batch, args.queries, args.clips, args.iters, repeats, loop=True, device=args.device)
    where = f"{torch.get_num_threads()} CPU threads" if args.device == "cpu" else torch.cuda.get_device_name(0)
    print(f"torch.compile: {main_row['compile_s']:.2f} s for the compiled module's first call "
          "(compiling, or loading from the compiler's cache)")
    print(f"FlexibleOT, B={args.batch}, {args.queries} queries + dustbin x {args.clips} clips, "
          f"{args.iters} iterations, float32, {where}, path={main_row['path']}, "
          f"medians of {repeats} interleaved rounds")
    pot = main_row["pot_batch_ms"]
    labels = {"module_eager_ms": "FlexibleOT module, eager:", "module_compiled_ms": "FlexibleOT module, torch.compile:",
              "solver_ms": "library solver (same problem):"}
    for key, label in labels.items():
        print(f"  {label:<38}{main_row[key]:8.2f} ms  {main_row[key] / pot:6.3f}x POT batched")
    print(f"  {'POT ot.solve_batch (log_sinkhorn):':<38}{pot:8.2f} ms")
    print(f"  {'POT loop of ot.sinkhorn:':<38}{main_row['pot_loop_ms']:8.2f} ms  "
          f"{main_row['pot_loop_ms'] / pot:6.3f}x POT batched")
    print(f"  {'module, log scheme, eager:':<38}{main_row['log_eager_ms']:8.2f} ms  "
          f"{main_row['log_eager_ms'] / pot:6.3f}x POT batched")
    print(f"  {'module torch.compile / module eager:':<38}"
          f"{main_row['module_compiled_ms'] / main_row['module_eager_ms']:8.3f}x")
    print(f"  {'POT loop / module eager (speed-up):':<38}{main_row['pot_loop_ms'] / main_row['module_eager_ms']:8.1f}x")
    print(f"  {'max |plan - POT batched plan|:':<38}{main_row['max_diff']:.2e}")
    print(f"  {'max |compiled plan - eager plan|:':<38}{main_row['max_diff_compiled']:.2e}")
    if args.no_scaling:
        return
    sizes_b = [128, 512] if args.quick else [128, 256, 512, 1024, 2048, 4096]
    sizes_c = [32, 64] if args.quick else [32, 64, 128, 256]
    print("\nscaling (module eager and compiled vs POT batched, ms; compile: first call in s):")
    print(f"{'B':>6} {'Mc':>5} {'path':>7} {'eager':>8} {'compiled':>9} {'POT':>8} {'eager/POT':>10} "
          f"{'compiled/POT':>13} {'compile':>8} {'max diff':>9}")
    for batch, clips in [(b, args.clips) for b in sizes_b] + [(args.batch, c) for c in sizes_c[1:]]:
        row = run_size(batch, args.queries, clips, args.iters, max(3, repeats // 2), loop=False, device=args.device)
        pot = row["pot_batch_ms"]
        print(f"{row['B']:>6} {row['Mc']:>5} {row['path']:>7} {row['module_eager_ms']:>8.2f} "
              f"{row['module_compiled_ms']:>9.2f} {pot:>8.2f} {row['module_eager_ms'] / pot:>10.3f} "
              f"{row['module_compiled_ms'] / pot:>13.3f} {row['compile_s']:>8.2f} {row['max_diff']:>9.1e}")


if __name__ == "__main__":
    main()
