"""Command line of the Holmes reference model:
``python -m reference_models.holmes {train,evaluate,validate,demo,diagnose}``.

``train``
    Train on a data root in the MS-SL/GMMFormer layout and write ``<output-dir>/results.json`` with the
    test metrics. Only when the collection has *no* test caption file (as MS-SL's TVR) does the ``val``
    split stand in for ``test``, with a warning, a marked table row and ``"test_split": "val"`` plus a
    ``"test_split_note"`` in ``results.json``; any other problem with the test file fails the command.
    A folder that already holds a run is refused unless ``--resume`` or ``--overwrite`` is given, and the
    folder is locked for the run's duration.
``evaluate``
    Score a checkpoint (``best.pt`` or ``last.pt``) on a split; ``--index exact`` or ``--index faiss[:TYPE]``
    keeps only each query's top-k (streamed, or FAISS candidates re-ranked exactly) for large galleries.
``validate``
    Check a data root; exit 0, or exit 2 with a one-line message naming the file and the problem.
``demo``
    Write the embedded benchmark, train Holmes and the MIL baseline (and the DAB variant with
    ``--with-dab``), print a results table and write ``<output-dir>/results.json``.

``diagnose``
    Write an HTML report of a checkpoint's retrieval-time uncertainty (:mod:`reference_models.holmes.diagnose`).

Your own videos are indexed, searched and served by ``prvr-videos`` (:mod:`reference_models.videos`); given a
``--data-root`` that ``prvr-videos index`` wrote, ``--collection``, ``--visual-feature`` and ``--text-feature``
default to the names it recorded in its ``gallery.json``, so ``train --config clip --data-root ROOT`` adapts
Holmes to that gallery. The subcommands ``extract``, ``search`` and ``serve`` of version 2 are gone: each is
refused with one line naming its ``prvr-videos`` successor.

``train``, ``evaluate`` and ``demo`` also fit the retrieval-time identification thresholds on the ``val`` split
and report selective retrieval and identification (:mod:`reference_models.holmes.selective`).

Exit status: 0 on success; 2 for a problem the user can fix (bad data, flag, value, file or folder),
reported as one line on standard error naming it, without a traceback. A traceback means a bug.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from reference_models import engine
from reference_models.holmes.config import ABLATIONS, PRESETS, HolmesConfig, preset
from reference_models.holmes.data import (
    DataValidationError,
    PRVRSplit,
    generate_embedded_benchmark,
    load_split,
    read_planted_types,
    validate_data_root,
    video_overlap_warnings,
)
from reference_models.holmes.data.layout import GALLERY_RECORD, MS_SL_TEXT_FEATURE, CollectionPaths

__all__ = ["main", "build_parser", "run_comparison"]

#: Exit status of a problem the user can fix (one line on standard error, no traceback); also that of invalid data.
EXIT_USER_ERROR = EXIT_INVALID_DATA = engine.EXIT_USER_ERROR

_BATCH_WHY = " (a video's only negatives are the other videos of its batch)"
#: The demo's output folder when ``--output-dir`` is not given.
_DEMO_FOLDER = Path("runs/demo")
#: The own-videos subcommands of version 2, and where each went (``prvr-videos``, :mod:`reference_models.videos`).
MOVED_COMMANDS = {"extract": "prvr-videos index", "search": "prvr-videos search", "serve": "prvr-videos serve"}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of all four subcommands (usage errors are one line, exit status 2)."""
    parser = engine.OneLineParser(
        prog="python -m reference_models.holmes",
        description="The Holmes reference model: train, evaluate, validate data, run the demo, diagnose a checkpoint.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def data_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data-root", required=True, help="folder holding <collection>/TextData and FeatureData")
        p.add_argument("--collection", help="collection name (default: the one prvr-videos index recorded in the "
                                            "data root, else tvr)")
        p.add_argument("--visual-feature", help="FeatureData sub-folder (default: the one prvr-videos index "
                                                "recorded in the data root, else i3d_resnet)")
        p.add_argument("--text-feature", help="text features TextData/<name>_<collection>_query_feat.hdf5 (default: "
                                              f"the one prvr-videos index recorded, else {MS_SL_TEXT_FEATURE})")

    train = sub.add_parser("train", help="train a model and write results.json with the test metrics")
    data_args(train)
    engine.add_device_arguments(train)
    train.add_argument("--config", choices=sorted(PRESETS), default="embedded",
                       help="hyperparameter preset (default: embedded, suited to small data sets)")
    train.add_argument("--config-file", type=Path, help="JSON config (overrides --config)")
    train.add_argument("--ablation", choices=sorted(ABLATIONS), default="full", help="Table 3 row / baseline / dab")
    train.add_argument("--epochs", type=engine.int_at_least(1), help="override the preset's number of epochs")
    train.add_argument("--videos-per-batch", type=engine.int_at_least(2, _BATCH_WHY),
                       help="override the preset's videos per batch (>= 2)")
    train.add_argument("--lr", type=engine.positive_number, help="override the preset's learning rate")
    train.add_argument("--threshold-decay", type=float, metavar="D",
                       help="smooth the identification thresholds (Eq. 11) across batches with this EMA decay in "
                            "[0, 1) (default: the in-batch thresholds, as the paper)")
    engine.add_output_arguments(train, Path("runs/holmes"))
    train.add_argument("--amp", action="store_true", help="mixed precision (torch.autocast)")
    engine.add_host_memory_argument(train)
    engine.add_distributed_arguments(train)

    evaluate = sub.add_parser("evaluate", help="score a checkpoint on a split")
    evaluate.add_argument("--checkpoint", type=Path, required=True, help="best.pt or last.pt of a run")
    data_args(evaluate)
    engine.add_device_arguments(evaluate)
    evaluate.add_argument("--split", choices=("train", "val", "test"), default="test",
                          help="the split to score (default: test)")
    evaluate.add_argument("--output", type=Path, help="write the metrics to this JSON file")
    evaluate.add_argument("--index", type=_index_arg, metavar="{exact,faiss[:TYPE]}",
                          help="large galleries: keep each query's top-k, exact and streamed ('exact') or from a "
                               "FAISS index over the clips re-ranked exactly ('faiss', 'faiss:ivf', "
                               "'faiss:ivfpq:nprobe=16', 'faiss:hnsw:m=16', ...; needs the [faiss] extra); default: full score matrices")
    evaluate.add_argument("--candidates", type=engine.int_at_least(1), metavar="K",
                          help="with --index faiss: candidate videos re-ranked per query (default: the videos kept)")

    validate = sub.add_parser("validate", help="check a data root (exit 0, or 2 with a one-line message)")
    data_args(validate)

    demo = sub.add_parser("demo", help="embedded benchmark: Holmes vs the MIL baseline")
    engine.add_device_arguments(demo)
    demo.set_defaults(threads_at_most=2)  # at most two, as the demo always ran (its figures were measured so)
    demo.add_argument("--output-dir", type=Path,
                      help=f"data, runs and results.json (default: {_DEMO_FOLDER}, or {_DEMO_FOLDER}-2, -3, ... when an "
                           "earlier demo is there; a folder named here that holds a run needs --overwrite)")
    demo.add_argument("--overwrite", action="store_true", help="replace the runs already in --output-dir")
    demo.add_argument("--epochs", type=engine.int_at_least(1), help="override the embedded preset's number of epochs")
    demo.add_argument("--with-dab", action="store_true", help="also train the DAB variant")

    from reference_models.holmes.diagnose import add_diagnose_parser

    add_diagnose_parser(sub, data_args, engine.device_arg)
    return parser


