"""The msrvtt-regime comparison's extra pieces against brute force: multi-positive ranks, the ``generic_multi`` set
of a (tiny) comparison run, and the diagnostics that its report carries."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from reference_models.compare import build_results
from reference_models.dab.benchmark import BENCHMARKS, oracle_ceilings
from reference_models.dab.cli import load_trained
from reference_models.dab.comparison_runner import DIAGNOSTICS_NAME, MULTI_POSITIVE_SET, DABComparison
from reference_models.dab.config import preset
from reference_models.dab.data import load_t2v_split
from reference_models.dab.evaluate import multi_positive_ranks, score_split
from reference_models.engine import seed_grid as grid

#: The regime's design and training (shared space, identity encoders, two groups, the Gaussian at the backbone's
#: width with an identity-started mean) at a size that trains in seconds.
TINY_REGIME = dataclasses.replace(BENCHMARKS["msrvtt-regime"], n_train=24, n_val=6, n_test=12, topics=3,
                                  events_per_topic=4, frames=6, feature_dims=(16, 16))
TINY_REGIME_CONFIG = preset("msrvtt-regime").replace(
    backbone={"hidden": 16, "temporal_layers": 1, "heads": 2, "max_frames": 6}, head={"gaussian_dim": 16},
    bridge={"n_steps": 2, "time_dim": 8}, optim={"epochs": 1, "batch_size": 8})


def _brute_force_rank(scores: list[float], positive: list[bool]) -> int:
    best = max(s for s, p in zip(scores, positive) if p)
    return 1 + sum(1 for s, p in zip(scores, positive) if not p and s >= best)


def test_multi_positive_ranks_against_a_brute_force_loop() -> None:
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 6, (200, 9), generator=g).double()  # few values: many ties, which count against
    positives = torch.rand(200, 9, generator=g) < 0.3
    positives[torch.arange(200), torch.randint(0, 9, (200,), generator=g)] = True  # at least one per query
    expected = [_brute_force_rank(s.tolist(), p.tolist()) for s, p in zip(scores, positives)]
    assert multi_positive_ranks(scores, positives).tolist() == expected


def test_generic_multi_set_and_diagnostics_of_a_comparison_run(tmp_path: Path) -> None:
    runner = DABComparison(TINY_REGIME_CONFIG, TINY_REGIME, multi_positive=True)
    assert runner.spec.sets == ("test", "test_all", MULTI_POSITIVE_SET)
    records = grid.run_grid(runner, tmp_path, seeds=[0], data_seeds=[0], log=lambda line: None)
    data = grid.data_folder(tmp_path, 0)
    meta = json.loads((data / "benchmark_meta.json").read_text())
    split = load_t2v_split(data, "test_all", max_frames=6)
    topic = [meta["videos"][vid]["topic"] for vid in split.video_ids]
    generic = [q for q, sen_id in enumerate(split.sen_ids) if meta["sentences"][str(sen_id)]["kind"] == "generic"]
    assert len(generic) == TINY_REGIME.n_test * TINY_REGIME.generic_per_video
    for record in records:
        ranks = record.sets[MULTI_POSITIVE_SET]
        assert ranks.query_ids == [str(split.sen_ids[q]) for q in generic]
        assert set(ranks.query_types or []) == {"generic"}
        model = load_trained(tmp_path / "runs" / "data0" / "seed0" / record.variant / "best.pt")
        logits = score_split(model, split).logits
        own_topic = [topic[int(split.query_video[q])] for q in generic]
        expected = [_brute_force_rank(logits[q].tolist(), [t == own for t in topic]) for q, own in zip(generic, own_topic)]
        assert ranks.ranks == expected
        # the single-positive set ranks only the caption's own video: never better than the multi-positive rank
        single = dict(zip(record.sets["test_all"].query_ids, record.sets["test_all"].ranks))
        assert all(r <= single[i] for r, i in zip(ranks.ranks, ranks.query_ids))
    # diagnostics: written by the Gaussian run only, averaged per model by the report
    run = tmp_path / "runs" / "data0" / "seed0"
    assert (run / "dab" / DIAGNOSTICS_NAME).is_file() and not (run / "base" / DIAGNOSTICS_NAME).exists()
    results = build_results(grid.read_runs(tmp_path), grid.read_plan(tmp_path), n_boot=100)
    assert set(results["sets"]) == {"test", "test_all", MULTI_POSITIVE_SET}
    assert set(results["diagnostics"]) == {"dab"}
    mean = results["diagnostics"]["dab"]["mean"]
    for key in ("sigma2.text", "sigma2.bridged", "sigma2.video", "bridge.shift", "bridge.closed_fraction",
                "variance_share.all_pairs", "variance_share.own_pairs"):
        assert key in mean
    assert any(key.startswith("video_sigma2_by_events.") for key in mean)
    report = grid.format_report(results)
    assert "diagnostics of dab" in report and "sigma2.video" in report and MULTI_POSITIVE_SET in report
    # the oracle ceilings: written with the instance, carried by the results when the folder is given, printed
    assert "ceilings" not in results and "oracle" not in report
    saved = json.loads((data / grid.CEILINGS_NAME).read_text())
    assert saved == json.loads(json.dumps(oracle_ceilings(0, TINY_REGIME)))
    results = build_results(grid.read_runs(tmp_path), grid.read_plan(tmp_path), n_boot=100, out=tmp_path)
    assert results["ceilings"]["data_seeds"] == [0]
    assert results["ceilings"]["mean"]["test"]["bayes"]["specific"] == saved["sets"]["test"]["bayes"]["specific"]
    report = grid.format_report(results)
    assert "beside the oracle ceilings" in report and "oracle bayes / oracle deterministic" in report
    table = report.split("beside the oracle ceilings")[2]  # the test_all set's (test, test_all, generic_multi)
    oracle = saved["sets"]["test_all"]
    for kind in ("all", "specific", "generic"):
        row = next(line for line in table.splitlines() if line.startswith(kind + " "))
        metrics = results["sets"]["test_all"]["metrics"] if kind == "all" else \
            results["sets"]["test_all"]["per_type"][kind]["metrics"]
        expected = " / ".join([f"{metrics['R@1']['method']['mean']:.2f}", f"{metrics['R@1']['base']['mean']:.2f}",
                               f"{oracle['bayes'][kind]['R@1']:.2f}", f"{oracle['deterministic'][kind]['R@1']:.2f}"])
        assert expected in row, (expected, row)
    assert all(f"oracle, data seed 0: {line}" in report for line in saved["statements"])


def test_a_varied_regime_run_correlates_the_text_variance_with_the_drawn_specificity(tmp_path: Path) -> None:
    varied = dataclasses.replace(BENCHMARKS["msrvtt-regime-varied"], n_train=24, n_val=6, n_test=12, topics=3,
                                 events_per_topic=4, frames=6, feature_dims=(16, 16))
    runner = DABComparison(TINY_REGIME_CONFIG, varied, multi_positive=True)
    grid.run_grid(runner, tmp_path, seeds=[0], data_seeds=[0], log=lambda line: None)
    saved = json.loads((tmp_path / "runs" / "data0" / "seed0" / "dab" / DIAGNOSTICS_NAME).read_text())
    corr = saved["text_sigma2_vs_specificity"]
    assert corr["n"] == len(load_t2v_split(grid.data_folder(tmp_path, 0), "test_all", max_frames=6).sen_ids)
    assert -1.0 <= corr["low"] <= corr["high"] <= 1.0
    assert json.loads((grid.data_folder(tmp_path, 0) / grid.CEILINGS_NAME).read_text())["scorers"] == [
        "bayes", "no_generic", "deterministic"]
