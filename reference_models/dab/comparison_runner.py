"""DAB vs its CLIP4Clip-style base as a comparison of the engine (:mod:`reference_models.engine.seed_grid`).

Each benchmark instance is the embedded text-to-video benchmark written with the data seed (``demo``'s
generator and spec); each run trains one variant with the engine's trainer as
:func:`reference_models.dab.cli.run_variant` does (``best.pt`` on the validation R@1), then
:meth:`~reference_models.dab.task.T2VTask.query_ranks` ranks the 1k-A-style test (``test``) and the
all-captions test (``test_all``); the caption kinds (``specific``, ``generic``) are the query types.

Ablations (:data:`~reference_models.dab.config.ABLATIONS`, ``--methods`` of ``python -m reference_models.compare``): one comparison folder
holds the base and any of these methods, each under its own variant name, so that each is set against the same
base runs with the same interval; every one is DAB's config with one change. ``dab-meandist`` and ``dab-onestep``
start from the ``dab`` run of the same seeds (re-ranked; distilled into one step, :mod:`reference_models.dab.distill`,
its model in the run folder's ``distilled.pt``).

Every run saves, with each test set's ranks, its own confidence per query (:func:`own_confidence`: the KL margin
of a Gaussian head, the max-score margin of a cosine head), from which the report computes the selective-retrieval
figures with their interval.

On the ``msrvtt-regime`` benchmark (``runner(benchmark="msrvtt-regime")``, ``--benchmark msrvtt-regime``) the
runs train with the ``msrvtt-regime`` config (:data:`~reference_models.dab.config.PRESETS`, the base with the
same backbone treatment), and a third set, ``generic_multi``, scores the generic captions of the all-captions
test by multi-positive recall: any test video of the caption's topic counts (a generic caption, "something of
topic t happens", is true of every video of topic t). Every run with a Gaussian head also writes
``diagnostics.json`` (:func:`~reference_models.dab.diagnostics.model_diagnostics` on the all-captions test),
which the comparison's report averages per model.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, cast

import torch

from evidential_prvr.functional import kl_margin
from reference_models.dab.benchmark import (
    T2VBenchmarkSpec,
    benchmark_spec,
    generate_t2v_benchmark,
    oracle_ceilings,
    spec_dict,
)
from reference_models.dab.config import ABLATIONS, T2VConfig, ablation_config, preset
from reference_models.dab.data import SPLITS, T2VSplit, load_t2v_split
from reference_models.dab.diagnostics import benchmark_labels, benchmark_specificity, model_diagnostics
from reference_models.dab.distill import distilled_model, load_teacher
from reference_models.dab.evaluate import multi_positive_ranks, score_split
from reference_models.dab.model import T2VModel, T2VOutput
from reference_models.dab.task import T2VTask
from reference_models.engine import ComparisonSpec, QueryRanks, Trainer, UserError, load_checkpoint, write_json
from reference_models.engine import seed_grid as grid

__all__ = ["DABComparison", "DIAGNOSTICS_NAME", "MULTI_POSITIVE_SET", "generic_multi_positive_ranks", "own_confidence",
           "runner"]

#: The extra evaluation set of the ``msrvtt-regime`` comparison: the all-captions test's generic captions, ranked
#: by multi-positive recall (any test video of the caption's topic counts).
MULTI_POSITIVE_SET = "generic_multi"
#: A run's uncertainty diagnostics (Gaussian heads), next to its ``ranks.json``.
DIAGNOSTICS_NAME = grid.DIAGNOSTICS_NAME  # the engine's name: the report reads it


class DABComparison:
    """The :class:`~reference_models.engine.seed_grid.ComparisonRunner` of DAB vs its base.

    Parameters
    ----------
    config : T2VConfig
        DAB's config (default: ``demo``'s); the base is its ``head.variant = "base"``.
    spec : T2VBenchmarkSpec
        The benchmark instances' design (default: the embedded benchmark's).
    multi_positive : bool
        Also rank the ``generic_multi`` set (:data:`MULTI_POSITIVE_SET`; the ``msrvtt-regime`` comparison).
    """

    task = "dab"
    spec: ComparisonSpec = dataclasses.replace(T2VTask.comparison, ablations=tuple(ABLATIONS))

    def __init__(self, config: T2VConfig | None = None, spec: T2VBenchmarkSpec | None = None, *,
                 multi_positive: bool = False) -> None:
        self.config = config if config is not None else T2VConfig()
        self.benchmark = spec if spec is not None else T2VBenchmarkSpec()
        self.multi_positive = multi_positive
        if multi_positive:
            self.spec = dataclasses.replace(self.spec, sets=(*T2VTask.comparison.sets, MULTI_POSITIVE_SET))

    def variant_config(self, variant: str) -> T2VConfig:
        """The config a variant trains with: the base (cosine head, text-only bridge settings) or an
        :data:`~reference_models.dab.config.ABLATIONS` entry applied to DAB's config."""
        if variant == self.spec.base:
            return self.config.replace(head={"variant": "base"}, bridge={"condition": "text"})
        self.spec.against(variant)
        return ablation_config(self.config, variant)

    def settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {"config": self.config.to_dict(), "benchmark": spec_dict(self.benchmark)}
        if self.multi_positive:
            settings["multi_positive"] = MULTI_POSITIVE_SET
        return settings

    def prepare_data(self, folder: Path, data_seed: int) -> None:
        """Write instance ``data_seed`` and its oracle ceilings (:func:`~reference_models.dab.benchmark.oracle_ceilings`,
        ``ceilings.json``, which the report prints beside the models)."""
        generate_t2v_benchmark(folder, seed=data_seed, spec=self.benchmark)
        write_json(folder / grid.CEILINGS_NAME, oracle_ceilings(data_seed, self.benchmark))

    def train_and_rank(self, variant: str, data: Path, out: Path, *, seed: int, device: str, resume: bool,
                       show_progress: bool) -> dict[str, QueryRanks]:
        config = self.variant_config(variant)
        splits = {s: load_t2v_split(data, s, max_frames=config.backbone.max_frames) for s in SPLITS}
        task = T2VTask(config, splits["train"], splits["val"])
        if variant in ("dab-meandist", "dab-onestep"):  # the dab run's checkpoint, re-ranked or distilled
            model = self._trained_dab(task, out.parent / "dab", device)
            if variant == "dab-onestep":
                model = distilled_model(model, splits["train"].text, out, seed=seed, device=device,
                                        teacher=out.parent / "dab" / "best.pt", extras=task.checkpoint_extras())
        else:
            trainer = Trainer(task, out, device=device, seed=seed, show_progress=show_progress)
            trainer.fit(resume=resume)
            model = cast(T2VModel, trainer.load_best())  # the task's model
        meta = json.loads((data / "benchmark_meta.json").read_text(encoding="utf-8"))
        kinds = meta["sentences"]
        result = {}
        outputs = {name: score_split(model, splits[name], device) for name in T2VTask.comparison.sets}
        for name, output in outputs.items():
            ranks = task.query_ranks(model, splits[name], device, logits=output.logits)
            ranks.query_types = [kinds.get(i, {}).get("kind", "unknown") for i in ranks.query_ids]
            ranks.confidence_name, confidence = own_confidence(output)
            ranks.confidence = confidence.tolist()
            result[name] = ranks
        if self.multi_positive:
            result[MULTI_POSITIVE_SET] = generic_multi_positive_ranks(model, splits["test_all"], meta, device,
                                                                      logits=outputs["test_all"].logits)
        video_events, query_kinds = benchmark_labels(data, splits["test_all"])
        diagnostics = model_diagnostics(model, splits["test_all"], device, video_events=video_events,
                                        query_kinds=query_kinds,
                                        query_specificity=benchmark_specificity(data, splits["test_all"]))
        if diagnostics is not None:
            write_json(out / DIAGNOSTICS_NAME, {"variant": variant, "set": "test_all", **diagnostics})
        return result


    @staticmethod
    def _trained_dab(task: T2VTask, folder: Path, device: str) -> T2VModel:
        best = folder / "best.pt"
        if not (folder / grid.RANKS_NAME).is_file() or not best.is_file():
            raise UserError(f"dab-meandist and dab-onestep start from the dab run's checkpoint, and {folder} holds "
                            "no finished dab run: train dab first (e.g. --methods dab,dab-onestep)")
        model = cast(T2VModel, task.build_model()).to(device)
        return load_teacher(model, load_checkpoint(best, map_location=device)["model"])


