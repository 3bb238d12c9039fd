"""The comparison tool's selective-retrieval figures: each run's confidences in ``ranks.json``, the figures with
the hierarchical interval in ``results.json``, the printed report and the ablation table; runs without
confidences keep the report as it was."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from evidential_prvr.metrics import SELECTIVE_METRICS, compare_selective_runs
from reference_models import compare as cli
from reference_models.dab.cli import load_trained
from reference_models.dab.comparison_runner import MULTI_POSITIVE_SET, DABComparison
from reference_models.dab.data import load_t2v_split
from reference_models.dab.evaluate import score_split
from reference_models.engine import UserError
from reference_models.engine import seed_grid as grid
from tests.reference_dab.test_regime_comparison import TINY_REGIME, TINY_REGIME_CONFIG


def _second_minus_first(row: list[float]) -> float:
    lowest = sorted(row)
    return lowest[1] - lowest[0]


def test_dab_runs_carry_their_own_confidence_and_the_report_its_intervals(tmp_path: Path, capsys) -> None:
    torch.set_num_threads(1)
    runner = DABComparison(TINY_REGIME_CONFIG, TINY_REGIME, multi_positive=True)
    grid.run_grid(runner, tmp_path, seeds=[0, 1], data_seeds=[0], methods=["dab", "prob"], log=lambda line: None)
    records = grid.read_runs(tmp_path)
    data = grid.data_folder(tmp_path, 0)
    split = load_t2v_split(data, "test", max_frames=6)
    for record in (r for r in records if r.seed == 0):
        ranks = record.sets["test"]
        output = score_split(load_trained(tmp_path / "runs" / "data0" / "seed0" / record.variant / "best.pt"), split)
        if record.variant == "base":  # the max-score margin: top-1 minus top-2 score
            assert ranks.confidence_name == "max_score_margin"
            expected = [_second_minus_first([-s for s in row]) for row in output.logits.tolist()]
        else:  # DAB's KL margin: second-lowest minus lowest cost
            assert ranks.confidence_name == "kl_margin"
            expected = [_second_minus_first(row) for row in output.cost.tolist()]
        assert ranks.confidence == pytest.approx(expected, abs=1e-6)
        assert record.sets[MULTI_POSITIVE_SET].confidence is None  # a multi-positive rank has no top-1 margin
    saved = json.loads((tmp_path / "runs" / "data0" / "seed1" / "dab" / grid.RANKS_NAME).read_text())
    assert saved["sets"]["test_all"]["confidence_name"] == "kl_margin"

    results = cli.report(tmp_path, n_boot=150, methods=["dab", "prob"])
    printed = capsys.readouterr().out
    assert MULTI_POSITIVE_SET in results["sets"] and "selective" not in results["sets"][MULTI_POSITIVE_SET]
    for set_name in ("test", "test_all"):
        selective = results["sets"][set_name]["selective"]
        assert selective["confidence"] == {"method": "kl_margin", "base": "max_score_margin"}
        assert list(selective["metrics"]) == list(SELECTIVE_METRICS)
        # the figures and intervals are the library's on the runs' own ranks and confidences
        by_variant = {v: [r.sets[set_name] for r in records if r.variant == v] for v in ("prob", "base")}
        arrays = {v: (np.array([q.confidence for q in runs]), np.array([q.ranks for q in runs]))
                  for v, runs in by_variant.items()}
        expected = compare_selective_runs(arrays["prob"][0][None], arrays["prob"][1][None], arrays["base"][0][None],
                                          arrays["base"][1][None], n_boot=150, generator=0)
        assert selective["metrics"] == {m: c.to_dict() for m, c in expected.items()}
    saved_results = json.loads((tmp_path / "results-prob.json").read_text())
    assert saved_results["sets"]["test"]["selective"]["metrics"]["AURC"]["higher_is_better"] is False
    assert "selective retrieval (prob by its kl_margin, base by its max_score_margin)" in printed
    table = json.loads((tmp_path / "ablations.json").read_text())
    assert table["selective"] == list(SELECTIVE_METRICS)
    assert all(set(SELECTIVE_METRICS) <= set(row) for row in table["rows"])
    assert "R@1@10% (method / base, diff [95%])" in printed


def _record(variant: str, seed: int, confidence: list[float] | None, name: str | None = "margin") -> grid.RunRecord:
    ranks = grid.QueryRanks([1, 2, 1, 3], ["a", "b", "c", "d"], None, confidence,
                            None if confidence is None else name)
    return grid.RunRecord(variant, 0, seed, {"test": ranks})


SPEC = grid.ComparisonSpec("m", "b", headline=("R@1",), metrics=("R@1",), ks=(1,))


def test_the_confidences_are_collected_only_when_every_run_has_one() -> None:
    full = [_record("m", 0, [0.1, 0.2, 0.3, 0.4]), _record("m", 1, [1.0, 0.0, 0.5, 0.2]),
            _record("b", 0, [0.4, 0.3, 0.2, 0.1], "score")]
    collected = grid.collect_ranks(full, SPEC, "test")
    assert collected["confidence"]["names"] == {"method": "margin", "base": "score"}
    np.testing.assert_array_equal(collected["confidence"]["method"][0], [[0.1, 0.2, 0.3, 0.4], [1.0, 0.0, 0.5, 0.2]])
    assert collected["confidence"]["base"][0].shape == (1, 4)
    missing = [*full[:2], _record("b", 0, None)]
    assert grid.collect_ranks(missing, SPEC, "test")["confidence"] is None
    mixed = [_record("m", 0, [0.1, 0.2, 0.3, 0.4]), _record("m", 1, [0.1, 0.2, 0.3, 0.4], "other"), full[2]]
    with pytest.raises(UserError, match="the m runs' test confidences are of different kinds \\(margin, other\\)"):
        grid.collect_ranks(mixed, SPEC, "test")


def test_query_ranks_check_their_confidences() -> None:
    with pytest.raises(ValueError, match="confidence and confidence_name go together"):
        grid.QueryRanks([1], ["a"], None, [0.5])
    with pytest.raises(ValueError, match="2 confidences for 1 ranks"):
        grid.QueryRanks([1], ["a"], None, [0.5, 0.1], "margin")
    with pytest.raises(ValueError, match="confidences must be finite"):
        grid.QueryRanks([1], ["a"], None, [float("nan")], "margin")
    ranks = grid.QueryRanks([1, 2], ["a", "b"], ["x", "y"], [0.5, 0.25], "margin")
    assert grid.QueryRanks.from_dict(json.loads(json.dumps(ranks.to_dict()))) == ranks
    # a ranks.json written before confidences existed reads as before, and writes no confidence keys
    old = grid.QueryRanks.from_dict({"ranks": [1], "query_ids": ["a"], "query_types": None})
    assert old.confidence is None and set(old.to_dict()) == {"ranks", "query_ids", "query_types"}