def resolve_data_root(args: argparse.Namespace) -> None:
    """Fill ``--collection``, ``--visual-feature`` and ``--text-feature`` left out from the data root's
    ``gallery.json`` (written by ``prvr-videos index``), else the MS-SL defaults ``tvr``, ``i3d_resnet`` and
    ``roberta``."""
    if not hasattr(args, "data_root") or not hasattr(args, "collection"):
        return
    path = Path(args.data_root) / GALLERY_RECORD
    record = engine.read_json_file(path, "--data-root") if path.is_file() else {}
    if not isinstance(record, dict):
        raise engine.UserError(f"--data-root {args.data_root}: {GALLERY_RECORD} is not a JSON object")
    for name, default in (("collection", "tvr"), ("visual_feature", "i3d_resnet"),
                          ("text_feature", MS_SL_TEXT_FEATURE)):
        if getattr(args, name) is None:
            setattr(args, name, str(record.get(name, default)))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status (0 ok, 2 a problem the user can fix)."""
    import sys

    given = list(sys.argv[1:] if argv is None else argv)
    if given and given[0] in MOVED_COMMANDS:
        engine.print_line("error", f"{given[0]} moved in version 3.0: run {MOVED_COMMANDS[given[0]]} (python -m "
                                   f"reference_models.videos {MOVED_COMMANDS[given[0]].split()[1]}; --help lists its flags)")
        return engine.EXIT_USER_ERROR
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2): argparse printed it already
        return exc.code if isinstance(exc.code, int) else engine.EXIT_USER_ERROR
    handler = {"train": _train, "evaluate": _evaluate, "validate": _validate, "demo": _demo,
               "diagnose": _diagnose}[args.command]
    try:
        resolve_data_root(args)
    except engine.UserError as exc:
        engine.print_line("error", str(exc))
        return engine.EXIT_USER_ERROR
    return engine.run_main(handler, args, program=argv is None)


# --- validate -------------------------------------------------------------------------------------
def _validate(args: argparse.Namespace) -> int:
    try:
        warnings = validate_data_root(args.data_root, args.collection, args.visual_feature,
                                      text_feature=args.text_feature)
    except DataValidationError as exc:
        engine.print_line("invalid data root", str(exc))
        return EXIT_INVALID_DATA
    except (OSError, ValueError) as exc:  # anything else the data raises: still one line, no traceback
        engine.print_line("invalid data root", f"{type(exc).__name__}: {exc}")
        return EXIT_INVALID_DATA
    for warning in warnings:
        engine.print_line("warning", warning)
    print(f"ok: {Path(args.data_root) / args.collection} ({args.visual_feature})")
    return 0


# --- train ----------------------------------------------------------------------------------------
def _read_config_file(path: Path) -> HolmesConfig:
    """The config in the JSON file ``path``, or a :class:`~reference_models.engine.UserError` naming ``--config-file`` and the problem."""
    flag = f"--config-file {path}"
    data = engine.read_json_file(path, "--config-file")
    try:
        return HolmesConfig.from_dict(data)
    except (TypeError, ValueError) as exc:
        raise engine.UserError(f"{flag}: {exc}") from None


def _config_from_args(args: argparse.Namespace) -> HolmesConfig:
    source = f"--config-file {args.config_file}" if args.config_file else f"--config {args.config}"
    cfg = _read_config_file(args.config_file) if args.config_file else preset(args.config)
    optim: dict[str, Any] = {}
    schedule: dict[str, Any] = {} if args.epochs is None else {"epochs": args.epochs}
    if args.videos_per_batch is not None:
        optim["videos_per_batch"] = args.videos_per_batch
    if args.lr is not None:
        optim["lr"] = args.lr
    try:
        if args.ablation != "full":
            cfg = cfg.with_ablation(args.ablation)
        cfg = cfg.replace(optim=optim, schedule=schedule) if optim or schedule else cfg
        if args.threshold_decay is not None:
            cfg = cfg.replace(ablation={"threshold_decay": args.threshold_decay})
    except (TypeError, ValueError) as exc:
        raise engine.UserError(f"{source} with the given overrides: {exc}") from None
    if cfg.optim.videos_per_batch < 2:
        raise engine.UserError(f"{source}: optim.videos_per_batch must be >= 2{_BATCH_WHY}, "
                        f"got {cfg.optim.videos_per_batch}")
    return cfg


def _load_splits(root, collection, feature, cfg: HolmesConfig, names: Sequence[str],
                 text_feature: str = MS_SL_TEXT_FEATURE) -> tuple[dict[str, PRVRSplit], str | None]:
    """The named splits, and a note when ``val`` stands in for a missing test caption file (else ``None``).

    Only a *missing* test file falls back to ``val`` (MS-SL's TVR has none), with a warning on standard
    error; any other problem with it (a duplicate caption id, bad encoding, ...) raises.
    """
    splits: dict[str, PRVRSplit] = {}
    note = None
    test_file = CollectionPaths(Path(root), collection, feature).caption_file("test")
    for name in names:
        if name == "test" and not test_file.exists():
            if "val" not in splits:
                splits["val"] = load_split(root, collection, feature, "val", max_query_len=cfg.model.max_query_len,
                                           text_feature=text_feature)
            splits[name] = splits["val"]
            note = f"no test caption file {test_file}: the val split is reported in place of test"
            engine.print_line("warning", note)
            continue
        splits[name] = load_split(root, collection, feature, name, max_query_len=cfg.model.max_query_len,
                                  text_feature=text_feature)
    return splits, note


def _warn_shared_videos(splits: dict[str, PRVRSplit], root, collection, feature) -> None:
    """Warn (standard error) about evaluation splits that share videos with the training split."""
    distinct = {name: split.video_ids for name, split in splits.items()
                if not (name == "test" and split is splits.get("val"))}  # val standing in for test: once
    for warning in video_overlap_warnings(distinct, CollectionPaths(Path(root), collection, feature)):
        engine.print_line("warning", warning)


def _planted(root, collection) -> dict[str, str] | None:
    try:
        return read_planted_types(root, collection)
    except (FileNotFoundError, ValueError):
        return None


def _train(args: argparse.Namespace) -> int:
    cfg = _config_from_args(args)
    with engine.process_group_from_environment(args.device, args.dist_timeout) as run:  # under torchrun
        data = (args.data_root, args.collection, args.visual_feature)
        splits, test_note = _load_splits(*data, cfg, ("train", "val", "test"), args.text_feature)
        if run.is_writer:
            _warn_shared_videos(splits, *data)
        out = Path(args.output_dir)
        lock = run.on_writer(lambda: _claim_output_folder(args))  # rank 0 alone claims the folder
        try:
            return _train_locked(args, cfg, splits, test_note, out, run)
        finally:
            if lock is not None:
                lock.release()


def _claim_output_folder(args: argparse.Namespace) -> engine.RunLock:
    """Create and lock ``--output-dir``, refuse a run there unless ``--resume``/``--overwrite``, remove the
    temporary files of an interrupted write; returns the held lock."""
    out = engine.prepare_output_folder(args.output_dir)
    lock = engine.RunLock(out).acquire()
    try:
        if lock.takeover:
            engine.print_line("note", lock.takeover)
        engine.claim_output_folder(out, resume=args.resume, overwrite=args.overwrite)
        for path in engine.remove_orphan_temporaries(out):
            engine.print_line("note", f"removed {path}, left by an interrupted checkpoint write")
    except BaseException:
        lock.release()
        raise
    return lock


def _train_locked(args: argparse.Namespace, cfg: HolmesConfig, splits: dict[str, PRVRSplit], test_note: str | None,
                  out: Path, run: engine.DistributedRun) -> int:
    """The part of ``train`` that runs while rank 0 holds the output folder's lock (every rank trains; rank 0
    alone writes the folder and evaluates the best weights on the test split)."""
    from reference_models.engine import Trainer
    from reference_models.holmes.evaluate import evaluate_retrieval, model_parameters
    from reference_models.holmes.objective import HolmesObjective
    from reference_models.holmes.selective import fit_retrieval_uncertainty, format_uncertainty_tables
    from reference_models.holmes.task import HolmesTask

    # Fail in seconds, not at the first validation or the final test, on bad evaluation features.
    for name in dict.fromkeys(("val", "test")):
        splits[name].check_features()
    device = str(run.device) if run.is_distributed else args.device
    trainer = Trainer(HolmesTask(cfg, splits["train"], splits["val"]), out, device=device, seed=args.seed, amp=args.amp,
                      show_progress=not args.no_progress, num_workers=args.num_workers, verbose=True,
                      host_memory=args.host_memory, **({"distributed": run} if run.is_distributed else {}))
    if args.resume:
        try:
            trainer.resume()  # refuses another config, seed or data before anything is written
        except engine.CheckpointError as exc:
            raise engine.UserError(f"cannot resume: {exc}; restore it, or start over with --overwrite") from None
    elif args.overwrite and run.is_writer:
        for path in engine.clear_run(out):
            trainer.logger.info("--overwrite: removed %s", path)
    if run.is_writer:
        engine.write_text(out / "config.json", cfg.to_json() + "\n")
    result = trainer.fit()
    run.close()  # rank 0 evaluates in one process; the others are done
    if not run.is_writer:
        return 0
    model = trainer.load_best()
    objective = cast(HolmesObjective, trainer.objective)  # HolmesTask.build_objective's
    planted = _planted(args.data_root, args.collection)
    uncertainty = fit_retrieval_uncertainty(model, objective, splits["val"], cfg, device=device,
                                            planted_types=planted, kl_margin=True)
    test = evaluate_retrieval(model, splits["test"], cfg, device=device, planted_types=planted,
                              identifier=objective.identifier(), uncertainty=uncertainty)
    results = {
        "config": cfg.to_dict(),
        "seed": args.seed,
        "test_split": splits["test"].split,
        **({"test_split_note": test_note} if test_note else {}),
        "test": test.to_dict(),
        "best_val_sumr": result.best_metric,
        "best_epoch": result.best_epoch,
        "epochs_completed": result.epochs_completed,
        "stopped_early": result.stopped_early,
        "efficiency": {**test.efficiency, "train_seconds_per_epoch": result.train_time_per_epoch,
                       "parameters_millions": model_parameters(model) / 1e6},
    }
    engine.write_json(out / "results.json", results)
    print(_format_table({_row_name(cfg.name, test_note): results["test"]}))
    print(format_uncertainty_tables({_row_name(cfg.name, test_note): results["test"]}))
    if test_note:
        print(f"note: {test_note}")
    print(f"results written to {out / 'results.json'}")
    return 0


def _row_name(name: str, note: str | None, split: str | None = None) -> str:
    """A table row's label: the config name (and ``split``), marked loudly when val stands in for test."""
    if note:
        return f"{name} (VAL split: no test file)"
    return f"{name} ({split})" if split else name


