"""The T2V model's heads: shapes, DAB's cost against independent references, the bridge at initialisation."""

from __future__ import annotations

import pytest
import torch
from torch.distributions import Normal, kl_divergence

from reference_models.dab.config import VARIANTS, T2VConfig
from reference_models.dab.model import T2VModel
from tests.reference_dab.conftest import TINY_CONFIG


def _inputs(q: int = 3, v: int = 4, t: int = 6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(v, t, dtype=torch.bool)
    mask[1, 4:] = False
    return torch.randn(q, 10, generator=g), torch.randn(v, t, 12, generator=g), mask


@pytest.mark.parametrize("pooling", ["mean", "xpool"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_scores_and_trains(variant: str, pooling: str) -> None:
    torch.manual_seed(0)
    model = T2VModel(12, 10, TINY_CONFIG.replace(head={"variant": variant}, backbone={"pooling": pooling}))
    out = model(*_inputs())
    assert out.logits.shape == (3, 4) and torch.isfinite(out.logits).all()
    if variant in ("dab", "prob"):
        assert torch.equal(out.logits, -out.cost) and (out.cost >= 0).all()
    else:
        assert out.cost is None
    out.logits.sum().backward()
    assert all(p.grad is not None for p in model.text_mlp.parameters())


def _gaussians(model: T2VModel, text: torch.Tensor, frames: torch.Tensor, mask: torch.Tensor):
    """The text, bridged text and video Gaussians, recomputed from the model's parts."""
    tokens = model.encode_frames(frames, mask)
    text_g = model.gaussian_head(model.encode_text(text))
    bridged = model.bridge(*text_g) if model.bridge is not None else text_g
    pooled = (tokens * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    video = model.gaussian_head(pooled)
    logvar = 0.5 * (video.logvar + model.token_head(tokens, mask=mask))
    return bridged, video.mu, logvar


def test_dab_cost_is_the_directional_kl_of_video_to_bridged_text() -> None:
    torch.manual_seed(1)
    model = T2VModel(12, 10, TINY_CONFIG)
    with torch.no_grad():  # a non-trivial bridge (its drift starts at zero)
        model.bridge.drift[-1].weight.normal_(std=0.1)
    text, frames, mask = _inputs()
    bridged, v_mu, v_logvar = _gaussians(model, text, frames, mask)
    reference = kl_divergence(Normal(v_mu[None], (0.5 * v_logvar[None]).exp()),
                              Normal(bridged.mu[:, None], (0.5 * bridged.logvar[:, None]).exp())).sum(-1)
    torch.testing.assert_close(model(text, frames, mask).cost, reference, rtol=1e-4, atol=1e-4)
    w2 = T2VModel(12, 10, TINY_CONFIG.replace(head={"cost": "w2"}))
    w2.load_state_dict(model.state_dict())
    bridged_sd = (0.5 * bridged.logvar).exp()
    reference_w2 = ((v_mu[None] - bridged.mu[:, None]) ** 2).sum(-1) + \
        (((0.5 * v_logvar).exp()[None] - bridged_sd[:, None]) ** 2).sum(-1)
    torch.testing.assert_close(w2(text, frames, mask).cost, reference_w2, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cost", ["kl", "w2"])
def test_a_prepared_gallery_scores_as_the_unprepared_one(cost: str) -> None:
    """``encode_gallery(prepare_kl=True)``: the KL's video side prepared once, the same cost up to rounding and
    against the independent KL; training and evaluation's default gallery is left unprepared, bit for bit."""
    torch.manual_seed(3)
    model = T2VModel(12, 10, TINY_CONFIG.replace(head={"cost": cost})).eval()
    with torch.no_grad():
        model.bridge.drift[-1].weight.normal_(std=0.1)
    text, frames, mask = _inputs(q=5)
    plain, prepared = model.encode_gallery(frames, mask), model.encode_gallery(frames, mask, prepare_kl=True)
    assert plain.kl_sources is None and (prepared.kl_sources is not None) == (cost == "kl")
    embedded = model.encode_text(text)
    expected = model.score(embedded, plain)
    assert torch.equal(expected.cost, model(text, frames, mask).cost)
    torch.testing.assert_close(model.score(embedded, prepared).cost, expected.cost, rtol=1e-5, atol=1e-4)
    for i in range(5):  # one query at a time: the same row
        torch.testing.assert_close(model.score(embedded[i : i + 1], prepared).cost, expected.cost[i : i + 1],
                                   rtol=1e-5, atol=1e-4)


def test_the_base_ranks_against_its_gallery_at_unit_norm() -> None:
    torch.manual_seed(4)
    model = T2VModel(12, 10, TINY_CONFIG.replace(head={"variant": "base"}))
    text, frames, mask = _inputs()
    gallery = model.encode_gallery(frames, mask)
    assert gallery.unit is not None and gallery.kl_sources is None
    torch.testing.assert_close(gallery.unit.norm(dim=-1), torch.ones(4))
    cosine = torch.nn.functional.normalize(model.encode_text(text), dim=-1) @ gallery.unit.T
    torch.testing.assert_close(model.score(model.encode_text(text), gallery).logits,
                               model.log_scale.exp() * cosine)


def test_bridge_is_the_identity_at_initialisation() -> None:
    torch.manual_seed(2)
    dab = T2VModel(12, 10, TINY_CONFIG)
    prob = T2VModel(12, 10, TINY_CONFIG.replace(head={"variant": "prob"}))
    prob.load_state_dict({k: v for k, v in dab.state_dict().items() if not k.startswith("bridge.")})
    inputs = _inputs()
    torch.testing.assert_close(dab(*inputs).cost, prob(*inputs).cost)


def test_xpool_with_one_frame_matches_pairwise_scoring() -> None:
    """With a single frame, X-Pool's attention has one key, so the video Gaussian no longer depends on the text
    and the per-pair KL must equal the library's pairwise KL on that video Gaussian."""
    torch.manual_seed(3)
    model = T2VModel(12, 10, TINY_CONFIG.replace(backbone={"pooling": "xpool"}))
    text, frames, mask = _inputs(t=1)
    cost = model(text, frames, mask).cost
    tokens = model.encode_frames(frames, mask)
    pooled = model.xpool(model.encode_text(text), tokens, mask)
    torch.testing.assert_close(pooled[0], pooled[2])  # independent of the text
    from evidential_prvr.functional import pairwise_gaussian_kl

    bridged = model.bridge(*model.gaussian_head(model.encode_text(text)))
    video = model.gaussian_head(pooled[0])
    logvar = 0.5 * (video.logvar + model.token_head(tokens, mask=mask))
    reference = pairwise_gaussian_kl(video.mu, logvar, bridged.mu, bridged.logvar).T
    torch.testing.assert_close(cost, reference, rtol=1e-4, atol=1e-4)


def test_config_round_trips_and_refuses_bad_values() -> None:
    config = T2VConfig().replace(head={"variant": "prob", "tau": 2.5})
    assert T2VConfig.from_dict(config.to_dict()) == config
    assert config.differences(T2VConfig().to_dict()) == ["head.variant 'dab' vs 'prob'", "head.tau 4.0 vs 2.5"]
    for bad, match in (({"head": {"variant": "dirichlet"}}, "head.variant"), ({"head": {"tau": 0}}, "tau"),
                       ({"bridge": {"n_steps": 2000}}, "n_steps"), ({"optim": {"lr": float("nan")}}, "lr"),
                       ({"backbone": {"hidden": 30}}, "multiple of heads")):
        with pytest.raises(ValueError, match=match):
            T2VConfig().replace(**bad)


@pytest.mark.parametrize("point_dim", [0, 8])
def test_bridge_only_xpool_attends_with_the_bridged_text_the_cosine_uses(point_dim: int) -> None:
    config = TINY_CONFIG.replace(head={"variant": "bridge"}, bridge={"point_dim": point_dim},
                                 backbone={"pooling": "xpool"})
    torch.manual_seed(0)
    model = T2VModel(12, 10, config)
    assert model.plan.bridge == "text" and not model.plan.gaussian
    text, frames, mask = _inputs()
    seen: list[torch.Tensor] = []
    model.xpool.register_forward_hook(lambda module, args, output: seen.append(args[0]))
    logits = model(text, frames, mask).logits
    point = model.encode_text(text) if model.point_proj is None else model.point_proj(model.encode_text(text))
    bridged = model.bridge(point, torch.zeros_like(point)).mu
    assert len(seen) == 1 and seen[0].shape[-1] == (point_dim or config.backbone.hidden)
    torch.testing.assert_close(seen[0], bridged)
    # the cosine of the same bridged text against the videos pooled with it
    tokens = model.encode_frames(frames, mask)
    tokens = tokens if model.point_proj is None else model.point_proj(tokens)
    pooled = torch.nn.functional.normalize(model.xpool(bridged, tokens, mask), dim=-1)
    cosine = (pooled * torch.nn.functional.normalize(bridged, dim=-1)[:, None, :]).sum(-1)
    torch.testing.assert_close(logits, model.log_scale.exp() * cosine)


def test_the_head_plan_is_resolved_once_from_the_config() -> None:
    from evidential_prvr.functional import paired_wasserstein2, pairwise_gaussian_kl

    plans = {name: T2VModel(12, 10, TINY_CONFIG.replace(**changes)).plan for name, changes in {
        "base": {"head": {"variant": "base"}}, "dab": {}, "prob": {"head": {"variant": "prob"}},
        "video": {"bridge": {"condition": "video"}}, "w2": {"head": {"cost": "w2", "ranking": "mean_distance"}},
    }.items()}
    assert [plans[n].bridge for n in ("base", "dab", "prob", "video")] == ["none", "text", "none", "video"]
    assert plans["dab"].gaussian and not plans["base"].gaussian and plans["dab"].pairwise_cost is pairwise_gaussian_kl
    assert plans["w2"].paired_cost is paired_wasserstein2 and plans["w2"].by_mean_distance
    with pytest.raises(ValueError, match=r"point_dim \(6\) must be a multiple of backbone.heads"):
        TINY_CONFIG.replace(head={"variant": "bridge"}, bridge={"point_dim": 6},
                            backbone={"pooling": "xpool", "heads": 4})
