"""Load on ``serve``: bounded requests at a set concurrency on loopback, against the search command's own time.

A zero-shot gallery of ``--videos`` videos (generated videos indexed with the bundled encoder and their
captions, so the search is calibrated, their windows tiled to the size: the cost of a search does not depend on
which videos they are) behind the service of :mod:`reference_models.videos.service`, in this process on a free
loopback port. Each setting sends ``--requests`` ``POST /search`` requests from ``--concurrency`` client threads
(one connection per request, a fixed list of queries; the run stops by itself) and prints errors, p50 / p99
latency and throughput; the reference, measured in the same run, is the ``search`` command's own time per query
(:meth:`Answerer.answer` of one query, median of 20). Settings: queries batched across concurrent requests with
a 5 ms window, only the queries already waiting (window 0), and no batching (one query per model call).

Usage::

    OMP_NUM_THREADS=2 python benchmarks/serve_load.py                     # 10k videos, 2,000 requests x 16
    python benchmarks/serve_load.py --quick                               # 1,000 videos, 200 requests
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._timing import set_threads  # noqa: E402
from benchmarks.own_videos import _tile  # noqa: E402


def _post(port: int, query: str, k: int) -> tuple[int, float]:
    body = json.dumps({"query": query, "k": k}).encode()
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", "/search", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status, time.perf_counter() - t0
    finally:
        conn.close()


def load(port: int, queries: list[str], requests: int, concurrency: int, k: int) -> dict[str, float]:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(lambda i: _post(port, queries[i % len(queries)], k), range(requests)))
    wall = time.perf_counter() - t0
    latencies = sorted(lat for _, lat in results)
    errors = sum(status != 200 for status, _ in results)
    return {"requests": requests, "errors": errors, "p50_ms": 1e3 * latencies[len(latencies) // 2],
            "p99_ms": 1e3 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            "throughput_per_s": requests / wall, "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--videos", type=int, default=10_000, help="gallery size (default: 10,000)")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1,000 videos, 200 requests")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    set_threads(args.threads)
    import logging

    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request

    from reference_models.videos.answers import Answerer
    from reference_models.videos.clip_encoder import BUNDLED_MODEL, BUNDLED_WEIGHTS
    from reference_models.videos.generated import write_generated_collection
    from reference_models.videos.indexing import IndexSettings, Sampling, run_index
    from reference_models.videos.service import QueryBatcher, create_app, gallery_thumbnails

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.quick:
            args.videos, args.requests = min(args.videos, 1000), min(args.requests, 200)
        coll = write_generated_collection(work / "world", n_videos=60, seed=0)
        run_index(IndexSettings(videos=coll.videos_dir, out=work / "gallery", model=BUNDLED_MODEL,
                                pretrained=BUNDLED_WEIGHTS, captions=coll.captions_csv, sampling=Sampling(fps=2.0)),
                  show_progress=False)
        searcher = Answerer(work / "gallery")
        _tile(searcher, args.videos, {"rows": dict(searcher.saved.rows), "ids": list(searcher.video_ids)})
        queries = [f"a {c} {s} moves {m}" for c in ("red", "blue", "green", "pink", "white", "cyan", "orange", "purple")
                   for s in ("square", "circle", "bar") for m in ("left", "right", "up", "down")]
        searcher.answer(queries[:1], k=args.k)  # warm-up
        one = []
        for q in queries[:20]:
            t0 = time.perf_counter()
            searcher.answer([q], k=args.k)
            one.append(time.perf_counter() - t0)
        command_ms = 1e3 * statistics.median(one)
        print(f"serve under load (zero-shot, calibrated): {args.videos} videos, {args.requests} requests at concurrency {args.concurrency}, "
              f"k = {args.k}, loopback; the search command's own time per query: {command_ms:.1f} ms (median of 20)")
        print(f"  {'batching':<28} {'errors':>6} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>7} {'p50 / command':>14} "
              f"{'req/s x command':>16} {'queries/batch':>14}")
        results: dict[str, object] = {"command_ms": command_ms, "videos": args.videos}
        for name, window, max_batch in (("window 5 ms", 0.005, 64), ("window 0 (waiting ones)", 0.0, 64),
                                        ("none (one per call)", 0.0, 1)):
            batcher = QueryBatcher(searcher, window_s=window, max_batch=max_batch)
            server = make_server("127.0.0.1", 0, create_app(batcher, gallery_thumbnails(searcher.gallery)), threaded=True)
            thread = threading.Thread(target=server.serve_forever, daemon=True)
            thread.start()
            try:
                row = load(server.server_port, queries, args.requests, args.concurrency, args.k)
            finally:
                server.shutdown()
                thread.join(timeout=30)
                batcher.close()
            row["queries_per_batch"] = batcher.answered / max(1, batcher.batches)
            results[name] = row
            print(f"  {name:<28} {row['errors']:>6} {row['p50_ms']:8.1f} {row['p99_ms']:8.1f} "
                  f"{row['throughput_per_s']:7.1f} {row['p50_ms'] / command_ms:14.2f} "
                  f"{row['throughput_per_s'] * command_ms / 1e3:16.2f} {row['queries_per_batch']:14.1f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
