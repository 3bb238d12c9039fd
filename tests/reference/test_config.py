"""Configs of the Holmes reference model: presets, ablation switches, validation and JSON round-trip."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from evidential_prvr.presets import holmes_settings
from reference_models.holmes.config import ABLATIONS, PRESETS, HolmesConfig, OptimSettings, from_registry, preset

# The release's settings, copied by hand from its src/Configs/{tvr,act,cha}.py (independent of the registry
# and of config.py). Early stopping: the release stops once its counter *exceeds* max_es_cnt (20 / 10 / 20),
# i.e. after max_es_cnt + 1 epochs without a better validation SumR.
INTER_TAU = {"tvr": 0.05, "activitynet": 0.04, "charades": 0.08}
INTRA_TAU = {"tvr": 0.06, "activitynet": 0.08, "charades": 0.08}
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
    w, base = cfg.weights, cfg.base
    assert (w.nce_clip, w.nce_frame, w.div, w.intra, w.inter) == want["weights"]
    assert (base.margin, base.div_delta, base.div_alpha, base.div_lambda) == (want["margin"], want["div_delta"], 32, 1)
    assert base.hard_negative_topk == 20
    assert cfg.optim.lr == want["lr"]
    assert cfg.schedule.early_stop_patience == want["patience"]
    assert cfg.model.max_query_len == want["query_len"]
    assert cfg.schedule.epochs == 100 and cfg.optim.videos_per_batch == 128
    assert cfg.optim.weight_decay == 0.01 and cfg.optim.warmup_proportion == 0.01 and cfg.optim.max_grad_norm == 1.0
    assert (cfg.optim.optimizer, cfg.optim.lr_schedule, cfg.optim.grad_clip_mode, cfg.optim.no_decay) == (
        "bert_adam", "bert_warmup_linear", "per_parameter", "embedding_norms")
    assert (cfg.optim.eps, cfg.optim.betas) == (1e-6, (0.9, 0.999))
    assert cfg.schedule.warmup_stage_epochs == 20 and cfg.schedule.hard_negative_epoch == 20
    m = cfg.model
    assert m.hidden_size == 384 and m.num_heads == 4 and m.num_blocks == 1
    assert (m.frame_weight, m.clip_weight) == (0.4, 0.6)
    assert m.dropout == want["dropout"] and m.width_temperature == want["sft"]
    assert m.widths == (math.inf, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
    assert cfg.to_dict()["model"]["widths"] == [None, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0]  # JSON: null = global
    assert m.position_table == 128 and m.initializer_range == 0.02
    assert (m.ffn_multiplier, m.query_ffn_multiplier) == (4, 4)
    assert (m.kernel, m.width_weighting, m.attention_mask, m.padded_frames) == (
        "release", "cross_attention", "additive", "zero")
    assert m.attention_output_projection is False and m.second_query_encoding is True
    assert (cfg.inter.tau, cfg.inter.tanh_scaling, cfg.inter.matched) == (INTER_TAU[name], "outside", "argmax")
    assert (cfg.intra.tau, cfg.intra.tanh_scaling) == (INTRA_TAU[name], "outside")
    assert (cfg.transport.epsilon, cfg.transport.n_iters, cfg.transport.dustbin_quantile) == (0.1, 50, 0.3)


def test_paper_source_takes_the_papers_values():
    """App. A.1 gives ActivityNet queries of 64 tokens; the rest follows the release."""
    cfg = from_registry("activitynet", source="paper")
    assert cfg.name == "activitynet-paper" and (cfg.inter.tau, cfg.inter.tanh_scaling) == (0.1, "inside")
    assert cfg.model.max_query_len == 64
    assert cfg.optim.lr == preset("activitynet").optim.lr
    assert from_registry("act") == preset("activitynet")


def test_presets_are_fresh_frozen_copies():
    a = preset("tvr")
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.optim.lr = 1.0  # type: ignore[misc]
    assert a.replace(optim={"lr": 1.0}).optim.lr == 1.0 and preset("tvr").optim.lr == 3e-4


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("ablation", sorted(ABLATIONS))
def test_json_round_trip(name, ablation, tmp_path):
    cfg = preset(name).with_ablation(ablation)
    assert HolmesConfig.from_json(cfg.to_json()) == cfg
    path = tmp_path / "cfg.json"
    cfg.to_json(path)
    assert HolmesConfig.from_json(path) == cfg
    assert json.loads(path.read_text())["ablation"]["method"] == cfg.ablation.method


#: Each Table 3 ablation: the field of the ablation section it sets, and the value.
TABLE3_SWITCHES = {
    "frame_only": ("inter_branches", "frame"), "clip_only": ("fusion", "clip"),
    "no_aggregation": ("aggregation", False), "trust_frame": ("fusion", "frame"), "trust_clip": ("fusion", "clip"),
    "confidence_dominance": ("fusion", "confidence_dominant"), "no_calibration": ("calibration", "none"),
    "initial_polysemous_only": ("calibration", "initial_polysemous"), "no_intra": ("intra", False),
    "softmax": ("assignment", "softmax"), "ot": ("assignment", "ot"), "baseline": ("method", "baseline"),
    "dab": ("method", "dab"),
}


def test_table3_switches():
    base = preset("embedded")
    for ablation, (field, value) in TABLE3_SWITCHES.items():
        actual = getattr(base.with_ablation(ablation).ablation, field)
        assert (type(actual), actual) == (type(value), value), ablation  # False, not 0
    # An ablation changes only the ablation section (and the name).
    changed = base.with_ablation("no_intra")
    assert changed.replace(ablation=dataclasses.asdict(base.ablation), name="embedded") == base
    assert changed.name == "embedded+no_intra"


@pytest.mark.parametrize(
    "section, change, match",
    [
        ("ablation", {"method": "mil"}, "ablation.method"),
        ("ablation", {"fusion": "average"}, "ablation.fusion"),
        ("ablation", {"assignment": "sinkhorn"}, "ablation.assignment"),
        ("optim", {"lr": 0.0}, "optim.lr"),
        ("schedule", {"epochs": 0}, "schedule.epochs"),
        ("optim", {"warmup_proportion": 1.0}, "optim.warmup_proportion"),
        ("model", {"hidden_size": 30, "num_heads": 4}, "divisible"),
        ("weights", {"intra": -1.0}, "weights.intra"),
        ("inter", {"tau": 0.0}, "inter.tau"),
        ("base", {"video_negative": "random"}, "base.video_negative"),
        ("transport", {"epsilon": -1.0}, "transport.epsilon"),
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
        ("optim", {"betas": [0.9, 1.0]}, "optim.betas"),
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


PREVIOUS = Path(__file__).parent / "previous_configs"


@pytest.mark.parametrize("file", ["embedded_d77b6c1.json", "activitynet_paper_d77b6c1.json",
                                  "tvr_no_intra_e4b604a.json"])
def test_configs_of_release_1_are_refused_with_their_old_names(file):
    """Files written by ``to_json`` of commits d77b6c1 (a ``loss`` section, ``optim.epochs``, ``optim.beta1``, ...)
    and e4b604a (release 1.0.0): version 3.0 no longer migrates them, and says so."""
    old = json.loads((PREVIOUS / file).read_text(encoding="utf-8"))
    with pytest.raises(ValueError, match=r"unknown config keys \['loss'\].*release 1.x\? Version 3.0 no longer"):
        HolmesConfig.from_dict(old)
    del old["loss"]
    with pytest.raises(ValueError, match=r"unknown keys \[.*'epochs'.*\] in config section 'optim'.*release 1.x"):
        HolmesConfig.from_dict(old)


@pytest.mark.parametrize("section, change, old", [
    ("optim", {"epochs": 3}, "epochs"), ("optim", {"warmup_ratio": 0.1}, "warmup_ratio"),
    ("optim", {"beta2": 0.9}, "beta2")])
def test_replace_refuses_the_names_of_release_1(section, change, old):
    with pytest.raises(ValueError, match=rf"unknown keys \['{old}'\] in config section '{section}'"):
        preset("tvr").replace(**{section: change})
    with pytest.raises(ValueError, match="unknown config section 'loss'"):
        preset("tvr").replace(loss={"intra": 1.0})


def test_a_section_must_be_its_dataclass():
    with pytest.raises(TypeError, match="config section 'inter' must be an InterVideoSettings"):
        dataclasses.replace(preset("tvr"), inter=holmes_settings("release", "tvr").intra)


def test_optim_settings_take_the_registry_keywords_only():
    for old in ("warmup_ratio", "grad_clip", "beta1", "beta2"):  # the names of release 1.x
        with pytest.raises(TypeError, match=old):
            OptimSettings(**{old: 0.5})
