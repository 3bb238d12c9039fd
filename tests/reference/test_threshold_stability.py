"""The Holmes reference model's smoothed-threshold option and its per-epoch identification stability record."""

from __future__ import annotations

import dataclasses
import io
import math
import statistics

import pytest
import torch

from evidential_prvr.functional import identify
from reference_models.holmes.cli import _config_from_args, build_parser
from reference_models.holmes.comparison_runner import HolmesComparison
from reference_models.holmes.config import HolmesConfig, preset
from reference_models.holmes.objective import HolmesObjective, build_criterion
from reference_models.holmes.stability import ThresholdStability

SIM = torch.tensor([[0.9, 0.1, 0.0], [0.5, 0.5, 0.4], [0.0, 0.1, 0.05]])


def _identification(types: list[int], scale: float = 1.0):
    """An identification of SIM * scale with its fused types replaced by ``types``."""
    result = identify(SIM * scale, SIM * scale, torch.tensor([0, 1, 2]))
    return dataclasses.replace(result, query_type=torch.tensor(types))


def test_type_changes_and_threshold_spread_per_epoch():
    monitor = ThresholdStability()
    batches = {0: [(["a", "b"], [0, 1], 1.0), (["c"], [2], 0.5)],
               1: [(["c", "a"], [2, 1], 0.8), (["b"], [1], 0.3)]}
    seen: dict[int, list[tuple[float, float]]] = {0: [], 1: []}
    for epoch, batch_list in batches.items():
        monitor.start_epoch(epoch)
        for ids, types, scale in batch_list:
            ident = _identification(types + [0] * (3 - len(types)), scale)
            ident = dataclasses.replace(ident, query_type=ident.query_type[:len(ids)])
            monitor.observe(ids, ident)
            seen[epoch].append((float(ident.frame.uncertainty_threshold), float(ident.clip.consistency_threshold)))
    summary = monitor.summary()
    assert math.isnan(summary["epoch01"]["type_changed"])  # no earlier visit
    assert summary["epoch02"]["type_changed"] == pytest.approx(1 / 3)  # a: 0 -> 1; b and c kept theirs
    for epoch, key in ((0, "epoch01"), (1, "epoch02")):
        u = [x for x, _ in seen[epoch]]
        p = [y for _, y in seen[epoch]]
        assert summary[key]["beta_u_sd"]["frame"] == pytest.approx(statistics.stdev(u))
        assert summary[key]["beta_p_sd"]["clip"] == pytest.approx(statistics.stdev(p))
        assert summary[key]["beta_u_mean"]["frame"] == pytest.approx(statistics.mean(u))


def test_eval_mode_and_mismatched_ids():
    monitor = ThresholdStability()
    monitor.start_epoch(0)
    monitor.eval()
    monitor.observe(["a", "b", "c"], _identification([0, 1, 2]))
    assert monitor.summary() == {}
    monitor.train()
    with pytest.raises(ValueError, match="caption_ids has 2 ids but the identification 3 queries"):
        monitor.observe(["a", "b"], _identification([0, 1, 2]))


