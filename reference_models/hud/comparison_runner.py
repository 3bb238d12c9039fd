"""HUD vs its CoVR-style base as a comparison of the engine (:mod:`reference_models.engine.seed_grid`).

Each benchmark instance is the embedded CVR benchmark (or a named one, ``--benchmark covr-regime``: the paper's
regime) written with the data seed (``demo``'s generator, ``--benchmark-scale`` as in ``demo``); each run is :func:`reference_models.hud.cli.run_variant` (what ``demo``
and ``train`` run: ``best.pt`` on the validation mean recall), then
:meth:`~reference_models.hud.task.CVRTask.query_ranks` ranks the test triplets; the edit types (pronoun,
explicit, key detail) are the query types.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from reference_models import engine
from reference_models.engine import QueryRanks
from reference_models.hud.benchmark import (
    CVRBenchmarkSpec,
    benchmark_spec,
    generate_cvr_benchmark,
)
from reference_models.hud.config import HUDRunConfig
from reference_models.hud.data import (
    SPLITS,
    SplitPaths,
    Vocabulary,
    load_cvr_split,
    read_annotations,
)
from reference_models.hud.task import CVRTask

__all__ = ["HUDComparison", "runner"]


class HUDComparison:
    """The :class:`~reference_models.engine.seed_grid.ComparisonRunner` of HUD vs its base.

    Parameters
    ----------
    spec : CVRBenchmarkSpec
        The benchmark instances' design (default: the embedded benchmark's).
    epochs : int, optional
        Override the default number of epochs of both models.
    """

    task = "hud"
    spec = CVRTask.comparison

    def __init__(self, spec: CVRBenchmarkSpec | None = None, epochs: int | None = None) -> None:
        self.benchmark = spec if spec is not None else CVRBenchmarkSpec()
        self.epochs = epochs

    def config(self, variant: str) -> HUDRunConfig:
        return HUDRunConfig(method=variant, **({"epochs": self.epochs} if self.epochs else {}))

    def settings(self) -> dict[str, Any]:
        benchmark = dataclasses.asdict(self.benchmark)
        if benchmark["near_duplicates"] == 1:  # the embedded design's settings as they were before the field existed
            del benchmark["near_duplicates"]
        return {"configs": {v: self.config(v).to_dict() for v in self.spec.variants}, "benchmark": benchmark}

    def prepare_data(self, folder: Path, data_seed: int) -> None:
        generate_cvr_benchmark(folder, seed=data_seed, spec=self.benchmark)

    def train_and_rank(self, variant: str, data: Path, out: Path, *, seed: int, device: str, resume: bool,
                       show_progress: bool) -> dict[str, QueryRanks]:
        from reference_models.hud.cli import run_variant

        config = self.config(variant)
        paths = {s: SplitPaths.default(data, s) for s in SPLITS}
        vocabulary = Vocabulary.build([t.edit for t in read_annotations(paths["train"].annotation)])
        splits = {s: load_cvr_split(s, p, vocabulary, max_words=config.max_words) for s, p in paths.items()}
        run_variant(config, splits, vocabulary, out, device=device, seed=seed, resume=resume, overwrite=not resume,
                    show_progress=show_progress, verbose=False)
        task = CVRTask(config, splits["train"], splits["val"], vocabulary)
        model = task.build_model()
        model.load_state_dict(engine.load_checkpoint(out / "best.pt", map_location=device)["model"])
        return {"test": task.query_ranks(model.to(device), splits["test"], device)}


def runner(epochs: int | None = None, scale: float = 1.0, benchmark: str = "embedded") -> HUDComparison:
    """The runner of the command line (``scale``: videos per split as a fraction of the benchmark's;
    ``benchmark``: a name of :data:`~reference_models.hud.benchmark.BENCHMARKS`)."""
    spec = benchmark_spec(benchmark)
    return HUDComparison(spec.scaled(scale) if scale != 1.0 else spec, epochs)
