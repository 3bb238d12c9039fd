"""A gallery of a million clips: exact streamed max-similarity search against FAISS candidates (flat, IVF, IVF-PQ, HNSW).

Simulated embeddings: ``--videos`` videos × ``--clips`` clips (default 31,250 × 32 = 1,000,000) of
dimension ``--dim``, L2-normalised; a video's clips scatter around the video's centre, which scatters
around one of ``--topics`` topic directions (so that many videos look alike, as in a real collection).
Each query is a noisy copy of one planted clip of a known video, the ground truth.

Measured in one run, on the same data:

* **exact** -- :func:`evidential_prvr.search.gallery_search` (streamed top-k, no ``[Q, V]`` matrix), its
  time, its achieved GFLOP/s (``2 · Q · clips · d`` over the time) and the ratio of that to the machine's
  sgemm roofline, measured here with ``torch.mm`` on the exact path's block shape in both operand orders
  and on a larger one (the fastest of the three medians), just before and just after the exact search (the
  mean of the two), ``--repeats`` times (medians reported);
* **FAISS** -- :class:`evidential_prvr.search.ClipIndex` for each ``--index`` spec: build time, search
  time (candidates + exact re-ranking of ``--candidates`` videos per query) and its speed-up over exact;
* for each: the peak resident memory added during the search (sampled from ``/proc/self/statm``; the
  build's as well for FAISS), R@1/5/10/100 against the planted ground truth and their difference from
  exact in points, and the share of the exact top-10 videos found in the top-10 (``10@10``).

A target's rank counts the retrieved videos that score above it. When ``K'`` is close to a cut-off, a
candidate stage that misses some of the videos that exact search ranks above the target ranks the target
higher than exact search does, so R@10 at ``K' = 16`` can exceed the exact R@10. It is what a user of
that list gets; ``10@10`` shows how far the list itself is from the exact one.

Usage::

    python benchmarks/million_clip_search.py --threads 2            # 1,000,000 clips
    python benchmarks/million_clip_search.py --small --threads 1    # 20,000 clips, seconds
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._timing import set_threads  # noqa: E402
from evidential_prvr.search import ClipIndex, SearchResult, gallery_search  # noqa: E402

KS = (1, 5, 10, 100)
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _resident_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * _PAGE


class PeakMemory:
    """Peak resident memory added while the ``with`` block runs (a sampling thread, every 2 ms)."""

    def __enter__(self) -> PeakMemory:
        gc.collect()
        self.start = self.peak = _resident_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, _resident_bytes())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _resident_bytes())

    @property
    def added_mib(self) -> float:
        return (self.peak - self.start) / 2**20


def simulate(videos: int, clips: int, dim: int, topics: int, queries: int, noise: float, seed: int):
    """``(clips [V, M, d], queries [Q, d], ground truth [Q])``, generated block by block (bounded temporaries)."""
    gen = torch.Generator().manual_seed(seed)
    topic = torch.nn.functional.normalize(torch.randn(topics, dim, generator=gen), dim=-1)
    gallery = torch.empty(videos, clips, dim)
    for v0 in range(0, videos, 4096):
        n = min(4096, videos - v0)
        centre = topic[torch.randint(0, topics, (n,), generator=gen)]
        centre = torch.nn.functional.normalize(centre + 0.9 * torch.randn(n, dim, generator=gen) / dim**0.5, dim=-1)
        block = centre.unsqueeze(1) + 0.8 * torch.randn(n, clips, dim, generator=gen) / dim**0.5
        gallery[v0 : v0 + n] = torch.nn.functional.normalize(block, dim=-1)
    truth = torch.randint(0, videos, (queries,), generator=gen)
    planted = gallery[truth, torch.randint(0, clips, (queries,), generator=gen)]
    query = torch.nn.functional.normalize(planted + noise * torch.randn(queries, dim, generator=gen) / dim**0.5,
                                          dim=-1)
    return gallery, query, truth


def sgemm_roofline(queries: int, dim: int, columns: int, repeats: int = 5, tokens_first: bool = False) -> float:
    """GFLOP/s of ``torch.mm([queries, dim], [dim, columns])`` in float32, or with ``tokens_first`` of
    ``[columns, dim] @ [dim, queries]`` (the exact path's layout), median of ``repeats``: on a shared machine
    the median follows the load the search itself sees, the best would not."""
    a, b = torch.randn(queries, dim), torch.randn(dim, columns)
    if tokens_first:
        a, b = b.t().contiguous(), a.t().contiguous()
    out = torch.mm(a, b)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        samples.append(time.perf_counter() - start)
    return 2 * queries * dim * columns / statistics.median(samples) / 1e9


@dataclass
class Row:
    name: str
    seconds: float
    memory_mib: float
    recall: dict[str, float]
    build_seconds: float = 0.0
    build_mib: float = 0.0
    same_top10: float = 100.0


def _row(name: str, result: SearchResult, seconds: float, memory: float, exact: SearchResult | None) -> Row:
    ks = tuple(c for c in KS if c < result.k or result.k >= result.num_videos)
    recall = {**{f"R@{c}": float("nan") for c in KS}, **result.recall_at_k(ks)}
    same = 100.0
    if exact is not None:
        top = min(10, result.k)  # share of the exact top-10 videos retrieved in the top-10 (top-k if fewer kept)
        found = (result.indices[:, :top, None] == exact.indices[:, None, :top]).any(dim=2)
        same = 100.0 * float(found.double().mean())
    return Row(name, seconds, memory, recall, same_top10=same)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, help="default 31,250 (--small: 625)")
    parser.add_argument("--clips", type=int, default=32, help="clips per video")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--topics", type=int, help="default 500 (--small: 50)")
    parser.add_argument("--queries", type=int, help="default 2,000 (--small: 200)")
    parser.add_argument("--noise", type=float, default=4.0, help="query noise (norm relative to the clip's)")
    parser.add_argument("--small", action="store_true", help="625 videos x 32 clips, 200 queries (seconds); "
                        "--videos, --topics and --queries still apply")
    parser.add_argument("--index", action="append", help="ClipIndex specs (default: flat, ivf, hnsw)")
    parser.add_argument("--candidates", default="128,16",
                        help="comma-separated candidate videos re-ranked per query, one search per value (a value "
                             "below 101 keeps that many videos: R@100 is then not reported)")
    parser.add_argument("--query-chunk", type=int, default=2048)
    parser.add_argument("--video-chunk", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5, help="exact searches timed (the median is reported; "
                        "the speed-ups are over it)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # progress shows when the output goes to a file
    for name, full, small in (("videos", 31_250, 625), ("queries", 2000, 200), ("topics", 500, 50)):
        if getattr(args, name) is None:
            setattr(args, name, small if args.small else full)
    specs = args.index or ["flat", "ivf:nprobe=16", "ivfpq:nprobe=16", "hnsw:m=16,ef_search=256,ef_construction=40"]
    if args.small:
        specs = [spec.replace("ef_construction=40", "ef_construction=16") for spec in specs]
    set_threads(args.threads)
    import faiss

    faiss.omp_set_num_threads(args.threads)

    clips_total = args.videos * args.clips
    print(f"gallery: {args.videos:,} videos x {args.clips} clips = {clips_total:,} clips, d={args.dim}, "
          f"{args.queries:,} queries, {args.threads} threads, torch {torch.__version__}, faiss {faiss.__version__}")
    gallery, queries, truth = simulate(args.videos, args.clips, args.dim, args.topics, args.queries, args.noise,
                                       args.seed)
    k = max(KS) + 1

    block_columns = args.video_chunk * args.clips
    query_rows = min(args.query_chunk, args.queries)
    large = (512, 8192) if args.small else (2048, 32_768)
    # measured before and after the exact search (the faster shape each time), averaged: a shared
    # machine's load then weighs on the roofline as on the search
    blocks = max(5, clips_total // block_columns // 8)

    def roofline_now() -> float:
        return max(sgemm_roofline(query_rows, args.dim, block_columns, blocks),
                   sgemm_roofline(query_rows, args.dim, block_columns, blocks, tokens_first=True),
                   sgemm_roofline(large[0], args.dim, large[1]))

    # each repeat: roofline, exact search, roofline; the ratio is taken per repeat and the median reported
    ratios, times, rooflines = [], [], []
    for _ in range(args.repeats):
        before = roofline_now()
        with PeakMemory() as memory:
            start = time.perf_counter()
            exact = gallery_search(queries, gallery, k=k, target=truth, query_chunk=args.query_chunk,
                                   video_chunk=args.video_chunk, validate_args=False)
            times.append(time.perf_counter() - start)
        rooflines.append(0.5 * (before + roofline_now()))
        ratios.append(2 * args.queries * clips_total * args.dim / times[-1] / 1e9 / rooflines[-1])
        print(f"  exact search {times[-1]:.2f} s, roofline {rooflines[-1]:.1f} GFLOP/s, ratio {ratios[-1]:.2f}")
    exact_seconds, roofline, ratio = (statistics.median(v) for v in (times, rooflines, ratios))
    achieved = 2 * args.queries * clips_total * args.dim / exact_seconds / 1e9
    rows = [_row("exact (streamed)", exact, exact_seconds, memory.added_mib, None)]
    print(f"sgemm roofline (torch.mm float32, fastest of [{query_rows}x{args.dim}]@[{args.dim}x{block_columns}], "
          f"[{block_columns}x{args.dim}]@[{args.dim}x{query_rows}] and [{large[0]}x{args.dim}]@[{args.dim}x{large[1]}]), "
          f"median of {args.repeats}: {roofline:.1f} GFLOP/s")
    print(f"exact path (median of {args.repeats}): {exact_seconds:.2f} s, {achieved:.1f} GFLOP/s, ratio to the roofline "
          f"{ratio:.2f} (median of the per-repeat ratios; goal >= 0.70)")

    for spec in specs:
        with PeakMemory() as build_memory:
            start = time.perf_counter()
            index = ClipIndex(gallery, spec, seed=args.seed)
            build_seconds = time.perf_counter() - start
        for candidates in (int(c) for c in args.candidates.split(",")):
            with PeakMemory() as memory:
                start = time.perf_counter()
                result = index.search(queries, min(k, candidates), num_candidates=candidates, target=truth)
                seconds = time.perf_counter() - start
            row = _row(f"faiss {spec} K'={candidates}", result, seconds, memory.added_mib, exact)
            row.build_seconds, row.build_mib = build_seconds, build_memory.added_mib
            rows.append(row)
        del index
        gc.collect()

    header = (f"{'method':52s} {'search s':>9s} {'speed-up':>9s} {'build s':>8s} {'peak MiB':>9s} {'build MiB':>9s} "
              + " ".join(f"{'R@' + str(c):>6s}" for c in KS) + " " + " ".join(f"{'dR@' + str(c):>7s}" for c in KS)
              + f" {'10@10 %':>8s}")
    print(header)
    base = rows[0]
    for row in rows:
        print(f"{row.name:52s} {row.seconds:9.2f} {base.seconds / row.seconds:8.1f}x {row.build_seconds:8.1f} "
              f"{row.memory_mib:9.0f} {row.build_mib:9.0f} "
              + " ".join(f"{row.recall[f'R@{c}']:6.1f}" for c in KS) + " "
              + " ".join(f"{row.recall[f'R@{c}'] - base.recall[f'R@{c}']:+7.1f}" for c in KS)
              + f" {row.same_top10:8.1f}")
    print(f"ratio exact / roofline: {ratio:.2f}; speed-up over exact: "
          + ", ".join(f"{r.name.removeprefix('faiss ')} {base.seconds / r.seconds:.1f}x" for r in rows[1:]))


if __name__ == "__main__":
    main()
