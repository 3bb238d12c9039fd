"""Time forward + backward of L_inter and L_intra with argument validation on, off, and compiled.

For the release presets at training-batch sizes it times one forward + backward pass of
:class:`evidential_prvr.EvidentialRetrievalLoss` (second stage: identification and calibration on)
and :class:`evidential_prvr.IntraVideoEvidentialLoss` (padded caption slots), each

* with ``validate_args=True`` (the default: value checks synchronise with the host),
* with ``validate_args=False`` (no host synchronisation from argument checks),
* compiled with :func:`torch.compile` (``validate_args=False``, whole graph) for each ``--backend``,

and prints the medians and the ratios to the validated eager call measured in the same run.

Example::

    python benchmarks/validation_overhead.py --threads 2 --backends inductor
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks._timing import median_ms, set_threads  # noqa: E402
from evidential_prvr import EvidentialRetrievalLoss, IntraVideoEvidentialLoss  # noqa: E402


def _inter_inputs(queries: int, videos: int, device: torch.device, generator: torch.Generator):
    owner = torch.arange(queries) % videos
    frame = (torch.randn(queries, videos, generator=generator) * 0.3).tanh()
    clip = (torch.randn(queries, videos, generator=generator) * 0.3).tanh()
    frame[torch.arange(queries), owner] += 0.3
    clip[torch.arange(queries), owner] += 0.3
    return frame.to(device).requires_grad_(), clip.to(device).requires_grad_(), owner.to(device)


def _intra_inputs(videos: int, max_queries: int, clips: int, device: torch.device, generator: torch.Generator):
    sim = torch.rand(videos, max_queries, clips, generator=generator)
    counts = torch.randint(1, max_queries + 1, (videos,), generator=generator)
    query_mask = torch.arange(max_queries)[None, :] < counts[:, None]
    return sim.to(device).requires_grad_(), query_mask.to(device)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=["tvr", "activitynet", "charades"], default="tvr")
    parser.add_argument("--inter-size", default="640x128", help="queries x videos of L_inter (default 640x128)")
    parser.add_argument("--intra-size", default="128x5x32", help="videos x captions x clips of L_intra")
    parser.add_argument("--backends", nargs="*", default=["inductor", "aot_eager"],
                        help="torch.compile backends to time (default: inductor aot_eager; 'none', or no name, skips compiling)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    set_threads(args.threads)
    device = torch.device(args.device)
    generator = torch.Generator().manual_seed(0)
    queries, videos = (int(x) for x in args.inter_size.split("x"))
    n_videos, max_queries, n_clips = (int(x) for x in args.intra_size.split("x"))
    frame, clip, owner = _inter_inputs(queries, videos, device, generator)
    sim, query_mask = _intra_inputs(n_videos, max_queries, n_clips, device, generator)

    cases = {
        f"L_inter {queries}x{videos}": (
            lambda validate: EvidentialRetrievalLoss.from_preset("release", args.dataset, validate_args=validate),
            (frame, clip, owner), (frame, clip)),
        f"L_intra {n_videos}x{max_queries}x{n_clips}": (
            lambda validate: IntraVideoEvidentialLoss.from_preset("release", args.dataset, validate_args=validate),
            (sim, query_mask), (sim,)),
    }
    print(f"preset=release/{args.dataset} device={device} threads={args.threads} repeats={args.repeats}")
    header = f"{'loss':>22} | {'mode':>22} | {'fwd+bwd ms':>10} | {'vs validated':>12} | {'compile s':>9}"
    print(header)
    print("-" * len(header))
    for name, (build, inputs, leaves) in cases.items():
        def step(fn):
            def run() -> None:
                for leaf in leaves:
                    leaf.grad = None
                fn(*inputs).backward()
            return run

        validated = median_ms(step(build(True)), args.repeats, warmup=args.warmup, device=device)
        rows = [("validate_args=True", validated, None), ]
        rows.append(("validate_args=False", median_ms(step(build(False)), args.repeats, warmup=args.warmup,
                                                      device=device), None))
        for backend in [name for name in args.backends if name != "none"]:
            torch._dynamo.reset()
            compiled = torch.compile(build(False), fullgraph=True, backend=backend)
            start = time.perf_counter()
            step(compiled)()  # compilation happens on the first call
            compile_seconds = time.perf_counter() - start
            rows.append((f"compiled ({backend})", median_ms(step(compiled), args.repeats, warmup=args.warmup,
                                                           device=device), compile_seconds))
        for mode, ms, seconds in rows:
            extra = f"{seconds:>9.1f}" if seconds is not None else f"{'':>9}"
            print(f"{name:>22} | {mode:>22} | {ms:>10.2f} | {validated / ms:>11.2f}x | {extra}")


if __name__ == "__main__":
    main()
