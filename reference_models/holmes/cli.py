"""Command line of the Holmes reference model: ``python -m reference_models.holmes <command>``.

``train``
    Train on a data root in the MS-SL/GMMFormer layout and write ``<output-dir>/results.json`` with the
    test metrics (the ``val`` split stands in for ``test`` when a collection has no test captions, as for TVR).
``evaluate``
    Score a checkpoint (``best.pt`` or ``last.pt``) on a split.
``validate``
    Check a data root; exit 0, or exit 2 with a one-line message naming the file and the problem.
``demo``
    Write the embedded benchmark, train Holmes and the MIL baseline (and the DAB variant with
    ``--with-dab``), print a results table and write ``<output-dir>/results.json``.
``diagnose``
    Write an HTML report of a checkpoint's retrieval-time uncertainty (:mod:`reference_models.holmes.diagnose`).

``train``, ``evaluate`` and ``demo`` also fit the retrieval-time identification thresholds on the ``val`` split
and report selective retrieval and identification (:mod:`reference_models.holmes.selective`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from reference_models.holmes.config import ABLATIONS, PRESETS, HolmesConfig, preset
from reference_models.holmes.data import (
    DataValidationError,
    generate_embedded_benchmark,
    load_split,
    read_planted_types,
    validate_data_root,
)

__all__ = ["main", "build_parser", "run_comparison"]

EXIT_INVALID_DATA = 2


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of all four subcommands."""
    parser = argparse.ArgumentParser(prog="python -m reference_models.holmes", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def data_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data-root", required=True, help="folder holding <collection>/TextData and FeatureData")
        p.add_argument("--collection", default="tvr", help="collection name (default: tvr)")
        p.add_argument("--visual-feature", default="i3d_resnet", help="FeatureData sub-folder (default: i3d_resnet)")

    def run_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                       help="torch device (default: cuda when available, else cpu)")
        p.add_argument("--seed", type=int, default=0, help="seed of every generator and the batch order")
        p.add_argument("--num-workers", type=int, default=0, help="data-loader worker processes")
        p.add_argument("--no-progress", action="store_true", help="hide tqdm progress bars")

    train = sub.add_parser("train", help="train a model and write results.json with the test metrics")
    data_args(train)
    run_args(train)
    train.add_argument("--config", choices=sorted(PRESETS), default="embedded",
                       help="hyperparameter preset (default: embedded, suited to small data sets)")
    train.add_argument("--config-file", type=Path, help="JSON config (overrides --config)")
    train.add_argument("--ablation", choices=sorted(ABLATIONS), default="full", help="Table 3 row / baseline / dab")
    train.add_argument("--epochs", type=int, help="override the preset's number of epochs")
    train.add_argument("--videos-per-batch", type=int, help="override the preset's videos per batch")
    train.add_argument("--lr", type=float, help="override the preset's learning rate")
    train.add_argument("--output-dir", type=Path, default=Path("runs/holmes"), help="checkpoints, log, results.json")
    train.add_argument("--resume", action="store_true", help="continue from <output-dir>/last.pt")
    train.add_argument("--amp", action="store_true", help="mixed precision (torch.autocast)")

    evaluate = sub.add_parser("evaluate", help="score a checkpoint on a split")
    evaluate.add_argument("--checkpoint", type=Path, required=True, help="best.pt or last.pt of a run")
    data_args(evaluate)
    run_args(evaluate)
    evaluate.add_argument("--split", choices=("train", "val", "test"), default="test")
    evaluate.add_argument("--output", type=Path, help="write the metrics to this JSON file")

    validate = sub.add_parser("validate", help="check a data root (exit 0, or 2 with a one-line message)")
    data_args(validate)

    demo = sub.add_parser("demo", help="embedded benchmark: Holmes vs the MIL baseline")
    run_args(demo)
    demo.add_argument("--output-dir", type=Path, default=Path("runs/demo"), help="data, runs and results.json")
    demo.add_argument("--epochs", type=int, help="override the embedded preset's number of epochs")
    demo.add_argument("--with-dab", action="store_true", help="also train the DAB variant (issue 5)")

    from reference_models.holmes.diagnose import add_diagnose_parser

    add_diagnose_parser(sub, data_args)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    args = build_parser().parse_args(argv)
    handler = {"train": _train, "evaluate": _evaluate, "validate": _validate, "demo": _demo,
               "diagnose": _diagnose}[args.command]
    try:
        return handler(args)
    except DataValidationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID_DATA


