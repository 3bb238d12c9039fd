"""``prvr-videos`` (``python -m reference_models.videos``): search your own videos.

``index``
    A folder of videos (and optionally captions) -> a gallery (:mod:`reference_models.videos.indexing`);
    again on a folder that changed, only the new and changed videos are encoded. Under ``torchrun`` every
    process encodes its share of the videos on its own device (:mod:`reference_models.videos.sharding`).
``search``
    Free-text queries over a gallery, zero-shot or with ``--checkpoint`` (:mod:`reference_models.videos.answers`).
``serve``
    The search as a local HTTP service with a page (:mod:`reference_models.videos.service`).
``demo``
    The generated world, indexed with the bundled encoder and searched zero-shot, offline
    (:mod:`reference_models.videos.demo`).

Adapting Holmes to a gallery's captions is ``python -m reference_models.holmes train --config clip --data-root
ROOT``; its checkpoint is then ``search --checkpoint``.

Exit status: 0 on success; 2 for a problem the user can fix, reported as one line on standard error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from reference_models import engine

__all__ = ["build_parser", "main", "run_index", "run_search", "run_serve", "run_demo"]

_VIDEO_EXTRA = 'pip install "evidential-prvr[video]" (open_clip_torch, av and flask; see the guide "Your own videos")'


def _require_video_extra(*modules: str) -> None:
    for module in ("open_clip", "av", *modules):
        try:
            __import__(module)
        except ImportError as exc:
            raise engine.UserError(f"this command needs {module} ({exc}): {_VIDEO_EXTRA}") from None


def _require_faiss(index: str) -> None:
    if index == "faiss":
        try:
            import faiss  # noqa: F401
        except ImportError:
            raise engine.UserError('--index faiss needs FAISS: pip install "evidential-prvr[faiss]"') from None


def _risk(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text!r}")
    return value


#: ``index --dist-timeout``'s default: the processes that finish their share first wait this long for the others.
INDEX_DIST_TIMEOUT_S = 7200.0


def _default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _add_index_parser(sub: Any) -> None:
    from reference_models.videos.clip_encoder import BUNDLED_MODEL, BUNDLED_WEIGHTS

    p = sub.add_parser("index", help="decode and encode a folder of videos into a gallery (again: only what changed)")
    p.add_argument("--videos", type=Path, required=True, help="folder of video files (.mp4, .mkv, .webm, .avi, ...)")
    p.add_argument("--out", type=Path, required=True, help="the gallery folder (nothing is written outside it)")
    p.add_argument("--model", required=True,
                   help=f"open_clip model name (ViT-B-32), a JSON model configuration, or {BUNDLED_MODEL} (the small "
                        "encoder this package ships, trained on the generated world)")
    p.add_argument("--pretrained",
                   help="open_clip pretrained tag (openai, laion2b_s34b_b79k, ...), a local weights file, or none (a "
                        f"model created without weights); default for --model {BUNDLED_MODEL}: {BUNDLED_WEIGHTS}")
    p.add_argument("--captions", type=Path,
                   help="optional: MS-SL caption file (<video_id>#enc#<n> <sentence>) or CSV with video,caption[,split]; "
                        "the val split calibrates the search, train adapts Holmes (default: the captions given before)")
    p.add_argument("--collection", default="videos", help="collection name (default: videos)")
    p.add_argument("--visual-feature", help="feature name (default: clip_<model>)")
    p.add_argument("--fps", type=engine.positive_number, default=1.0,
                   help="frames sampled per second of video (default: 1)")
    p.add_argument("--max-frames", type=engine.int_at_least(1), default=128,
                   help="at most this many frames per video, spread over all of it (default: 128)")
    p.add_argument("--batch-size", type=engine.int_at_least(1), default=64, help="frames per encoder call (default: 64)")
    p.add_argument("--workers", type=engine.int_at_least(0), default=2,
                   help="decoding processes beside the encoder (default: 2; 0 decodes in the main process)")
    p.add_argument("--part-videos", type=engine.int_at_least(1), default=16,
                   help="videos per part file written (default: 16; an interrupted run loses at most one part)")
    p.add_argument("--strict", action="store_true", help="exit 2 when any video or caption had a problem")
    p.add_argument("--device", type=engine.device_arg, default=_default_device(),
                   help="torch device of the encoder (default: cuda when available, else cpu; under torchrun, cuda is "
                        "each process's cuda:LOCAL_RANK)")
    p.add_argument("--seed", type=engine.int_at_least(0), default=0,
                   help="seed of the split draw and of the weights of --pretrained none (default: 0)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--dist-timeout", type=engine.positive_number, default=INDEX_DIST_TIMEOUT_S, metavar="SECONDS",
                   help="under torchrun: how long a process that finished its share waits for the others, and the "
                        f"start waits for every process (default: {INDEX_DIST_TIMEOUT_S:g})")
    engine.add_threads_argument(p)


def _gallery_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``search`` and ``serve`` that name the gallery, the scoring and the index."""
    p.add_argument("--gallery", type=Path, required=True, help="the --out of index")
    p.add_argument("--checkpoint", type=Path,
                   help="a trained checkpoint (train --config clip --data-root GALLERY); default: zero-shot")
    p.add_argument("--index", choices=("exact", "faiss"), default="exact",
                   help="exact: score every video; faiss: candidates from a FAISS index, re-ranked exactly")
    p.add_argument("--rebuild-index", action="store_true", help="compute the gallery's saved search index again")