def test_the_record_is_saved_with_the_objective_and_old_checkpoints_still_load():
    config = preset("embedded")
    assert HolmesObjective(config, config.model.hidden_size).stability is None  # asked for only
    objective = HolmesObjective(config, config.model.hidden_size, stability=True)
    assert objective.stability is not None
    objective.set_epoch(0)
    objective.stability.observe(["a", "b", "c"], _identification([0, 1, 2]))
    objective.set_epoch(1)
    objective.stability.observe(["a", "b", "c"], _identification([1, 1, 2]))
    buffer = io.BytesIO()
    torch.save(objective.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    restored = HolmesObjective(config, config.model.hidden_size, stability=True)
    restored.load_state_dict(state)
    assert restored.stability is not None
    assert restored.stability.summary()["epoch02"]["type_changed"] == pytest.approx(1 / 3)
    older = {k: v for k, v in state.items() if not k.startswith("stability.")}
    HolmesObjective(config, config.model.hidden_size, stability=True).load_state_dict(older)  # from before the record
    baseline = preset("embedded").with_ablation("baseline")
    assert HolmesObjective(baseline, baseline.model.hidden_size, stability=True).stability is None


def test_the_config_option_reaches_the_criterion():
    config = preset("embedded")
    assert config.ablation.threshold_decay is None and build_criterion(config).threshold_ema is None
    ema = config.with_ablation("ema_thresholds")
    assert ema.ablation.threshold_decay == 0.9 and ema.name == "embedded+ema_thresholds"
    criterion = build_criterion(ema)
    assert criterion.threshold_ema is not None and criterion.threshold_ema.decay == 0.9
    assert HolmesConfig.from_json(ema.to_json()) == ema
    assert build_criterion(ema.replace(ablation={"method": "baseline"})).threshold_ema is None


@pytest.mark.parametrize("decay", [1.0, -0.5, "0.9", True])
def test_the_config_refuses_a_bad_decay(decay):
    with pytest.raises(ValueError, match="ablation.threshold_decay must be null"):
        preset("embedded").replace(ablation={"threshold_decay": decay})


def test_the_command_line_option():
    args = build_parser().parse_args(["train", "--data-root", "x", "--threshold-decay", "0.8"])
    assert _config_from_args(args).ablation.threshold_decay == 0.8
    args = build_parser().parse_args(["train", "--data-root", "x"])
    assert _config_from_args(args).ablation.threshold_decay is None
    help_text = build_parser()._subparsers._group_actions[0].choices["train"].format_help()  # type: ignore[union-attr]
    assert "--threshold-decay" in help_text


def test_the_comparison_offers_holmes_ema_and_keeps_earlier_folders_valid():
    comparison = HolmesComparison()
    assert comparison.spec.methods == ("holmes", "holmes-ema") and comparison.spec.base == "baseline"
    assert "threshold_decay" not in comparison.settings()["config"]["ablation"]


def test_the_comparison_sets_holmes_ema_against_holmes_itself(monkeypatch, tmp_path, capsys):
    import json

    import reference_models.holmes.comparison_runner as module
    from reference_models import compare as cli
    from tests.reference.data_helpers import MICRO_SPEC

    monkeypatch.setattr(module, "runner", lambda epochs=None, scale=1.0: HolmesComparison(
        preset("embedded").replace(schedule={"epochs": 2, "warmup_stage_epochs": 1}), MICRO_SPEC))
    torch.set_num_threads(1)
    out = tmp_path / "cmp"
    assert cli.main(["run", "--task", "holmes", "--seeds", "0", "--data-seeds", "0", "--out", str(out),
                     "--methods", "holmes,holmes-ema", "--no-progress", "--no-report"]) == 0
    diagnostics = json.loads((out / "runs/data0/seed0/holmes-ema/diagnostics.json").read_text())
    assert set(diagnostics["stability"]) == {"epoch01", "epoch02"}
    assert not (out / "runs/data0/seed0/baseline/diagnostics.json").exists()
    assert cli.main(["report", "--out", str(out), "--methods", "holmes-ema", "--base", "holmes",
                     "--n-boot", "200"]) == 0
    results = json.loads((out / "results-holmes-ema-vs-holmes.json").read_text())
    assert (results["method"], results["base"]) == ("holmes-ema", "holmes")
    assert set(results["diagnostics"]) == {"holmes-ema", "holmes"}
    capsys.readouterr()
    assert cli.main(["report", "--out", str(out), "--methods", "holmes", "--base", "holmes", "--n-boot", "200"]) == 2
    assert "--base holmes: choose another of the comparison's methods (holmes-ema) or baseline" in capsys.readouterr().err
    from reference_models.holmes import stability_report

    figure = tmp_path / "stability.png"
    assert stability_report.main([str(out), "--figure", str(figure)]) == 0
    printed = capsys.readouterr().out
    assert "holmes-ema     1  epoch02" in printed and figure.read_bytes()[:4] == b"\x89PNG"
