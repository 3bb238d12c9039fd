"""``python -m reference_models.compare run|report``: a task's method vs its base over training seeds and
benchmark instances, with a hierarchical-bootstrap interval and a verdict (:doc:`/guide/comparisons`).

* ``run --task {holmes,hud,dab,videos} --seeds 0,1,2 --data-seeds 0,1 --out DIR`` trains the runs of those seeds
  that are not finished (each in ``DIR/runs/data<D>/seed<S>/<variant>``, resumed when interrupted, skipped
  when its ``ranks.json`` is there), then writes the report over every finished run (``--no-report``: not).
  Calls may split the grid (``--seeds 0`` in one, ``--seeds 1`` in another) and share ``DIR``.
  ``--benchmark tvr-regime`` (Holmes), ``covr-regime`` (HUD) or ``msrvtt-regime`` / ``msrvtt-regime-varied``
  (DAB): the named benchmark in the paper's regime instead of the embedded one.
* ``report --out DIR`` reads every finished run of ``DIR`` and writes ``DIR/results.json``, prints the table
  and draws ``DIR/comparison.png``.  ``--base M`` sets the methods against another of the comparison's methods instead of its base (e.g. Holmes
  with smoothed thresholds against Holmes itself).

``--task videos`` sets Holmes trained on a generated world's captions against the zero-shot search of the same
gallery (:mod:`reference_models.videos.comparison_runner`; needs the ``video`` extra).

This module sits above the tasks: it is the one place that knows all of them and the library's statistics
(:func:`evidential_prvr.metrics.compare_runs`); the engine (:mod:`reference_models.engine.seed_grid`) keeps the
task-agnostic half, the tasks their :class:`~reference_models.engine.ComparisonSpec` and per-query ranks.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from evidential_prvr.metrics import SELECTIVE_METRICS, compare_runs, compare_selective_runs
from reference_models import engine
from reference_models.engine import seed_grid as grid

__all__ = ["BENCHMARK_NAMES", "SCHEMA", "TASKS", "VERDICT_RULE", "ablation_table", "build_parser", "build_results",
           "format_ablation_table", "main", "plan_spec", "report", "runner_for"]

#: The tasks that have a comparison, and the module of each one's runner.
TASKS = {"holmes": "reference_models.holmes.comparison_runner", "hud": "reference_models.hud.comparison_runner",
         "dab": "reference_models.dab.comparison_runner", "videos": "reference_models.videos.comparison_runner"}
#: The ``schema`` field of ``results.json``.
SCHEMA = "evidential-prvr/comparison/1"
#: The verdict rule, as written in ``results.json`` (and in :doc:`/guide/comparisons`, before any number).
VERDICT_RULE = ("the method beats its base when the 95% hierarchical-bootstrap interval of the difference "
                "method - base of every headline metric on the primary set lies entirely on the better side of "
                "zero (above it; below it for MnR/MdR); it is worse when one such interval lies entirely on the "
                "worse side; otherwise the comparison cannot tell")
METHOD = ("hierarchical (three-level) bootstrap: data instances, then training seeds within an instance (each "
          "model's own), then queries within an instance (the same for both models); percentile interval")


#: The named benchmark instances of each task (``--benchmark``); the first is the default (the embedded one).
BENCHMARK_NAMES = {"holmes": ("embedded", "tvr-regime", "tvr-regime-sparse"), "hud": ("embedded", "covr-regime"),
                   "dab": ("embedded", "msrvtt-regime", "msrvtt-regime-varied"), "videos": ("generated-world",)}


def runner_for(task: str, *, epochs: int | None = None, scale: float = 1.0,
               benchmark: str | None = None) -> grid.ComparisonRunner:
    """The comparison runner of ``task`` (``reference_models.<task>.comparison.runner``) on the named benchmark
    (:data:`BENCHMARK_NAMES`; ``None``: the task's embedded benchmark)."""
    engine.check_choice(task, "--task", tuple(TASKS))
    module = importlib.import_module(TASKS[task])
    if benchmark is None or benchmark == BENCHMARK_NAMES[task][0]:
        return module.runner(epochs=epochs, scale=scale)
    if benchmark not in BENCHMARK_NAMES[task]:
        raise engine.UserError(f"--benchmark {benchmark}: task {task} has the benchmarks "
                               f"{', '.join(BENCHMARK_NAMES[task])}")
    return module.runner(epochs=epochs, scale=scale, benchmark=benchmark)


def _seed_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip() != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 0,1,2, got {text!r}") from None
    if not values or any(v < 0 for v in values) or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected distinct integers >= 0 such as 0,1,2, got {text!r}")
    return values


def _name_list(text: str) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected distinct comma-separated names such as dab,prob, got {text!r}")
    return values


def build_parser() -> engine.OneLineParser:
    parser = engine.OneLineParser(
        prog="python -m reference_models.compare",
        description="A task's method vs its base over training seeds and benchmark instances: per-query ranks of "
                    "every run, a hierarchical-bootstrap interval of each metric's difference, and a verdict.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=engine.OneLineParser)
    run = sub.add_parser("run", help="train the runs not done yet, then write the report")
    run.add_argument("--task", choices=tuple(TASKS), required=True,
                     help="the reference model whose method and base are compared")
    run.add_argument("--seeds", type=_seed_list, default=[0, 1, 2], help="training seeds (default 0,1,2)")
    run.add_argument("--data-seeds", type=_seed_list, default=[0, 1], help="benchmark instances (default 0,1)")
    run.add_argument("--out", type=Path, required=True, help="the comparison folder (data, runs, results)")
    run.add_argument("--epochs", type=engine.int_at_least(1), help="override the task's default epochs")
    run.add_argument("--benchmark-scale", type=engine.positive_number, default=1.0,
                     help="videos per split as a fraction of the benchmark's (same design)")
    run.add_argument("--benchmark", choices=sorted({n for names in BENCHMARK_NAMES.values() for n in names}),
                     help="the named benchmark instance (default: the task's embedded one; the paper's regime: "
                          "holmes: tvr-regime, hud: covr-regime, dab: msrvtt-regime)")
    run.add_argument("--device", type=engine.device_arg, default="cuda" if torch.cuda.is_available() else "cpu",
                     help="torch device of every run (default: cuda when available, else cpu)")
    run.add_argument("--no-progress", action="store_true", help="hide tqdm progress bars")
    engine.add_threads_argument(run, at_most=2)
    run.add_argument("--no-report", action="store_true", help="train only; merge later with report")
    run.add_argument("--methods", type=_name_list,
                     help="which methods to train against the base, in this order (a task with ablations: "
                          "dab; default: the task's method)")
    _report_arguments(run)
    rep = sub.add_parser("report", help="merge every finished run of --out: results.json, table, figure")
    rep.add_argument("--out", type=Path, required=True, help="the comparison folder written by run")
    rep.add_argument("--methods", type=_name_list,
                     help="which methods to report against the base (default: the comparison's method); with "
                          "several, also the ablation table (ablations.json)")
    rep.add_argument("--base", help="one of the comparison's methods as the base instead of its own base (e.g. "
                                    "holmes with --methods holmes-ema: a method against Holmes itself); files "
                                    "results-<method>-vs-<base>.json")
    _report_arguments(rep)
    return parser


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n-boot", type=engine.int_at_least(100), default=2000, help="bootstrap replicates")
    parser.add_argument("--bootstrap-seed", type=engine.int_at_least(0), default=0,
                        help="seed of the bootstrap's random stream (the same runs give the same results.json)")


def _compare(collected: dict[str, Any], spec: grid.ComparisonSpec, n_boot: int, seed: int) -> dict[str, Any]:
    comparisons = compare_runs(collected["method"], collected["base"], spec.metrics, n_boot=n_boot, ks=spec.ks,
                               generator=seed)
    return {m: c.to_dict() for m, c in comparisons.items()}


def _compare_selective(collected: dict[str, Any], n_boot: int, seed: int) -> dict[str, Any] | None:
    """``{"confidence": {"method": name, "base": name}, "metrics": {figure: comparison}}``: the selective-retrieval
    figures (:data:`~evidential_prvr.metrics.SELECTIVE_METRICS`) of each model by its own confidence, with the
    recall metrics' interval (the same replicates' stream); ``None`` when some run has no confidence."""
    confidence = collected["confidence"]
    if confidence is None:
        return None
    comparisons = compare_selective_runs(confidence["method"], collected["method"], confidence["base"],
                                         collected["base"], SELECTIVE_METRICS, n_boot=n_boot, generator=seed)
    return {"confidence": confidence["names"], "metrics": {m: c.to_dict() for m, c in comparisons.items()}}


def plan_spec(plan: dict[str, Any]) -> grid.ComparisonSpec:
    """The :class:`~reference_models.engine.ComparisonSpec` a ``comparison.json`` was written with, with the
    ablations its task offers today (they are not part of the plan)."""
    saved = plan["spec"]
    ablations = runner_for(str(plan["task"])).spec.ablations
    return grid.ComparisonSpec(str(saved["method"]), str(saved["base"]), tuple(saved["headline"]),
                               tuple(saved["metrics"]), tuple(saved["ks"]), tuple(saved["sets"]), str(saved["primary"]),
                               ablations)


def build_results(records: list[grid.RunRecord], plan: dict[str, Any], *, n_boot: int = 2000,
                  bootstrap_seed: int = 0, method: str | None = None, base: str | None = None,
                  out: Path | None = None) -> dict[str, Any]:
    """The content of ``results.json`` (schema: :doc:`/guide/comparisons`) from the finished runs; ``method``:
    one of the comparison's methods (default: the one its plan names); ``base``: another of its methods in
    place of its base; ``out``: the comparison folder, whose instances' oracle ceilings
    (:func:`~reference_models.engine.seed_grid.collect_ceilings`) are then carried as ``ceilings``."""
    spec = plan_spec(plan)
    offered = spec.methods
    if method is not None:
        spec = spec.against(method)
    if base is not None and base != spec.base:
        if base not in offered or base == spec.method:
            raise engine.UserError(f"--base {base}: choose another of the comparison's methods "
                                   f"({', '.join(m for m in offered if m != spec.method)}) or {spec.base}")
        spec = dataclasses.replace(spec, base=base, ablations=tuple(a for a in offered if a not in (base, spec.method)))
    sets: dict[str, Any] = {}
    for set_name in spec.sets:
        collected = grid.collect_ranks(records, spec, set_name)
        if not collected["data_seeds"]:
            raise engine.UserError("no data seed has a finished run of both models yet; run the comparison first")
        block: dict[str, Any] = {
            "data_seeds": collected["data_seeds"], "seeds": collected["seeds"], "queries": collected["queries"],
            "runs": {v: sum(len(s) for s in collected["seeds"][v].values()) for v in spec.variants},
            "metrics": _compare(collected, spec, n_boot, bootstrap_seed),
        }
        selective = _compare_selective(collected, n_boot, bootstrap_seed)
        if selective is not None:
            block["selective"] = selective
        types = sorted({t for r in records if r.variant == spec.method and r.data_seed in collected["data_seeds"]
                        for t in (r.sets[set_name].query_types or [])})
        block["per_type"] = {}
        for kind in types:
            sub = grid.collect_ranks(records, spec, set_name, query_type=kind)
            if sub["data_seeds"]:
                block["per_type"][kind] = {"data_seeds": sub["data_seeds"], "queries": sub["queries"],
                                           "metrics": _compare(sub, spec, n_boot, bootstrap_seed)}
        sets[set_name] = block
    headline = {m: sets[spec.primary]["metrics"][m] for m in spec.headline}
    beats = all(c["beats_base"] for c in headline.values())
    worse = any(c["worse_than_base"] for c in headline.values())
    text = ("beats its base" if beats else "worse than its base" if worse
            else "cannot tell (an interval of a headline metric includes zero)")
    diagnostics = grid.collect_diagnostics(records, spec)
    ceilings = {} if out is None else grid.collect_ceilings(out, sets[spec.primary]["data_seeds"])
    return {
        "schema": SCHEMA, "task": plan["task"], "method": spec.method, "base": spec.base,
        "headline": list(spec.headline), "primary_set": spec.primary, "level": 0.95, "n_boot": n_boot,
        "bootstrap_seed": bootstrap_seed, "interval_method": METHOD, "settings": plan["settings"],
        "sets": sets,
        **({"diagnostics": diagnostics} if diagnostics else {}),
        **({"ceilings": ceilings} if ceilings else {}),
        "runs": [{"variant": r.variant, "data_seed": r.data_seed, "seed": r.seed, "train_seconds": r.train_seconds}
                 for r in records if r.variant in spec.variants],
        "verdict": {"rule": VERDICT_RULE, "beats_base": beats, "worse_than_base": worse, "text": text},
    }


def report(out: Path, *, n_boot: int = 2000, bootstrap_seed: int = 0,
           methods: Sequence[str] | None = None, base: str | None = None) -> dict[str, Any]:
    """Write ``out/results.json`` and ``out/comparison.png`` from every finished run of ``out``; print the table.

    With ``methods`` (ablations), each method's files are ``results-<method>.json`` and ``comparison-<method>.png``
    (the plan's own method keeps the plain names), and with more than one, ``ablations.json`` holds the table of
    every method's headline differences on the primary set (:func:`ablation_table`). Returns the last method's
    results.
    """
    plan = grid.read_plan(out)
    records = grid.read_runs(out)
    default = plan_spec(plan).method
    every: dict[str, dict[str, Any]] = {}
    for method in (methods or [default]):
        results = build_results(records, plan, n_boot=n_boot, bootstrap_seed=bootstrap_seed, method=method,
                                base=base, out=out)
        suffix = "" if method == default else f"-{method}"
        if base is not None and base != plan_spec(plan).base:
            suffix = f"-{method}-vs-{base}"
        engine.write_json(out / f"results{suffix}.json", results, flag="--out")
        grid.draw_report(results, out / f"comparison{suffix}.png")
        print(grid.format_report(results))
        print(f"results written to {out / f'results{suffix}.json'}, figure to {out / f'comparison{suffix}.png'}")
        every[method] = results
    if len(every) > 1:
        table = ablation_table(every)
        engine.write_json(out / ("ablations.json" if base is None else f"ablations-vs-{base}.json"), table,
                          flag="--out")
        print(format_ablation_table(table))
        print(f"ablation table written to {out / ('ablations.json' if base is None else f'ablations-vs-{base}.json')}")
    return results


def ablation_table(every: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"base", "primary_set", "headline", "selective", "rows": [{"method", "runs", "verdict", metric: {"method",
    "base", "difference", "interval"}}]}``: each method's headline metrics on the primary set against the one base,
    from its results, and the selective-retrieval figures (``selective``: those every row has) by the same rule."""
    rows = []
    for method, results in every.items():
        block = results["sets"][results["primary_set"]]
        row: dict[str, Any] = {"method": method, "runs": block["runs"][method], "verdict": results["verdict"]["text"]}
        figures = {m: block["metrics"][m] for m in results["headline"]}
        if block.get("selective"):
            figures.update(block["selective"]["metrics"])
        for metric, c in figures.items():
            row[metric] = {"method": c["method"]["mean"], "base": c["base"]["mean"], "difference": c["difference"],
                           "interval": [c["low"], c["high"]]}
        rows.append(row)
    first = next(iter(every.values()))
    selective = [m for m in SELECTIVE_METRICS if all(m in row for row in rows)]
    return {"schema": SCHEMA + "/ablations", "base": first["base"], "primary_set": first["primary_set"],
            "headline": first["headline"], "selective": selective, "rows": rows}


def format_ablation_table(table: dict[str, Any]) -> str:
    """The ablation table as text: one row per method, its headline means, difference and interval, then the
    selective-retrieval figures (each model by its own confidence) when every row has them."""
    lines = [f"ablations against {table['base']} on {table['primary_set']}:"]
    for figures, digits, verdict in ((table["headline"], 2, True), (table.get("selective", []), 3, False)):
        if not figures:
            continue
        lines.append("  ".join(["method", "runs"] + [f"{m} (method / base, diff [95%])" for m in figures]
                               + (["verdict"] if verdict else [])))
        for row in table["rows"]:
            cells = [row["method"], str(row["runs"])]
            for metric in figures:
                c = row[metric]
                cells.append(f"{c['method']:.{digits}f} / {c['base']:.{digits}f}, {c['difference']:+.{digits}f} "
                             f"[{c['interval'][0]:.{digits}f}, {c['interval'][1]:.{digits}f}]")
            lines.append("  ".join(cells + ([row["verdict"]] if verdict else [])))
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    runner = runner_for(args.task, epochs=args.epochs, scale=args.benchmark_scale, benchmark=args.benchmark)
    start = time.perf_counter()
    grid.run_grid(runner, args.out, seeds=args.seeds, data_seeds=args.data_seeds, device=args.device,
                  show_progress=not args.no_progress, methods=args.methods, log=lambda line: print(line, flush=True))
    print(f"runs of seeds {args.seeds} x data seeds {args.data_seeds} done in {time.perf_counter() - start:.0f} s")
    if not args.no_report:
        report(args.out, n_boot=args.n_boot, bootstrap_seed=args.bootstrap_seed, methods=args.methods)
    return 0


def _report(args: argparse.Namespace) -> int:
    report(args.out, n_boot=args.n_boot, bootstrap_seed=args.bootstrap_seed, methods=args.methods, base=args.base)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return engine.run_main({"run": _run, "report": _report}[args.command], args, program=argv is None)


if __name__ == "__main__":
    raise SystemExit(main())