def _add_search_parser(sub: Any) -> None:
    p = sub.add_parser("search", help="answer free-text queries over a gallery (zero-shot, or with --checkpoint)")
    _gallery_arguments(p)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--query", help="one query")
    what.add_argument("--queries", type=Path, help="a UTF-8 text file, one query per line")
    p.add_argument("-k", type=engine.int_at_least(1), default=5, help="videos per query (default: 5)")
    p.add_argument("--risk", type=_risk, default=0.2,
                   help="the share of answered queries whose video is not among the k shown, as measured on the "
                        "held-out captions; below its confidence threshold a query is sent back (default: 0.2)")
    p.add_argument("--format", choices=("auto", "json", "table"), default="auto",
                   help="auto: a table on a terminal, JSON otherwise (default)")
    engine.add_device_arguments(p)


def _add_serve_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="the search as an HTTP service with a page (POST /search, GET /health, GET /)")
    _gallery_arguments(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default: 127.0.0.1, this machine only; 0.0.0.0 opens it to the network)")
    p.add_argument("--port", type=engine.int_at_least(0), default=8000, help="port (default: 8000; 0: a free one)")
    p.add_argument("--batch-window-ms", type=float, default=0.0,
                   help="how long a query waits for others to be answered with it (default: 0, the queries already "
                        "waiting are answered together)")
    p.add_argument("--max-batch", type=engine.int_at_least(1), default=64, help="queries per batch (default: 64)")
    p.add_argument("--stop-after", type=engine.int_at_least(1), metavar="N",
                   help="stop after answering N requests (scripted trials); default: run until Ctrl-C")
    p.add_argument("--workers", type=engine.int_at_least(1),
                   help="N > 1: N gunicorn worker processes (Linux, macOS) sharing the loaded model and index, each "
                        "with --threads / N CPU threads and batching its own requests; 1: one process, Werkzeug's "
                        "threaded server batching every request's query (default: one worker per CPU thread on the "
                        "CPU where gunicorn is installed, else 1)")
    p.add_argument("--worker-threads", type=engine.int_at_least(1), default=16, metavar="N",
                   help="with --workers N > 1: requests each worker takes at once, their queries batched (default: 16)")
    p.add_argument("--device", type=engine.device_arg, default=_default_device(),
                   help="torch device (default: cuda when available, else cpu)")
    engine.add_threads_argument(p)


