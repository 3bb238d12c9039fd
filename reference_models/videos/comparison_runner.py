"""Holmes trained on a gallery's captions vs the zero-shot search of the same gallery, as a comparison of the engine.

``python -m reference_models.compare run --task videos --seeds 0,1,2 --data-seeds 0,1,2 --out DIR`` (see
:mod:`reference_models.compare`). Each benchmark instance is a generated world
(:func:`reference_models.videos.generated.write_generated_collection`, the data seed its seed) indexed with the
bundled encoder and its captions (train, val and test splits by video). The variants rank every test caption's
video among **all** the gallery's videos, as a user's query meets them:

``holmes``
    ``train --config clip`` on the gallery (the training seed), then the checkpoint's search
    (:mod:`reference_models.videos.trained`); the confidence is its calibration's (the held-out ``val`` captions).
``zero-shot``
    The zero-shot search (:mod:`reference_models.videos.zero_shot`); no training (each training seed gives the
    same run); the confidence is the evidential one its calibration chose.
``zero-shot-max-score``
    The same ranks as ``zero-shot`` with the top score as the confidence: ``report --methods zero-shot-max-score``
    sets it against ``zero-shot``, whose AURC difference is then that of the evidential confidence against the
    top score.

The query types are the captions' kinds (appearance, motion, order, generic), so the report gives each kind's
recall and its interval.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch

from evidential_prvr.metrics import DEFAULT_KS
from reference_models.engine import ComparisonSpec, QueryRanks

__all__ = ["VideosComparison", "runner", "SPEC"]

#: Holmes (trained) against the zero-shot search, on the test captions, over the whole gallery.
SPEC = ComparisonSpec(method="holmes", base="zero-shot", headline=("SumR",),
                      metrics=("R@1", "R@5", "R@10", "R@100", "SumR", "MnR", "MdR"),
                      ablations=("zero-shot-max-score",), ks=DEFAULT_KS)


@dataclasses.dataclass(frozen=True)
class WorldSettings:
    """The generated world of each benchmark instance, and how it is indexed."""

    n_videos: int = 200
    fps: float = 2.0


class VideosComparison:
    """The :class:`~reference_models.engine.seed_grid.ComparisonRunner` of Holmes vs the zero-shot search."""

    task = "videos"
    spec: ComparisonSpec = SPEC

    def __init__(self, world: WorldSettings | None = None, epochs: int | None = None) -> None:
        from reference_models.holmes.config import preset

        self.world = world or WorldSettings()
        self.config = preset("clip")
        if epochs is not None:
            self.config = self.config.replace(schedule={"epochs": epochs})

    def settings(self) -> dict[str, Any]:
        from reference_models.videos.clip_encoder import bundled_files

        record = json.loads(bundled_files()["record"].read_text(encoding="utf-8"))
        return {"world": dataclasses.asdict(self.world), "config": self.config.to_dict(),
                "encoder_weights_sha256": record["weights_sha256"]}

    def prepare_data(self, folder: Path, data_seed: int) -> None:
        from reference_models.videos.clip_encoder import BUNDLED_MODEL, BUNDLED_WEIGHTS
        from reference_models.videos.generated import write_generated_collection
        from reference_models.videos.indexing import IndexSettings, Sampling, run_index

        world = write_generated_collection(folder / "world", n_videos=self.world.n_videos, seed=data_seed)
        run_index(IndexSettings(videos=world.videos_dir, out=folder / "gallery", model=BUNDLED_MODEL,
                                pretrained=BUNDLED_WEIGHTS, captions=world.captions_csv,
                                sampling=Sampling(fps=self.world.fps), workers=1), show_progress=False)

    def _ranks(self, answerer: Any, data: Path, confidence: str = "calibrated") -> QueryRanks:
        truth = json.loads((data / "world" / "truth.json").read_text(encoding="utf-8"))
        kinds = {c["caption_id"]: c["kind"] for c in truth["captions"]}
        captions = [c for c in answerer.gallery.captions() if c["split"] == "test"]
        where = {v: i for i, v in enumerate(answerer.video_ids)}
        scorer, saved, cal = answerer.scorer, answerer.saved, answerer.calibration
        queries = scorer.encode_texts([c["sentence"] for c in captions])
        target = torch.tensor([where[c["video"]] for c in captions], dtype=torch.long)
        result = scorer.top_k(queries, saved.rows, answerer.num_videos, target=target)
        if confidence == "max_score":
            values, name = result.scores[:, 0], "max_score"
        else:
            values, name = cal.confidence_of(cal.opinion(result, queries)), "evidential"  # the kind its calibration chose
        return QueryRanks(result.target_ranks().tolist(), [c["caption_id"] for c in captions],
                          [kinds[c["caption_id"]] for c in captions], values.double().tolist(), name)

    def train_and_rank(self, variant: str, data: Path, out: Path, *, seed: int, device: str, resume: bool,
                       show_progress: bool) -> dict[str, QueryRanks]:
        from reference_models.videos.answers import Answerer

        gallery = data / "gallery"
        if variant in ("zero-shot", "zero-shot-max-score"):
            answerer = Answerer(gallery, device=device)
            kind = "max_score" if variant == "zero-shot-max-score" else "calibrated"
            return {"test": self._ranks(answerer, data, kind)}
        from reference_models.engine import Trainer
        from reference_models.holmes.data import load_split
        from reference_models.holmes.task import HolmesTask
        from reference_models.videos.gallery import read_gallery

        paths = read_gallery(gallery).collection
        splits = {name: load_split(gallery, paths.collection, paths.visual_feature, name,
                                   max_query_len=self.config.model.max_query_len, text_feature=paths.text_feature)
                  for name in ("train", "val")}
        trainer = Trainer(HolmesTask(self.config, splits["train"], splits["val"]), out, device=device, seed=seed,
                          show_progress=show_progress)
        trainer.fit(resume=resume)
        answerer = Answerer(gallery, checkpoint=out / "best.pt", device=device)
        return {"test": self._ranks(answerer, data)}


def runner(epochs: int | None = None, scale: float = 1.0) -> VideosComparison:
    """The runner of the command line: ``epochs`` overrides the ``clip`` preset's, ``scale`` multiplies the
    generated world's videos (< 1 for quick checks)."""
    world = WorldSettings()
    if scale != 1.0:
        world = dataclasses.replace(world, n_videos=max(20, round(world.n_videos * scale)))
    return VideosComparison(world, epochs)
