"""Load on ``serve``: bounded requests at a set concurrency on loopback, one process against worker processes.

A zero-shot gallery of ``--videos`` videos (generated videos indexed with the bundled encoder and their
captions, so the search is calibrated, their windows tiled to the size: the cost of a search does not depend on
which videos they are) behind the service of :mod:`reference_models.videos.service`, started for each setting in
a server process of its own (this script with ``--server``) on a free loopback port. Each setting sends
``--requests`` ``POST /search`` requests from ``--concurrency`` client threads of this process (one connection
per request, a fixed list of queries), after a warm-up of ``2 x --concurrency``; the server stops by itself after
the last one (``--stop-after``). Every setting runs ``--repeats`` times, the settings taking turns, and the
medians are printed: errors, p50 / p99 latency and throughput; the reference, measured in the same run, is the
``search`` command's own time per query (:meth:`Answerer.answer` of one query, median of 20, here).

Settings (:mod:`reference_models.videos.serving`): one process (Werkzeug's threaded server, one model thread
batching the queries waiting, every CPU thread) and ``--workers`` gunicorn worker processes (each batching its own
requests on its share of the threads), each batched and one query per model call.

Usage::

    OMP_NUM_THREADS=2 python benchmarks/serve_load.py                     # 10k videos, 2,000 requests x 16, 3 repeats
    python benchmarks/serve_load.py --quick                               # 1,000 videos, 200 requests, 1 repeat
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._timing import set_threads  # noqa: E402
from benchmarks.own_videos import _tile  # noqa: E402

QUERIES = [f"a {c} {s} moves {m}" for c in ("red", "blue", "green", "pink", "white", "cyan", "orange", "purple")
           for s in ("square", "circle", "bar") for m in ("left", "right", "up", "down")]


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


def serve(args: argparse.Namespace) -> None:
    """The server process of one setting: the gallery tiled to ``--videos``, served until ``--stop-after``."""
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    from reference_models.videos.answers import Answerer
    from reference_models.videos.service import gallery_thumbnails
    from reference_models.videos.serving import serve_one_process, serve_worker_processes

    threads = torch.get_num_threads()
    if args.workers > 1:  # loaded before the workers are forked: one thread (serving's documentation)
        torch.set_num_threads(1)
    answerer = Answerer(args.server)
    _tile(answerer, args.videos, {"rows": dict(answerer.saved.rows), "ids": list(answerer.video_ids)})
    options = {"host": "127.0.0.1", "port": 0, "max_batch": args.max_batch, "stop_after": args.stop_after,
               "announce": lambda port: print(f"port {port}", flush=True)}
    thumbnails = gallery_thumbnails(answerer.gallery)
    if args.workers > 1:
        serve_worker_processes(answerer, thumbnails, workers=args.workers, torch_threads=max(1, threads // args.workers),
                               **options)
    else:
        serve_one_process(answerer, thumbnails, **options)


def one_setting(gallery: Path, args: argparse.Namespace, workers: int, max_batch: int) -> dict[str, float]:
    """Start the server of one setting, warm it, load it, and wait for it to stop by itself."""
    warm = 2 * args.concurrency
    command = [sys.executable, __file__, "--server", str(gallery), "--videos", str(args.videos), "--workers",
               str(workers), "--max-batch", str(max_batch), "--stop-after", str(warm + args.requests)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if not line.startswith("port "):
            raise RuntimeError(f"the server did not start: {line!r}")
        port = int(line.split()[1])
        load(port, QUERIES, warm, args.concurrency, args.k)
        row = load(port, QUERIES, args.requests, args.concurrency, args.k)
        server.wait(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return row


def _load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--videos", type=int, default=10_000, help="gallery size (default: 10,000)")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the gunicorn settings (default: 2)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1,000 videos, 200 requests, 1 repeat")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--server", type=Path, help=argparse.SUPPRESS)  # the server process of one setting
    parser.add_argument("--max-batch", type=int, default=64, help=argparse.SUPPRESS)
    parser.add_argument("--stop-after", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    set_threads(args.threads)
    if args.server is not None:
        serve(args)
        return
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request

    from reference_models.videos.answers import Answerer
    from reference_models.videos.clip_encoder import BUNDLED_MODEL, BUNDLED_WEIGHTS
    from reference_models.videos.generated import write_generated_collection
    from reference_models.videos.indexing import IndexSettings, Sampling, run_index

    if args.quick:
        args.videos, args.requests, args.repeats = min(args.videos, 1000), min(args.requests, 200), 1
    settings = [("one process, batched", 1, 64), (f"{args.workers} worker processes, batched", args.workers, 64),
                ("one process, one query per call", 1, 1),
                (f"{args.workers} worker processes, one query per call", args.workers, 1)]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        coll = write_generated_collection(work / "world", n_videos=60, seed=0)
        run_index(IndexSettings(videos=coll.videos_dir, out=work / "gallery", model=BUNDLED_MODEL,
                                pretrained=BUNDLED_WEIGHTS, captions=coll.captions_csv, sampling=Sampling(fps=2.0)),
                  show_progress=False)
        searcher = Answerer(work / "gallery")
        _tile(searcher, args.videos, {"rows": dict(searcher.saved.rows), "ids": list(searcher.video_ids)})
        searcher.answer(QUERIES[:1], k=args.k)  # warm-up
        one = []
        for q in QUERIES[:20]:
            t0 = time.perf_counter()
            searcher.answer([q], k=args.k)
            one.append(time.perf_counter() - t0)
        command_ms = 1e3 * statistics.median(one)
        del searcher
        before = _load_average()
        rows: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in settings}
        for _ in range(args.repeats):  # the settings take turns, so that a burst of other load hits them alike
            for name, workers, max_batch in settings:
                rows[name].append(one_setting(work / "gallery", args, workers, max_batch))
        after = _load_average()
    print(f"serve under load (zero-shot, calibrated): {args.videos} videos, {args.requests} requests at concurrency "
          f"{args.concurrency}, k = {args.k}, loopback, {torch.get_num_threads()} CPU threads per server; medians of "
          f"{args.repeats}; the search command's own time per query: {command_ms:.1f} ms (median of 20); load "
          f"average before {before}, after {after}")
    print(f"  {'server':<44} {'errors':>6} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>7} {'req/s x command':>16} "
          f"{'req/s vs one process':>21}")
    results: dict[str, object] = {"command_ms": command_ms, "videos": args.videos, "load_before": before,
                                  "load_after": after}
    medians = {name: {key: statistics.median(r[key] for r in runs) for key in runs[0]} for name, runs in rows.items()}
    reference = medians[settings[0][0]]["throughput_per_s"]
    for name, row in medians.items():
        results[name] = {"median": row, "runs": rows[name]}
        print(f"  {name:<44} {row['errors']:>6.0f} {row['p50_ms']:8.1f} {row['p99_ms']:8.1f} "
              f"{row['throughput_per_s']:7.1f} {row['throughput_per_s'] * command_ms / 1e3:16.2f} "
              f"{row['throughput_per_s'] / reference:21.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
