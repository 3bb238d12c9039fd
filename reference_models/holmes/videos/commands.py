"""The ``extract`` and ``search`` subcommands of ``python -m reference_models.holmes`` (own videos)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

from reference_models import engine

__all__ = ["add_extract_parser", "add_search_parser", "add_serve_parser", "run_extract", "run_search", "run_serve",
           "resolve_data_root"]

_VIDEO_EXTRA = 'pip install "evidential-prvr[video]" (open_clip_torch and av; see the guide "Your own videos")'


def _require_video_extra() -> None:
    for module in ("open_clip", "av"):
        try:
            __import__(module)
        except ImportError as exc:
            raise engine.UserError(f"this command needs {module} ({exc}): {_VIDEO_EXTRA}") from None


def _risk(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text!r}")
    return value


def add_extract_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``extract`` on the CLI's sub-parsers."""
    p = sub.add_parser("extract", help="decode your videos, encode frames and captions with CLIP, write the MS-SL "
                                       "layout that train, evaluate, validate and search read")
    p.add_argument("--videos", type=Path, required=True, help="folder of video files (.mp4, .mkv, .webm, .avi, ...)")
    p.add_argument("--captions", type=Path, required=True,
                   help="MS-SL caption file (<video_id>#enc#<n> <sentence>) or CSV with video,caption[,split]")
    p.add_argument("--out", type=Path, required=True, help="the data root to write (nothing is written outside it)")
    p.add_argument("--model", required=True, help="open_clip model name (ViT-B-32) or a JSON model configuration")
    p.add_argument("--pretrained", required=True,
                   help="open_clip pretrained tag (openai, laion2b_s34b_b79k, ...), a local weights file, or none "
                        "(a model created without weights, for tests and trials)")
    p.add_argument("--collection", default="videos", help="collection name (default: videos)")
    p.add_argument("--visual-feature", help="FeatureData sub-folder (default: clip_<model>)")
    p.add_argument("--fps", type=engine.positive_number, default=1.0,
                   help="frames sampled per second of video (default: 1)")
    p.add_argument("--max-frames", type=engine.int_at_least(1), default=128,
                   help="at most this many frames per video, spread over all of it (default: 128)")
    p.add_argument("--batch-size", type=engine.int_at_least(1), default=64, help="frames per encoder call (default: 64)")
    p.add_argument("--workers", type=engine.int_at_least(0), default=2,
                   help="decoding processes beside the encoder (default: 2; 0 decodes in the main process)")
    p.add_argument("--strict", action="store_true", help="exit 2 when any video or caption had a problem")
    p.add_argument("--device", type=engine.device_arg, default="cuda" if torch.cuda.is_available() else "cpu",
                   help="torch device of the encoder (default: cuda when available, else cpu)")
    p.add_argument("--seed", type=engine.int_at_least(0), default=0,
                   help="seed of the split draw and of the weights of --pretrained none (default: 0)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    engine.add_threads_argument(p)
    return p


def _gallery_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``search`` and ``serve`` that name the model, the gallery and its index."""
    p.add_argument("--checkpoint", type=Path, required=True, help="best.pt of train --data-root ROOT")
    p.add_argument("--gallery", type=Path, required=True, help="the --out of extract")
    p.add_argument("--index", choices=("exact", "faiss"), default="exact",
                   help="exact: score every video; faiss: candidates from a FAISS index, re-ranked exactly")
    p.add_argument("--rebuild-index", action="store_true", help="compute the saved gallery index again")


def _require_faiss(index: str) -> None:
    if index == "faiss":
        try:
            import faiss  # noqa: F401
        except ImportError:
            raise engine.UserError('--index faiss needs FAISS: pip install "evidential-prvr[faiss]"') from None


def add_search_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``search`` on the CLI's sub-parsers."""
    p = sub.add_parser("search", help="answer free-text queries over an extracted gallery with a trained checkpoint")
    _gallery_arguments(p)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--query", help="one query")
    what.add_argument("--queries", type=Path, help="a UTF-8 text file, one query per line")
    p.add_argument("-k", type=engine.int_at_least(1), default=5, help="videos per query (default: 5)")
    p.add_argument("--risk", type=_risk, default=0.2,
                   help="the share of answered queries whose video is not among the k shown, as measured on the "
                        "validation captions; below its confidence threshold a query is sent back (default: 0.2)")
    p.add_argument("--format", choices=("auto", "json", "table"), default="auto",
                   help="auto: a table on a terminal, JSON otherwise (default)")
    engine.add_device_arguments(p)
    return p


def add_serve_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``serve`` on the CLI's sub-parsers."""
    p = sub.add_parser("serve", help="the search as an HTTP service with a page (POST /search, GET /health, GET /)")
    _gallery_arguments(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default: 127.0.0.1, this machine only; 0.0.0.0 opens it to the network)")
    p.add_argument("--port", type=engine.int_at_least(0), default=8000, help="port (default: 8000; 0: a free one)")
    p.add_argument("--batch-window-ms", type=float, default=0.0,
                   help="how long a query waits for others to be answered with it (default: 0, the queries already "
                        "waiting are answered together; under load that was as fast as a 5 ms window)")
    p.add_argument("--max-batch", type=engine.int_at_least(1), default=64, help="queries per batch (default: 64)")
    p.add_argument("--stop-after", type=engine.int_at_least(1), metavar="N",
                   help="stop after answering N requests (scripted trials); default: run until Ctrl-C")
    p.add_argument("--device", type=engine.device_arg, default="cuda" if torch.cuda.is_available() else "cpu",
                   help="torch device (default: cuda when available, else cpu)")
    engine.add_threads_argument(p)
    return p


def run_serve(args: argparse.Namespace) -> int:
    """``serve``: until Ctrl-C (or ``--stop-after`` requests); exit 0."""
    _require_video_extra()
    try:
        import flask  # noqa: F401
    except ImportError:
        raise engine.UserError(f"serve needs flask: {_VIDEO_EXTRA}") from None
    import threading

    from werkzeug.serving import make_server

    from reference_models.holmes.videos.search import GallerySearch
    from reference_models.holmes.videos.service import QueryBatcher, create_app, gallery_thumbnails

    _require_faiss(args.index)
    if not (args.batch_window_ms >= 0 and args.batch_window_ms < 1e4):
        raise engine.UserError(f"--batch-window-ms must be in [0, 10000), got {args.batch_window_ms}")
    searcher = GallerySearch(args.checkpoint, args.gallery, device=args.device, index=args.index,
                             rebuild=args.rebuild_index)
    batcher = QueryBatcher(searcher, window_s=args.batch_window_ms / 1e3, max_batch=args.max_batch)
    app = create_app(batcher, gallery_thumbnails(searcher))
    try:
        server = make_server(args.host, args.port, app, threaded=True)
    except OSError as exc:
        batcher.close()
        raise engine.UserError(f"--host {args.host} --port {args.port}: cannot listen there ({exc.strerror or exc})") from None
    if args.stop_after:
        served = {"n": 0}

        @app.after_request
        def count(response: Any) -> Any:
            served["n"] += 1
            if served["n"] >= args.stop_after:
                threading.Thread(target=server.shutdown, daemon=True).start()
            return response

    print(f"serving {searcher.num_videos} videos on http://{args.host}:{server.server_port}/ (Ctrl-C stops)",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        batcher.close()
    return 0


def run_extract(args: argparse.Namespace) -> int:
    """``extract``: exit 0, or 2 with ``--strict`` when a problem was reported."""
    _require_video_extra()
    from reference_models.holmes.videos.clip_encoder import EncoderError
    from reference_models.holmes.videos.extraction import ExtractionSettings, run_extraction

    settings = ExtractionSettings(
        videos=args.videos, captions=args.captions, out=args.out, model=args.model, pretrained=args.pretrained,
        collection=args.collection, visual_feature=args.visual_feature, fps=args.fps, max_frames=args.max_frames,
        batch_size=args.batch_size, workers=args.workers, device=args.device, seed=args.seed,
        strict=args.strict)
    try:
        report = run_extraction(settings, show_progress=not args.no_progress)
    except EncoderError as exc:
        raise engine.UserError(str(exc)) from None
    except engine.DataValidationError as exc:
        raise engine.UserError(f"--captions: {exc}") from None
    print(f"extracted {len(report.extracted)} videos ({report.frames} frames), skipped {len(report.skipped_done)} "
          f"already done, {len(report.problems)} problems; captions train/val/test "
          f"{report.captions.get('train', 0)}/{report.captions.get('val', 0)}/{report.captions.get('test', 0)}; "
          f"report: {Path(args.out) / 'extraction_report.json'} ({report.seconds:.1f}s)")
    if args.strict and report.problems:
        engine.print_line("error", f"--strict: {len(report.problems)} problems (see the report)")
        return engine.EXIT_USER_ERROR
    return 0


def _read_queries(path: Path) -> list[str]:
    from reference_models.holmes.data.layout import read_utf8_text

    try:
        text = read_utf8_text(path)
    except engine.DataValidationError as exc:
        raise engine.UserError(f"--queries: {exc}") from None
    queries = [line.strip() for line in text.splitlines() if line.strip()]
    if not queries:
        raise engine.UserError(f"--queries {path}: holds no query")
    return queries


def run_search(args: argparse.Namespace) -> int:
    """``search``: JSON (or a table on a terminal) on standard output."""
    _require_video_extra()
    from reference_models.holmes.videos.search import GallerySearch, format_answers

    queries = [args.query] if args.query is not None else _read_queries(args.queries)
    if any(not q.strip() for q in queries):
        raise engine.UserError("--query: an empty query; say what the moment shows")
    _require_faiss(args.index)
    searcher = GallerySearch(args.checkpoint, args.gallery, device=args.device, index=args.index,
                             rebuild=args.rebuild_index)
    if args.k > searcher.num_videos:
        raise engine.UserError(f"-k {args.k}: the gallery holds {searcher.num_videos} videos")
    answers = searcher.search(queries, k=args.k, risk=args.risk)
    table = args.format == "table" or (args.format == "auto" and sys.stdout.isatty())
    if table:
        print(format_answers(answers))
    else:
        print(json.dumps({"answers": [a.to_dict() for a in answers]}, indent=2))
    return 0


def resolve_data_root(args: argparse.Namespace) -> None:
    """Fill ``--collection`` / ``--visual-feature`` left out from the data root's ``extraction.json`` (else the
    MS-SL defaults ``tvr`` / ``i3d_resnet``)."""
    if not hasattr(args, "data_root") or not hasattr(args, "collection"):
        return
    record = None
    path = Path(args.data_root) / "extraction.json"
    if path.is_file():
        record = engine.read_json_file(path, "--data-root")
    if args.collection is None:
        args.collection = record["collection"] if record else "tvr"
    if args.visual_feature is None:
        args.visual_feature = record["visual_feature"] if record else "i3d_resnet"
