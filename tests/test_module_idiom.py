"""One idiom for every module (torch.nn's and kornia's): ``__init__`` checks its arguments and stores them as plain
attributes, ``forward`` is one call of the public function with them, ``from_preset`` is written once; the
registry's sections are the modules' keyword arguments; the criterion composes its parts."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

import evidential_prvr as ep
from evidential_prvr import functional as F
from evidential_prvr import presets

SECTIONS = (presets.TransportSettings, presets.InterVideoSettings, presets.IntraVideoSettings,
            presets.BaseLossSettings, presets.HUDSettings, presets.DABSettings)

#: Each public function and the module whose ``forward`` (or ``details``) calls it.
PAIRS = [
    (F.identify, ep.UncertaintyGuidedIdentifier),
    (F.inter_video_loss, ep.EvidentialRetrievalLoss),
    (F.inter_video_loss_details, ep.EvidentialRetrievalLoss),
    (F.flexible_ot, ep.FlexibleOT),
    (F.intra_video_loss, ep.IntraVideoEvidentialLoss),
    (F.intra_video_loss, ep.FlexibleOT),  # the label's transport: the module's fot
    (F.intra_video_loss_details, ep.IntraVideoEvidentialLoss),
    (F.base_retrieval_loss, ep.BaseRetrievalLoss),
    (F.base_retrieval_loss_details, ep.BaseRetrievalLoss),
    (F.triplet_ranking_loss, ep.TripletRankingLoss),
    (F.info_nce_loss, ep.InfoNCELoss),
    (F.query_diversity_loss, ep.QueryDiversityLoss),
    (F.gallery_opinion, ep.GalleryUncertainty),
    (F.dempster_shafer_fusion, ep.DempsterShaferFusion),
    (F.selective_confidence, ep.SelectiveConfidence),
]


def _keyword_defaults(fn):
    return {p.name: p.default for p in inspect.signature(fn).parameters.values() if p.default is not inspect.Parameter.empty}


def _disagreements(function, module):
    """The keywords a function and its module both take whose defaults differ. A function may default an option to
    ``None`` (off) where its module has a ``use_*`` switch instead (the triplet's hard negatives)."""
    fn, mod = _keyword_defaults(function), _keyword_defaults(module.__init__)
    has_switch = any(name.startswith("use_") and isinstance(default, bool) for name, default in mod.items())
    return [(name, fn[name], mod[name]) for name in fn.keys() & mod.keys()
            if fn[name] != mod[name] and not (fn[name] is None and has_switch)]


@pytest.mark.parametrize(("function", "module"), PAIRS, ids=lambda x: x.__name__)
def test_a_function_and_its_module_default_their_shared_keywords_alike(function, module):
    assert _disagreements(function, module) == []
    assert _keyword_defaults(function).keys() & _keyword_defaults(module.__init__).keys()  # they do share some


def test_the_pair_check_catches_a_default_written_twice_differently():
    def flexible_ot(sim, *, epsilon: float = 0.2):
        return sim

    assert _disagreements(flexible_ot, ep.FlexibleOT) == [("epsilon", 0.2, 0.1)]


@pytest.mark.parametrize("section", SECTIONS, ids=lambda s: s.__name__)
def test_sections_hold_no_defaults_and_are_frozen(section):
    """A preset writes every value out: a section has no default that a changed function default could move."""
    assert all(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
               for f in dataclasses.fields(section))
    value = getattr(presets.holmes_settings("release", "tvr"), {
        presets.TransportSettings: "transport", presets.InterVideoSettings: "inter",
        presets.IntraVideoSettings: "intra", presets.BaseLossSettings: "base"}[section]) if section not in (
        presets.HUDSettings, presets.DABSettings) else (presets.hud_settings("paper") if section is presets.HUDSettings
                                                        else presets.dab_settings("paper"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.__setattr__(dataclasses.fields(section)[0].name, 0)


@pytest.mark.parametrize("section", SECTIONS[:4], ids=lambda s: s.__name__)
def test_holmes_sections_are_keyword_only_and_checked(section):
    settings = {"transport": presets.TransportSettings, "inter": presets.InterVideoSettings,
                "intra": presets.IntraVideoSettings, "base": presets.BaseLossSettings}
    name = next(k for k, v in settings.items() if v is section)
    value = getattr(presets.holmes_settings("release", "tvr"), name)
    with pytest.raises(TypeError):
        section(*[getattr(value, f.name) for f in dataclasses.fields(section)])  # no positional order
    first = dataclasses.fields(section)[0].name
    with pytest.raises((TypeError, ValueError), match=first):
        dataclasses.replace(value, **{first: "not a value"})


def test_a_registry_section_is_the_modules_keyword_arguments():
    s = presets.holmes_settings("release", "tvr")
    for module, section in ((ep.FlexibleOT, s.transport), (ep.EvidentialRetrievalLoss, s.inter)):
        built, preset = module(**dataclasses.asdict(section)), module.from_preset("release", "tvr")
        assert repr(built) == repr(preset)
    intra = ep.IntraVideoEvidentialLoss(ep.FlexibleOT(**dataclasses.asdict(s.transport)), **dataclasses.asdict(s.intra))
    assert repr(intra) == repr(ep.IntraVideoEvidentialLoss.from_preset("release", "tvr"))
    base = ep.BaseRetrievalLoss(**dataclasses.asdict(s.base), frame_nce_weight=s.weights.nce_frame,
                                clip_nce_weight=s.weights.nce_clip, div_weight=s.weights.div)
    assert repr(base) == repr(ep.BaseRetrievalLoss.from_preset("release", "tvr"))


def test_hyperparameters_are_keyword_only():
    with pytest.raises(TypeError):
        ep.FlexibleOT(0.1, 50)
    for cls in (ep.EvidentialRetrievalLoss, ep.UncertaintyGuidedIdentifier, ep.BaseRetrievalLoss):
        with pytest.raises(TypeError):
            cls(0.3)


def _groups(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(3, 4, 8, generator=g), torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)


def test_an_assigned_hyperparameter_is_used_by_the_next_call():
    sim, qmask = _groups()
    fot = ep.FlexibleOT.from_preset("release", "tvr")
    fot.epsilon = 0.2
    assert torch.equal(fot(sim, qmask).plan, ep.FlexibleOT(epsilon=0.2)(sim, qmask).plan)
    assert "epsilon=0.2" in repr(fot)
    intra = ep.IntraVideoEvidentialLoss.from_preset("release", "tvr")
    intra.fot.n_iters, intra.tau = 7, 0.1  # the transport's attributes reach the label
    expected = ep.IntraVideoEvidentialLoss(ep.FlexibleOT(n_iters=7), tau=0.1)(sim, qmask)
    assert torch.equal(intra(sim, qmask), expected)
    frame, clip = torch.rand(6, 3, generator=torch.Generator().manual_seed(1)), torch.rand(6, 3)
    query_video = torch.tensor([0, 0, 1, 1, 2, 2])
    inter = ep.EvidentialRetrievalLoss.from_preset("release", "tvr")
    inter.gamma, inter.terms = 0.5, ("fused",)
    assert torch.equal(inter(frame, clip, query_video),
                       ep.EvidentialRetrievalLoss.from_preset("release", "tvr", gamma=0.5, terms=("fused",))(
                           frame, clip, query_video))


@pytest.mark.parametrize(("module", "name", "value"), [
    (ep.FlexibleOT, "n_iters", 0), (ep.FlexibleOT, "method", "fast"), (ep.UncertaintyGuidedIdentifier, "beta", 2.0),
    (ep.UncertaintyGuidedIdentifier, "fusion", "uncertain"), (ep.EvidentialRetrievalLoss, "gamma", 1.5),
    (ep.IntraVideoEvidentialLoss, "tau", 0.0), (ep.BaseRetrievalLoss, "margin", -1.0),
    (ep.BaseRetrievalLoss, "div_weight", -1.0),
])
def test_a_bad_value_is_refused_naming_it_at_construction_and_at_the_next_call(module, name, value):
    with pytest.raises(ValueError, match=name):
        module(**{name: value})
    instance = module()
    setattr(instance, name, value)  # an ordinary attribute: the function checks it when the module next runs
    sim, qmask = _groups()
    frame, clip, query_video = torch.rand(6, 3), torch.rand(6, 3), torch.tensor([0, 0, 1, 1, 2, 2])
    call = {ep.FlexibleOT: lambda m: m(sim, qmask), ep.IntraVideoEvidentialLoss: lambda m: m(sim, qmask),
            ep.BaseRetrievalLoss: lambda m: m(frame, clip, torch.randn(6, 4), query_video)}.get(
        module, lambda m: m(frame, clip, query_video))
    with pytest.raises(ValueError, match=name):
        call(instance)


PRESET_MODULES = [ep.FlexibleOT, ep.UncertaintyGuidedIdentifier, ep.EvidentialRetrievalLoss,
                  ep.IntraVideoEvidentialLoss, ep.BaseRetrievalLoss, ep.TripletRankingLoss, ep.InfoNCELoss,
                  ep.QueryDiversityLoss, ep.GalleryUncertainty]


@pytest.mark.parametrize("cls", PRESET_MODULES, ids=lambda c: c.__name__)
def test_one_from_preset_for_every_module(cls):
    assert issubclass(cls, ep.PresetModule) and "from_preset" not in vars(cls)
    with pytest.raises(TypeError, match=rf"{cls.__name__}\.from_preset\(\) got unexpected override\(s\) 'eps'; accepted"):
        cls.from_preset("release", "tvr", eps=0.2)
    assert cls.from_preset("release", "tvr").validate_args is None  # an option the preset leaves at its default
    assert cls.from_preset("release", "tvr", validate_args=False).validate_args is False


def test_from_preset_overrides_replace_preset_values():
    assert ep.IntraVideoEvidentialLoss.from_preset("release", "cha", tau=0.2, reduction="sum").tau == 0.2
    changed, release = ep.FlexibleOT.from_preset("release", "tvr", epsilon=0.2), ep.FlexibleOT.from_preset("release")
    assert changed.epsilon == 0.2 and repr(changed) == repr(release).replace("epsilon=0.1", "epsilon=0.2")
    fot = ep.FlexibleOT(n_iters=7)
    assert ep.IntraVideoEvidentialLoss.from_preset("paper", None, fot).fot is fot  # the constructor's positional
    with pytest.raises(TypeError, match="multiple values for fot"):
        ep.IntraVideoEvidentialLoss.from_preset("paper", None, fot, fot=fot)
    with pytest.raises(ValueError, match="epsilon"):
        ep.FlexibleOT.from_preset("release", "tvr", epsilon=-1.0)  # checked like the constructor's argument


# --- the criterion composes its parts ------------------------------------------------------------------------------
def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    q, v, mc, d = 8, 3, 6, 12
    return dict(frame_sim=torch.rand(q, v, generator=g), clip_sim=torch.rand(q, v, generator=g),
                query_video=[0, 0, 0, 1, 1, 2, 2, 2], query_emb=torch.randn(q, d, generator=g),
                clip_emb=torch.randn(v, mc, d, generator=g))


def _loss(criterion, b):
    return criterion.details(b["frame_sim"], b["clip_sim"], b["query_video"], query_emb=b["query_emb"],
                             clip_emb=b["clip_emb"], generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("part", ["base", "inter", "intra"])
def test_a_subclassed_part_changes_the_total(part):
    classes = {"base": ep.BaseRetrievalLoss, "inter": ep.EvidentialRetrievalLoss,
               "intra": ep.IntraVideoEvidentialLoss}

    class Doubled(classes[part]):
        def forward(self, *args, **kwargs):
            return 2 * super().forward(*args, **kwargs)

        def details(self, *args, **kwargs):
            out = super().details(*args, **kwargs)
            return dataclasses.replace(out, loss=2 * out.loss)

    b = _batch()
    criterion = ep.HolmesCriterion.from_preset("release", "tvr")
    criterion.set_epoch(25)
    reference = _loss(criterion, b)
    setattr(criterion, part, Doubled.from_preset("release", "tvr"))
    changed = _loss(criterion, b)
    weight = {"base": 1.0, "inter": criterion.inter_weight, "intra": criterion.intra_weight}[part]
    torch.testing.assert_close(changed.loss, reference.loss + weight * getattr(reference, part))


def test_a_replacement_module_is_called_with_what_the_parts_share():
    seen = {}

    class Recorder(torch.nn.Module):
        def forward(self, frame_sim, clip_sim, query_video, *, calibrate=None):
            seen.update(query_video=query_video, calibrate=calibrate)
            return frame_sim.sum() * 0

        details = forward  # a tensor in place of the details: the criterion takes either

    b = _batch()
    criterion = ep.HolmesCriterion.from_preset("release", "tvr", inter=Recorder())
    _loss(criterion, b)
    assert seen["calibrate"] is False and torch.equal(seen["query_video"], torch.tensor(b["query_video"]))
    criterion.set_epoch(20)
    _loss(criterion, b)
    assert seen["calibrate"] is True
    with pytest.raises(TypeError, match="inter"):
        ep.HolmesCriterion(ep.BaseRetrievalLoss(), inter=ep.BaseRetrievalLoss())


@pytest.mark.parametrize("part", ["base", "inter", "intra"])
def test_the_criterions_parts_are_the_parts_own_presets(part):
    criterion = ep.HolmesCriterion.from_preset("paper", "charades", validate_args=False, distributed=True)
    own = type(getattr(criterion, part)).from_preset("paper", "charades", validate_args=False, distributed=True)
    assert repr(getattr(criterion, part)) == repr(own)
    assert getattr(criterion, part).validate_args is False and getattr(criterion, part).distributed is True


def test_an_assigned_hud_temperature_reaches_both_losses():
    """HUDObjective calls HUD's two loss functions with its own ``tau`` (no submodule holds a copy of it)."""
    from evidential_prvr.probabilistic import HUDObjective

    def build(**changes):
        torch.manual_seed(0)
        return HUDObjective.from_preset("paper", dim=8, holistic_dim=4, num_reference_tokens=2, **changes)

    g = torch.Generator().manual_seed(1)
    tokens = torch.randn(3, 2, 8, generator=g), torch.randn(3, 4, 8, generator=g), torch.randn(3, 5, 8, generator=g)
    assigned, built = build(), build(tau=0.3)
    assigned.tau = 0.3
    a, b = (m(*tokens, generator=torch.Generator().manual_seed(2)) for m in (assigned, built))
    assert torch.equal(a.rank, b.rank) and torch.equal(a.consistency, b.consistency)