def _add_demo_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="the generated world indexed with the bundled encoder and searched zero-shot")
    p.add_argument("--out", type=Path, default=Path("runs/videos-demo"),
                   help="where the videos and the gallery go (default: runs/videos-demo)")
    p.add_argument("--videos", type=engine.int_at_least(10), default=120, help="generated videos (default: 120)")
    p.add_argument("--seed", type=engine.int_at_least(0), default=0, help="seed of the generated world (default: 0)")
    p.add_argument("--device", type=engine.device_arg, default=_default_device(),
                   help="torch device of the encoder (default: cuda when available, else cpu)")
    engine.add_threads_argument(p)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``prvr-videos`` (usage errors are one line, exit status 2)."""
    parser = engine.OneLineParser(prog="prvr-videos", description="Search your own videos with a sentence: index a "
                                  "folder, search it zero-shot or with a trained Holmes checkpoint, serve a page.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=engine.OneLineParser)
    _add_index_parser(sub)
    _add_search_parser(sub)
    _add_serve_parser(sub)
    _add_demo_parser(sub)
    return parser


def run_index(args: argparse.Namespace) -> int:
    """``index``: exit 0, or 2 with ``--strict`` when a problem was reported."""
    _require_video_extra()
    from reference_models.videos.clip_encoder import BUNDLED_MODEL, BUNDLED_WEIGHTS, EncoderError
    from reference_models.videos.indexing import IndexSettings, Sampling, run_index

    pretrained = args.pretrained
    if pretrained is None:
        if args.model != BUNDLED_MODEL:
            raise engine.UserError(f"--pretrained is required for --model {args.model} (an open_clip tag, a weights "
                                   "file, or none)")
        pretrained = BUNDLED_WEIGHTS
    ranks = engine.launched_ranks()  # under torchrun: (rank, world size, local rank)
    device = args.device
    if ranks is not None:
        try:
            device = str(engine.rank_device(args.device, ranks[2]))
        except engine.UserError as exc:
            if ranks[0] != 0:  # the same line from every process would say nothing more
                raise engine.PeerStoppedError(str(exc)) from None
            raise
    settings = IndexSettings(
        videos=args.videos, out=args.out, model=args.model, pretrained=pretrained, captions=args.captions,
        collection=args.collection, visual_feature=args.visual_feature,
        sampling=Sampling(fps=args.fps, max_frames=args.max_frames), batch_size=args.batch_size,
        workers=args.workers, part_videos=args.part_videos, device=device, seed=args.seed, strict=args.strict)
    # the processes of a torchrun run exchange file names, digests and counts only: gloo, whatever the device
    with engine.process_group_from_environment("cpu", args.dist_timeout) as run:
        try:
            report = run_index(settings, show_progress=not args.no_progress, run=run)
        except EncoderError as exc:
            raise engine.UserError(str(exc)) from None
    if not run.is_writer:  # rank 0 reports for every process
        return 0
    captions = (f"captions train/val/test {report.captions.get('train', 0)}/{report.captions.get('val', 0)}/"
                f"{report.captions.get('test', 0)}" if report.captions else "no captions")
    search = report.search_index
    calibrated = (f"calibrated on {search['calibrated_on']} held-out captions" if search.get("calibrated_on")
                  else "not calibrated (no held-out captions)")
    processes = f" by {len(report.processes)} processes" if len(report.processes) > 1 else ""
    print(f"indexed {report.videos} videos: {len(report.encoded)} encoded{processes} ({report.frames} frames), "
          f"{len(report.unchanged)} unchanged, {len(report.removed)} removed, {len(report.problems)} problems; "
          f"{captions}; zero-shot search {calibrated}; report: {Path(args.out) / 'index_report.json'} "
          f"({report.seconds:.1f}s)")
    if args.strict and report.problems:
        engine.print_line("error", f"--strict: {len(report.problems)} problems (see the report)")
        return engine.EXIT_USER_ERROR
    return 0


def _read_queries(path: Path) -> list[str]:
    from reference_models.holmes.data.layout import read_utf8_text

    if not path.is_file():
        raise engine.UserError(f"--queries {path}: no such file")
    try:
        text = read_utf8_text(path)
    except engine.DataValidationError as exc:
        raise engine.UserError(f"--queries: {exc}") from None
    queries = [line.strip() for line in text.splitlines() if line.strip()]
    if not queries:
        raise engine.UserError(f"--queries {path}: holds no query")
    return queries


def _answerer(args: argparse.Namespace) -> Any:
    from reference_models.videos.answers import Answerer

    _require_faiss(args.index)
    return Answerer(args.gallery, checkpoint=args.checkpoint, device=args.device, index=args.index,
                    rebuild=args.rebuild_index)


def run_search(args: argparse.Namespace) -> int:
    """``search``: JSON (or a table on a terminal) on standard output."""
    _require_video_extra()
    from reference_models.videos.answers import format_answers

    queries = [args.query] if args.query is not None else _read_queries(args.queries)
    if any(not q.strip() for q in queries):
        raise engine.UserError("--query: an empty query; say what the moment shows")
    answerer = _answerer(args)
    if args.k > answerer.num_videos:
        raise engine.UserError(f"-k {args.k}: the gallery holds {answerer.num_videos} videos")
    answers = answerer.answer(queries, k=args.k, risk=args.risk)
    if args.format == "table" or (args.format == "auto" and sys.stdout.isatty()):
        print(format_answers(answers))
    else:
        print(json.dumps({"answers": [a.to_dict() for a in answers]}, indent=2))
    return 0


def _serve_workers(args: argparse.Namespace, threads: int, gunicorn: bool) -> int:
    """``--workers``, or its default: one worker process per CPU thread on the CPU where gunicorn is installed (they
    held more load than one process on two cores: docs/guide/larger_collections.rst), else one process."""
    on_cpu = torch.device(args.device).type == "cpu"
    if args.workers is None:
        return threads if on_cpu and gunicorn else 1
    if args.workers > 1 and not gunicorn:
        raise engine.UserError(f"--workers {args.workers} needs gunicorn (Linux or macOS): pip install gunicorn, or "
                               "serve in one process with --workers 1")
    if args.workers > 1 and not on_cpu:
        raise engine.UserError(f"--workers {args.workers} with --device {args.device}: the worker processes are forked "
                               "after the model is loaded, which a GPU's runtime does not allow; on a GPU one process "
                               "batches the queries (--workers 1)")
    return int(args.workers)


def run_serve(args: argparse.Namespace) -> int:
    """``serve``: until Ctrl-C (or ``--stop-after`` requests); exit 0."""
    _require_video_extra("flask")
    from reference_models.videos.service import gallery_thumbnails
    from reference_models.videos.serving import gunicorn_available, serve_one_process, serve_worker_processes

    if not (args.batch_window_ms >= 0 and args.batch_window_ms < 1e4):
        raise engine.UserError(f"--batch-window-ms must be in [0, 10000), got {args.batch_window_ms}")
    threads = torch.get_num_threads()  # the CPU threads of the service (--threads, else engine's choice)
    workers = _serve_workers(args, threads, gunicorn_available())
    if workers > 1:  # the answerer is loaded before the workers are forked: one thread, see serving's documentation
        torch.set_num_threads(1)
    answerer = _answerer(args)
    mode = "zero-shot" if args.checkpoint is None else f"checkpoint {args.checkpoint}"
    how = f" with {workers} worker processes" if workers > 1 else ""

    def announce(port: int) -> None:
        print(f"serving {answerer.num_videos} videos ({mode}) on http://{args.host}:{port}/{how} (Ctrl-C stops)",
              flush=True)

    options = {"host": args.host, "port": args.port, "window_s": args.batch_window_ms / 1e3,
               "max_batch": args.max_batch, "stop_after": args.stop_after, "announce": announce}
    thumbnails = gallery_thumbnails(answerer.gallery)
    if workers > 1:
        serve_worker_processes(answerer, thumbnails, workers=workers, worker_threads=args.worker_threads,
                               torch_threads=max(1, threads // workers), **options)
    else:
        serve_one_process(answerer, thumbnails, **options)
    return 0


def run_demo(args: argparse.Namespace) -> int:
    """``demo``: the generated world, indexed and searched zero-shot; exit 0."""
    _require_video_extra()
    from reference_models.videos.demo import run_demo as demo

    return demo(args.out, n_videos=args.videos, seed=args.seed, device=args.device)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``prvr-videos``; returns the process exit status (0 ok, 2 a problem the user can fix)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2): argparse printed it already
        return exc.code if isinstance(exc.code, int) else engine.EXIT_USER_ERROR
    handler = {"index": run_index, "search": run_search, "serve": run_serve, "demo": run_demo}[args.command]
    return engine.run_main(handler, args, program=argv is None)


def console_main() -> None:
    """The ``prvr-videos`` console script."""
    raise SystemExit(main())
