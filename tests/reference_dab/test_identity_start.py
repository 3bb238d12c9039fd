"""DAB's identity start: with zero log-variance weights (the default) DAB at step 0 ranks as its
base; the old random start does not; and the diagnostics' variance-free split of the cost sums to the cost."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from evidential_prvr.functional import pairwise_gaussian_kl, pairwise_wasserstein2
from evidential_prvr.probabilistic import DiagonalGaussian
from reference_models.dab.config import ABLATIONS, HeadSettings, ablation_config, preset
from reference_models.dab.diagnostics import gaussian_diagnostics, variance_free_split
from reference_models.dab.model import T2VModel

#: The msrvtt-regime treatment (identity encoders, the Gaussian at the backbone's width, identity mean start) small.
CONFIG = preset("msrvtt-regime").replace(backbone={"hidden": 16, "temporal_layers": 1, "heads": 2, "max_frames": 6},
                                         head={"gaussian_dim": 16}, bridge={"n_steps": 3, "time_dim": 8})


def _data(centred: bool, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    text, frames = torch.randn(40, 16, generator=g), torch.randn(30, 6, 16, generator=g)
    if centred:  # zero-mean coordinates: the layer norm in front of DAB's mean layer only rescales
        text, frames = text - text.mean(-1, keepdim=True), frames - frames.mean(-1, keepdim=True)
    return text, frames, torch.ones(30, 6, dtype=torch.bool)


def _order(logits: torch.Tensor) -> torch.Tensor:
    return logits.argsort(dim=1, descending=True, stable=True)


@torch.no_grad()
def _models(config, seed: int = 0) -> tuple[T2VModel, T2VModel]:
    torch.manual_seed(seed)
    dab = T2VModel(16, 16, config).eval()
    torch.manual_seed(seed)
    base = T2VModel(16, 16, config.replace(head={"variant": "base"})).eval()
    return dab, base


def test_the_identity_start_is_the_default_and_the_old_start_a_named_option() -> None:
    assert HeadSettings().logvar_weights == "zero" and CONFIG.head.logvar_weights == "zero"
    assert ablation_config(CONFIG, "dab-logvar-pytorch").head.logvar_weights == "pytorch"
    assert ABLATIONS["dab-logvar-pytorch"] == {"head": {"logvar_weights": "pytorch"}}
    with pytest.raises(ValueError, match="head.logvar_weights must be one of 'zero', 'small', 'pytorch'; got 'ones'"):
        CONFIG.replace(head={"logvar_weights": "ones"})


@torch.no_grad()
def test_at_initialisation_dab_ranks_exactly_as_its_base() -> None:
    text, frames, mask = _data(centred=True)
    dab, base = _models(CONFIG)
    assert torch.equal(_order(dab(text, frames, mask).logits), _order(base(text, frames, mask).logits))
    # the old start (PyTorch's random log-variance weights) gives each query its own metric: another ranking
    old, _ = _models(CONFIG.replace(head={"logvar_weights": "pytorch"}))
    assert not torch.equal(_order(old(text, frames, mask).logits), _order(base(text, frames, mask).logits))


@torch.no_grad()
def test_on_uncentred_features_the_identity_start_ranks_by_the_centred_cosine_of_the_bases_embeddings() -> None:
    """What differs from the base on any features: DAB's layer norm (Key Design 1) centres each embedding, so the
    identity start ranks by the correlation of the base's own text and video embeddings instead of their cosine."""
    text, frames, mask = _data(centred=False)
    text = text + 0.5  # a common offset: cosine and correlation then rank differently
    dab, base = _models(CONFIG)
    emb, pooled = base.encode_text(text), base.encode_gallery(frames, mask).pooled
    assert pooled is not None

    def centred_unit(x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x - x.mean(-1, keepdim=True), dim=-1)

    correlation = centred_unit(emb) @ centred_unit(pooled).T
    assert torch.equal(_order(dab(text, frames, mask).logits), _order(correlation))
    assert not torch.equal(_order(correlation), _order(base(text, frames, mask).logits))


@pytest.mark.parametrize(("cost", "library"), [("kl", pairwise_gaussian_kl), ("w2", pairwise_wasserstein2)])
def test_the_variance_free_split_sums_to_the_cost_and_its_mean_term_is_the_distance_of_the_means(cost, library):
    g = torch.Generator().manual_seed(1)
    v_mu, v_lv = torch.randn(7, 5, generator=g, dtype=torch.float64), torch.randn(7, 5, generator=g, dtype=torch.float64)
    t_mu, t_lv = torch.randn(4, 5, generator=g, dtype=torch.float64), torch.randn(4, 5, generator=g, dtype=torch.float64)
    term, rest = variance_free_split(v_mu, v_lv, t_mu, t_lv, cost)
    torch.testing.assert_close(term + rest, library(v_mu, v_lv, t_mu, t_lv).T)
    distance = torch.cdist(t_mu, v_mu).square()
    torch.testing.assert_close(term, 0.5 * distance if cost == "kl" else distance)
    # the variances do not enter the mean term
    torch.testing.assert_close(variance_free_split(v_mu, 3 * v_lv, t_mu, -t_lv, cost)[0], term)
    with pytest.raises(ValueError, match="cost must be 'kl' or 'w2', got 'l2'"):
        variance_free_split(v_mu, v_lv, t_mu, t_lv, "l2")


def test_the_diagnostics_report_the_variance_free_term() -> None:
    g = torch.Generator().manual_seed(2)
    text = DiagonalGaussian(torch.randn(12, 4, generator=g), torch.full((12, 4), -2.0))
    video = DiagonalGaussian(torch.randn(6, 4, generator=g), torch.full((6, 4), -2.0))
    query_video = torch.arange(12) % 6
    result = gaussian_diagnostics(text, text, video, query_video, query_kinds=["specific", "generic"] * 6)
    free = result["variance_free"]
    # equal variances everywhere: the KL is e^2 times the mean term, which then ranks exactly as the whole cost
    assert free["mean_term_share"] == pytest.approx(torch.e ** -2, rel=1e-5)
    assert free["moves"]["changed"] == 0.0 and set(free["moves"]) >= {"by_kind.specific", "by_kind.generic"}
