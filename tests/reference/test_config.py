"""Configs of the Holmes reference model: presets, ablation switches, validation and JSON round-trip."""

from __future__ import annotations

import json

import pytest

from reference_models.holmes.config import ABLATIONS, PRESETS, HolmesConfig, preset

# Release settings written out from issue 4 (independent of config.py's own tables).
RELEASE = {
    "tvr": dict(lr=3e-4, weights=(0.05, 0.04, 8e-5, 0.8, 0.2), margin=0.1, patience=20, query_len=30),
    "activitynet": dict(lr=2.5e-4, weights=(0.02, 0.04, 0.003, 1e-4, 0.06), margin=0.2, patience=10, query_len=64),
    "charades": dict(lr=2e-4, weights=(0.02, 0.04, 0.003, 9e-4, 0.06), margin=0.2, patience=10, query_len=30),
}


@pytest.mark.parametrize("name", sorted(RELEASE))
def test_release_presets_match_issue(name):
    cfg = preset(name)
    want = RELEASE[name]
    loss = cfg.loss
    assert (loss.nce_clip, loss.nce_frame, loss.div, loss.intra, loss.inter) == want["weights"]
    assert loss.margin == want["margin"]
    assert cfg.optim.lr == want["lr"]
    assert cfg.optim.early_stop_patience == want["patience"]
    assert cfg.optim.max_query_len == want["query_len"]
    assert cfg.optim.epochs == 100 and cfg.optim.videos_per_batch == 128
    assert cfg.optim.weight_decay == 0.01 and cfg.optim.warmup_ratio == 0.01 and cfg.optim.grad_clip == 1.0
    assert cfg.schedule.warmup_stage_epochs == 20 and cfg.schedule.hard_negative_epoch == 20
    assert cfg.model.hidden_size == 384 and cfg.model.num_heads == 4
    assert (cfg.model.frame_weight, cfg.model.clip_weight) == (0.4, 0.6)
    assert loss.loss_dataset == name and loss.evidential_preset == "release"


def test_presets_are_fresh_copies():
    a = preset("tvr")
    a.optim.lr = 1.0
    assert preset("tvr").optim.lr == 3e-4


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("ablation", sorted(ABLATIONS))
def test_json_round_trip(name, ablation, tmp_path):
    cfg = preset(name).with_ablation(ablation)
    assert HolmesConfig.from_json(cfg.to_json()) == cfg
    path = tmp_path / "cfg.json"
    cfg.to_json(path)
    assert HolmesConfig.from_json(path) == cfg
    assert json.loads(path.read_text())["ablation"]["method"] == cfg.ablation.method


def test_table3_switches():
    base = preset("embedded")
    assert base.with_ablation("frame_only").ablation.inter_branches == "frame"
    assert base.with_ablation("clip_only").ablation.fusion == "clip"
    assert base.with_ablation("no_aggregation").ablation.aggregation is False
    assert base.with_ablation("trust_frame").ablation.fusion == "frame"
    assert base.with_ablation("trust_clip").ablation.fusion == "clip"
    assert base.with_ablation("confidence_dominance").ablation.fusion == "confidence_dominant"
    assert base.with_ablation("no_calibration").ablation.calibration == "none"
    assert base.with_ablation("initial_polysemous_only").ablation.calibration == "initial_polysemous"
    assert base.with_ablation("no_intra").ablation.intra is False
    assert base.with_ablation("softmax").ablation.assignment == "softmax"
    assert base.with_ablation("ot").ablation.assignment == "ot"
    assert base.with_ablation("baseline").ablation.method == "baseline"
    assert base.with_ablation("dab").ablation.method == "dab"
    # An ablation changes only the ablation section (and the name).
    changed = base.with_ablation("no_intra")
    assert changed.loss == base.loss and changed.optim == base.optim and changed.name == "embedded+no_intra"


@pytest.mark.parametrize(
    "section, change, match",
    [
        ("ablation", {"method": "mil"}, "ablation.method"),
        ("ablation", {"fusion": "average"}, "ablation.fusion"),
        ("ablation", {"assignment": "sinkhorn"}, "ablation.assignment"),
        ("optim", {"lr": 0.0}, "optim.lr"),
        ("optim", {"epochs": 0}, "optim.epochs"),
        ("optim", {"warmup_ratio": 1.0}, "optim.warmup_ratio"),
        ("model", {"hidden_size": 30, "num_heads": 4}, "divisible"),
        ("loss", {"intra": -1.0}, "loss.intra"),
        ("loss", {"inter_tau": 0.0}, "loss.inter_tau"),
        ("loss", {"loss_dataset": "msrvtt"}, "loss.loss_dataset"),
    ],
)
def test_bad_values_are_refused(section, change, match):
    with pytest.raises(ValueError, match=match):
        preset("embedded").replace(**{section: change})


def test_unknown_keys_are_refused():
    data = preset("tvr").to_dict()
    data["optim"]["learning_rate"] = 1e-3
    with pytest.raises(ValueError, match="learning_rate"):
        HolmesConfig.from_dict(data)
    with pytest.raises(ValueError, match="unknown config keys"):
        HolmesConfig.from_dict({"modle": {}})
    with pytest.raises(ValueError, match="config preset"):
        preset("msrvtt")
    with pytest.raises(ValueError, match="ablation name"):
        preset("tvr").with_ablation("no_everything")
