"""The retrieval-time uncertainty modules and the selective confidences: thin wrappers of the functional layer."""

from __future__ import annotations

import math

import pytest
import torch

import evidential_prvr
from evidential_prvr import GalleryQueryIdentifier, GalleryUncertainty, SelectiveConfidence
from evidential_prvr.functional import (
    gallery_opinion,
    kl_margin,
    pairwise_gaussian_kl,
    selective_confidence,
)
from evidential_prvr.uncertainty import CONFIDENCES, QueryTypeThresholds


def _scores(q=12, v=9, seed=0):
    gen = torch.Generator().manual_seed(seed)
    frame, clip = torch.rand(q, v, generator=gen), torch.rand(q, v, generator=gen)
    return frame, clip, torch.randint(0, v, (q,), generator=gen)


def test_exports():
    for name in ("GalleryUncertainty", "GalleryQueryIdentifier", "GalleryIdentification", "SelectiveConfidence"):
        assert name in evidential_prvr.__all__ and getattr(evidential_prvr, name) is not None
    for name in ("risk_coverage", "aurc", "e_aurc", "augrc", "selective_recall"):
        assert name in evidential_prvr.metrics.__all__
    for name in ("gallery_opinion", "selective_confidence", "identify_query_types", "fit_query_thresholds"):
        assert callable(getattr(evidential_prvr.functional, name))


def test_gallery_module_is_one_call_of_the_function(device):
    frame, clip, target = (x.to(device) for x in _scores())
    module = GalleryUncertainty(k=4, tau=0.2, tanh_scaling="outside", query_chunk=5)
    out = module(frame, clip, target=target)
    ref = gallery_opinion(frame, clip, k=4, tau=0.2, tanh_scaling="outside", query_chunk=5, target=target)
    torch.testing.assert_close(out.fused.aleatoric, ref.fused.aleatoric)
    assert torch.equal(out.candidates, ref.candidates) and torch.equal(out.correct, ref.correct)
    assert "k=4" in repr(module)


def test_gallery_presets():
    release = GalleryUncertainty.from_preset("release", "tvr", k=5)
    assert (release.k, release.tau, release.tanh_scaling) == (5, 0.05, "outside")
    paper = GalleryUncertainty.from_preset("paper")
    assert (paper.tau, paper.tanh_scaling) == (0.1, "inside")
    with pytest.raises(TypeError, match="unexpected override"):
        GalleryUncertainty.from_preset("paper", kk=3)
    with pytest.raises(ValueError, match="k"):
        GalleryUncertainty(k=0)
    with pytest.raises(ValueError, match="tanh_scaling"):
        GalleryUncertainty(tanh_scaling="both")


def test_identifier_fit_forward_and_state_dict():
    frame, clip, target = _scores(60, 10)
    op = GalleryUncertainty(k=5)(frame, clip, target=target)
    ident = GalleryQueryIdentifier(grid=9)
    assert ident(op).query_type.eq(0).all()  # every test off until fitted: everything precise
    types = torch.randint(0, 3, (60,), generator=torch.Generator().manual_seed(1))
    th = ident.fit(op, query_types=types)
    assert ident.thresholds == th and ident.rule == "thresholds"
    out = ident(op)
    assert out.thresholds == th and out.rule == "thresholds" and out.query_type.shape == (60,)
    restored = GalleryQueryIdentifier()
    restored.load_state_dict(ident.state_dict())
    assert restored.thresholds == th and torch.equal(restored(op).query_type, out.query_type)
    youden = GalleryQueryIdentifier(grid=9)
    assert isinstance(youden.fit(op), QueryTypeThresholds)  # no types: the correct flags drive the fit


def test_identifier_batch_rule_and_errors():
    frame, clip, target = _scores()
    op = gallery_opinion(frame, clip, k=4, target=target)
    batch = GalleryQueryIdentifier(rule="batch", beta=0.2, entropy_median="batch")(op)
    assert batch.rule == "batch" and batch.thresholds is None and batch.query_type.dtype == torch.int64
    unlabelled = gallery_opinion(frame, clip, k=4)
    with pytest.raises(ValueError, match="target"):
        GalleryQueryIdentifier().fit(unlabelled)
    with pytest.raises(TypeError, match="GalleryOpinion"):
        GalleryQueryIdentifier()(frame)
    with pytest.raises(ValueError, match="rule"):
        GalleryQueryIdentifier(rule="median")
    with pytest.raises(TypeError, match="thresholds"):
        GalleryQueryIdentifier((0.1, 0.2, 0.3))


def test_confidences_read_the_opinion():
    frame, clip, _ = _scores()
    ranking = 0.4 * frame + 0.6 * clip
    op = gallery_opinion(frame, clip, ranking=ranking, k=4)
    top2 = ranking.topk(2, dim=1).values
    expected = {
        "neg_u": -op.fused.uncertainty, "top_belief": op.fused_belief[:, 0], "neg_xi": -op.fused.aleatoric,
        "max_score": top2[:, 0], "margin": top2[:, 0] - top2[:, 1],
    }
    for kind, value in expected.items():
        torch.testing.assert_close(selective_confidence(op, kind), value)
        torch.testing.assert_close(SelectiveConfidence(kind)(op), value)


def test_kl_margin_confidence_uses_the_dab_cost():
    gen = torch.Generator().manual_seed(2)
    t_mu, t_lv = torch.randn(12, 4, generator=gen), torch.randn(12, 4, generator=gen) * 0.1
    v_mu, v_lv = torch.randn(9, 4, generator=gen), torch.randn(9, 4, generator=gen) * 0.1
    cost = pairwise_gaussian_kl(v_mu, v_lv, t_mu, t_lv).T
    frame, clip, _ = _scores()
    op = gallery_opinion(frame, clip, k=3)
    torch.testing.assert_close(selective_confidence(op, "kl_margin", kl_cost=cost), kl_margin(cost))
    assert "kl_margin" in CONFIDENCES


@pytest.mark.parametrize(
    "kind, kwargs, error, match",
    [
        ("entropy", {}, ValueError, "kind"),
        ("kl_margin", {}, ValueError, "kl_cost"),
        ("max_score", {"kl_cost": torch.rand(12, 9)}, ValueError, "kl_cost"),
        ("kl_margin", {"kl_cost": torch.rand(11, 9)}, ValueError, "kl_cost"),
        ("kl_margin", {"kl_cost": torch.rand(12, 9, device="meta")}, ValueError, "same device"),
        ("kl_margin", {"kl_cost": torch.full((12, 9), math.nan)}, ValueError, "finite"),
    ],
)
def test_confidence_errors(kind, kwargs, error, match):
    frame, clip, _ = _scores()
    op = gallery_opinion(frame, clip, k=3)
    with pytest.raises(error, match=match):
        selective_confidence(op, kind, **kwargs)


def test_margin_needs_two_candidates():
    frame, clip, _ = _scores()
    with pytest.raises(ValueError, match="2 candidates"):
        selective_confidence(gallery_opinion(frame, clip, k=1), "margin")
    with pytest.raises(TypeError, match="GalleryOpinion"):
        selective_confidence(frame, "margin")
