"""Own videos: index throughput against the encoder alone, adding 1 % of a collection against indexing it all,
and zero-shot search latency at 1k and 100k videos against the scoring's own matrix product.

1. **Index** (``index``'s own code, :func:`reference_models.videos.indexing.run_index`) of a generated collection
   written here (``--videos`` videos of ``--seconds`` s at 25 frames per second, ``--size`` pixels), sampled at
   ``--fps``: frames per second of the decoding and encoding loop, against the limit, the encoder's forward alone
   on the same frames already decoded in memory, in batches of ``--batch-size`` (ratio index / encoder).
2. **Incremental**: ``--incremental-videos`` generated videos indexed from nothing (the full index), then 1 % more
   videos copied into the folder and ``index`` run again (only they are decoded and encoded; the gallery's files
   and its zero-shot search index are updated); the ratio add / full.
3. **Zero-shot search** (:class:`reference_models.videos.answers.Answerer`, the bundled encoder): a gallery of
   generated videos whose windows are tiled to each ``--gallery-sizes`` size (the cost of a search does not depend
   on which videos they are); per size, the whole answer (query text -> top ``k`` with moments, opinion,
   probability and decision) for one query and for ``--batch`` at once, its top-``k`` scoring alone (exact and
   streamed; FAISS flat candidates re-ranked exactly), and the limit: the matrix product of the query with every
   window, ``[1, d] x [d, V * W]`` (ratio search / matrix product).

Needs the ``video`` extra (and ``faiss-cpu`` for the FAISS rows). Nothing is downloaded: the index part's encoder
is created without weights (``--pretrained none``; the cost of a forward does not depend on the weights' values)
and the search part uses the bundled encoder.

Usage::

    OMP_NUM_THREADS=2 python benchmarks/own_videos.py                      # ViT-B-32, 1k and 100k videos
    python benchmarks/own_videos.py --quick                                # a tiny model, small sizes (seconds)
    python benchmarks/own_videos.py --device cuda                          # the index part on a GPU
"""

from __future__ import annotations

import argparse
import json
import shutil
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
         "vision_cfg": {"image_size": 48, "layers": 2, "width": 64, "head_width": 32, "patch_size": 8},
         "text_cfg": {"context_length": 20, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2}}


def _median_s(fn, repeats: int, device: torch.device) -> float:
    samples = []
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def encoder_model(args: argparse.Namespace, work: Path) -> str:
    """``--model``, or with ``--quick`` a tiny configuration written into ``work``."""
    if not args.quick:
        return str(args.model)
    path = work / "tiny.json"
    path.write_text(json.dumps(_TINY), encoding="utf-8")
    return str(path)


def _settings(args: argparse.Namespace, videos: Path, out: Path, model: str) -> Any:
    from reference_models.videos.indexing import IndexSettings, Sampling

    return IndexSettings(videos=videos, out=out, model=model, pretrained="none", sampling=Sampling(fps=args.fps),
                         batch_size=args.batch_size, workers=args.workers, device=args.device)


def indexing(args: argparse.Namespace, work: Path, model: str) -> dict[str, float]:
    from reference_models.videos.clip_encoder import ClipEncoder
    from reference_models.videos.decoding import decode_video
    from reference_models.videos.generated import write_generated_collection
    from reference_models.videos.indexing import run_index

    coll = write_generated_collection(work / "coll", n_videos=args.videos, events_per_video=2,
                                      event_seconds=args.seconds / 2, fps=25, size=args.size, seed=0)
    device = torch.device(args.device)
    report = run_index(_settings(args, coll.videos_dir, work / "gallery", model), show_progress=False)
    index_fps = report.frames / report.video_seconds
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
    encoder_fps = len(frames) / _median_s(encode_all, args.repeats, device)
    name = model if not model.endswith(".json") else "tiny config"
    print(f"index ({name}, {args.videos} videos of {args.seconds:g} s at 25 fps, {args.size} px, sampled at "
          f"{args.fps:g} fps -> {report.frames} frames, {args.workers} decoding workers, batch {args.batch_size}, "
          f"{args.device}, {torch.get_num_threads()} threads)")
    print(f"  index loop      {index_fps:8.1f} frames/s")
    print(f"  encoder alone   {encoder_fps:8.1f} frames/s  (the limit; median of {args.repeats})")
    print(f"  decoding alone  {decode_fps:8.1f} frames/s  (one process)")
    print(f"  ratio index / encoder alone: {index_fps / encoder_fps:.2f}")
    return {"index_fps": index_fps, "encoder_fps": encoder_fps, "decode_fps": decode_fps,
            "ratio": index_fps / encoder_fps, "frames": report.frames}


