"""Own videos end to end: extract -> train --config clip -> search on a generated collection; the saved gallery
index, its refusals, FAISS candidates; the throughput benchmark runs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av", reason="the video extra (av) is not installed")
open_clip = pytest.importorskip("open_clip", reason="the video extra (open_clip_torch) is not installed")

import torch  # noqa: E402

from tests.own_videos.helpers import ROOT, cli, cli_env, held_out_captions  # noqa: E402


def test_end_to_end_retrieves_held_out_captions_and_flags_generic_ones(trained: dict[str, Path]) -> None:
    from reference_models.holmes.videos.generated import GENERIC_CAPTIONS

    captions = held_out_captions(trained["root"])
    queries = trained["base"] / "queries.txt"
    queries.write_text("\n".join(s for _, s in captions) + "\n", encoding="utf-8")
    k = 5
    run = cli("search", "--checkpoint", str(trained["run"] / "best.pt"), "--gallery", str(trained["root"]),
               "--queries", str(queries), "-k", str(k), "--risk", "0.5")
    assert run.returncode == 0, run.stderr
    answers = json.loads(run.stdout)["answers"]
    assert len(answers) == len(captions)
    n_videos = 120
    specific = [(cid.split("#")[0], a) for (cid, s), a in zip(captions, answers) if s not in GENERIC_CAPTIONS]
    generic = [a for (_, s), a in zip(captions, answers) if s in GENERIC_CAPTIONS]
    hit = np.mean([any(h["video"] == vid for h in a["results"]) for vid, a in specific])
    chance = k / n_videos
    assert hit >= 4 * chance, (hit, chance)  # the held-out captions' videos, well above chance
    rephrase_generic = np.mean([a["decision"] == "rephrase" for a in generic])
    rephrase_specific = np.mean([a["decision"] == "rephrase" for _, a in specific])
    assert rephrase_generic > rephrase_specific, (rephrase_generic, rephrase_specific)
    under_generic = np.mean([a["query_type"] == "underdetermined" for a in generic])
    under_specific = np.mean([a["query_type"] == "underdetermined" for _, a in specific])
    assert under_generic > under_specific, (under_generic, under_specific)
    # the best moment of the right video, when it is shown, overlaps the event its caption describes
    truth = json.loads((trained["coll"] / "truth.json").read_text())
    overlaps = []
    for (cid, s), a in zip(captions, answers):
        if s in GENERIC_CAPTIONS:
            continue
        vid, event = cid.split("#")[0], int(cid.split("#")[2])
        start, end = truth["videos"][vid][event]["span"]
        overlaps += [h["moment"]["start"] < end and h["moment"]["end"] > start for h in a["results"] if h["video"] == vid]
    assert overlaps and np.mean(overlaps) >= 0.8, overlaps
    first = answers[0]
    assert set(first) >= {"query", "results", "belief", "uncertainty", "query_type", "decision", "threshold"}
    assert first["query_type"] in ("precise", "polysemous", "underdetermined")
    moment = first["results"][0]["moment"]
    assert 0.0 <= moment["start"] < moment["end"] <= 6.0 + 1e-6


def test_the_uncertainty_threshold_is_fitted_on_what_search_gives_the_validation_captions(
        trained: dict[str, Path]) -> None:
    """beta_u is the best Youden J cut of the uncertainty that search itself gives the validation captions (over
    the whole gallery): fitted against the validation videos alone, it would sit on another scale."""
    from reference_models.holmes.videos.search import GallerySearch

    searcher = GallerySearch(trained["run"] / "best.pt", trained["root"])
    captions = held_out_captions(trained["root"], "val")
    answers = searcher.search([s for _, s in captions], k=5, risk=0.5)
    u = np.array([a.uncertainty for a in answers])
    correct = np.array([a.results[0].video == cid.split("#")[0] for (cid, _), a in zip(captions, answers)])
    assert 0 < correct.sum() < len(correct)

    def youden(cut: float) -> float:  # the test "u <= cut" as a detector of a correct top-1
        kept = u <= cut
        return kept[correct].mean() - kept[~correct].mean()

    beta_u = searcher.uncertainty.thresholds.uncertainty
    best = max(youden(c) for c in np.unique(u))  # every distinct cut, brute force
    # the fit searches a grid of at most 33 midpoints, which may miss the best cut by one query
    assert youden(beta_u) >= best - max(1 / correct.sum(), 1 / (~correct).sum()) - 1e-12, (youden(beta_u), best)
    assert youden(beta_u) > 0


def test_saved_gallery_index_is_reused_refused_when_stale_and_faiss_gives_the_same_top_k(
        trained: dict[str, Path]) -> None:
    pytest.importorskip("faiss", reason="faiss-cpu is not installed")
    from reference_models.holmes.videos.search import GallerySearch

    ckpt, root = trained["run"] / "best.pt", trained["root"]
    exact = GallerySearch(ckpt, root)
    assert exact.index_path.is_file()
    queries = [s for _, s in held_out_captions(root)[:8]]
    top = [[h.video for h in a.results] for a in exact.search(queries, k=5)]
    again = GallerySearch(ckpt, root)  # loads the saved index
    assert [[h.video for h in a.results] for a in again.search(queries, k=5)] == top
    flat = GallerySearch(ckpt, root, index="faiss")  # candidates from FAISS, re-ranked exactly
    assert [[h.video for h in a.results] for a in flat.search(queries, k=5)] == top
    reloaded = GallerySearch(ckpt, root, index="faiss")  # the saved FAISS index
    assert [[h.video for h in a.results] for a in reloaded.search(queries, k=5)] == top
    # another checkpoint: refused in one line
    other = trained["base"] / "other" / "best.pt"
    other.parent.mkdir(exist_ok=True)
    state = torch.load(ckpt, weights_only=True)
    first = next(iter(state["model"]))
    state["model"][first] = state["model"][first] + 1.0
    torch.save(state, other)
    shutil.copy(exact.index_path, other.parent / exact.index_path.name)
    run = cli("search", "--checkpoint", str(other), "--gallery", str(root), "--query", "a red square moves up")
    assert run.returncode == 2 and "does not match the checkpoint it was built from" in run.stderr
    assert len([line for line in run.stderr.splitlines() if line.startswith("error")]) == 1
    # a changed feature file: refused in one line too
    copy = trained["base"] / "root-copy"
    shutil.copytree(root, copy)
    import h5py

    with h5py.File(copy / "videos" / "FeatureData" / "clip_tiny-clip" / "feature.hdf5", "r+") as f:
        f["video0000"][0, 0] += 1.0
    run = cli("search", "--checkpoint", str(ckpt), "--gallery", str(copy), "--query", "a red square moves up")
    assert run.returncode == 2 and "does not match the features it was built from" in run.stderr


def test_search_refuses_bad_queries_in_one_line(trained: dict[str, Path]) -> None:
    ckpt, root = str(trained["run"] / "best.pt"), str(trained["root"])
    for extra, message in ((("--query", "   "), "empty query"), (("--query", "x", "-k", "0"), "must be >= 1"),
                           (("--query", "x", "-k", "500"), "the gallery holds 120 videos"),
                           (("--query", "x", "--risk", "1.5"), "must be in (0, 1)")):
        run = cli("search", "--checkpoint", ckpt, "--gallery", root, *extra)
        assert run.returncode == 2, (extra, run.stderr)
        assert message in run.stderr, (extra, run.stderr)
        assert "Traceback" not in run.stderr


def test_the_throughput_benchmark_runs() -> None:
    root = ROOT
    run = subprocess.run([sys.executable, str(root / "benchmarks" / "own_videos.py"), "--quick", "--gallery-sizes",
                          "300", "--faiss", "flat", "--batch", "4", "--threads", "1"],
                         capture_output=True, text=True, timeout=280, cwd=root, env=cli_env())
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ratio extract / encoder alone" in run.stdout and "ratio one / exact" in run.stdout, run.stdout
