"""``python -m reference_models.hud demo|train|evaluate|validate|ablation``: the CVR reference model's command line.

* ``demo --seed S --output-dir D``: writes the embedded CVR benchmark (seed ``S``; ``--benchmark covr-regime``:
  the instance in the paper's regime) to ``D/data``, trains HUD and the base on it (``D/hud``, ``D/base``) and
  writes ``D/results.json`` with both models' test recalls.
* ``train --data-root ROOT --output-dir OUT [--method hud|base] [--derivative N] [--epochs N] [--device D]``.
* ``evaluate --checkpoint OUT/best.pt --data-root ROOT [--split test]``.
* ``validate --data-root ROOT``: reads every file, prints sizes and edit types, or the first problem.
* ``ablation --seed S --output-dir D``: HUD and its Table 4 derivatives D#1-D#9 on the embedded benchmark.

Every split's CSV, embedding folder (or ``.h5`` file) and text features can be pointed elsewhere with
``--annotation-<split>``, ``--embeddings-<split>`` and ``--text-features-<split>``, as CoVR's configs do. A problem
with the data, a flag or a file is one ``error: ...`` line (exit status 2), and nothing is written.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from evidential_prvr.probabilistic import HUD_DERIVATIVES
from reference_models import engine
from reference_models.hud.benchmark import BENCHMARKS, benchmark_spec, generate_cvr_benchmark
from reference_models.hud.config import DERIVATIVE_CHOICES, HUDRunConfig
from reference_models.hud.data import (
    SPLITS,
    SplitPaths,
    Vocabulary,
    load_cvr_split,
    read_annotations,
    validate_cvr_root,
)
from reference_models.hud.metrics import evaluate_split
from reference_models.hud.model import METHODS, BackboneSettings
from reference_models.hud.task import CVRTask, build_cvr_model

__all__ = ["main", "build_parser", "run_variant"]


def _data_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--data-root", type=Path, required=required,
                        help="ROOT with annotation/{train,val,test}.csv and embeddings/ (CoVR layout)")
    for split in SPLITS:
        parser.add_argument(f"--annotation-{split}", type=Path, help=f"the {split} CSV (default ROOT/annotation/{split}.csv)")
        parser.add_argument(f"--embeddings-{split}", type=Path, help=f"the {split} embedding folder or .h5 file")
        parser.add_argument(f"--text-features-{split}", type=Path, help=f"precomputed {split} text tokens (HDF5 per row)")


def _config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--method", choices=tuple(METHODS), default="hud", help="HUD or its base (default: hud)")
    parser.add_argument("--derivative", type=int, choices=DERIVATIVE_CHOICES, default=0,
                        help="HUD Table 4 derivative D#N (0 = full HUD)")
    parser.add_argument("--lr", type=engine.positive_number, default=HUDRunConfig.lr,
                        help=f"learning rate (default: {HUDRunConfig.lr:g})")
    parser.add_argument("--batch-size", type=engine.int_at_least(2), default=HUDRunConfig.batch_size,
                        help=f"triplets (reference video, edit text, target video) per batch, >= 2 (default: {HUDRunConfig.batch_size})")


def build_parser() -> argparse.ArgumentParser:
    parser = engine.OneLineParser(prog="python -m reference_models.hud", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=engine.OneLineParser)
    demo = sub.add_parser("demo", help="HUD vs base on the embedded CVR benchmark")
    engine.add_run_arguments(demo, "runs/hud_demo")
    _scale_argument(demo)
    train = sub.add_parser("train", help="train one model on a data root")
    _data_arguments(train)
    _config_arguments(train)
    engine.add_run_arguments(train, "runs/hud_train")
    evaluate = sub.add_parser("evaluate", help="recalls of a checkpoint on a split")
    _data_arguments(evaluate)
    evaluate.add_argument("--checkpoint", type=Path, required=True, help="best.pt or last.pt of a run")
    evaluate.add_argument("--split", choices=SPLITS, default="test", help="the split to score (default: test)")
    evaluate.add_argument("--output", type=Path, help="also write the metrics to this JSON file")
    engine.add_device_arguments(evaluate)
    validate = sub.add_parser("validate", help="check a data root")
    _data_arguments(validate)
    ablation = sub.add_parser("ablation", help="HUD Table 4's derivatives on the embedded benchmark")
    engine.add_run_arguments(ablation, "runs/hud_ablation")
    _scale_argument(ablation)
    return parser


def _scale_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--benchmark-scale", type=engine.positive_number, default=1.0,
                        help="videos per split as a fraction of the benchmark's (same design; < 1 for quick checks)")
    parser.add_argument("--benchmark", choices=tuple(BENCHMARKS), default="embedded",
                        help="the named benchmark: embedded (default, the demo's) or covr-regime (the paper's regime)")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handlers = {"demo": _demo, "train": _train, "evaluate": _evaluate, "validate": _validate, "ablation": _ablation}
    return engine.run_main(handlers[args.command], args, program=argv is None)


# --- data ---------------------------------------------------------------------------------------------
def _split_paths(args: argparse.Namespace) -> dict[str, SplitPaths]:
    paths = {}
    for split in SPLITS:
        default = SplitPaths.default(args.data_root, split)
        paths[split] = SplitPaths(getattr(args, f"annotation_{split}") or default.annotation,
                                  getattr(args, f"embeddings_{split}") or default.embeddings,
                                  getattr(args, f"text_features_{split}"))
    return paths


def _load(paths: dict[str, SplitPaths], config: HUDRunConfig, vocabulary: Vocabulary | None = None):
    """The three splits and the vocabulary (built from the training edits unless given or text features are used)."""
    if vocabulary is None and paths["train"].text_features is None:
        vocabulary = Vocabulary.build([t.edit for t in read_annotations(paths["train"].annotation)])
    if (paths["train"].text_features is None) != all(p.text_features is None for p in paths.values()):
        raise engine.UserError("--text-features-<split>: give text features for every split or for none")
    return {s: load_cvr_split(s, p, vocabulary, max_words=config.max_words) for s, p in paths.items()}, vocabulary


# --- one run --------------------------------------------------------------------------------------------
def run_variant(config: HUDRunConfig, splits, vocabulary, out: Path, *, device: str = "cpu", seed: int = 0,
                resume: bool = False, overwrite: bool = False, show_progress: bool = False, amp: bool = False,
                verbose: bool = True) -> dict[str, Any]:
    """Train ``config`` with the engine in ``out`` and return its val and test recalls (``out/results.json``)."""
    out = engine.prepare_output_folder(out)
    with engine.RunLock(out):
        engine.claim_output_folder(out, resume=resume, overwrite=overwrite)
        task = CVRTask(config, splits["train"], splits["val"], vocabulary)
        trainer = engine.Trainer(task, out, device=device, seed=seed, amp=amp, show_progress=show_progress,
                                 verbose=verbose)
        if overwrite and not resume:
            engine.clear_run(out)
        start = time.perf_counter()
        result = trainer.fit(resume=resume)
        model = trainer.load_best()
        test = evaluate_split(task.method, model, splits["test"], trainer.device, seed=config.eval_seed)
        results = {"config": config.to_dict(), "seed": seed, "test": test, "best_val_mean": result.best_metric,
                   "best_epoch": result.best_epoch, "epochs_completed": result.epochs_completed,
                   "train_seconds": time.perf_counter() - start}
        engine.write_json(out / "results.json", results)
    return results


def _train(args: argparse.Namespace) -> int:
    config = HUDRunConfig(method=args.method, derivative=args.derivative, lr=args.lr, batch_size=args.batch_size,
                          **({"epochs": args.epochs} if args.epochs else {}))
    splits, vocabulary = _load(_split_paths(args), config)  # every data problem is raised before anything is written
    results = run_variant(config, splits, vocabulary, args.output_dir, device=args.device, seed=args.seed,
                          resume=args.resume, overwrite=args.overwrite, show_progress=not args.no_progress, amp=args.amp)
    print(_table({config.method: results["test"]}))
    print(f"results written to {args.output_dir / 'results.json'}")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    state = engine.load_checkpoint(args.checkpoint)
    engine.require_keys(state, args.checkpoint, ("config", "model", "backbone", "vocabulary"))
    config = HUDRunConfig.from_dict(state["config"])
    vocabulary = None if state["vocabulary"] is None else Vocabulary(list(state["vocabulary"]))
    paths = _split_paths(args)
    split = load_cvr_split(args.split, paths[args.split], vocabulary, max_words=config.max_words)
    settings = BackboneSettings(**state["backbone"])
    if split.video_shape != (settings.frames, settings.tokens_per_frame, settings.video_dim):
        raise engine.UserError(f"{paths[args.split].embeddings}: videos of shape {split.video_shape}, the checkpoint "
                               f"was trained on {(settings.frames, settings.tokens_per_frame, settings.video_dim)}")
    model = build_cvr_model(config, settings)
    model.load_state_dict(state["model"])
    device = torch.device(args.device)
    metrics = evaluate_split(METHODS[config.method], model.to(device), split, device, seed=config.eval_seed)
    print(_table({config.method: metrics}))
    if args.output:
        engine.write_json(args.output, {args.split: metrics}, "--output")
    return 0


def _validate(args: argparse.Namespace) -> int:
    report = validate_cvr_root(_split_paths(args))
    for name, info in report.items():
        print(f"{name}: {info}")
    print("ok")
    return 0


# --- the embedded benchmark -------------------------------------------------------------------------------
def _benchmark(args: argparse.Namespace) -> tuple[dict, Vocabulary, Path, dict]:
    out = args.output_dir
    engine.claim_output_folder(out, resume=args.resume, overwrite=args.overwrite)
    data = out / "data"
    spec = benchmark_spec(args.benchmark).scaled(args.benchmark_scale)
    summary = generate_cvr_benchmark(data, seed=args.seed, spec=spec)
    config = HUDRunConfig()
    splits, vocabulary = _load({s: SplitPaths.default(data, s) for s in SPLITS}, config)
    return splits, vocabulary, data, summary


def _demo(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    splits, vocabulary, data, summary = _benchmark(args)
    results: dict[str, object] = {"benchmark": {"seed": args.seed, "edit_types": {s: summary[s] for s in SPLITS}}}
    for method in ("hud", "base"):
        config = HUDRunConfig(method=method, **({"epochs": args.epochs} if args.epochs else {}))
        results[method] = run_variant(config, splits, vocabulary, args.output_dir / method, device=args.device,
                                      seed=args.seed, resume=args.resume, overwrite=args.overwrite,
                                      show_progress=not args.no_progress, amp=args.amp, verbose=False)
    results["wall_seconds"] = time.perf_counter() - start
    engine.write_json(args.output_dir / "results.json", results)
    print(_table({m: results[m]["test"] for m in ("hud", "base")}))  # type: ignore[index]
    print(f"results written to {args.output_dir / 'results.json'} ({results['wall_seconds']:.0f} s)")
    return 0


def _ablation(args: argparse.Namespace) -> int:
    splits, vocabulary, data, _ = _benchmark(args)
    rows: dict[str, dict] = {}
    for number in (0, *HUD_DERIVATIVES):
        config = HUDRunConfig(derivative=number, **({"epochs": args.epochs} if args.epochs else {}))
        name = "HUD" if number == 0 else f"D#{number} {HUD_DERIVATIVES[number][0]}"
        rows[name] = run_variant(config, splits, vocabulary, args.output_dir / f"d{number}", device=args.device,
                                 seed=args.seed, resume=args.resume, overwrite=args.overwrite,
                                 show_progress=not args.no_progress, amp=args.amp, verbose=False)["test"]
        print(f"{name}: mean {rows[name]['mean']:.2f}", flush=True)
    engine.write_json(args.output_dir / "results.json", {"seed": args.seed, "test": rows})
    print(_table(rows))
    return 0


def _table(rows: dict[str, dict]) -> str:
    header = ["model", "R@1", "R@5", "R@10", "R@50", "mean", "pronoun", "explicit", "key_detail"]
    body = [[name, *(f"{m[k]:.2f}" for k in header[1:6]),
             *(f"{m['per_type'][t]['mean']:.2f}" if t in m["per_type"] else "-" for t in header[6:])]
            for name, m in rows.items()]
    return engine.format_table([header, *body])
