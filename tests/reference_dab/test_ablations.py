"""DAB's ablation variants in the reference model and the comparison tool: the video-conditioned bridge (blocked
scoring equals one block, the cost equals the library's pieces), mean-distance ranking, the bridge-only variant at
DAB's width, and one comparison folder that sets several methods against the same base runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.distributions import Normal, kl_divergence

import reference_models.dab.model as model_module
from reference_models import compare as cli
from reference_models.dab.comparison_runner import DABComparison
from reference_models.dab.config import ABLATIONS, T2VConfig
from reference_models.dab.model import T2VModel
from reference_models.engine import UserError
from reference_models.engine import seed_grid as grid
from tests.reference_dab.test_regime_comparison import TINY_REGIME, TINY_REGIME_CONFIG

SMALL = T2VConfig().replace(backbone={"hidden": 16, "temporal_layers": 1, "heads": 2, "max_frames": 6},
                            head={"gaussian_dim": 8}, bridge={"n_steps": 3, "time_dim": 8})


def _perturbed(config: T2VConfig, seed: int = 0) -> T2VModel:
    torch.manual_seed(seed)
    model = T2VModel(12, 10, config).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def _inputs(q: int = 5, v: int = 7):
    g = torch.Generator().manual_seed(1)
    return (torch.randn(q, 10, generator=g, dtype=torch.float64), torch.randn(v, 6, 12, generator=g, dtype=torch.float64),
            torch.rand(v, 6, generator=g) > 0.2)


def test_video_conditioned_cost_is_the_kl_to_each_pairs_own_bridged_text():
    model = _perturbed(SMALL.replace(bridge={"condition": "video"}))
    text, frames, mask = _inputs()
    mask[:, 0] = True
    out = model(text, frames, mask)
    gallery = model.encode_gallery(frames, mask)
    gaussian = model.gaussian_head(model.encode_text(text))
    for i in range(text.shape[0]):
        for j in range(frames.shape[0]):
            video = gallery.video.mu[j], gallery.video.logvar[j]
            bridged = model.bridge(gaussian.mu[i], gaussian.logvar[i], *video)
            expected = kl_divergence(Normal(video[0], (0.5 * video[1]).exp()),
                                     Normal(bridged.mu, (0.5 * bridged.logvar).exp())).sum()
            torch.testing.assert_close(out.cost[i, j], expected)
    torch.testing.assert_close(out.logits, -out.cost)


@pytest.mark.parametrize("pooling", ["mean", "xpool"])
def test_video_conditioned_scoring_in_blocks_equals_one_block(monkeypatch, pooling):
    model = _perturbed(SMALL.replace(bridge={"condition": "video"}, backbone={"pooling": pooling}))
    text, frames, mask = _inputs()
    mask[:, 0] = True
    whole = model(text, frames, mask)
    monkeypatch.setattr(model_module, "PAIR_BLOCK", 6)  # one video per block for 5 queries
    blocked = model(text, frames, mask)
    torch.testing.assert_close(blocked.cost, whole.cost, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(blocked.logits, whole.logits, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("condition", ["text", "video"])
def test_mean_distance_ranking_keeps_the_cost(condition):
    config = SMALL.replace(bridge={"condition": condition})
    by_cost = _perturbed(config)
    by_mean = _perturbed(config.replace(head={"ranking": "mean_distance"}))
    text, frames, mask = _inputs()
    mask[:, 0] = True
    a, b = by_cost(text, frames, mask), by_mean(text, frames, mask)
    torch.testing.assert_close(b.cost, a.cost, rtol=0, atol=0)  # same weights, same cost
    gallery = by_mean.encode_gallery(frames, mask)
    gaussian = by_mean.gaussian_head(by_mean.encode_text(text))
    if condition == "text":
        bridged = by_mean.bridge(*gaussian).mu
        expected = -((bridged[:, None, :] - gallery.video.mu[None]) ** 2).sum(-1)
    else:
        bridged = by_mean.bridge(gaussian.mu[:, None], gaussian.logvar[:, None], gallery.video.mu[None],
                                 gallery.video.logvar[None]).mu
        expected = -((bridged - gallery.video.mu[None]) ** 2).sum(-1)
    torch.testing.assert_close(b.logits, expected)


def test_bridge_only_variant_at_dabs_width_has_dabs_bridge():
    dab = T2VModel(12, 10, SMALL)
    narrow = T2VModel(12, 10, SMALL.replace(head={"variant": "bridge"}, bridge={"point_dim": 8}))
    wide = T2VModel(12, 10, SMALL.replace(head={"variant": "bridge"}))
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(narrow.bridge) == count(dab.bridge) < count(wide.bridge)
    assert narrow.bridge.dim == 8 and wide.bridge.dim == 16
    text, frames, mask = _inputs()
    mask[:, 0] = True
    assert narrow(text.float(), frames.float(), mask).logits.shape == (5, 7)


def test_ablation_settings_are_checked():
    with pytest.raises(ValueError, match='bridge.condition = "video" needs head.variant = "dab"'):
        SMALL.replace(head={"variant": "prob"}, bridge={"condition": "video"})
    with pytest.raises(ValueError, match=r"contraction must lie in \(0, 1\]"):
        SMALL.replace(bridge={"contraction": 1.5})
    with pytest.raises(ValueError, match=r"point_dim \(8\) .* \(leave point_dim at 0\)"):
        SMALL.replace(bridge={"point_dim": 8})
    with pytest.raises(ValueError, match="head.ranking"):
        SMALL.replace(head={"ranking": "median"})
    runner = DABComparison(SMALL)
    assert set(runner.spec.methods) == set(ABLATIONS)
    for method in ABLATIONS:
        runner.variant_config(method)  # each ablation is a valid config
    assert runner.variant_config("bridge").bridge.point_dim == SMALL.head.gaussian_dim
    assert runner.variant_config("base").head.variant == "base"
    with pytest.raises(UserError, match="one of dab, dab-video"):
        runner.variant_config("dab-huge")


def test_one_folder_sets_several_methods_against_the_same_base(tmp_path: Path, capsys):
    torch.set_num_threads(1)
    runner = DABComparison(TINY_REGIME_CONFIG, TINY_REGIME, multi_positive=True)
    with pytest.raises(UserError, match="train dab first"):
        grid.run_grid(runner, tmp_path / "early", seeds=[0], data_seeds=[0], methods=["dab-meandist"],
                      log=lambda line: None)
    grid.run_grid(runner, tmp_path, seeds=[0], data_seeds=[0], methods=["dab", "dab-meandist"], log=lambda line: None)
    grid.run_grid(runner, tmp_path, seeds=[0], data_seeds=[0], methods=["dab-video"], log=lambda line: None)
    runs = tmp_path / "runs" / "data0" / "seed0"
    assert sorted(p.name for p in runs.iterdir()) == ["base", "dab", "dab-meandist", "dab-video"]
    assert not (runs / "dab-meandist" / "best.pt").exists()  # it trained nothing
    base_record = json.loads((runs / "base" / grid.RANKS_NAME).read_text())
    assert base_record["resumed"] is False  # the base trained once for all three
    results = cli.report(tmp_path, n_boot=100, methods=["dab", "dab-video", "dab-meandist"])
    printed = capsys.readouterr().out
    assert "ablations against base on test" in printed
    table = json.loads((tmp_path / "ablations.json").read_text())
    assert [row["method"] for row in table["rows"]] == ["dab", "dab-video", "dab-meandist"]
    assert (tmp_path / "results.json").is_file() and (tmp_path / "results-dab-video.json").is_file()
    assert results["method"] == "dab-meandist"
    # each row's figures are that method's own results
    video = json.loads((tmp_path / "results-dab-video.json").read_text())
    assert table["rows"][1]["R@1"]["difference"] == video["sets"]["test"]["metrics"]["R@1"]["difference"]
    assert video["diagnostics"]["dab-video"]["runs"] == 1
    with pytest.raises(UserError, match="method 'dab-huge'"):
        cli.report(tmp_path, n_boot=100, methods=["dab-huge"])
