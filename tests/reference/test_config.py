"""Configs of the Holmes reference model: presets, ablation switches, validation and JSON round-trip."""

from __future__ import annotations

import json

import pytest

from reference_models.holmes.config import ABLATIONS, PRESETS, HolmesConfig, from_registry, preset

# The release's settings, copied by hand from its src/Configs/{tvr,act,cha}.py (independent of the registry
# and of config.py). Early stopping: the release stops once its counter *exceeds* max_es_cnt (20 / 10 / 20),
# i.e. after max_es_cnt + 1 epochs without a better validation SumR.
RELEASE = {
    "tvr": dict(lr=3e-4, weights=(0.05, 0.04, 8e-5, 0.8, 0.2), margin=0.1, div_delta=0.15, patience=21,
                query_len=30, dropout=0.2, sft=0.09),
    "activitynet": dict(lr=2.5e-4, weights=(0.02, 0.04, 0.003, 1e-4, 0.06), margin=0.2, div_delta=0.2, patience=11,
                        query_len=30, dropout=0.31, sft=0.6),
    "charades": dict(lr=2e-4, weights=(0.02, 0.04, 0.003, 9e-4, 0.06), margin=0.2, div_delta=0.2, patience=21,
                     query_len=30, dropout=0.25, sft=0.6),
}


@pytest.mark.parametrize("name", sorted(RELEASE))
def test_release_presets_match_the_release_configs(name):
    cfg = preset(name)
    want = RELEASE[name]
    loss = cfg.loss
    assert (loss.nce_clip, loss.nce_frame, loss.div, loss.intra, loss.inter) == want["weights"]
    assert (loss.margin, loss.div_delta, loss.div_alpha, loss.div_lambda) == (want["margin"], want["div_delta"], 32, 1)
    assert loss.hard_negative_topk == 20
    assert cfg.optim.lr == want["lr"]
    assert cfg.optim.early_stop_patience == want["patience"]
    assert cfg.optim.max_query_len == want["query_len"]
    assert cfg.optim.epochs == 100 and cfg.optim.videos_per_batch == 128
    assert cfg.optim.weight_decay == 0.01 and cfg.optim.warmup_ratio == 0.01 and cfg.optim.grad_clip == 1.0
    assert (cfg.optim.optimizer, cfg.optim.lr_schedule, cfg.optim.grad_clip_mode, cfg.optim.no_decay) == (
        "bert_adam", "bert_warmup_linear", "per_parameter", "embedding_norms")
    assert (cfg.optim.eps, cfg.optim.beta1, cfg.optim.beta2) == (1e-6, 0.9, 0.999)
    assert cfg.schedule.warmup_stage_epochs == 20 and cfg.schedule.hard_negative_epoch == 20
    m = cfg.model
    assert m.hidden_size == 384 and m.num_heads == 4 and m.num_blocks == 1
    assert (m.frame_weight, m.clip_weight) == (0.4, 0.6)
    assert m.dropout == want["dropout"] and m.width_temperature == want["sft"]
    assert m.widths == [None, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    assert m.position_table == 128 and m.initializer_range == 0.02
    assert (m.ffn_multiplier, m.query_ffn_multiplier) == (4, 4)
    assert (m.kernel, m.width_weighting, m.attention_mask, m.padded_frames) == (
        "release", "cross_attention", "additive", "zero")
    assert m.attention_output_projection is False and m.second_query_encoding is True
    assert loss.loss_dataset == name and loss.evidential_preset == "release"


def test_paper_source_takes_the_papers_values():
    """App. A.1 gives ActivityNet queries of 64 tokens; the rest follows the release."""
    cfg = from_registry("activitynet", source="paper")
    assert cfg.name == "activitynet-paper" and cfg.loss.evidential_preset == "paper"
    assert cfg.optim.max_query_len == 64
    assert cfg.optim.lr == preset("activitynet").optim.lr
    assert from_registry("act") == preset("activitynet")


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
        ("model", {"kernel": "box"}, "model.kernel"),
        ("model", {"width_weighting": "fusion"}, "model.width_weighting"),
        ("model", {"padded_frames": "drop"}, "model.padded_frames"),
        ("model", {"attention_mask": "none"}, "model.attention_mask"),
        ("model", {"width_temperature": 0.0}, "model.width_temperature"),
        ("model", {"query_ffn_multiplier": -1}, "model.query_ffn_multiplier"),
        ("model", {"second_query_encoding": 1}, "model.second_query_encoding"),
        ("optim", {"optimizer": "sgd"}, "optim.optimizer"),
        ("optim", {"lr_schedule": "cosine"}, "optim.lr_schedule"),
        ("optim", {"grad_clip_mode": "none"}, "optim.grad_clip_mode"),
        ("optim", {"no_decay": "nothing"}, "optim.no_decay"),
        ("optim", {"beta2": 1.0}, "optim.beta2"),
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
