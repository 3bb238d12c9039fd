"""Holmes vs the MIL baseline as a comparison of the engine (:mod:`reference_models.engine.seed_grid`).

Each benchmark instance is the embedded benchmark (or a named one, ``--benchmark tvr-regime``: a TVR-sized
test split) written with the data seed (``demo``'s generator and spec); each run trains one variant with the
``embedded`` preset through the Holmes trainer (what ``demo`` and ``train`` run), selects ``best.pt`` on the
validation SumR and ranks the test captions with :meth:`~reference_models.holmes.task.HolmesTask.query_ranks`;
the planted types are the query types.

Ablations (``--methods holmes,holmes-ema``): ``holmes-ema`` is Holmes with the identification thresholds
smoothed across batches (the ``ema_thresholds`` ablation of the config, beyond the paper), set against the
same MIL runs. Every Holmes run writes ``diagnostics.json``: per epoch, the stability of its training queries'
identification (:class:`~reference_models.holmes.stability.ThresholdStability`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, cast

from reference_models.engine import ComparisonSpec, QueryRanks, write_json
from reference_models.engine import seed_grid as grid
from reference_models.holmes.config import HolmesConfig, preset
from reference_models.holmes.data import (
    EmbeddedBenchmarkSpec,
    benchmark_spec,
    generate_embedded_benchmark,
    load_split,
    read_planted_types,
)
from reference_models.holmes.objective import HolmesObjective
from reference_models.holmes.task import HolmesTask

__all__ = ["COLLECTION", "HolmesComparison", "runner"]

COLLECTION = "embedded"
#: Each variant's ablation of the config (:data:`~reference_models.holmes.config.ABLATIONS`).
_ABLATION = {"holmes": "full", "baseline": "baseline", "holmes-ema": "ema_thresholds"}


class HolmesComparison:
    """The :class:`~reference_models.engine.seed_grid.ComparisonRunner` of Holmes vs the MIL baseline.

    Parameters
    ----------
    config : HolmesConfig
        The Holmes config (default: the ``embedded`` preset); the baseline is its ``baseline`` ablation.
    spec : EmbeddedBenchmarkSpec
        The benchmark instances' design (default: the embedded benchmark's).
    """

    task = "holmes"
    spec: ComparisonSpec = dataclasses.replace(HolmesTask.comparison, ablations=("holmes-ema",))

    def __init__(self, config: HolmesConfig | None = None, spec: EmbeddedBenchmarkSpec | None = None) -> None:
        self.config = config if config is not None else preset("embedded")
        self.benchmark = spec if spec is not None else EmbeddedBenchmarkSpec()

    def settings(self) -> dict[str, Any]:
        config = self.config.to_dict()
        if config["ablation"]["threshold_decay"] is None:  # the field came later: earlier folders stay valid
            del config["ablation"]["threshold_decay"]
        return {"config": config, "benchmark": dataclasses.asdict(self.benchmark)}

    def prepare_data(self, folder: Path, data_seed: int) -> None:
        generate_embedded_benchmark(folder, COLLECTION, seed=data_seed, spec=self.benchmark)

    def train_and_rank(self, variant: str, data: Path, out: Path, *, seed: int, device: str, resume: bool,
                       show_progress: bool) -> dict[str, QueryRanks]:
        from reference_models.engine import Trainer

        config = self.config.with_ablation(_ABLATION[variant])
        feature = self.benchmark.visual_feature
        splits = {name: load_split(data, COLLECTION, feature, name, max_query_len=config.model.max_query_len)
                  for name in ("train", "val", "test")}
        trainer = Trainer(HolmesTask(config, splits["train"], splits["val"], stability=True), out, device=device,
                          seed=seed, show_progress=show_progress)
        trainer.fit(resume=resume)
        stability = cast(HolmesObjective, trainer.objective).stability  # HolmesTask.build_objective's
        if stability is not None:
            write_json(out / grid.DIAGNOSTICS_NAME, {"stability": stability.summary()})
        model = trainer.load_best()
        ranks = trainer.task.query_ranks(model, splits["test"], device)
        planted = read_planted_types(data, COLLECTION)
        ranks.query_types = [planted.get(cid, "unknown") for cid in ranks.query_ids]
        return {"test": ranks}


def runner(epochs: int | None = None, scale: float = 1.0, benchmark: str = "embedded") -> HolmesComparison:
    """The runner of the command line: ``epochs`` overrides the preset's, ``scale`` multiplies the number of
    videos of every split (the design stays; < 1 for quick checks), ``benchmark`` is a name of
    :data:`~reference_models.holmes.data.embedded.BENCHMARKS`."""
    config = preset("embedded")
    if epochs is not None:
        config = config.replace(schedule={"epochs": epochs})
    spec = benchmark_spec(benchmark)
    return HolmesComparison(config, spec.scaled(scale) if scale != 1.0 else spec)
