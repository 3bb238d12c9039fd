"""Method-vs-base comparisons over training seeds and benchmark instances: the runs, their files and the report.

A reference model exists to show that its method beats its base. One training run of each says little (two
runs that differ only in the seed differ by more than a per-query test of one run allows), so a comparison
trains both over ``S`` training seeds x ``D`` benchmark instances (data seeds) and keeps every query's rank.
This module is the task-agnostic half of it:

* :class:`ComparisonSpec` -- what a task compares (method and base, headline metrics, metrics, evaluation
  sets); a :class:`~reference_models.engine.TrainingTask` declares it as its ``comparison`` attribute and
  gives its per-query ranks with :meth:`~reference_models.engine.TrainingTask.query_ranks`;
* :class:`ComparisonRunner` -- how one task prepares a benchmark instance and trains and ranks one run
  (each task's ``comparison`` module; it goes through the task's usual training path);
* :func:`run_grid` -- trains the runs not done yet, each in its own run folder
  ``<out>/runs/data<D>/seed<S>/<variant>/`` (so a run interrupted is resumed from its ``last.pt``, and a run
  with its ``ranks.json`` is skipped); one call may do a subset of the seeds and data seeds;
* :func:`read_runs` / :func:`collect_ranks` -- every finished run's ranks, as the arrays the statistics take;
* :func:`collect_diagnostics` -- the runs' optional ``diagnostics.json`` (numbers a task reports about a
  trained model, e.g. DAB's uncertainty diagnostics), averaged per model;
* :func:`collect_ceilings` -- the benchmark instances' optional ``ceilings.json`` (what an oracle scorer of the
  instance's hidden variables reaches, per set and query type, e.g. DAB's Bayes-optimal scorer), averaged over
  the data seeds, which the report prints beside the models;
* :func:`format_report` and :func:`draw_report` -- the table and the figure of a ``results.json``.

The statistics (:func:`evidential_prvr.metrics.compare_runs`) are applied by the command line that sits above
the tasks (:mod:`reference_models.compare`): the engine does not import the library. See
:doc:`/guide/comparisons` for the method, the schema of ``results.json`` and the verdict rule.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Protocol, cast

import numpy as np

from reference_models.engine.checkpoint import atomic_write
from reference_models.engine.errors import UserError
from reference_models.engine.reporting import format_table
from reference_models.engine.run_folder import RunLock, prepare_output_folder

__all__ = [
    "CEILINGS_NAME",
    "DIAGNOSTICS_NAME",
    "FOLDER_FORMAT",
    "PLAN_NAME",
    "RANKS_NAME",
    "ComparisonRunner",
    "ComparisonSpec",
    "QueryRanks",
    "RunRecord",
    "check_plan",
    "collect_ceilings",
    "collect_diagnostics",
    "collect_ranks",
    "data_folder",
    "draw_report",
    "format_report",
    "read_plan",
    "read_runs",
    "run_folder",
    "run_grid",
]

#: The comparison's settings, written by the first call into ``--out`` and checked by every later one.
PLAN_NAME = "comparison.json"
#: The layout of a comparison folder, stored as ``"format"`` in its ``comparison.json``; the folders of
#: release 1.x have none and are refused (their settings and runs are read differently).
FOLDER_FORMAT = 2
#: A finished run's per-query ranks, written last and atomically (its presence marks the run as done).
RANKS_NAME = "ranks.json"
#: A run's optional diagnostics (a JSON object whose numbers the report averages per model), written by the
#: task's runner into the run folder before ``ranks.json``.
DIAGNOSTICS_NAME = "diagnostics.json"
#: A benchmark instance's oracle ceilings, in its data folder (written by the runner's ``prepare_data``, optional):
#: ``{"scorers": [name, ...], "sets": {set: {scorer: {query type: {metric: value}}}}, "statements": [line, ...]}``
#: (query type ``all`` for every query).
CEILINGS_NAME = "ceilings.json"
_DATA_DONE = "prepared.json"


@dataclass(frozen=True)
class ComparisonSpec:
    """What a task's comparison compares.

    Attributes
    ----------
    method, base : str
        Variant names of the method and of its base (run-folder names, table rows).
    headline : tuple of str
        The headline metrics: the verdict "beats its base" needs each of their intervals on the better side
        of zero on ``primary``.
    metrics : tuple of str
        Every metric reported (names of :func:`evidential_prvr.metrics.run_metric`).
    ks : tuple of int
        Cut-offs of the recalls' ``SumR`` / ``MeanR`` (the task's protocol: no default here, so that the cut-offs
        are written once, by the task).
    sets : tuple of str
        The evaluation sets each run ranks (``("test",)``; DAB: ``("test", "test_all")``).
    primary : str
        The set the verdict is read on.
    ablations : tuple of str
        Further methods (ablations) that one comparison folder may also set against the same base, each under
        its own variant name (:func:`run_grid`'s ``methods``, :meth:`against`); empty for a plain comparison.
    """

    method: str
    base: str
    headline: tuple[str, ...]
    metrics: tuple[str, ...]
    ks: tuple[int, ...]
    sets: tuple[str, ...] = ("test",)
    primary: str = "test"
    ablations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.method == self.base:
            raise ValueError(f"ComparisonSpec: method and base must differ, got {self.method!r} twice")
        if not set(self.headline) <= set(self.metrics):
            raise ValueError(f"ComparisonSpec: headline {self.headline} must be among metrics {self.metrics}")
        if self.primary not in self.sets:
            raise ValueError(f"ComparisonSpec: primary {self.primary!r} must be one of sets {self.sets}")
        if self.base in self.ablations or len(set(self.ablations)) != len(self.ablations):
            raise ValueError(f"ComparisonSpec: ablations {self.ablations} must be distinct and not the base")

    @property
    def variants(self) -> tuple[str, str]:
        return self.method, self.base

    @property
    def methods(self) -> tuple[str, ...]:
        """Every method this comparison can set against the base (``method``, then the ``ablations``)."""
        return (self.method, *(a for a in self.ablations if a != self.method))

    def against(self, method: str) -> ComparisonSpec:
        """The same comparison with ``method`` (one of :attr:`methods`) as the method."""
        if method not in self.methods:
            raise UserError(f"method {method!r}: this comparison sets one of {', '.join(self.methods)} against "
                            f"{self.base}")
        return replace(self, method=method)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


@dataclass
class QueryRanks:
    """The 1-based rank of the ground truth of every query of one evaluation set, in the set's order.

    Attributes
    ----------
    ranks : list of int
        ``Q`` ranks (1 = first).
    query_ids : list of str
        ``Q`` query ids (the same for every run on one benchmark instance; checked when runs are merged).
    query_types : list of str or None
        The query type of each query (planted type, edit type, caption kind), or ``None``.
    confidence : list of float or None
        The model's own confidence in each query's top-1 answer (higher = more trusted; DAB: the KL margin of a
        Gaussian head, the max-score margin of a cosine head), or ``None``. When every run of a comparison has
        one, the report adds the selective-retrieval figures (:func:`evidential_prvr.metrics.compare_selective_runs`).
    confidence_name : str or None
        What ``confidence`` is (``"kl_margin"``, ``"max_score_margin"``); required with ``confidence``.
    """

    ranks: list[int]
    query_ids: list[str]
    query_types: list[str] | None = None
    confidence: list[float] | None = None
    confidence_name: str | None = None

    def __post_init__(self) -> None:
        self.ranks = [int(r) for r in self.ranks]
        self.query_ids = [str(q) for q in self.query_ids]
        if len(self.ranks) != len(self.query_ids):
            raise ValueError(f"QueryRanks: {len(self.ranks)} ranks for {len(self.query_ids)} query ids")
        if self.query_types is not None:
            self.query_types = [str(t) for t in self.query_types]
            if len(self.query_types) != len(self.ranks):
                raise ValueError(f"QueryRanks: {len(self.query_types)} query types for {len(self.ranks)} ranks")
        if any(r < 1 for r in self.ranks):
            raise ValueError("QueryRanks: ranks are 1-based (>= 1)")
        if (self.confidence is None) != (self.confidence_name is None):
            raise ValueError("QueryRanks: confidence and confidence_name go together (both or neither)")
        if self.confidence is not None:
            self.confidence = [float(c) for c in self.confidence]
            if len(self.confidence) != len(self.ranks):
                raise ValueError(f"QueryRanks: {len(self.confidence)} confidences for {len(self.ranks)} ranks")
            if not all(np.isfinite(self.confidence)):
                raise ValueError("QueryRanks: confidences must be finite")

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"ranks": self.ranks, "query_ids": self.query_ids, "query_types": self.query_types}
        if self.confidence is not None:
            data.update(confidence=self.confidence, confidence_name=self.confidence_name)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QueryRanks:
        return cls(list(data["ranks"]), list(data["query_ids"]), data.get("query_types"), data.get("confidence"),
                   data.get("confidence_name"))


class ComparisonRunner(Protocol):
    """One task's side of a comparison (``reference_models.<task>.comparison.runner(...)``)."""

    #: The task's name (``holmes``, ``hud``, ``dab``).
    task: str
    #: The task's :class:`ComparisonSpec` (its ``TrainingTask.comparison``).
    spec: ComparisonSpec

    def settings(self) -> dict[str, Any]:
        """JSON-able settings fixed for the whole comparison (epochs, benchmark sizes); checked on every call."""

    def prepare_data(self, folder: Path, data_seed: int) -> None:
        """Write benchmark instance ``data_seed`` into ``folder`` (the same files for the same settings)."""

    def train_and_rank(self, variant: str, data: Path, out: Path, *, seed: int, device: str, resume: bool,
                       show_progress: bool) -> dict[str, QueryRanks]:
        """Train ``variant`` with training seed ``seed`` on the data in ``data`` into the run folder ``out``
        (resuming its ``last.pt`` when ``resume``) and rank every query of each of ``spec.sets``."""


@dataclass
class RunRecord:
    """One finished run (its ``ranks.json``)."""

    variant: str
    data_seed: int
    seed: int
    sets: dict[str, QueryRanks]
    train_seconds: float = float("nan")
    path: Path | None = field(default=None, compare=False)


def data_folder(out: Path, data_seed: int) -> Path:
    """``<out>/data/data<D>``: benchmark instance ``D``."""
    return Path(out) / "data" / f"data{data_seed}"


def run_folder(out: Path, data_seed: int, seed: int, variant: str) -> Path:
    """``<out>/runs/data<D>/seed<S>/<variant>``: one run (the task's checkpoints, log and ``ranks.json``)."""
    return Path(out) / "runs" / f"data{data_seed}" / f"seed{seed}" / variant


def _write_json(path: Path, data: dict[str, Any]) -> None:
    text = json.dumps(data, indent=1, sort_keys=True, allow_nan=True) + "\n"

    def write(handle: IO[bytes]) -> None:
        handle.write(text.encode("utf-8"))

    atomic_write(path, write)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: cannot read it ({exc})") from None


def _plan(runner: ComparisonRunner) -> dict[str, Any]:
    spec = runner.spec.to_dict()
    # which ablations a task offers is not a setting of the folder: one added later can use the folder's base runs
    del spec["ablations"]
    return {"format": FOLDER_FORMAT, "task": runner.task, "spec": spec, "settings": runner.settings()}


def _check_format(path: Path, saved: Any) -> None:
    """Refuse a ``comparison.json`` of another folder layout (release 1.x wrote none) in one line."""
    found = saved.get("format") if isinstance(saved, dict) else None
    if found != FOLDER_FORMAT:
        writer = "release 1.x" if found is None else f"comparison folder format {found!r}"
        raise UserError(f"{path} was written by {writer}; this version reads comparison folder format "
                        f"{FOLDER_FORMAT} only: run the comparison again into another --out")


def check_plan(out: Path, runner: ComparisonRunner) -> None:
    """Write ``<out>/comparison.json`` on the first call; refuse a folder that holds another comparison."""
    path = Path(out) / PLAN_NAME
    plan = json.loads(json.dumps(_plan(runner)))
    if path.exists():
        saved = _read_json(path)
        _check_format(path, saved)
        if saved != plan:
            differ = sorted(k for k in set(saved) | set(plan) if saved.get(k) != plan.get(k))
            raise UserError(f"--out {out} holds a comparison with other settings ({', '.join(differ)} differ: "
                            f"saved {json.dumps({k: saved.get(k) for k in differ})}); use another --out")
        return
    _write_json(path, plan)


def read_plan(out: Path) -> dict[str, Any]:
    """The ``comparison.json`` of ``out`` (a :class:`UserError` when there is none)."""
    path = Path(out) / PLAN_NAME
    if not path.is_file():
        raise UserError(f"--out {out}: no {PLAN_NAME} (not a comparison folder; run the comparison first)")
    plan = _read_json(path)
    _check_format(path, plan)
    return cast(dict[str, Any], plan)


def run_grid(runner: ComparisonRunner, out: str | Path, *, seeds: Sequence[int], data_seeds: Sequence[int],
             device: str = "cpu", show_progress: bool = False, methods: Sequence[str] | None = None,
             log: Callable[[str], None] = print) -> list[RunRecord]:
    """Train every run of ``seeds`` x ``data_seeds`` x (methods, base) that is not finished; returns all of them.

    ``methods``: which of the spec's :attr:`~ComparisonSpec.methods` to train besides the base, in this order
    (default: the spec's method).

    A run is finished when its folder holds ``ranks.json``; a run with a ``last.pt`` but no ``ranks.json``
    (interrupted) is resumed. Each benchmark instance is written once into ``<out>/data/data<D>``. A lock per
    run and per instance keeps two calls on the same ``out`` (e.g. one per seed, in parallel) apart.
    """
    chosen = tuple(methods) if methods is not None else (runner.spec.method,)
    for method in chosen:
        runner.spec.against(method)  # a UserError naming the choices for an unknown one
    out = prepare_output_folder(out, "--out")
    check_plan(out, runner)
    records = []
    for data_seed in data_seeds:
        data = data_folder(out, data_seed)
        _prepare(runner, data, data_seed, log)
        for seed in seeds:
            for variant in (*chosen, runner.spec.base):
                records.append(_one_run(runner, out, data, data_seed, seed, variant, device, show_progress, log))
    return records


def _lock_folder(out: Path, name: str) -> Path:
    return prepare_output_folder(Path(out) / ".locks" / name, "--out")


def _prepare(runner: ComparisonRunner, data: Path, data_seed: int, log: Callable[[str], None]) -> None:
    done = data / _DATA_DONE
    marker = json.loads(json.dumps({"data_seed": data_seed, "settings": runner.settings()}))
    with RunLock(_lock_folder(data.parent.parent, f"data{data_seed}"), "--out"):
        if done.is_file() and _read_json(done) == marker:
            return
        log(f"[data {data_seed}] writing the benchmark instance to {data}")
        data.mkdir(parents=True, exist_ok=True)
        runner.prepare_data(data, data_seed)
        _write_json(done, marker)


def _one_run(runner: ComparisonRunner, out: Path, data: Path, data_seed: int, seed: int, variant: str, device: str,
             show_progress: bool, log: Callable[[str], None]) -> RunRecord:
    folder = run_folder(out, data_seed, seed, variant)
    name = f"[data {data_seed} seed {seed} {variant}]"
    with RunLock(_lock_folder(out, f"data{data_seed}-seed{seed}-{variant}"), "--out"):
        if (folder / RANKS_NAME).is_file():
            log(f"{name} done already ({folder / RANKS_NAME}): skipped")
            return _read_record(folder / RANKS_NAME)
        folder.mkdir(parents=True, exist_ok=True)
        resume = (folder / "last.pt").is_file()
        log(f"{name} {'resuming' if resume else 'training'} in {folder}")
        start = time.perf_counter()
        sets = runner.train_and_rank(variant, data, folder, seed=seed, device=device, resume=resume,
                                     show_progress=show_progress)
        missing = [s for s in runner.spec.sets if s not in sets]
        if missing:
            raise RuntimeError(f"{runner.task} comparison runner returned no ranks for {missing}")
        seconds = time.perf_counter() - start
        record = RunRecord(variant, data_seed, seed, {s: sets[s] for s in runner.spec.sets}, seconds, folder)
        _write_json(folder / RANKS_NAME, {"task": runner.task, "variant": variant, "data_seed": data_seed,
                                          "seed": seed, "train_seconds": seconds, "resumed": resume,
                                          "sets": {s: r.to_dict() for s, r in record.sets.items()}})
        log(f"{name} finished in {seconds:.0f} s")
        return record


def _read_record(path: Path) -> RunRecord:
    data = _read_json(path)
    try:
        sets = {name: QueryRanks.from_dict(value) for name, value in data["sets"].items()}
        return RunRecord(str(data["variant"]), int(data["data_seed"]), int(data["seed"]), sets,
                         float(data.get("train_seconds", float("nan"))), path.parent)
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{path}: not a {RANKS_NAME} of a comparison run ({exc})") from None


def read_runs(out: str | Path) -> list[RunRecord]:
    """Every finished run under ``<out>/runs`` (sorted by data seed, seed, variant)."""
    paths = sorted((Path(out) / "runs").glob(f"data*/seed*/*/{RANKS_NAME}"))
    records = [_read_record(p) for p in paths]
    return sorted(records, key=lambda r: (r.data_seed, r.seed, r.variant))


def collect_ranks(records: Iterable[RunRecord], spec: ComparisonSpec, set_name: str,
                  query_type: str | None = None) -> dict[str, Any]:
    """The ranks of one evaluation set as the arrays of :func:`evidential_prvr.metrics.compare_runs`.

    Returns ``{"method": [array [S_i, Q_i], ...], "base": [...], "data_seeds": [...], "seeds": {variant: {D:
    [S, ...]}}, "queries": {D: Q_i}, "confidence": ...}`` over the data seeds that have at least one finished run
    of *both* models (seeds sorted); with ``query_type``, only the queries of that type (instances without any
    are left out). ``"confidence"`` is ``{"method": [array [S_i, Q_i], ...], "base": [...], "names": {"method":
    name, "base": name}}``, the runs' per-query confidences in the layout of the ranks, when every run used has
    one (one name per model), else ``None``. Raises :class:`UserError` when two runs on one instance ranked
    different queries, or when one model's runs name different confidences.
    """
    by_instance: dict[int, dict[str, list[RunRecord]]] = {}
    for r in records:
        if r.variant in spec.variants:
            by_instance.setdefault(r.data_seed, {v: [] for v in spec.variants})[r.variant].append(r)
    method: list[np.ndarray] = []
    base: list[np.ndarray] = []
    seeds: dict[str, dict[str, list[int]]] = {v: {} for v in spec.variants}
    queries: dict[str, int] = {}
    used: list[int] = []
    confidence: dict[str, list[np.ndarray]] = {v: [] for v in spec.variants}
    names: dict[str, set[str | None]] = {v: set() for v in spec.variants}
    for data_seed in sorted(by_instance):
        runs = by_instance[data_seed]
        if not all(runs[v] for v in spec.variants):
            continue
        reference = runs[spec.method][0].sets[set_name]
        keep = np.arange(len(reference.ranks))
        if query_type is not None:
            keep = np.array([i for i, t in enumerate(reference.query_types or []) if t == query_type], dtype=int)
            if keep.size == 0:
                continue
        arrays = {}
        for variant in spec.variants:
            rows, confidences = [], []
            for r in sorted(runs[variant], key=lambda r: r.seed):
                ranks = r.sets[set_name]
                if ranks.query_ids != reference.query_ids:
                    raise UserError(f"{r.path}: its {set_name} queries are not those of the other runs on data seed "
                                    f"{data_seed} ({len(ranks.query_ids)} vs {len(reference.query_ids)} queries)")
                rows.append(np.asarray(ranks.ranks, dtype=np.float64)[keep])
                names[variant].add(ranks.confidence_name)
                if ranks.confidence is not None:
                    confidences.append(np.asarray(ranks.confidence, dtype=np.float64)[keep])
            arrays[variant] = np.stack(rows)
            if len(confidences) == len(rows):
                confidence[variant].append(np.stack(confidences))
            seeds[variant][str(data_seed)] = sorted(r.seed for r in runs[variant])
        method.append(arrays[spec.method])
        base.append(arrays[spec.base])
        queries[str(data_seed)] = int(keep.size)
        used.append(data_seed)
    return {"method": method, "base": base, "data_seeds": used, "seeds": seeds, "queries": queries,
            "confidence": _confidences(confidence, names, spec, set_name)}


def _confidences(confidence: dict[str, list[np.ndarray]], names: dict[str, set[str | None]], spec: ComparisonSpec,
                 set_name: str) -> dict[str, Any] | None:
    """The ``"confidence"`` entry of :func:`collect_ranks`: ``None`` unless every run used has a confidence."""
    if any(None in names[v] or not names[v] for v in spec.variants):
        return None
    for variant in spec.variants:
        if len(names[variant]) > 1:
            raise UserError(f"the {variant} runs' {set_name} confidences are of different kinds "
                            f"({', '.join(sorted(str(n) for n in names[variant]))}); rerun them with one code")
    return {"method": confidence[spec.method], "base": confidence[spec.base],
            "names": {"method": next(iter(names[spec.method])), "base": next(iter(names[spec.base]))}}


def _numbers(data: Any, prefix: str = "") -> dict[str, float]:
    """The numbers of a nested JSON object, by dotted key (``{"a": {"b": 1}}`` -> ``{"a.b": 1.0}``)."""
    if isinstance(data, dict):
        out: dict[str, float] = {}
        for key, value in data.items():
            out.update(_numbers(value, f"{prefix}{key}."))
        return out
    if isinstance(data, (int, float)) and not isinstance(data, bool):
        return {prefix[:-1]: float(data)}
    return {}


def collect_diagnostics(records: Iterable[RunRecord], spec: ComparisonSpec) -> dict[str, Any]:
    """Per model, the mean and s.d. over its runs of every number of the runs' ``diagnostics.json``.

    Returns ``{variant: {"runs": n, "mean": {dotted key: value}, "sd": {...}, "per_run": [{"data_seed", "seed",
    "diagnostics"}]}}`` for the models with at least one such file (``{}`` when no run has one); a number missing
    from some runs is averaged over the runs that have it.
    """
    result: dict[str, Any] = {}
    for variant in spec.variants:
        per_run = []
        for r in sorted(records, key=lambda r: (r.data_seed, r.seed)):
            path = None if r.path is None else Path(r.path) / DIAGNOSTICS_NAME
            if r.variant == variant and path is not None and path.is_file():
                per_run.append({"data_seed": r.data_seed, "seed": r.seed, "diagnostics": _read_json(path)})
        if not per_run:
            continue
        values: dict[str, list[float]] = {}
        for run in per_run:
            for key, value in _numbers(run["diagnostics"]).items():
                values.setdefault(key, []).append(value)
        result[variant] = {"runs": len(per_run), "mean": {k: float(np.mean(v)) for k, v in values.items()},
                           "sd": {k: float(np.std(v, ddof=1)) if len(v) > 1 else float("nan") for k, v in values.items()},
                           "per_run": per_run}
    return result


def collect_ceilings(out: str | Path, data_seeds: Sequence[int]) -> dict[str, Any]:
    """The oracle ceilings (:data:`CEILINGS_NAME`) of the benchmark instances ``data_seeds`` of ``out``.

    Parameters
    ----------
    out : str or pathlib.Path
        The comparison folder.
    data_seeds : sequence of int
        The instances whose ceilings to read (those of the compared runs).

    Returns
    -------
    dict
        ``{"data_seeds", "scorers", "mean": {set: {scorer: {query type: {metric: value}}}}, "statements": {data
        seed: [line, ...]}}``, each value the mean over the instances that have it; ``{}`` when no instance has a
        ceilings file (a folder prepared before they existed, or a task without them).
    """
    found: dict[int, Any] = {}
    for data_seed in data_seeds:
        path = data_folder(Path(out), data_seed) / CEILINGS_NAME
        if path.is_file():
            found[int(data_seed)] = _read_json(path)
    if not found:
        return {}
    values: dict[tuple[str, str, str, str], list[float]] = {}
    for content in found.values():
        for set_name, by_scorer in content["sets"].items():
            for scorer, by_type in by_scorer.items():
                for kind, metrics in by_type.items():
                    for metric, value in metrics.items():
                        values.setdefault((set_name, scorer, kind, metric), []).append(float(value))
    mean: dict[str, Any] = {}
    for (set_name, scorer, kind, metric), numbers in values.items():
        mean.setdefault(set_name, {}).setdefault(scorer, {}).setdefault(kind, {})[metric] = float(np.mean(numbers))
    first = next(iter(found.values()))
    return {"data_seeds": sorted(found), "scorers": list(first["scorers"]), "mean": mean,
            "statements": {str(k): list(v.get("statements", [])) for k, v in found.items()}}


def _ceiling_rows(block: dict[str, Any], ceilings: dict[str, Any], results: dict[str, Any],
                  set_name: str) -> list[list[str]]:
    """Per query type, each headline metric of the two models (their means) beside every oracle scorer's."""
    method, base, scorers = results["method"], results["base"], ceilings["scorers"]
    by_scorer = ceilings["mean"][set_name]
    rows = [["query type", *(f"{m}: {method} / {base} / " + " / ".join(f"oracle {s}" for s in scorers)
                             for m in results["headline"])]]
    types = {"all": block["metrics"], **{k: v["metrics"] for k, v in (block.get("per_type") or {}).items()}}
    for kind, metrics in types.items():
        cells = []
        for metric in results["headline"]:
            oracle = [_fmt(by_scorer.get(s, {}).get(kind, {}).get(metric)) for s in scorers]
            cells.append(" / ".join([_fmt(metrics[metric]["method"]["mean"]), _fmt(metrics[metric]["base"]["mean"]),
                                     *oracle]))
        rows.append([kind, *cells])
    return rows


# --- the report ----------------------------------------------------------------------------------------
def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None or not np.isfinite(value):
        return "-"
    return f"{value:.{digits}f}"


def _metric_rows(metrics: dict[str, Any], results: dict[str, Any], title: str, digits: int = 2) -> list[list[str]]:
    """The rows of one block of comparisons (:meth:`~evidential_prvr.metrics.RunComparison.to_dict` by name):
    each model's mean ± s.d., the difference, its interval and the side of zero (headline metrics starred)."""
    method, base = results["method"], results["base"]
    rows = [[title, f"{method} mean ± sd", f"{base} mean ± sd", f"{method} - {base}",
             f"{round(100 * results['level'])}% interval", "vs 0"]]
    for metric, c in metrics.items():
        mark = "better" if c["beats_base"] else ("worse" if c["worse_than_base"] else "")
        rows.append([metric + (" *" if metric in results["headline"] else ""),
                     f"{_fmt(c['method']['mean'], digits)} ± {_fmt(c['method']['sd'], digits)}",
                     f"{_fmt(c['base']['mean'], digits)} ± {_fmt(c['base']['sd'], digits)}",
                     _fmt(c["difference"], digits), f"[{_fmt(c['low'], digits)}, {_fmt(c['high'], digits)}]", mark])
    return rows


def format_report(results: dict[str, Any]) -> str:
    """The table of a comparison's ``results.json``: per set and metric, each model's mean ± s.d. over runs,
    the difference with its interval, the selective-retrieval figures when the runs have confidences, and the
    verdict line."""
    method, base = results["method"], results["base"]
    level = round(100 * results["level"])
    lines = []
    for set_name, block in results["sets"].items():
        runs = block["runs"]
        lines.append(f"{set_name}: {runs[method]} {method} runs and {runs[base]} {base} runs on data seeds "
                     f"{block['data_seeds']} ({', '.join(f'{q} queries' for q in block['queries'].values())})")
        lines.append(format_table(_metric_rows(block["metrics"], results, "metric")))
        selective = block.get("selective")
        if selective:
            names = selective["confidence"]
            lines.append(f"selective retrieval ({method} by its {names['method']}, {base} by its {names['base']}):")
            lines.append(format_table(_metric_rows(selective["metrics"], results, "selective", digits=3)))
        if block.get("per_type"):
            type_rows = [["query type", "queries (all data seeds)", *(f"{m} diff [{level}%]" for m in results["headline"])]]
            for kind, sub in block["per_type"].items():
                type_rows.append([kind, str(sum(sub["queries"].values())),
                                  *(f"{_fmt(sub['metrics'][m]['difference'])} [{_fmt(sub['metrics'][m]['low'])}, "
                                    f"{_fmt(sub['metrics'][m]['high'])}]" for m in results["headline"])])
            lines.append(format_table(type_rows))
        ceilings = results.get("ceilings") or {}
        if set_name in ceilings.get("mean", {}):
            lines.append(f"beside the oracle ceilings (means over data seeds {ceilings['data_seeds']}; "
                         f"{CEILINGS_NAME} of each instance):")
            lines.append(format_table(_ceiling_rows(block, ceilings, results, set_name)))
        lines.append("")
    for variant, block in (results.get("diagnostics") or {}).items():
        lines.append(f"diagnostics of {variant} (diagnostics.json, mean ± sd over {block['runs']} runs):")
        rows = [["quantity", "mean ± sd"]]
        rows += [[key, f"{_fmt(value, 4)} ± {_fmt(block['sd'][key], 4)}"] for key, value in block["mean"].items()]
        lines.append(format_table(rows))
        lines.append("")
    for data_seed, statements in (results.get("ceilings") or {}).get("statements", {}).items():
        lines += [f"oracle, data seed {data_seed}: {line}" for line in statements]
    lines.append(f"verdict ({results['primary_set']}, headline {', '.join(results['headline'])}): "
                 f"{results['verdict']['text']}")
    return "\n".join(lines)


def draw_report(results: dict[str, Any], path: str | Path) -> Path:
    """A PNG of a comparison: per evaluation set (rows) and metric (columns), the difference method - base with
    its interval, over all queries and per query type (matplotlib's Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = list(results["sets"])
    metrics = list(next(iter(results["sets"].values()))["metrics"])
    fig, axes = plt.subplots(len(sets), len(metrics), figsize=(2.4 * len(metrics) + 1.2, 0.5 + 2.2 * len(sets)),
                             squeeze=False)
    level = round(100 * results["level"])
    for row, set_name in enumerate(sets):
        block = results["sets"][set_name]
        groups = [("all", block["metrics"])] + [(k, v["metrics"]) for k, v in (block.get("per_type") or {}).items()]
        for col, metric in enumerate(metrics):
            ax = axes[row][col]
            for y, (_label, values) in enumerate(groups):
                c = values[metric]
                colour = "tab:green" if c["beats_base"] else ("tab:red" if c["worse_than_base"] else "tab:gray")
                ax.errorbar([c["difference"]], [y], xerr=[[c["difference"] - c["low"]], [c["high"] - c["difference"]]],
                            fmt="o", color=colour, capsize=3)
            ax.axvline(0.0, color="black", linewidth=0.8)
            ax.set_yticks(range(len(groups)), [g[0] for g in groups] if col == 0 else [""] * len(groups))
            ax.invert_yaxis()
            star = " *" if metric in results["headline"] else ""
            ax.set_title(f"{metric}{star}" + (f" ({'lower' if not values[metric]['higher_is_better'] else 'higher'}"
                                              " is better)" if row == 0 else ""), fontsize=8)
            ax.tick_params(labelsize=7)
            if col == 0:
                ax.set_ylabel(set_name, fontsize=8)
    fig.suptitle(f"{results['task']}: {results['method']} - {results['base']}, {level}% hierarchical-bootstrap "
                 f"interval ({results['verdict']['text']})", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
