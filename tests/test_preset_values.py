"""Every preset's values, written out here as literals: the registry holds each number once, by name, and no
preset reads a default of a function or a module, so changing a default moves no preset (the defaults stand once
per layer: in the function's signature and in the module's)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import evidential_prvr as ep
from evidential_prvr import functional as F
from evidential_prvr import presets
from evidential_prvr.probabilistic import ConditionedDistributionBridge, DistributionBridge, GaussianEmbeddingHead

TERMS = ("frame", "clip", "fused")
RELEASE_TRANSPORT = dict(epsilon=0.1, n_iters=50, dustbin_quantile=0.3, normalize="minmax", minmax_over="block",
                         marginals="release", grad="detach", tol=None, method="auto")
RELEASE = {  # the official release's src/Configs/{tvr,act,cha}.py
    "tvr": dict(
        inter=dict(beta=0.3, tau=0.05, tanh_scaling="outside", entropy_median="batch", matched="argmax",
                   fusion="uncertainty_dominant", gamma=0.2, calibrate=True, calibration_set="refined", terms=TERMS),
        transport=RELEASE_TRANSPORT, intra=dict(tau=0.06, tanh_scaling="outside", assignment="fot"),
        base=dict(margin=0.1, div_delta=0.15, hard_negative_topk=20, video_negative="hardest",
                  nce_video_to_text="release", div_alpha=32.0, div_lambda=1.0),
        weights=dict(nce_clip=0.05, nce_frame=0.04, div=8e-5, intra=0.8, inter=0.2)),
    "activitynet": dict(
        inter=dict(beta=0.3, tau=0.04, tanh_scaling="outside", entropy_median="batch", matched="argmax",
                   fusion="uncertainty_dominant", gamma=0.2, calibrate=True, calibration_set="refined", terms=TERMS),
        transport=RELEASE_TRANSPORT, intra=dict(tau=0.08, tanh_scaling="outside", assignment="fot"),
        base=dict(margin=0.2, div_delta=0.2, hard_negative_topk=20, video_negative="hardest",
                  nce_video_to_text="release", div_alpha=32.0, div_lambda=1.0),
        weights=dict(nce_clip=0.02, nce_frame=0.04, div=0.003, intra=1e-4, inter=0.06)),
    "charades": dict(
        inter=dict(beta=0.3, tau=0.08, tanh_scaling="outside", entropy_median="batch", matched="argmax",
                   fusion="uncertainty_dominant", gamma=0.2, calibrate=True, calibration_set="refined", terms=TERMS),
        transport=RELEASE_TRANSPORT, intra=dict(tau=0.08, tanh_scaling="outside", assignment="fot"),
        base=dict(margin=0.2, div_delta=0.2, hard_negative_topk=20, video_negative="hardest",
                  nce_video_to_text="release", div_alpha=32.0, div_lambda=1.0),
        weights=dict(nce_clip=0.02, nce_frame=0.04, div=0.003, intra=9e-4, inter=0.06)),
}
PAPER = dict(  # Holmes as printed (ε and the dustbin's quantile: the release's; App. B.5's uniform marginals)
    inter=dict(beta=0.3, tau=0.1, tanh_scaling="inside", entropy_median="candidates", matched="any_positive",
               fusion="uncertainty_dominant", gamma=0.2, calibrate=True, calibration_set="refined", terms=TERMS),
    transport=dict(epsilon=0.1, n_iters=50, dustbin_quantile=0.3, normalize=None, minmax_over="valid",
                   marginals="uniform", grad="detach", tol=None, method="auto"),
    intra=dict(tau=0.1, tanh_scaling="inside", assignment="fot"))
HUD = dict(num_samples=8, tau=0.1, kappa=0.5)
DAB = dict(logvar_init=-2.0, logvar_bounds=(-6.0, 2.0), logvar_weight_init="zero", n_steps=32, total_steps=1000,
           step_range=(0.2, 0.6), contraction=0.8, weight_decay=0.02, encoder_lr=1e-6, head_lr=1e-4, warmup_ratio=0.1,
           batch_size=32, epochs=10)


@pytest.mark.parametrize("dataset", sorted(RELEASE))
def test_the_release_sections_are_the_releases_numbers(dataset):
    settings = presets.holmes_settings("release", dataset)
    for section, expected in RELEASE[dataset].items():
        assert dataclasses.asdict(getattr(settings, section)) == expected, section


@pytest.mark.parametrize("dataset", [None, *sorted(RELEASE)])
def test_the_paper_sections_are_the_papers_numbers(dataset):
    settings = presets.holmes_settings("paper", dataset)
    for section, expected in PAPER.items():
        assert dataclasses.asdict(getattr(settings, section)) == expected, section
    if dataset is not None:  # the rest from the release, as the paper says (App. A.1)
        assert dataclasses.asdict(settings.base) == RELEASE[dataset]["base"]
        assert dataclasses.asdict(settings.weights) == RELEASE[dataset]["weights"]


def test_the_hud_and_dab_presets_are_their_papers_numbers():
    assert dataclasses.asdict(presets.hud_settings("paper")) == HUD
    assert dataclasses.asdict(presets.dab_settings("paper")) == DAB


def _attributes(module, names):
    return {name: getattr(module, name) for name in names}


def _expected_modules(preset, dataset):
    """Each module's from_preset and the literal values it must hold."""
    section = RELEASE[dataset] if preset == "release" else {**RELEASE[dataset], **PAPER}
    weights = section["weights"]
    base = {**section["base"], "frame_nce_weight": weights["nce_frame"], "clip_nce_weight": weights["nce_clip"],
            "div_weight": weights["div"]}
    identification = {k: section["inter"][k] for k in ("beta", "tau", "tanh_scaling", "entropy_median", "matched",
                                                      "fusion")}
    return [
        (ep.FlexibleOT.from_preset(preset, dataset), section["transport"]),
        (ep.UncertaintyGuidedIdentifier.from_preset(preset, dataset), identification),
        (ep.EvidentialRetrievalLoss.from_preset(preset, dataset), section["inter"]),
        (ep.IntraVideoEvidentialLoss.from_preset(preset, dataset), section["intra"]),
        (ep.IntraVideoEvidentialLoss.from_preset(preset, dataset).fot, section["transport"]),
        (ep.BaseRetrievalLoss.from_preset(preset, dataset), base),
        (ep.TripletRankingLoss.from_preset(preset, dataset), {k: base[k] for k in (
            "margin", "hard_negative_topk", "video_negative")}),
        (ep.QueryDiversityLoss.from_preset(preset, dataset), {"alpha": base["div_alpha"], "delta": base["div_delta"],
                                                              "lam": base["div_lambda"]}),
        (ep.InfoNCELoss.from_preset(preset, dataset), {"video_to_text": base["nce_video_to_text"]}),
        (ep.GalleryUncertainty.from_preset(preset, dataset), {k: section["inter"][k] for k in ("tau", "tanh_scaling")}),
        (ep.HolmesCriterion.from_preset(preset, dataset), {"inter_weight": weights["inter"],
                                                           "intra_weight": weights["intra"],
                                                           "warmup_stage_epochs": 20, "hard_negative_epoch": 20}),
        (GaussianEmbeddingHead.from_preset("paper", None, 8, 4), {"logvar_bounds": DAB["logvar_bounds"],
                                                                  "logvar_weight_init": DAB["logvar_weight_init"]}),
        (DistributionBridge.from_preset("paper", None, 4), {k: DAB[k] for k in (
            "n_steps", "total_steps", "step_range", "logvar_bounds")}),
        (ConditionedDistributionBridge.from_preset("paper", None, 4), {k: DAB[k] for k in (
            "n_steps", "total_steps", "step_range", "contraction", "logvar_bounds")}),
        (ep.probabilistic.HUDObjective.from_preset("paper", None, 8, 4, 2), HUD),
    ]