def own_confidence(output: T2VOutput) -> tuple[str, torch.Tensor]:
    """A model's own selective-retrieval signal per query, by name: DAB's ``kl_margin`` (second-lowest minus
    lowest cost, :func:`~evidential_prvr.functional.kl_margin`; DAB "Key Findings") for a Gaussian head, the
    ``max_score_margin`` (top-1 minus top-2 ranking score) for a cosine head. A Gaussian head that ranks by
    :math:`-C` has the two equal, so its KL margin is also its max-score margin."""
    if output.cost is not None:
        return "kl_margin", kl_margin(output.cost)
    return "max_score_margin", kl_margin(-output.logits)  # the same order statistic of the negated scores


def generic_multi_positive_ranks(model: T2VModel, split: T2VSplit, meta: dict[str, Any],
                                 device: str | torch.device = "cpu", *,
                                 logits: torch.Tensor | None = None) -> QueryRanks:
    """The ranks of the generic captions of ``split`` when any of its videos of the caption's topic counts
    (:func:`~reference_models.dab.evaluate.multi_positive_ranks`); ``meta`` is the ``benchmark_meta.json``."""
    kinds, videos = meta["sentences"], meta["videos"]
    generic = [i for i, sen_id in enumerate(split.sen_ids) if kinds[str(sen_id)]["kind"] == "generic"]
    topics = torch.tensor([int(videos[vid]["topic"]) for vid in split.video_ids])
    rows = torch.tensor(generic, dtype=torch.long)
    own_topic = topics[split.query_video[rows]]
    scores = (logits if logits is not None else score_split(model, split, device).logits)[rows]
    ranks = multi_positive_ranks(scores, own_topic[:, None] == topics[None, :])
    return QueryRanks(ranks.tolist(), [str(split.sen_ids[i]) for i in generic], ["generic"] * len(generic))


def runner(epochs: int | None = None, scale: float = 1.0, benchmark: str = "embedded") -> DABComparison:
    """The runner of the command line (``scale``: videos per split as a fraction of the benchmark's;
    ``benchmark``: a name of :data:`~reference_models.dab.benchmark.BENCHMARKS`, trained with the config preset
    of the same name, :data:`~reference_models.dab.config.PRESETS`)."""
    spec, config = benchmark_spec(benchmark), preset(benchmark)
    if epochs is not None:
        config = config.replace(optim={"epochs": epochs})
    return DABComparison(config, spec.scaled(scale) if scale != 1.0 else spec,
                         multi_positive=benchmark != "embedded")