# --- evaluate -------------------------------------------------------------------------------------
def _index_arg(text: str) -> str:
    """``--index``: checked when parsed, so that a misspelling is a one-line usage error."""
    from reference_models.holmes.evaluate import parse_index

    try:
        parse_index(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _require_faiss(index: str | None) -> None:
    if index is not None and index.startswith("faiss"):
        try:
            import faiss  # noqa: F401
        except ImportError:
            raise engine.UserError(f"--index {index} needs FAISS: pip install \"evidential-prvr[faiss]\" "
                                   "(faiss-cpu), or faiss-gpu for CUDA") from None


def _evaluate(args: argparse.Namespace) -> int:
    from reference_models.holmes.evaluate import evaluate_retrieval
    from reference_models.holmes.factory import build_model
    from reference_models.holmes.objective import HolmesObjective
    from reference_models.holmes.selective import fit_retrieval_uncertainty, format_uncertainty_tables

    _require_faiss(args.index)
    state = engine.load_checkpoint(args.checkpoint, map_location=args.device)
    engine.require_keys(state, args.checkpoint, ("config", "model", "visual_dim", "text_dim", "n_clips", "n_frames"))
    try:
        cfg = HolmesConfig.from_dict(state["config"])
    except (TypeError, ValueError) as exc:
        raise engine.CheckpointError(args.checkpoint, f"its config is not valid here ({exc})") from None
    names = tuple(dict.fromkeys(("val", args.split)))  # val: the identification thresholds are fitted there
    splits, note = _load_splits(args.data_root, args.collection, args.visual_feature, cfg, names, args.text_feature)
    split = splits[args.split]
    if (split.visual_dim, split.text_dim) != (state["visual_dim"], state["text_dim"]):
        raise engine.UserError(f"checkpoint {args.checkpoint} expects (D_v, D_t) = ({state['visual_dim']}, "
                        f"{state['text_dim']}), the data under --data-root have ({split.visual_dim}, {split.text_dim})")
    model = build_model(cfg, split.visual_dim, split.text_dim, state["n_clips"], state["n_frames"]).to(args.device)
    model.load_state_dict(state["model"])
    objective = HolmesObjective(cfg, cfg.model.hidden_size)
    planted = _planted(args.data_root, args.collection)
    uncertainty = fit_retrieval_uncertainty(model, objective, splits["val"], cfg, device=args.device,
                                            planted_types=planted)
    if args.candidates is not None and not (args.index or "").startswith("faiss"):
        raise engine.UserError("--candidates applies to --index faiss[:TYPE] only")
    result = evaluate_retrieval(model, split, cfg, device=args.device, identifier=objective.identifier(),
                                planted_types=planted, uncertainty=uncertainty, index=args.index,
                                num_candidates=args.candidates)
    row = _row_name(cfg.name, note, split.split)
    print(_format_table({row: result.to_dict()}))
    print(format_uncertainty_tables({row: result.to_dict()}))
    if note:
        print(f"note: {note}")
    if args.output:
        extra = {"split": split.split, **({"split_note": note} if note else {})}
        engine.write_json(args.output, {**result.to_dict(), **extra}, flag="--output")
    return 0


# --- diagnose -------------------------------------------------------------------------------------
def _diagnose(args: argparse.Namespace) -> int:
    from reference_models.holmes.diagnose import run_diagnose

    return run_diagnose(args)


# --- demo -----------------------------------------------------------------------------------------
def _demo_output_folder(args: argparse.Namespace) -> Path:
    """Where the demo writes: the default folder, or the next unused one after it, so that an earlier demo stays;
    a folder named with ``--output-dir`` that holds a run is refused unless ``--overwrite`` (its runs are cleared)."""
    if args.output_dir is None:
        return engine.unused_folder(_DEMO_FOLDER)
    out = Path(args.output_dir)
    if engine.holds_runs(out) and not args.overwrite:
        raise engine.OutputFolderError(f"--output-dir {out} already holds a demo; add --overwrite to replace it, or "
                                       "leave --output-dir out to write into a new folder")
    for name in ("", "holmes", "baseline", "dab"):
        engine.clear_run(out / name)
    return out


def _demo(args: argparse.Namespace) -> int:
    out = _demo_output_folder(args)
    print(f"writing the embedded benchmark, the runs and results.json to {out}", flush=True)
    start = time.perf_counter()
    generate_embedded_benchmark(out / "data", "embedded", seed=args.seed)
    base = preset("embedded")
    if args.epochs is not None:
        base = base.replace(schedule={"epochs": args.epochs})
    results = run_comparison(out / "data", "embedded", "synthetic", base, out, seed=args.seed, device=args.device,
                             with_dab=args.with_dab, show_progress=not args.no_progress,
                             num_workers=args.num_workers)
    results["total_seconds"] = time.perf_counter() - start
    engine.write_json(out / "results.json", results)
    from reference_models.holmes.selective import format_uncertainty_tables

    rows = {k: v for k, v in results.items() if k in ("holmes", "baseline", "dab")}
    print(_format_table(rows))
    print(format_uncertainty_tables(rows))
    print(f"results written to {out / 'results.json'} ({results['total_seconds']:.0f}s)")
    return 0


def run_comparison(
    data_root: str | Path,
    collection: str,
    visual_feature: str,
    config: HolmesConfig,
    output_dir: str | Path,
    *,
    seed: int = 0,
    device: str = "cpu",
    with_dab: bool = False,
    show_progress: bool = False,
    num_workers: int = 0,
) -> dict[str, Any]:
    """Train Holmes (``config``), the MIL baseline (and the DAB variant) and evaluate each on the test split.

    Returns a dict with keys ``"holmes"``, ``"baseline"`` (and ``"dab"``), each holding the
    :class:`~reference_models.holmes.evaluate.EvaluationResult` fields plus the best epoch, its validation
    SumR and the training time, and ``"seed"``, ``"device"`` and ``"config"``. Every variant is identified
    with the same identifier settings (those of ``config``), so the identification rows compare.
    """
    from reference_models.engine import Trainer
    from reference_models.holmes.evaluate import evaluate_retrieval
    from reference_models.holmes.objective import HolmesObjective
    from reference_models.holmes.selective import fit_retrieval_uncertainty
    from reference_models.holmes.task import HolmesTask

    splits, _ = _load_splits(data_root, collection, visual_feature, config, ("train", "val", "test"))
    planted = _planted(data_root, collection)
    variants = {"holmes": config.with_ablation("full"), "baseline": config.with_ablation("baseline")}
    if with_dab:
        variants["dab"] = config.with_ablation("dab")
    results: dict[str, Any] = {"seed": seed, "device": str(device), "config": config.to_dict()}
    for name, cfg in variants.items():
        t0 = time.perf_counter()
        trainer = Trainer(HolmesTask(cfg, splits["train"], splits["val"]), Path(output_dir) / name, device=device, seed=seed,
                          show_progress=show_progress, num_workers=num_workers, verbose=True)
        fit = trainer.fit()
        model = trainer.load_best()
        objective = cast(HolmesObjective, trainer.objective)  # HolmesTask.build_objective's
        uncertainty = fit_retrieval_uncertainty(model, objective, splits["val"], cfg, device=device,
                                                planted_types=planted, kl_margin=True)
        test = evaluate_retrieval(model, splits["test"], cfg, device=device, planted_types=planted,
                                  identifier=objective.identifier(), uncertainty=uncertainty).to_dict()
        test["best_epoch"] = fit.best_epoch
        test["best_val_sumr"] = fit.best_metric
        test["train_seconds"] = time.perf_counter() - t0
        test["efficiency"]["train_seconds_per_epoch"] = fit.train_time_per_epoch
        results[name] = test
        print(f"[{name}] test SumR {test['recall']['SumR']:.1f} (best val epoch {fit.best_epoch + 1}, "
              f"{test['train_seconds']:.0f}s)", flush=True)
    return results


# --- output ---------------------------------------------------------------------------------------
def _pct(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{100 * value:.0f}"


def _format_table(rows: dict[str, dict[str, Any]]) -> str:
    """A plain-text table: recalls, per-type R@1 and identification precision/recall per row."""
    header = ["model", "R@1", "R@5", "R@10", "R@100", "SumR", "R@1 prec.", "R@1 poly.", "R@1 under.",
              "ident P/R prec.", "ident P/R poly.", "ident P/R under."]
    lines = [header]
    for name, res in rows.items():
        rec = res["recall"]
        cells = [name] + [f"{rec.get(k, float('nan')):.1f}" for k in ("R@1", "R@5", "R@10", "R@100", "SumR")]
        per_type = res.get("per_type_r1") or {}
        cells += [f"{per_type[t]:.1f}" if t in per_type else "-" for t in ("precise", "polysemous", "underdetermined")]
        ident = (res.get("identification") or {}).get("per_type", {})
        for t in ("precise", "polysemous", "underdetermined"):
            m = ident.get(t)
            cells.append(f"{_pct(m['precision'])}/{_pct(m['recall'])}" if m else "-")
        lines.append(cells)
    return engine.format_table(lines)