def _check_modules(preset, dataset):
    for module, expected in _expected_modules(preset, dataset):
        assert _attributes(module, expected) == expected, type(module).__name__


def _batch():
    g = torch.Generator().manual_seed(0)
    q, v, mc, d = 8, 3, 6, 12
    return (torch.rand(q, v, generator=g), torch.rand(q, v, generator=g), [0, 0, 0, 1, 1, 2, 2, 2]), dict(
        query_emb=torch.randn(q, d, generator=g), clip_emb=torch.randn(v, mc, d, generator=g))


def _criterion_loss(preset, dataset):
    criterion = ep.HolmesCriterion.from_preset(preset, dataset)
    criterion.set_epoch(25)
    args, kwargs = _batch()
    return criterion.details(*args, **kwargs, generator=torch.Generator().manual_seed(1))


def _changed(defaults):
    """Another value for every number among ``defaults`` (a bool is a switch, not a number: kept)."""
    def change(value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return value
        return value + 1 if isinstance(value, int) else value * 0.5 + 0.25
    return {k: change(v) for k, v in defaults.items()} if isinstance(defaults, dict) else tuple(map(change, defaults))


DEFAULTED = [ep.FlexibleOT.__init__, ep.UncertaintyGuidedIdentifier.__init__, ep.EvidentialRetrievalLoss.__init__,
             ep.IntraVideoEvidentialLoss.__init__, ep.BaseRetrievalLoss.__init__, ep.TripletRankingLoss.__init__,
             ep.InfoNCELoss.__init__, ep.QueryDiversityLoss.__init__, ep.GalleryUncertainty.__init__,
             ep.HolmesCriterion.__init__, GaussianEmbeddingHead.__init__, DistributionBridge.__init__,
             ConditionedDistributionBridge.__init__, ep.probabilistic.HUDObjective.__init__,
             F.flexible_ot, F.identify, F.inter_video_loss, F.inter_video_loss_details, F.intra_video_loss,
             F.intra_video_loss_details, F.base_retrieval_loss, F.base_retrieval_loss_details, F.triplet_ranking_loss,
             F.query_diversity_loss, F.gallery_opinion]


@pytest.mark.parametrize("preset, dataset", [("release", "tvr"), ("release", "activitynet"), ("paper", "charades")])
def test_a_changed_default_moves_no_preset(monkeypatch, preset, dataset):
    before = _criterion_loss(preset, dataset)
    for fn in DEFAULTED:  # every number a function or a module defaults to, changed
        if fn.__kwdefaults__:
            monkeypatch.setattr(fn, "__kwdefaults__", _changed(fn.__kwdefaults__))
        if fn.__defaults__:
            monkeypatch.setattr(fn, "__defaults__", _changed(fn.__defaults__))
    assert ep.FlexibleOT().n_iters == 51 and ep.EvidentialRetrievalLoss().gamma == 0.35  # the defaults did change
    _check_modules(preset, dataset)
    after = _criterion_loss(preset, dataset)
    assert torch.equal(after.loss, before.loss) and torch.equal(after.intra, before.intra)
    for section, expected in (RELEASE[dataset] if preset == "release" else PAPER).items():
        assert dataclasses.asdict(getattr(presets.holmes_settings(preset, dataset), section)) == expected


@pytest.mark.parametrize("preset", ["release", "paper"])
def test_every_module_of_a_preset_holds_the_presets_numbers(preset):
    _check_modules(preset, "tvr")
