"""Own videos: ``index`` in 1 and N processes under ``torchrun``, frames per second against the encoder alone.

A generated collection (``--videos`` videos of ``--seconds`` s at 25 frames per second, ``--size`` pixels) is
indexed from nothing by ``torchrun --nproc_per_node P -m reference_models.videos index`` for each ``P`` of
``--processes`` (``P = 1`` is the one-process ``index``), each process with ``--threads / P`` CPU threads (or its
own GPU with ``--device cuda``) and ``--workers`` decoding workers; the index rate is the frames encoded over the
time from the start of encoding to the last process's end (``video_seconds`` of ``index_report.json``). The
limit, measured in the same run: the encoder's forward alone on the same frames already decoded in memory, in
``P`` processes side by side with the same threads (or devices) each, summed. Every setting runs ``--repeats``
times, the settings taking turns; medians.

The encoder is created without weights (``--pretrained none``: the cost of a forward does not depend on the
weights' values), so nothing is downloaded.

Usage::

    python benchmarks/sharded_index.py                                     # ViT-B-32, 1 and 2 processes, CPU
    python benchmarks/sharded_index.py --quick                             # a tiny model (seconds)
    python benchmarks/sharded_index.py --device cuda --processes 1,8      # 1 GPU and 8 GPUs
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.own_videos import _TINY  # noqa: E402


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (torchrun's rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(threads: int) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": str(threads),
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def index_once(args: argparse.Namespace, videos: Path, out: Path, model: str, processes: int) -> dict[str, float]:
    """``torchrun --nproc_per_node P ... index`` from nothing; the index rate from its report."""
    threads = max(1, args.threads // processes)
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(processes),
               "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "-m", "reference_models.videos",
               "index", "--videos", str(videos), "--out", str(out), "--model", model, "--pretrained", "none",
               "--fps", str(args.fps), "--batch-size", str(args.batch_size), "--workers", str(args.workers),
               "--device", args.device, "--threads", str(threads), "--no-progress"]
    run = subprocess.run(command, capture_output=True, text=True, env=_env(threads), timeout=3600)
    if run.returncode != 0:
        raise RuntimeError(f"index with {processes} processes failed:\n{run.stderr[-3000:]}")
    report = json.loads((out / "index_report.json").read_text())
    per_process = [p["frames_per_second"] for p in report["processes"]]
    return {"frames": report["frames"], "index_fps": report["frames"] / report["video_seconds"],
            "slowest_process_s": max(p["seconds"] for p in report["processes"]),
            "per_process_fps": statistics.median(per_process)}


def encoder_alone(args: argparse.Namespace, frames: Path, model: str, processes: int) -> float:
    """Frames per second of the encoder's forward alone in ``processes`` processes side by side, summed."""
    threads = max(1, args.threads // processes)
    servers = []
    for rank in range(processes):
        device = f"cuda:{rank}" if args.device == "cuda" else args.device
        servers.append(subprocess.Popen(
            [sys.executable, __file__, "--encoder-alone", str(frames), "--model", model, "--device", device,
             "--batch-size", str(args.batch_size), "--threads", str(threads)],
            stdout=subprocess.PIPE, text=True, env=_env(threads)))
    rates = []
    for server in servers:
        out, _ = server.communicate(timeout=3600)
        if server.returncode != 0:
            raise RuntimeError(f"the encoder-alone process failed: {out}")
        rates.append(float(out.split()[-1]))
    return sum(rates)


def _encode_alone(args: argparse.Namespace) -> None:
    """One encoder-alone process: the frames of ``--encoder-alone`` encoded twice (a warm-up, then timed)."""
    from benchmarks._timing import synchronize
    from reference_models.videos.clip_encoder import ClipEncoder

    torch.set_num_threads(args.threads)
    encoder = ClipEncoder(args.model, "none", device=args.device)
    frames = torch.from_numpy(np.load(args.encoder_alone))
    device = torch.device(args.device)
    for _ in ("warm-up", "timed"):  # the time of the second pass is kept
        synchronize(device)
        t0 = time.perf_counter()
        for i in range(0, len(frames), args.batch_size):
            encoder.encode_frames(frames[i : i + args.batch_size])
        synchronize(device)
    print(f"frames/s {len(frames) / (time.perf_counter() - t0)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="ViT-B-32", help="open_clip model (default: ViT-B-32)")
    parser.add_argument("--videos", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--size", type=int, default=256, help="frame size of the generated videos in pixels")
    parser.add_argument("--fps", type=float, default=2.0, help="sampling rate of the index")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1, help="decoding workers of each process (default: 1)")
    parser.add_argument("--processes", default="1,2", help="process counts to compare (default: 1,2)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="CPU threads in all, shared by the processes (default: the machine's cores)")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda: each process its own GPU")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a tiny model, 6 short videos, one repeat")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--encoder-alone", type=Path, help=argparse.SUPPRESS)  # one encoder-alone process
    args = parser.parse_args()
    if args.encoder_alone is not None:
        _encode_alone(args)
        return
    from reference_models.videos.clip_encoder import ClipEncoder
    from reference_models.videos.decoding import decode_video
    from reference_models.videos.generated import write_generated_collection

    counts = [int(p) for p in args.processes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = args.model
        if args.quick:
            args.videos, args.seconds, args.size, args.repeats = 6, 4.0, 96, 1
            model = str(work / "tiny.json")
            Path(model).write_text(json.dumps(_TINY), encoding="utf-8")
        coll = write_generated_collection(work / "coll", n_videos=args.videos, events_per_video=2,
                                          event_seconds=args.seconds / 2, fps=25, size=args.size, seed=0)
        size = ClipEncoder(model, "none").image_size
        decoded = [decode_video(f, fps=args.fps, max_frames=128, size=size) for f in sorted(coll.videos_dir.glob("*"))]
        np.save(work / "frames.npy", np.concatenate([v.frames for v in decoded if v.frames is not None]))
        load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
        rows: dict[int, list[dict[str, float]]] = {p: [] for p in counts}
        for repeat in range(args.repeats):  # the settings take turns, so that a burst of other load hits them alike
            for p in counts:
                row = index_once(args, coll.videos_dir, work / f"gallery-{p}-{repeat}", model, p)
                row["encoder_fps"] = encoder_alone(args, work / "frames.npy", model, p)
                rows[p].append(row)
        load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    name = model if not model.endswith(".json") else "tiny config"
    frames = rows[counts[0]][0]["frames"]
    print(f"index under torchrun ({name}, {args.videos} videos of {args.seconds:g} s at 25 fps, {args.size} px, "
          f"sampled at {args.fps:g} fps -> {frames:.0f} frames; {args.device}, {args.threads} CPU threads in all, "
          f"{args.workers} decoding worker(s) per process, batch {args.batch_size}; medians of {args.repeats}; load "
          f"average before {load_before}, after {load_after})")
    print(f"  {'processes':>9} {'index frames/s':>15} {'encoder alone':>14} {'ratio':>6} {'per process':>12} "
          f"{'speed-up':>9}")
    results: dict[str, object] = {}
    base = statistics.median(r["index_fps"] for r in rows[counts[0]])
    for p in counts:
        median = {key: statistics.median(r[key] for r in rows[p]) for key in rows[p][0]}
        ratio = median["index_fps"] / median["encoder_fps"]
        results[str(p)] = {"median": median, "runs": rows[p], "ratio": ratio}
        print(f"  {p:>9} {median['index_fps']:15.1f} {median['encoder_fps']:14.1f} {ratio:6.2f} "
              f"{median['per_process_fps']:12.1f} {median['index_fps'] / base:9.2f}")
    print("  encoder alone: its forward on the same frames in memory, in as many processes side by side, summed; "
          "ratio: index / encoder alone; per process: a process's frames over its own encoding time")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
