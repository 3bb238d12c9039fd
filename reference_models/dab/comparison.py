"""DAB vs its CLIP4Clip-style base as a comparison of the engine (:mod:`reference_models.engine.compare`).

Each benchmark instance is the embedded text-to-video benchmark written with the data seed (``demo``'s
generator and spec); each run trains one variant with the engine's trainer as
:func:`reference_models.dab.cli.run_variant` does (``best.pt`` on the validation R@1), then
:meth:`~reference_models.dab.task.T2VTask.query_ranks` ranks the 1k-A-style test (``test``) and the
all-captions test (``test_all``); the caption kinds (``specific``, ``generic``) are the query types.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from reference_models.dab.benchmark import T2VBenchmarkSpec, generate_t2v_benchmark
from reference_models.dab.config import T2VConfig
from reference_models.dab.data import SPLITS, load_t2v_split
from reference_models.dab.task import T2VTask
from reference_models.engine import QueryRanks, Trainer

__all__ = ["DABComparison", "runner"]


class DABComparison:
    """The :class:`~reference_models.engine.compare.ComparisonRunner` of DAB vs its base.

    Parameters
    ----------
    config : T2VConfig
        DAB's config (default: ``demo``'s); the base is its ``head.variant = "base"``.
    spec : T2VBenchmarkSpec
        The benchmark instances' design (default: the embedded benchmark's).
    """

    task = "dab"
    spec = T2VTask.comparison

    def __init__(self, config: T2VConfig | None = None, spec: T2VBenchmarkSpec | None = None) -> None:
        self.config = config if config is not None else T2VConfig()
        self.benchmark = spec if spec is not None else T2VBenchmarkSpec()

    def variant_config(self, variant: str) -> T2VConfig:
        return self.config if variant == "dab" else self.config.replace(head={"variant": "base"})

    def settings(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "benchmark": dataclasses.asdict(self.benchmark)}

    def prepare_data(self, folder: Path, data_seed: int) -> None:
        generate_t2v_benchmark(folder, seed=data_seed, spec=self.benchmark)

    def train_and_rank(self, variant: str, data: Path, out: Path, *, seed: int, device: str, resume: bool,
                       show_progress: bool) -> dict[str, QueryRanks]:
        config = self.variant_config(variant)
        splits = {s: load_t2v_split(data, s, max_frames=config.backbone.max_frames) for s in SPLITS}
        trainer = Trainer(T2VTask(config, splits["train"], splits["val"]), out, device=device, seed=seed,
                          show_progress=show_progress)
        trainer.fit(resume=resume)
        model = trainer.load_best()
        kinds = json.loads((data / "benchmark_meta.json").read_text(encoding="utf-8"))["sentences"]
        result = {}
        for name in self.spec.sets:
            ranks = trainer.task.query_ranks(model, splits[name], device)
            ranks.query_types = [kinds.get(i, {}).get("kind", "unknown") for i in ranks.query_ids]
            result[name] = ranks
        return result


def runner(epochs: int | None = None, scale: float = 1.0) -> DABComparison:
    """The runner of the command line (``scale``: videos per split as a fraction of the benchmark's)."""
    config = T2VConfig() if epochs is None else T2VConfig().replace(optim={"epochs": epochs})
    spec = T2VBenchmarkSpec()
    if scale != 1.0:
        spec = dataclasses.replace(spec, **{f"n_{s}": max(4, round(getattr(spec, f"n_{s}") * scale))
                                            for s in ("train", "val", "test")})
    return DABComparison(config, spec)
