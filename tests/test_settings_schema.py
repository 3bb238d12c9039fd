"""One schema per operation: each operation's frozen settings dataclass holds its
hyperparameters, defaults and checks; modules hold one such object; the criterion composes its parts."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

import evidential_prvr as ep
from evidential_prvr import functional as F
from evidential_prvr import presets
from evidential_prvr._settings import BaseLossSettings, BaseRetrievalSettings, IdentificationSettings

SCHEMAS = (IdentificationSettings, presets.InterVideoSettings, presets.TransportSettings, presets.IntraVideoSettings,
           BaseLossSettings, BaseRetrievalSettings)

#: Each public function and the module whose ``forward`` calls it.
PAIRS = [
    (F.identify, ep.UncertaintyGuidedIdentifier),
    (F.inter_video_loss, ep.EvidentialRetrievalLoss),
    (F.inter_video_loss_details, ep.EvidentialRetrievalLoss),
    (F.flexible_ot, ep.FlexibleOT),
    (F.intra_video_loss, ep.IntraVideoEvidentialLoss),
    (F.intra_video_loss_details, ep.IntraVideoEvidentialLoss),
    (F.base_retrieval_loss, ep.BaseRetrievalLoss),
    (F.base_retrieval_loss_details, ep.BaseRetrievalLoss),
    (F.triplet_ranking_loss, ep.TripletRankingLoss),
    (F.info_nce_loss, ep.InfoNCELoss),
    (F.query_diversity_loss, ep.QueryDiversityLoss),
    (F.gallery_opinion, ep.GalleryUncertainty),
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


def _modules_with_settings():
    return [obj for name in ep.__all__ if inspect.isclass(obj := getattr(ep, name))
            and issubclass(obj, torch.nn.Module) and callable(getattr(obj, "settings", None))]


@pytest.mark.parametrize("module", _modules_with_settings(), ids=lambda m: m.__name__)
def test_a_module_with_settings_takes_every_field_with_its_default(module):
    fields = {f.name: f.default for f in dataclasses.fields(module().settings())}
    takes = _keyword_defaults(module.__init__)
    assert {name: takes.get(name, "missing") for name in fields} == fields
    assert any(m is module for _, m in PAIRS), "pair the module with its function in PAIRS"


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: s.__name__)
def test_schemas_are_frozen_keyword_only_and_checked(schema):
    settings = schema()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.__setattr__(dataclasses.fields(schema)[0].name, 0)
    with pytest.raises(TypeError):
        schema(*[getattr(settings, f.name) for f in dataclasses.fields(schema)])  # no positional order
    first = dataclasses.fields(schema)[0].name
    with pytest.raises((TypeError, ValueError), match=first):
        dataclasses.replace(settings, **{first: "not a value"})


def test_registry_sections_are_the_operation_schemas():
    s = presets.holmes_settings("release", "tvr")
    assert type(s.transport) is presets.TransportSettings is ep._settings.TransportSettings
    assert ep.FlexibleOT.from_preset("release", "tvr").settings() is not None
    assert ep.FlexibleOT.from_preset("release", "tvr").settings() == s.transport
    assert ep.EvidentialRetrievalLoss.from_preset("release", "tvr").settings() == s.inter
    assert ep.IntraVideoEvidentialLoss.from_preset("release", "tvr").settings() == s.intra
    assert ep.BaseRetrievalLoss.from_preset("release", "tvr").settings() == \
        BaseRetrievalSettings.from_sections(s.base, s.weights)


def test_flexible_ot_hyperparameters_are_keyword_only():
    with pytest.raises(TypeError):
        ep.FlexibleOT(0.1, 50)
    for cls in (ep.EvidentialRetrievalLoss, ep.UncertaintyGuidedIdentifier, ep.BaseRetrievalLoss):
        with pytest.raises(TypeError):
            cls(0.3)


def test_attributes_read_and_write_the_settings_with_checks():
    fot = ep.FlexibleOT.from_preset("release", "tvr")
    fot.n_iters = 10
    assert fot.settings().n_iters == 10 and fot.n_iters == 10
    with pytest.raises(ValueError, match="n_iters"):
        fot.n_iters = 0
    inter = ep.EvidentialRetrievalLoss.from_preset("release", "tvr")
    inter.calibrate = False
    assert inter.settings().calibrate is False


def test_identifier_attributes_write_the_settings_with_checks():
    identifier = ep.UncertaintyGuidedIdentifier.from_preset("release", "tvr")
    identifier.tau = 0.2
    assert identifier.settings().tau == 0.2 and identifier.tau == 0.2
    with pytest.raises(ValueError, match="beta"):
        identifier.beta = 2.0
    with pytest.raises(ValueError, match="fusion"):
        identifier.fusion = "uncertain"
    assert identifier.settings().beta == 0.3 and identifier.fusion == "uncertainty_dominant"


def test_from_settings_refuses_another_schema():
    s = presets.holmes_settings("release", "tvr")
    with pytest.raises(TypeError, match="settings must be a TransportSettings, got InterVideoSettings"):
        ep.FlexibleOT.from_settings(s.inter)
    assert ep.UncertaintyGuidedIdentifier.from_settings(s.inter).settings() == IdentificationSettings(
        **{f.name: getattr(s.inter, f.name) for f in dataclasses.fields(IdentificationSettings)})


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
    assert ep.FlexibleOT.from_preset("release", "tvr", epsilon=0.2).settings() == dataclasses.replace(
        ep.FlexibleOT.from_preset("release", "tvr").settings(), epsilon=0.2)
    fot = ep.FlexibleOT(n_iters=7)
    assert ep.IntraVideoEvidentialLoss.from_preset("paper", None, fot).fot is fot  # the constructor's positional
    with pytest.raises(TypeError, match="multiple values for fot"):
        ep.IntraVideoEvidentialLoss.from_preset("paper", None, fot, fot=fot)
    with pytest.raises(ValueError, match="epsilon"):
        ep.FlexibleOT.from_preset("release", "tvr", epsilon=-1.0)  # checked like the constructor's argument


def test_criterion_evaluates_the_registry_once(monkeypatch):
    calls = []
    real = presets.holmes_settings

    def counting(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(presets, "holmes_settings", counting)
    ep.HolmesCriterion.from_preset("release", "tvr")
    assert calls == [("release", "tvr")]


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
    replaced = getattr(criterion, part)
    doubled = Doubled.from_settings(replaced.settings(), **({"fot": replaced.fot} if part == "intra" else {}))
    setattr(criterion, part, doubled)
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
