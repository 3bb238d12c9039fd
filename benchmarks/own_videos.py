"""Own videos: extraction throughput against the encoder alone, and search latency at 1k and 100k videos.

1. **Extraction** (``extract``'s own code, :func:`reference_models.holmes.videos.extraction.run_extraction`)
   on a generated collection written here (``--videos`` videos of ``--seconds`` s at 25 frames per second,
   ``--size`` pixels), sampled at ``--fps``: frames per second of the decoding and encoding loop, against the
   limit, the encoder's forward alone on the same frames already decoded in memory, in batches of
   ``--batch-size`` (ratio extraction / encoder). Decoding alone is printed beside them.
2. **Search** (:class:`reference_models.holmes.videos.search.GallerySearch`, from query text to the answer with
   moments, opinion and decision): a checkpoint trained one epoch on that collection answers queries over its
   gallery tiled to each ``--gallery-sizes`` size, one query at a time and ``--batch`` at once (time per
   query), with exact scoring and with FAISS candidates (``--faiss`` specs) re-ranked exactly.

Needs the ``video`` extra (and ``faiss-cpu`` for the FAISS rows). Nothing is downloaded: the encoder is created
without weights (``--pretrained none``; the cost of a forward does not depend on the weights' values).

Usage::

    OMP_NUM_THREADS=2 python benchmarks/own_videos.py                      # ViT-B-32, 1k and 100k videos
    python benchmarks/own_videos.py --quick                                # a tiny model, small sizes
    python benchmarks/own_videos.py --device cuda                          # the extraction on a GPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._timing import set_threads, synchronize  # noqa: E402

_TINY = {"embed_dim": 64,
         "vision_cfg": {"image_size": 64, "layers": 2, "width": 64, "head_width": 32, "patch_size": 16,
                        "pool_type": "avg"},
         "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2}}


def _median_s(fn, repeats: int, device: torch.device) -> float:
    samples = []
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def extraction(args: argparse.Namespace, work: Path, model: str) -> tuple[Path, dict[str, float]]:
    from reference_models.holmes.videos.clip_encoder import ClipEncoder
    from reference_models.holmes.videos.decoding import decode_video
    from reference_models.holmes.videos.extraction import ExtractionSettings, run_extraction
    from reference_models.holmes.videos.generated import write_generated_collection

    coll = write_generated_collection(work / "coll", n_videos=args.videos, events_per_video=2,
                                      event_seconds=args.seconds / 2, fps=25, size=args.size, seed=0)
    device = torch.device(args.device)
    root = work / "root"
    settings = ExtractionSettings(videos=coll.videos_dir, captions=coll.captions_csv, out=root, model=model,
                                  pretrained="none", fps=args.fps, batch_size=args.batch_size, workers=args.workers,
                                  device=args.device)
    report = run_extraction(settings, show_progress=False)
    extract_fps = report.frames / report.video_seconds

    encoder = ClipEncoder(model, "none", device=args.device)
    files = sorted(coll.videos_dir.glob("*.mp4"))
    t0 = time.perf_counter()
    decoded = [decode_video(f, fps=args.fps, max_frames=128, size=encoder.image_size) for f in files]
    decode_fps = sum(len(v.frames) for v in decoded) / (time.perf_counter() - t0)  # type: ignore[arg-type]
    frames = torch.cat([torch.from_numpy(v.frames) for v in decoded])  # type: ignore[arg-type]

    def encode_all() -> None:
        for i in range(0, len(frames), args.batch_size):
            encoder.encode_frames(frames[i : i + args.batch_size])

    encode_all()  # warm-up
    encode_s = _median_s(encode_all, args.repeats, device)
    encoder_fps = len(frames) / encode_s
    print(f"extraction ({model if not model.endswith('.json') else 'tiny config'}, {args.videos} videos of "
          f"{args.seconds:g} s at 25 fps, {args.size} px, sampled at {args.fps:g} fps -> {report.frames} frames, "
          f"{args.workers} decoding workers, batch {args.batch_size}, {args.device}, {torch.get_num_threads()} threads)")
    print(f"  extract loop    {extract_fps:8.1f} frames/s")
    print(f"  encoder alone   {encoder_fps:8.1f} frames/s  (the limit; median of {args.repeats})")
    print(f"  decoding alone  {decode_fps:8.1f} frames/s  (one process)")
    print(f"  ratio extract / encoder alone: {extract_fps / encoder_fps:.2f}")
    return root, {"extract_fps": extract_fps, "encoder_fps": encoder_fps, "decode_fps": decode_fps,
                  "ratio": extract_fps / encoder_fps, "frames": report.frames}


def encoder_model(args: argparse.Namespace, work: Path) -> str:
    """``--model``, or with ``--quick`` the tiny configuration written into ``work``."""
    if not args.quick:
        return str(args.model)
    path = work / "tiny.json"
    path.write_text(json.dumps(_TINY), encoding="utf-8")
    return str(path)


def trained_search(work: Path, root: Path) -> Any:
    """A :class:`GallerySearch` over ``root`` with a checkpoint trained one epoch there (``--config clip``)."""
    import subprocess

    from reference_models.holmes.videos.search import GallerySearch

    run = subprocess.run([sys.executable, "-m", "reference_models.holmes", "train", "--config", "clip", "--epochs", "1",
                          "--data-root", str(root), "--output-dir", str(work / "run"), "--no-progress", "--device",
                          "cpu"], capture_output=True, text=True)
    if run.returncode:
        raise SystemExit(run.stderr[-2000:])
    return GallerySearch(work / "run" / "best.pt", root, device="cpu")


def tile(searcher: Any, size: int, base: Any = None) -> None:
    """Make ``searcher``'s gallery ``size`` videos by repeating its own (the cost of a search does not depend on
    which videos the embeddings are); ``base``: ``(videos, ids, spans)`` of the original gallery."""
    from reference_models.holmes.model import VideoEmbeddings

    videos, ids, spans = base or (searcher.videos, list(searcher.video_ids), searcher.saved["clip_spans"])
    reps = -(-size // len(ids))
    searcher.videos = VideoEmbeddings(clip=videos.clip.repeat(reps, 1, 1)[:size],
                                      frame=videos.frame.repeat(reps, 1, 1)[:size],
                                      frame_mask=videos.frame_mask.repeat(reps, 1)[:size])
    searcher.video_ids = [f"{v}~{i}" for i in range(reps) for v in ids][:size]
    searcher.saved["clip_spans"] = spans.repeat(reps, 1, 1)[:size]


def search(args: argparse.Namespace, work: Path, root: Path) -> dict[str, dict[str, float]]:
    import torch.nn.functional as F

    from evidential_prvr.search import ClipIndex

    searcher = trained_search(work, root)
    base = (searcher.videos, list(searcher.video_ids), searcher.saved["clip_spans"])
    queries = [f"a {c} {s} moves {m}" for c, s, m in
               zip(["red", "blue", "green", "pink"] * 16, ["square", "circle", "bar", "circle"] * 16,
                   ["left", "up", "down", "right"] * 16)][: args.batch]
    out: dict[str, dict[str, float]] = {}
    print(f"search (query text -> top-{args.k} with moments, opinion, decision; one query and {args.batch} at once; "
          f"median of {args.repeats}; d = {base[0].clip.shape[-1]}, {base[0].clip.shape[1]} clips per video)")
    print(f"  {'videos':>8}  {'index':<24} {'one query ms':>12} {'batched ms/query':>17} {'ratio one / exact':>18}")
    for size in args.gallery_sizes:
        tile(searcher, size, base)
        exact_one = None
        for spec in ["exact", *args.faiss]:
            searcher.faiss = None if spec == "exact" else ClipIndex(F.normalize(searcher.videos.clip, dim=-1), spec)
            searcher.search(queries[:1], k=args.k)  # warm-up
            one = _median_s(lambda: searcher.search(queries[:1], k=args.k), args.repeats, torch.device("cpu"))
            batched = _median_s(lambda: searcher.search(queries, k=args.k), args.repeats, torch.device("cpu"))
            exact_one = exact_one or one
            out[f"{size}/{spec}"] = {"one_ms": 1e3 * one, "batched_ms_per_query": 1e3 * batched / len(queries)}
            print(f"  {size:>8}  {spec:<24} {1e3 * one:12.1f} {1e3 * batched / len(queries):17.2f} "
                  f"{one / exact_one:18.2f}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="ViT-B-32", help="open_clip model (default: ViT-B-32)")
    parser.add_argument("--videos", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--size", type=int, default=256, help="frame size of the generated videos in pixels")
    parser.add_argument("--fps", type=float, default=2.0, help="sampling rate of the extraction")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gallery-sizes", type=lambda t: [int(x) for x in t.split(",")], default=[1000, 100_000])
    parser.add_argument("--faiss", action="append", help="FAISS specs for the candidate rows (default: flat, "
                                                         "ivf:nlist=1024,nprobe=16)")
    parser.add_argument("--batch", type=int, default=64, help="queries of the batched rows")
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--no-search", action="store_true", help="the extraction part only")
    parser.add_argument("--quick", action="store_true", help="a tiny model and small sizes (seconds)")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    set_threads(args.threads)
    if args.faiss is None:
        args.faiss = ["flat", "ivf:nlist=1024,nprobe=16"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = encoder_model(args, work)
        if args.quick:
            args.videos, args.seconds, args.size, args.repeats = min(args.videos, 8), 4.0, 96, 1
            args.gallery_sizes = [min(s, 2000) for s in args.gallery_sizes]
            args.faiss = [s.replace("nlist=1024", "nlist=16") for s in args.faiss]
        root, ext = extraction(args, work, model)
        results: dict[str, object] = {"extraction": ext}
        if not args.no_search:
            results["search"] = search(args, work, root)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
