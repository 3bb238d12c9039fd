"""``prvr-videos demo``: zero-shot search of the generated world with the bundled encoder, offline, in a minute.

Writes the generated world (:mod:`reference_models.videos.generated`) into ``OUT/world``, indexes it with the
bundled encoder and its captions into ``OUT/gallery`` (the ``val`` captions calibrate the search), answers one
held-out test caption of each kind, and prints how the zero-shot search does on every held-out test caption:
R@1/5/10 per caption kind against chance with the mean probability shown at ``k = 10`` (in percent, to set
beside R@10), and the calibration's expected error on them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from evidential_prvr.metrics import recall_from_ranks

__all__ = ["run_demo", "held_out_answers"]


def held_out_answers(answerer: Any, truth: dict, split: str = "test", k: int = 10) -> list[tuple[dict, Any]]:
    """``(caption's truth entry, its answer)`` for every caption of ``split`` (answered at ``k``)."""
    captions = [c for c in answerer.gallery.captions() if c["split"] == split]
    entries = {c["caption_id"]: c for c in truth["captions"]}
    answers = answerer.answer([c["sentence"] for c in captions], k=k) if captions else []
    return [({**entries[c["caption_id"]], "sentence": c["sentence"]}, a) for c, a in zip(captions, answers)]


def run_demo(out: Path, *, n_videos: int = 120, seed: int = 0, device: str = "cpu") -> int:
    from reference_models.engine import format_table
    from reference_models.videos.answers import Answerer, format_answers
    from reference_models.videos.calibration import expected_calibration_error
    from reference_models.videos.clip_encoder import BUNDLED_MODEL, BUNDLED_WEIGHTS
    from reference_models.videos.generated import CAPTION_KINDS, write_generated_collection
    from reference_models.videos.indexing import IndexSettings, Sampling, run_index

    start = time.perf_counter()
    out = Path(out)
    world = out / "world"
    truth_path = world / "truth.json"
    if not truth_path.is_file() or json.loads(truth_path.read_text())["seed"] != seed or len(
            json.loads(truth_path.read_text())["videos"]) != n_videos:
        print(f"writing {n_videos} generated videos to {world}", flush=True)
        write_generated_collection(world, n_videos=n_videos, seed=seed)
    coll = json.loads(truth_path.read_text())
    settings = IndexSettings(videos=world / "videos", out=out / "gallery", model=BUNDLED_MODEL,
                             pretrained=BUNDLED_WEIGHTS, captions=world / "captions.csv",
                             sampling=Sampling(fps=2.0), workers=1, device=device)
    report = run_index(settings, show_progress=False)
    print(f"indexed {report.videos} videos into {settings.out} ({len(report.encoded)} encoded, "
          f"{len(report.unchanged)} unchanged)", flush=True)
    answerer = Answerer(settings.out, device=device)
    pairs = held_out_answers(answerer, coll, k=10)
    examples = []
    for kind in CAPTION_KINDS:
        first = next((c for c, _ in pairs if c["kind"] == kind), None)
        if first is not None:
            examples.append(first["sentence"])
    print(format_answers(answerer.answer(examples, k=5)))
    rows = [["captions", "n", "R@1", "R@5", "R@10", "chance R@5", "mean probability@10"]]
    for kind in (*CAPTION_KINDS, "all"):
        chosen = [(c, a) for c, a in pairs if kind in ("all", c["kind"])]
        if not chosen:
            continue
        rank = np.array([next((h.rank for h in a.results if h.video == c["video"]), 11) for c, a in chosen])
        recall = recall_from_ranks(rank, ks=(1, 5, 10))
        shown = [a.probability for _, a in chosen if a.probability is not None]
        rows.append([kind, str(len(chosen))] + [f"{recall[f'R@{r}']:.1f}" for r in (1, 5, 10)]
                    + [f"{100 * 5 / answerer.num_videos:.1f}", f"{100 * np.mean(shown):.1f}" if shown else "-"])
    print(f"zero-shot on the {len(pairs)} held-out test captions over all {answerer.num_videos} videos:")
    print(format_table(rows))
    probs = np.array([a.probability for _, a in pairs if a.probability is not None])
    if len(probs):
        hits = np.array([any(h.video == c["video"] for h in a.results) for c, a in pairs if a.probability is not None])
        print(f"calibration (k = 10, fitted on {answerer.calibration.captions} val captions): expected calibration "
              f"error {expected_calibration_error(probs, hits):.3f} on the test captions; temperature "
              f"{answerer.calibration.temperature:.3g} ({answerer.calibration.temperature_source})")
    print(f"done in {time.perf_counter() - start:.0f} s; search it yourself: prvr-videos search --gallery "
          f"{settings.out} --query \"a red circle\" --format table")
    return 0