# --- validate -------------------------------------------------------------------------------------
def _validate(args: argparse.Namespace) -> int:
    try:
        validate_data_root(args.data_root, args.collection, args.visual_feature)
    except DataValidationError as exc:
        print(f"invalid data root: {exc}", file=sys.stderr)
        return EXIT_INVALID_DATA
    except (OSError, ValueError) as exc:  # anything else the data raises: still one line, no traceback
        print(f"invalid data root: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        return EXIT_INVALID_DATA
    print(f"ok: {Path(args.data_root) / args.collection} ({args.visual_feature})")
    return 0


# --- train ----------------------------------------------------------------------------------------
def _config_from_args(args: argparse.Namespace) -> HolmesConfig:
    cfg = HolmesConfig.from_json(args.config_file) if args.config_file else preset(args.config)
    if args.ablation != "full":
        cfg = cfg.with_ablation(args.ablation)
    optim: dict[str, Any] = {}
    if args.epochs is not None:
        optim["epochs"] = args.epochs
    if args.videos_per_batch is not None:
        optim["videos_per_batch"] = args.videos_per_batch
    if args.lr is not None:
        optim["lr"] = args.lr
    return cfg.replace(optim=optim) if optim else cfg


def _load_splits(root, collection, feature, cfg: HolmesConfig, names: Sequence[str]) -> dict[str, Any]:
    splits: dict[str, Any] = {}
    for name in names:
        try:
            splits[name] = load_split(root, collection, feature, name, max_query_len=cfg.optim.max_query_len)
        except DataValidationError:
            if name != "test":
                raise
            # MS-SL's TVR (and some other releases) evaluate on val: use it when there is no test file.
            splits[name] = splits["val"]
    return splits


def _planted(root, collection) -> dict[str, str] | None:
    try:
        return read_planted_types(root, collection)
    except (FileNotFoundError, ValueError):
        return None


def _train(args: argparse.Namespace) -> int:
    from reference_models.holmes.evaluate import evaluate_retrieval, model_parameters
    from reference_models.holmes.selective import fit_retrieval_uncertainty, format_uncertainty_tables
    from reference_models.holmes.trainer import Trainer

    cfg = _config_from_args(args)
    splits = _load_splits(args.data_root, args.collection, args.visual_feature, cfg, ("train", "val", "test"))
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg.to_json(out / "config.json")
    trainer = Trainer(cfg, splits["train"], splits["val"], out, device=args.device, seed=args.seed, amp=args.amp,
                      show_progress=not args.no_progress, num_workers=args.num_workers, verbose=True)
    result = trainer.fit(resume=args.resume)
    model = trainer.load_best()
    planted = _planted(args.data_root, args.collection)
    uncertainty = fit_retrieval_uncertainty(model, trainer.objective, splits["val"], cfg, device=args.device,
                                            planted_types=planted, kl_margin=True)
    test = evaluate_retrieval(model, splits["test"], cfg, device=args.device, planted_types=planted,
                              identifier=trainer.objective.identifier(), uncertainty=uncertainty)
    results = {
        "config": cfg.to_dict(),
        "seed": args.seed,
        "test_split": splits["test"].split,
        "test": test.to_dict(),
        "best_val_sumr": result.best_sumr,
        "best_epoch": result.best_epoch,
        "epochs_completed": result.epochs_completed,
        "stopped_early": result.stopped_early,
        "efficiency": {**test.efficiency, "train_seconds_per_epoch": result.train_time_per_epoch,
                       "parameters_millions": model_parameters(model) / 1e6},
    }
    _write_json(out / "results.json", results)
    print(_format_table({cfg.name: results["test"]}))
    print(format_uncertainty_tables({cfg.name: results["test"]}))
    print(f"results written to {out / 'results.json'}")
    return 0


# --- evaluate -------------------------------------------------------------------------------------
def _evaluate(args: argparse.Namespace) -> int:
    from reference_models.holmes.checkpoint import load_checkpoint
    from reference_models.holmes.evaluate import evaluate_retrieval
    from reference_models.holmes.factory import build_model
    from reference_models.holmes.objective import HolmesObjective
    from reference_models.holmes.selective import fit_retrieval_uncertainty, format_uncertainty_tables

    state = load_checkpoint(args.checkpoint, map_location=args.device)
    cfg = HolmesConfig.from_dict(state["config"])
    splits = _load_splits(args.data_root, args.collection, args.visual_feature, cfg, ("val", args.split))
    split = splits[args.split]
    if (split.visual_dim, split.text_dim) != (state["visual_dim"], state["text_dim"]):
        print(f"error: checkpoint expects (D_v, D_t) = ({state['visual_dim']}, {state['text_dim']}), "
              f"data has ({split.visual_dim}, {split.text_dim})", file=sys.stderr)
        return EXIT_INVALID_DATA
    model = build_model(cfg, split.visual_dim, split.text_dim, state["n_clips"], state["n_frames"]).to(args.device)
    model.load_state_dict(state["model"])
    objective = HolmesObjective(cfg, cfg.model.hidden_size)
    planted = _planted(args.data_root, args.collection)
    uncertainty = fit_retrieval_uncertainty(model, objective, splits["val"], cfg, device=args.device,
                                            planted_types=planted)
    result = evaluate_retrieval(model, split, cfg, device=args.device, identifier=objective.identifier(),
                                planted_types=planted, uncertainty=uncertainty)
    print(_format_table({f"{cfg.name} ({split.split})": result.to_dict()}))
    print(format_uncertainty_tables({f"{cfg.name} ({split.split})": result.to_dict()}))
    if args.output:
        _write_json(args.output, result.to_dict())
    return 0


# --- diagnose -------------------------------------------------------------------------------------
def _diagnose(args: argparse.Namespace) -> int:
    from reference_models.holmes.diagnose import run_diagnose

    return run_diagnose(args)


# --- demo -----------------------------------------------------------------------------------------
def _demo(args: argparse.Namespace) -> int:
    if args.device == "cpu":
        torch.set_num_threads(max(1, min(torch.get_num_threads(), 2)))
    out = Path(args.output_dir)
    start = time.perf_counter()
    generate_embedded_benchmark(out / "data", "embedded", seed=args.seed)
    base = preset("embedded")
    if args.epochs is not None:
        base = base.replace(optim={"epochs": args.epochs})
    results = run_comparison(out / "data", "embedded", "synthetic", base, out, seed=args.seed, device=args.device,
                             with_dab=args.with_dab, show_progress=not args.no_progress,
                             num_workers=args.num_workers)
    results["total_seconds"] = time.perf_counter() - start
    _write_json(out / "results.json", results)
    print(_format_table({k: v for k, v in results.items() if k in ("holmes", "baseline", "dab")}))
    from reference_models.holmes.selective import format_uncertainty_tables

    print(format_uncertainty_tables({k: v for k, v in results.items() if k in ("holmes", "baseline", "dab")}))
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
    from reference_models.holmes.evaluate import evaluate_retrieval, model_parameters
    from reference_models.holmes.selective import fit_retrieval_uncertainty
    from reference_models.holmes.trainer import Trainer

    splits = _load_splits(data_root, collection, visual_feature, config, ("train", "val", "test"))
    planted = _planted(data_root, collection)
    variants = {"holmes": config.with_ablation("full"), "baseline": config.with_ablation("baseline")}
    if with_dab:
        variants["dab"] = config.with_ablation("dab")
    results: dict[str, Any] = {"seed": seed, "device": str(device), "config": config.to_dict()}
    for name, cfg in variants.items():
        t0 = time.perf_counter()
        trainer = Trainer(cfg, splits["train"], splits["val"], Path(output_dir) / name, device=device, seed=seed,
                          show_progress=show_progress, num_workers=num_workers, verbose=True)
        fit = trainer.fit()
        model = trainer.load_best()
        uncertainty = fit_retrieval_uncertainty(model, trainer.objective, splits["val"], cfg, device=device,
                                                planted_types=planted, kl_margin=True)
        test = evaluate_retrieval(model, splits["test"], cfg, device=device, planted_types=planted,
                                  identifier=trainer.objective.identifier(), uncertainty=uncertainty).to_dict()
        test["best_epoch"] = fit.best_epoch
        test["best_val_sumr"] = fit.best_sumr
        test["train_seconds"] = time.perf_counter() - t0
        test["efficiency"]["train_seconds_per_epoch"] = fit.train_time_per_epoch
        results[name] = test
        print(f"[{name}] test SumR {test['recall']['SumR']:.1f} (best val epoch {fit.best_epoch + 1}, "
              f"{test['train_seconds']:.0f}s)", flush=True)
    return results


# --- output ---------------------------------------------------------------------------------------
def _finite_or_none(value: Any) -> Any:
    """Standard JSON: NaN/inf (e.g. precision of a type never identified) become ``null``."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value


def _write_json(path: Path, data: dict[str, Any]) -> None:
    data = _finite_or_none(data)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def _pct(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{100 * value:.0f}"


def _format_table(rows: dict[str, dict[str, Any]]) -> str:
    """A plain-text table: recalls, per-type R@1 and identification precision/recall per row."""
    header = ["model", "R@1", "R@5", "R@10", "R@100", "SumR", "R@1 prec.", "R@1 poly.", "R@1 under.",
              "ident P/R prec.", "ident P/R poly.", "ident P/R under."]
    lines = []
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
    widths = [max(len(str(r[i])) for r in [header, *lines]) for i in range(len(header))]
    fmt = lambda r: "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, lines)])