def incremental(args: argparse.Namespace, work: Path, model: str) -> dict[str, float]:
    from reference_models.videos.generated import write_generated_collection
    from reference_models.videos.indexing import run_index

    n = args.incremental_videos
    added = max(1, round(n / 100))
    coll = write_generated_collection(work / "inc", n_videos=n, seed=1)
    extra = write_generated_collection(work / "inc-extra", n_videos=max(3, added), seed=2)
    folder = work / "inc-videos"
    shutil.copytree(coll.videos_dir, folder)
    t0 = time.perf_counter()
    full = run_index(_settings(args, folder, work / "inc-gallery", model), show_progress=False)
    full_s = time.perf_counter() - t0
    for i in range(added):
        shutil.copy(extra.videos_dir / f"video{i:04d}.mp4", folder / f"added{i:04d}.mp4")
    t0 = time.perf_counter()
    again = run_index(_settings(args, folder, work / "inc-gallery", model), show_progress=False)
    add_s = time.perf_counter() - t0
    assert len(again.encoded) == added and again.search_index["added"] == added
    print(f"incremental ({n} videos of 4 s at 8 fps indexed from nothing, then {added} added = 1 %; the same model)")
    print(f"  full index      {full_s:8.2f} s  (encoding {full.video_seconds:.2f} s)")
    print(f"  add 1 %         {add_s:8.2f} s  (encoding {again.video_seconds:.2f} s, search index "
          f"{again.search_index['seconds']:.2f} s)")
    print(f"  ratio add 1% / full index: {add_s / full_s:.3f}")
    return {"videos": n, "added": added, "full_s": full_s, "add_s": add_s, "ratio": add_s / full_s,
            "full_encode_s": full.video_seconds, "add_encode_s": again.video_seconds}


