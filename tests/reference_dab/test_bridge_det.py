"""The equal-capacity deterministic control ``bridge-det``: DAB's parameters less its variance
layers (plus the base's logit scale), InfoNCE on the cosine, and a method of the DAB comparison."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch import nn

from reference_models.dab.benchmark import BENCHMARKS
from reference_models.dab.comparison_runner import DABComparison
from reference_models.dab.config import ABLATIONS, VARIANTS, ablation_config, preset
from reference_models.dab.model import T2VModel
from reference_models.dab.task import T2VObjective
from reference_models.engine import seed_grid as grid

CONFIG = preset("msrvtt-regime").replace(backbone={"hidden": 16, "temporal_layers": 1, "heads": 2, "max_frames": 6},
                                         head={"gaussian_dim": 16}, bridge={"n_steps": 2, "time_dim": 8},
                                         optim={"epochs": 1, "batch_size": 8})
TINY = dataclasses.replace(BENCHMARKS["msrvtt-regime"], n_train=24, n_val=6, n_test=8, topics=3, events_per_topic=4,
                           frames=6, feature_dims=(16, 16))


def _count(*modules: nn.Module) -> int:
    return sum(p.numel() for m in modules for p in m.parameters())


def test_bridge_det_has_dabs_parameters_less_the_variance_layers() -> None:
    dab = T2VModel(16, 16, CONFIG)
    det = T2VModel(16, 16, ablation_config(CONFIG, "bridge-det"))
    variance_layers = (dab.gaussian_head.logvar_norm, dab.gaussian_head.logvar, dab.token_head)
    # exactly: DAB - (log-variance LayerNorm + Linear of the Gaussian head + the token head) - DAB's learned PAC
    # temperature (the preset's tau_rule) + the base's logit scale
    assert dab.log_tau is not None and dab.log_tau.numel() == 1
    assert _count(det) == _count(dab) - _count(*variance_layers) - 1 + 1
    fixed = T2VModel(16, 16, CONFIG.replace(head={"tau_rule": "fixed"}))
    assert _count(det) == _count(fixed) - _count(fixed.gaussian_head.logvar_norm, fixed.gaussian_head.logvar,
                                                 fixed.token_head) + 1
    assert _count(det.bridge) == _count(dab.bridge) and det.log_scale.numel() == 1  # type: ignore[arg-type]
    assert det.point_mean is not None and det.point_norm is not None
    assert _count(det.point_norm, det.point_mean) == _count(dab.gaussian_head.mean_norm, dab.gaussian_head.mean)
    backbone = ("text_mlp", "frame_proj", "temporal")
    assert all(_count(getattr(det, n)) == _count(getattr(dab, n)) for n in backbone) and torch.equal(det.position,
                                                                                                    dab.position)


def test_bridge_det_is_a_cosine_head_with_infonce_and_a_text_bridge() -> None:
    config = ablation_config(CONFIG, "bridge-det")
    assert "bridge-det" in VARIANTS and ABLATIONS["bridge-det"] == {"head": {"variant": "bridge-det"}}
    model = T2VModel(16, 16, config)
    assert not model.plan.gaussian and model.plan.bridge == "text"
    g = torch.Generator().manual_seed(0)
    out = model(torch.randn(5, 16, generator=g), torch.randn(5, 6, 16, generator=g), torch.ones(5, 6, dtype=torch.bool))
    assert out.cost is None and out.logits.shape == (5, 5)
    assert T2VObjective(config.head)(out).name == "nce"
    # the bridge acts on the text: a non-zero drift moves the scores
    with torch.no_grad():
        model.bridge.drift[-1].bias.fill_(0.5)  # type: ignore[union-attr, index]
    moved = model(torch.randn(5, 16, generator=g.manual_seed(0)), torch.randn(5, 6, 16, generator=g),
                  torch.ones(5, 6, dtype=torch.bool))
    assert not torch.allclose(moved.logits, out.logits)


def test_bridge_det_trains_and_ranks_as_a_method_of_the_comparison(tmp_path: Path) -> None:
    runner = DABComparison(CONFIG, TINY, multi_positive=True)
    records = grid.run_grid(runner, tmp_path, seeds=[0], data_seeds=[0], methods=["bridge-det"], log=lambda line: None)
    assert sorted(r.variant for r in records) == ["base", "bridge-det"]
    det = next(r for r in records if r.variant == "bridge-det")
    assert len(det.sets["test"].ranks) == TINY.n_test and det.sets["test"].confidence_name == "max_score_margin"
