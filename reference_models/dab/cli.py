"""``python -m reference_models.dab demo|train|evaluate|validate|oracle``: the text-to-video reference model's command line.

* ``demo --seed S --output-dir D`` -- write the embedded benchmark to ``D/data``, train the base and DAB (and,
  with ``--ablations``, DAB's ablation rows), evaluate each on the 1k-A-style and the all-captions test, print
  the tables and write ``D/results.json`` (``{"dab": {"test": {"R@1", ..., "aurc": {...}}, ...}, "base": ...}``).
* ``train --data-root R --output-dir D`` -- train one variant on a data root and evaluate it.
* ``evaluate --checkpoint D/best.pt --data-root R`` -- evaluate a trained model on a split.
* ``validate --data-root R`` -- check a data root and print the split sizes; writes nothing.
* ``select-tau --output-dir D`` -- apply the PAC temperature rule of the guide on the development instance
  (:mod:`reference_models.dab.tau_selection`).
* ``oracle --benchmark B --seeds 0,1`` -- print the oracle ceilings of the named benchmark's instances
  (:func:`~reference_models.dab.benchmark.oracle_ceilings`); writes nothing.
* ``diagnose --comparison DIR [--method M]`` -- DAB's variance audit beside the paper's, from a comparison folder's
  runs (:mod:`reference_models.dab.audit`); ``diagnose --gradients --output-dir D`` -- train DAB once on a named
  benchmark's instance and record the gradient reaching each log-variance against the means' and AdamW's steps
  (:mod:`reference_models.dab.gradient_audit`), into ``D/gradients.json``.
* ``planted --seeds 0,1,2 --gains 1,100`` -- train DAB's objective on the planted world whose right variances are
  known (:mod:`reference_models.dab.planted`) and print what its variances learned; writes nothing unless
  ``--output`` is given.

Bad input (a file, a video id, a flag) is one ``error: ...`` line naming it, exit status 2, nothing written.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, cast

from reference_models.dab.benchmark import BENCHMARKS, format_oracle_ceilings, oracle_ceilings, spec_dict
from reference_models.dab.config import (
    BRIDGE_CONDITIONS,
    COSTS,
    DEMO_ABLATIONS,
    POOLINGS,
    RANKINGS,
    VARIANTS,
    T2VConfig,
    ablation_config,
)
from reference_models.dab.data import SPLITS, T2VSplit, load_t2v_split, validate_data_root
from reference_models.dab.diagnostics import benchmark_labels, format_diagnostics, model_diagnostics
from reference_models.dab.distill import distilled_model
from reference_models.dab.evaluate import evaluate_split, query_cost
from reference_models.dab.model import T2VModel
from reference_models.dab.task import T2VTask
from reference_models.engine import (
    CheckpointError,
    OneLineParser,
    Trainer,
    UserError,
    add_device_arguments,
    add_run_arguments,
    claim_output_folder,
    device_arg,
    format_table,
    int_at_least,
    load_checkpoint,
    require_keys,
    run_main,
    write_json,
)

__all__ = ["main", "build_parser", "run_variant"]

# Settings of demo (module attributes so that a test can shrink them).
DEMO_CONFIG = T2VConfig()
DEMO_SPEC = None  # None: the documented T2VBenchmarkSpec defaults


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="python -m reference_models.dab", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    demo = commands.add_parser("demo", help="embedded benchmark: train and compare the base and DAB")
    add_device_arguments(demo)
    demo.set_defaults(threads_at_most=2)  # at most two, as the demo always ran (its figures were measured so)
    demo.add_argument("--output-dir", type=Path, default=Path("runs/dab_demo"), help="data, runs and results.json")
    demo.add_argument("--overwrite", action="store_true", help="replace the runs already in --output-dir")
    demo.add_argument("--epochs", type=int_at_least(1), help="override the default number of epochs")
    demo.add_argument("--ablations", action="store_true", help=f"also train DAB's ablation rows ({', '.join(DEMO_ABLATIONS)})")

    train = commands.add_parser("train", help="train one variant on a data root")
    add_run_arguments(train)
    train.add_argument("--data-root", type=Path, required=True, help="folder in the MSR-VTT layout")
    train.add_argument("--variant", choices=VARIANTS, help="retrieval head (default: dab)")
    train.add_argument("--cost", choices=COSTS, help="Gaussian cost (default: kl)")
    train.add_argument("--pooling", choices=POOLINGS, help="frame pooling (default: mean)")
    train.add_argument("--n-steps", type=int_at_least(1), help="truncated bridge steps T' (default 32)")
    train.add_argument("--bridge-condition", choices=BRIDGE_CONDITIONS,
                       help="what DAB's bridge sees: the text alone or the text and its target video (default: text)")
    train.add_argument("--ranking", choices=RANKINGS, help="Gaussian heads: rank by the cost or the mean distance")
    train.add_argument("--config", type=Path, help="JSON file of config changes, e.g. {\"head\": {\"tau\": 8}}")

    evaluate = commands.add_parser("evaluate", help="evaluate a checkpoint on a split")
    evaluate.add_argument("--checkpoint", type=Path, required=True, help="best.pt or last.pt of a run")
    evaluate.add_argument("--data-root", type=Path, required=True, help="folder in the MSR-VTT layout")
    evaluate.add_argument("--split", choices=SPLITS, default="test", help="the split to score (default: test)")
    evaluate.add_argument("--device", type=device_arg, default="cpu", help="torch device (default: cpu)")
    evaluate.add_argument("--output", type=Path, help="also write the metrics to this JSON file")

    validate = commands.add_parser("validate", help="check a data root; writes nothing")
    validate.add_argument("--data-root", type=Path, required=True, help="folder in the MSR-VTT layout")

    oracle = commands.add_parser("oracle", help="print the oracle ceilings of a named benchmark's instances")
    oracle.add_argument("--benchmark", choices=tuple(BENCHMARKS), default="embedded", help="the named benchmark")
    oracle.add_argument("--seeds", type=_seed_list, default=[0], help="data seeds, e.g. 0,1 (default 0)")

    diagnose = commands.add_parser("diagnose", help="DAB's variance audit beside the paper's, or its gradients")
    mode = diagnose.add_mutually_exclusive_group(required=True)
    mode.add_argument("--comparison", type=Path, help="a DAB comparison folder: print the variance audit of --method")
    mode.add_argument("--gradients", action="store_true",
                      help="train DAB on a benchmark instance and record the gradients of its log-variances")
    diagnose.add_argument("--method", help="--comparison: the Gaussian-head method (default dab)")
    diagnose.add_argument("--base", help="--comparison: the model its confidence is set against (default: the base)")
    diagnose.add_argument("--n-boot", type=int_at_least(100), help="--comparison: bootstrap replicates (default 2000)")
    diagnose.add_argument("--output-dir", type=Path, help="--gradients: the instance and gradients.json go here")
    diagnose.add_argument("--benchmark", choices=tuple(BENCHMARKS),
                          help="--gradients: the named benchmark, whose config preset trains (default "
                               "msrvtt-regime-varied)")
    diagnose.add_argument("--data-seed", type=int_at_least(0),
                          help="--gradients: the instance (default 100, the development seed)")
    diagnose.add_argument("--seed", type=int_at_least(0), help="--gradients: the training seed (default 0)")
    diagnose.add_argument("--config", type=Path, help="--gradients: JSON of changes to the preset, e.g. "
                                                      "{\"head\": {\"logvar_gain\": 100}}")
    diagnose.add_argument("--epochs", type=int_at_least(1), help="--gradients: override the preset's epochs")
    diagnose.add_argument("--device", type=device_arg, default="cpu", help="torch device (default: cpu)")
    diagnose.add_argument("--output", type=Path, help="also write the result to this JSON file")

    planted = commands.add_parser("planted", help="DAB's objective on a world whose right variances are known")
    planted.add_argument("--seeds", type=_seed_list, default=[0, 1, 2], help="worlds and training seeds (default 0,1,2)")
    planted.add_argument("--gains", type=_gain_list, default=[1.0, 100.0],
                         help="log-variance gains to train with (default 1,100; 1 is DAB's)")
    planted.add_argument("--steps", type=int_at_least(1), default=400, help="AdamW updates (default 400)")
    planted.add_argument("--output", type=Path, help="also write the results to this JSON file")

    select = commands.add_parser("select-tau", help="choose DAB's PAC temperature rule on the development instance")
    select.add_argument("--benchmark", choices=tuple(BENCHMARKS), default="msrvtt-regime", help="the named benchmark")
    select.add_argument("--output-dir", type=Path, required=True, help="instance, runs and selection.json")
    select.add_argument("--epochs", type=int_at_least(1), help="override the preset's epochs")
    select.add_argument("--device", type=device_arg, default="cpu", help="torch device (default: cpu)")
    return parser


def _seed_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 0,1, got {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected integers >= 0 such as 0,1, got {text!r}")
    return values


def _gain_list(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers such as 1,100, got {text!r}") from None
    if not values or any(not v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected numbers > 0 such as 1,100, got {text!r}")
    return values


def _config_changes(path: Path | None, flag: str) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        changes = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{flag} {path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{flag} {path}: {exc}") from None
    if not isinstance(changes, dict):
        raise UserError(f"{flag} {path}: a JSON object of config sections is expected")
    return changes


#: The flags of each ``diagnose`` mode (a flag of the other mode is refused, not ignored).
_COMPARISON_FLAGS = ("method", "base", "n_boot")
_GRADIENT_FLAGS = ("output_dir", "benchmark", "data_seed", "seed", "config", "epochs")


def _diagnose(args: argparse.Namespace) -> int:
    mode, other = ("--comparison", _GRADIENT_FLAGS) if args.comparison is not None else ("--gradients",
                                                                                           _COMPARISON_FLAGS)
    given = [name for name in other if getattr(args, name) is not None]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise UserError(f"{flag} is not a flag of diagnose {mode}")
    if args.comparison is not None:
        from reference_models.dab.audit import format_variance_audit, variance_audit

        if not args.comparison.is_dir():
            raise UserError(f"--comparison {args.comparison}: no such folder")
        audit = variance_audit(args.comparison, args.method or "dab", base=args.base, n_boot=args.n_boot or 2000)
        print(format_variance_audit(audit))
        if args.output is not None:
            write_json(args.output, audit, flag="--output")
        return 0
    return _diagnose_gradients(args)


def _diagnose_gradients(args: argparse.Namespace) -> int:
    from reference_models.dab.benchmark import generate_t2v_benchmark
    from reference_models.dab.config import preset
    from reference_models.dab.diagnostics import benchmark_specificity
    from reference_models.dab.gradient_audit import format_gradient_audit, gradient_audit, specificity_probe

    if args.output_dir is None:
        raise UserError("--gradients needs --output-dir (the instance and gradients.json go there)")
    benchmark = args.benchmark or "msrvtt-regime-varied"
    data_seed = 100 if args.data_seed is None else args.data_seed
    seed = 0 if args.seed is None else args.seed
    try:
        config = preset(benchmark).replace(**_config_changes(args.config, "--config"))
        if args.epochs is not None:
            config = config.replace(optim={"epochs": args.epochs})
    except (ValueError, TypeError) as exc:
        raise UserError(f"settings: {exc}") from None
    data = args.output_dir / "data"
    meta_path = data / "benchmark_meta.json"
    if meta_path.is_file():  # an instance written by an earlier call: it must be the one asked for
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("seed") != data_seed or meta.get("spec") != json.loads(json.dumps(spec_dict(BENCHMARKS[benchmark]))):
            raise UserError(f"--output-dir {args.output_dir}: its data/ holds another instance than {benchmark} data seed "
                            f"{data_seed}; choose another --output-dir")
    else:
        generate_t2v_benchmark(data, seed=data_seed, spec=BENCHMARKS[benchmark])
    splits = _load(data, ("train", "test_all"), config.backbone.max_frames)
    try:
        audit = gradient_audit(config, splits["train"], seed=seed, device=args.device,
                               log=lambda line: print(line, flush=True))
    except ValueError as exc:
        raise UserError(f"settings: {exc}") from None
    print(format_gradient_audit(audit))
    specificity = (benchmark_specificity(data, splits["train"]), benchmark_specificity(data, splits["test_all"]))
    if specificity[0] is not None and specificity[1] is not None:
        audit["specificity_probe"] = specificity_probe(splits["train"].text, specificity[0], splits["test_all"].text,
                                                       specificity[1])
        p = audit["specificity_probe"]
        print(f"a linear function of the text features (what the log-variance layer reads at the start) predicts the "
              f"caption's specificity on the all-captions test with Spearman {p['spearman']:+.3f} "
              f"[{p['low']:+.3f}, {p['high']:+.3f}] ({p['n']:.0f} captions)")
    result = {"benchmark": benchmark, "data_seed": data_seed, "seed": seed,
              "config": config.to_dict(), **audit}
    write_json(args.output_dir / "gradients.json", result)
    if args.output is not None:
        write_json(args.output, result, flag="--output")
    print(f"written to {args.output_dir / 'gradients.json'} ({audit['seconds']:.0f} s of training)")
    return 0


def _planted(args: argparse.Namespace) -> int:
    import dataclasses

    from reference_models.dab.planted import PlantedRecipe, format_planted, planted_world, train_planted

    results = []
    for seed in args.seeds:
        world = planted_world(seed)
        for gain in args.gains:
            results.append(train_planted(world, PlantedRecipe(steps=args.steps, logvar_gain=gain), seed=seed))
            print(format_planted(results[-1:]).splitlines()[-1], flush=True)
    print(format_planted(results))
    if args.output is not None:
        write_json(args.output, {"results": [dataclasses.asdict(r) for r in results]}, flag="--output")
    return 0


def _select_tau(args: argparse.Namespace) -> int:
    from reference_models.dab.tau_selection import select_tau_rule

    result = select_tau_rule(args.output_dir, benchmark=args.benchmark, epochs=args.epochs, device=args.device)
    for rule, f in result["figures"].items():
        print(f"{rule}: validation R@1 {f['val_R@1']:.2f}, MnR {f['val_MnR']:.2f} (best epoch {f['best_epoch']:.0f}), "
              f"tau {f['tau_start']:.4g} -> {f['tau_end']:.4g}, {f['seconds']:.0f} s")
    print(f"chosen: {result['chosen']} ({result['reason']})")
    return 0


def _oracle(args: argparse.Namespace) -> int:
    for seed in args.seeds:
        print(format_oracle_ceilings(oracle_ceilings(seed, BENCHMARKS[args.benchmark])))
    return 0


def _load(root: Path, splits: tuple[str, ...], max_frames: int) -> dict[str, T2VSplit]:
    if not root.is_dir():
        raise UserError(f"--data-root {root}: no such folder")
    return {split: load_t2v_split(root, split, max_frames=max_frames) for split in splits}


def run_variant(config: T2VConfig, splits: dict[str, T2VSplit], out: Path, *, seed: int, device: str,
                show_progress: bool = False, resume: bool = False,
                data_root: Path | None = None) -> dict[str, Any]:
    """Train ``config`` on ``splits["train"]`` (selection on ``"val"``), evaluate the best epoch on the test
    splits present; returns the metrics by split plus the training summary, the per-query efficiency and, for the
    Gaussian heads, the uncertainty diagnostics (:mod:`reference_models.dab.diagnostics`, on ``test_all`` when
    present, by caption kind and number of events when ``data_root`` has a ``benchmark_meta.json``)."""
    start = time.perf_counter()
    trainer = Trainer(T2VTask(config, splits["train"], splits["val"]), out, device=device, seed=seed,
                      show_progress=show_progress)
    fit = trainer.fit(resume=resume)
    model = cast(T2VModel, trainer.load_best())  # the task's model
    if config.bridge.distill == "one-step":  # the second stage: the one-step bridge, into out/distilled.pt
        model = distilled_model(model, splits["train"].text, out, seed=seed, device=device, teacher=out / "best.pt",
                                extras=trainer.task.checkpoint_extras())
    result: dict[str, Any] = {"best_epoch": fit.best_epoch, "best_val_R@1": fit.best_metric}
    result["train_seconds"] = time.perf_counter() - start
    result["train_seconds_per_epoch"] = sum(h["train_seconds"] for h in fit.history) / max(len(fit.history), 1)
    for split in ("test", "test_all"):
        if split in splits:
            result[split] = evaluate_split(model, splits[split], device)
    result["efficiency"] = query_cost(model, splits.get("test", splits["val"]), device)
    name = next(s for s in ("test_all", "test", "val") if s in splits)
    video_events, query_kinds = (None, None) if data_root is None else benchmark_labels(data_root, splits[name])
    diagnostics = model_diagnostics(model, splits[name], device, video_events=video_events, query_kinds=query_kinds)
    if diagnostics is not None:
        result["diagnostics"] = {"set": name, **diagnostics}
    return result


def _print_diagnostics(results: dict[str, dict[str, Any]]) -> None:
    for name, result in results.items():
        if result.get("diagnostics"):
            print(f"uncertainty diagnostics of {name} ({result['diagnostics']['set']}):\n"
                  f"{format_diagnostics(result['diagnostics'])}")


def _summary_rows(results: dict[str, dict[str, Any]], split: str) -> list[list[str]]:
    rows = [["model", "R@1", "R@5", "R@10", "MdR", "MnR", "AURC kl_margin", "AURC max_score", "R@1@25%", "R@1@10%"]]
    for name, res in results.items():
        test = res[split]
        best = "kl_margin" if "kl_margin" in test["aurc"] else "max_score"
        rows.append([name, *(f"{test[k]:.1f}" for k in ("R@1", "R@5", "R@10", "MdR", "MnR")),
                     f"{test['aurc']['kl_margin']:.3f}" if "kl_margin" in test["aurc"] else "-",
                     f"{test['aurc']['max_score']:.3f}",
                     f"{test['R@1@25%'][best]:.1f}", f"{test['R@1@10%'][best]:.1f}"])
    return rows


def _demo(args: argparse.Namespace) -> int:
    from reference_models.dab.benchmark import generate_t2v_benchmark

    out = args.output_dir
    names = ["base", "dab", *(DEMO_ABLATIONS if args.ablations else ())]
    for name in names:
        claim_output_folder(out / name, resume=False, overwrite=args.overwrite)
    claim_output_folder(out, resume=False, overwrite=args.overwrite)
    start = time.perf_counter()
    config = DEMO_CONFIG
    if args.epochs is not None:
        config = config.replace(optim={"epochs": args.epochs})
    generate_t2v_benchmark(out / "data", seed=args.seed, spec=DEMO_SPEC)
    splits = _load(out / "data", SPLITS, config.backbone.max_frames)
    variants = {"base": config.replace(head={"variant": "base"}), "dab": config}
    if args.ablations:
        variants.update({name: ablation_config(config, name) for name in DEMO_ABLATIONS})
    results: dict[str, Any] = {}
    for name, variant in variants.items():
        results[name] = run_variant(variant, splits, out / name, seed=args.seed, device=args.device,
                                    data_root=out / "data",
                                    show_progress=not args.no_progress)
        print(f"[{name}] test R@1 {results[name]['test']['R@1']:.1f} MnR {results[name]['test']['MnR']:.1f} "
              f"({results[name]['train_seconds']:.0f}s)", flush=True)
    models = {k: v for k, v in results.items()}
    results.update({"seed": args.seed, "device": str(args.device), "config": config.to_dict(),
                    "total_seconds": time.perf_counter() - start})
    write_json(out / "results.json", results)
    for split, title in (("test", "1k-A-style test (one caption per video)"), ("test_all", "all-captions test")):
        print(f"{title}:\n{format_table(_summary_rows(models, split))}")
    _print_diagnostics(models)
    print(f"results written to {out / 'results.json'} ({results['total_seconds']:.0f}s)")
    return 0


def _train(args: argparse.Namespace) -> int:
    config = T2VConfig()
    if args.config is not None:
        try:
            changes = json.loads(args.config.read_text(encoding="utf-8"))
            config = config.replace(**changes)
        except FileNotFoundError:
            raise UserError(f"--config {args.config}: no such file") from None
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError, TypeError) as exc:
            raise UserError(f"--config {args.config}: {exc}") from None
    flags = {"head": {"variant": args.variant, "cost": args.cost, "ranking": args.ranking},
             "bridge": {"n_steps": args.n_steps, "condition": args.bridge_condition},
             "backbone": {"pooling": args.pooling}, "optim": {"epochs": args.epochs}}
    try:  # flags that were given override the --config file
        config = config.replace(**{section: {k: v for k, v in values.items() if v is not None}
                                   for section, values in flags.items()})
    except ValueError as exc:
        raise UserError(f"settings: {exc}") from None
    splits = _load(args.data_root, SPLITS, config.backbone.max_frames)  # before anything is written
    claim_output_folder(args.output_dir, resume=args.resume, overwrite=args.overwrite)
    result = run_variant(config, splits, args.output_dir, seed=args.seed, device=args.device,
                         data_root=args.data_root,
                         show_progress=not args.no_progress, resume=args.resume)
    write_json(args.output_dir / "results.json", {"config": config.to_dict(), **result})
    print(format_table(_summary_rows({config.head.variant: result}, "test")))
    _print_diagnostics({config.head.variant: result})
    return 0


def load_trained(path: Path, device: str = "cpu") -> T2VModel:
    """The model of a run's ``best.pt`` / ``last.pt``; :class:`CheckpointError` naming the file otherwise."""
    state = load_checkpoint(path, map_location=device)
    require_keys(state, path, ("config", "model", "frame_dim", "text_dim"))
    try:
        config = T2VConfig.from_dict(state["config"])
        model = T2VModel(int(state["frame_dim"]), int(state["text_dim"]), config)
        model.load_state_dict(state["model"])
    except (ValueError, TypeError, RuntimeError, KeyError) as exc:
        raise CheckpointError(path, f"not a checkpoint of reference_models.dab ({str(exc).splitlines()[0]})") from None
    return model.to(device)