def _tile(answerer: Any, size: int, base: dict[str, Any]) -> None:
    """Make ``answerer``'s gallery ``size`` videos by repeating its own windows."""
    reps = -(-size // len(base["ids"]))
    saved = answerer.saved
    saved.rows = {name: t.repeat(reps, *([1] * (t.dim() - 1)))[:size] for name, t in base["rows"].items()}
    saved.video_ids = [f"{v}~{i}" for i in range(reps) for v in base["ids"]][:size]
    saved.digests = list(saved.video_ids)
    saved.slots = torch.arange(size)
    saved.candidates = None


def search(args: argparse.Namespace, work: Path) -> dict[str, dict[str, float]]:
    from reference_models.videos.answers import Answerer
    from reference_models.videos.clip_encoder import BUNDLED_MODEL, BUNDLED_WEIGHTS
    from reference_models.videos.generated import write_generated_collection
    from reference_models.videos.indexing import IndexSettings, Sampling, run_index
    from reference_models.videos.saved_index import TokenCandidates

    coll = write_generated_collection(work / "search-world", n_videos=40 if args.quick else 100, seed=3)
    run_index(IndexSettings(videos=coll.videos_dir, out=work / "search-gallery", model=BUNDLED_MODEL,
                            pretrained=BUNDLED_WEIGHTS, captions=coll.captions_csv, sampling=Sampling(fps=2.0),
                            workers=args.workers), show_progress=False)
    answerer = Answerer(work / "search-gallery")
    base = {"rows": dict(answerer.saved.rows), "ids": list(answerer.saved.video_ids)}
    queries = [f"a {c} {s} moves {m}" for c, s, m in
               zip(["red", "blue", "green", "pink"] * 16, ["square", "circle", "bar", "ring"] * 16,
                   ["left", "up", "down", "right"] * 16)][: args.batch]
    windows = base["rows"]["windows"]
    print(f"zero-shot search (bundled encoder, d = {windows.shape[-1]}, {windows.shape[1]} windows per video; top-{args.k}; "
          f"median of {args.repeats}; ms per query)")
    print(f"  {'videos':>8}  {'scoring':<22} {'answer, 1 query':>15} {'answer, batched':>15} {'top-k alone':>11} "
          f"{'matrix product':>14} {'ratio search / matrix product':>30}")
    out: dict[str, dict[str, float]] = {}
    cpu = torch.device("cpu")
    for size in args.gallery_sizes:
        _tile(answerer, size, base)
        flat = answerer.saved.rows["windows"].reshape(-1, windows.shape[-1])
        q = answerer.scorer.encode_texts(queries[:1])
        product = _median_s(lambda: q @ flat.T, args.repeats, cpu)
        for scoring in ("exact", "faiss flat"):
            if scoring == "faiss flat":
                answerer.saved.candidates = TokenCandidates.build(answerer.saved.rows["windows"], answerer.saved.slots)
                slots = answerer.saved.slot_to_row()

                def top_k() -> None:
                    c = answerer.saved.candidates.candidates(q, 10, slots)
                    answerer.scorer.top_k(q, answerer.saved.rows, 10, candidates=c)
            else:
                def top_k() -> None:
                    answerer.scorer.top_k(q, answerer.saved.rows, 10)
            answerer.answer(queries[:1], k=args.k)  # warm-up
            one = _median_s(lambda: answerer.answer(queries[:1], k=args.k), args.repeats, cpu)
            batched = _median_s(lambda: answerer.answer(queries, k=args.k), args.repeats, cpu) / len(queries)
            scoring_s = _median_s(top_k, args.repeats, cpu)
            out[f"{size}/{scoring}"] = {"answer_one_ms": 1e3 * one, "answer_batched_ms": 1e3 * batched,
                                        "top_k_ms": 1e3 * scoring_s, "matrix_product_ms": 1e3 * product,
                                        "ratio": scoring_s / product}
            print(f"  {size:>8}  {scoring:<22} {1e3 * one:15.1f} {1e3 * batched:15.2f} {1e3 * scoring_s:11.1f} "
                  f"{1e3 * product:14.2f} {scoring_s / product:30.2f}")
        answerer.saved.candidates = None
    print("  ratio search / matrix product: the top-k scoring alone against the product of the query with every window")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="ViT-B-32", help="open_clip model of the index parts (default: ViT-B-32)")
    parser.add_argument("--videos", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--size", type=int, default=256, help="frame size of the generated videos in pixels")
    parser.add_argument("--fps", type=float, default=2.0, help="sampling rate of the index")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--incremental-videos", type=int, default=200)
    parser.add_argument("--gallery-sizes", type=lambda t: [int(x) for x in t.split(",")], default=[1000, 100_000])
    parser.add_argument("--batch", type=int, default=64, help="queries of the batched rows")
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--parts", default="index,incremental,search", help="which parts to run (default: all)")
    parser.add_argument("--quick", action="store_true", help="a tiny model and small sizes (seconds)")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    set_threads(args.threads)
    parts = set(args.parts.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = encoder_model(args, work)
        if args.quick:
            args.videos, args.seconds, args.size, args.repeats = min(args.videos, 6), 4.0, 96, 1
            args.incremental_videos, args.batch = min(args.incremental_videos, 100), min(args.batch, 8)
            args.gallery_sizes = [min(s, 2000) for s in args.gallery_sizes]
        results: dict[str, object] = {}
        if "index" in parts:
            results["index"] = indexing(args, work, model)
        if "incremental" in parts:
            results["incremental"] = incremental(args, work, model)
        if "search" in parts:
            results["search"] = search(args, work)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