def _evaluate(args: argparse.Namespace) -> int:
    model = load_trained(args.checkpoint, args.device)
    split = _load(args.data_root, (args.split,), model.config.backbone.max_frames)[args.split]
    frame_dim, text_dim = model.frame_dim, model.text_dim
    if split.frames.shape[2] != frame_dim or split.text.shape[1] != text_dim:
        raise UserError(f"--data-root {args.data_root}: features are {split.frames.shape[2]}/{split.text.shape[1]}-d, "
                        f"checkpoint {args.checkpoint} expects {frame_dim}/{text_dim}")
    metrics = evaluate_split(model, split, args.device)
    if args.output is not None:
        write_json(args.output, {"split": args.split, "checkpoint": str(args.checkpoint), **metrics}, flag="--output")
    print(format_table(_summary_rows({model.config.head.variant: {args.split: metrics}}, args.split)))
    return 0


def _validate(args: argparse.Namespace) -> int:
    if not args.data_root.is_dir():
        raise UserError(f"--data-root {args.data_root}: no such folder")
    sizes = validate_data_root(args.data_root)
    rows = [["split", "videos", "queries"], *([s, str(v["videos"]), str(v["queries"])] for s, v in sizes.items())]
    print(format_table(rows))
    print(f"{args.data_root}: OK")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = {"demo": _demo, "train": _train, "evaluate": _evaluate, "validate": _validate,
               "oracle": _oracle, "select-tau": _select_tau, "diagnose": _diagnose, "planted": _planted}[args.command]
    return run_main(handler, args, program=argv is None)
