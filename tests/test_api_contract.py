"""The API's promises across operations: module equals functional, one ``from_preset`` call, one mask
rule, one device policy, one reduction convention, the validation switch and compile-readiness."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

import evidential_prvr as ep
from evidential_prvr import functional as F
from evidential_prvr.presets import BaseLossSettings, InterVideoSettings, TransportSettings, holmes_settings

IDENTIFICATION = ("beta", "tau", "tanh_scaling", "entropy_median", "matched", "fusion")
BASE = tuple(f.name for f in dataclasses.fields(BaseLossSettings) if f.name != "hard_negative_topk") + (
    "frame_nce_weight", "clip_nce_weight", "div_weight")  # hard_negative_topk=None: the module's negatives, off


def _pair(q=9, v=4, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    frame = torch.rand(q, v, generator=gen, dtype=dtype) * 2 - 1
    clip = torch.rand(q, v, generator=gen, dtype=dtype) * 2 - 1
    return frame, clip, torch.arange(q) % v


def _groups(seed=1, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    sim = torch.rand(3, 4, 8, generator=gen, dtype=dtype)
    qmask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)
    return sim, qmask


# --- module == functional, bit for bit ----------------------------------------------------------------------------
def test_identifier_equals_identify():
    frame, clip, qv = _pair()
    for preset in ("paper", "release"):
        module = ep.UncertaintyGuidedIdentifier.from_preset(preset, "tvr")
        settings = {name: getattr(module, name) for name in IDENTIFICATION}
        a, b = module(frame, clip, qv), F.identify(frame, clip, qv, **settings)
        assert torch.equal(a.query_type, b.query_type) and torch.equal(a.frame.aleatoric, b.frame.aleatoric)


def test_fusion_module_equals_functional():
    alpha_a, alpha_b = torch.rand(5, 4, dtype=torch.float64) * 9 + 1, torch.rand(5, 4, dtype=torch.float64) * 9 + 1
    a, b = ep.DempsterShaferFusion()(alpha_a, alpha_b), F.dempster_shafer_fusion(alpha_a, alpha_b)
    for name in ("alpha", "belief", "uncertainty", "conflict"):
        assert torch.equal(getattr(a, name), getattr(b, name))
    assert torch.equal(a.alpha, F.ds_combine(alpha_a, alpha_b))


@pytest.mark.parametrize("preset", ["paper", "release"])
def test_inter_module_equals_functional(preset):
    frame, clip, qv = _pair()
    module = ep.EvidentialRetrievalLoss.from_preset(preset, "activitynet")
    settings = {f.name: getattr(module, f.name) for f in dataclasses.fields(InterVideoSettings)}
    assert torch.equal(module(frame, clip, qv), F.inter_video_loss(frame, clip, qv, **settings))


@pytest.mark.parametrize("preset", ["paper", "release"])
def test_transport_and_intra_modules_equal_functionals(preset):
    sim, qmask = _groups()
    fot = ep.FlexibleOT.from_preset(preset, "tvr")
    transport = {f.name: getattr(fot, f.name) for f in dataclasses.fields(TransportSettings)}
    a, b = fot(sim, qmask), F.flexible_ot(sim, qmask, **transport)
    assert torch.equal(a.plan, b.plan) and torch.equal(a.assignment, b.assignment)
    intra = ep.IntraVideoEvidentialLoss.from_preset(preset, "tvr")
    del transport["grad"]  # the label is detached whatever the module's transport says
    assert torch.equal(intra(sim, qmask), F.intra_video_loss(sim, qmask, tau=intra.tau, tanh_scaling=intra.tanh_scaling,
                                                             assignment=intra.assignment, **transport))


def test_base_loss_modules_equal_functionals():
    frame, clip, qv = _pair()
    emb = torch.randn(9, 8, dtype=torch.float64)
    base = ep.BaseRetrievalLoss.from_preset("release", "tvr")
    generator = lambda: torch.Generator().manual_seed(5)  # noqa: E731
    assert torch.equal(base(frame, clip, emb, qv, generator=generator()),
                       F.base_retrieval_loss(frame, clip, emb, qv, **{name: getattr(base, name) for name in BASE},
                                             generator=generator()))
    triplet = ep.TripletRankingLoss.from_preset("release", "tvr")
    assert torch.equal(triplet(frame, qv, generator()), F.triplet_ranking_loss(frame, qv, 0.1, None, generator()))
    assert torch.equal(ep.InfoNCELoss()(frame, qv), F.info_nce_loss(frame, qv))
    div = ep.QueryDiversityLoss.from_preset("release", "tvr")
    assert torch.equal(div(emb, qv), F.query_diversity_loss(emb, qv, 32.0, 0.15, 1.0))


# --- one from_preset call ------------------------------------------------------------------------------------------
PRESET_CLASSES = [ep.UncertaintyGuidedIdentifier, ep.EvidentialRetrievalLoss, ep.FlexibleOT, ep.IntraVideoEvidentialLoss,
                  ep.BaseRetrievalLoss, ep.TripletRankingLoss, ep.InfoNCELoss, ep.QueryDiversityLoss,
                  ep.HolmesCriterion]


@pytest.mark.parametrize("cls", PRESET_CLASSES, ids=lambda c: c.__name__)
def test_every_preset_class_takes_the_same_call(cls):
    params = list(inspect.signature(cls.from_preset).parameters.values())
    # one from_preset (PresetModule's): the constructor's arguments, positional ones too
    assert cls.from_preset.__func__ is ep.PresetModule.from_preset.__func__
    assert [p.name for p in params] == ["preset", "dataset", "args", "overrides"]
    assert params[1].default is None and params[-1].kind is inspect.Parameter.VAR_KEYWORD
    for dataset in ("tvr", "activitynet", "charades", "act", "cha"):
        cls.from_preset("release", dataset)
        cls.from_preset("paper", dataset)
    # no data set: the TVR settings (a data set of one's own)
    assert repr(cls.from_preset("release")) == repr(cls.from_preset("release", "tvr"))
    for unknown in ("hiddenprvr", "msrvtt"):
        with pytest.raises(ValueError, match=r"dataset=None.*closest_dataset"):
            cls.from_preset("release", unknown)
    with pytest.raises(ValueError, match="preset"):
        cls.from_preset("official", "tvr")
    with pytest.raises(TypeError, match="'not_a_setting'"):
        cls.from_preset("release", "tvr", not_a_setting=1)


def test_from_preset_takes_the_constructors_positional_arguments():
    fot = ep.FlexibleOT(epsilon=0.2)
    assert ep.IntraVideoEvidentialLoss.from_preset("release", "tvr", fot).fot is fot
    assert ep.TripletRankingLoss.from_preset("release", "tvr", 0.5).margin == 0.5
    with pytest.raises(TypeError, match="multiple values for fot"):
        ep.IntraVideoEvidentialLoss.from_preset("release", "tvr", fot, fot=fot)
    with pytest.raises(TypeError, match="too many positional"):
        ep.UncertaintyGuidedIdentifier.from_preset("release", "tvr", 0.3)  # its constructor is keyword-only


def test_release_aliases_are_the_same_settings():
    assert holmes_settings("release", "act") == holmes_settings("release", "activitynet")
    assert holmes_settings("release", "cha") == holmes_settings("release", "charades")
    assert holmes_settings("paper", "activitynet").model.max_query_len == 64  # App. A.1
    assert holmes_settings("release", "activitynet").model.max_query_len == 30


# --- one refusal of a bad setting, naming it -----------------------------------------------------------------------
#: Settings each module must refuse when it is built, as ``(name, value, error)``; the error names the setting.
BAD_SETTINGS = {
    ep.UncertaintyGuidedIdentifier: [("beta", 1.5, ValueError), ("tau", 0.0, ValueError),
                                     ("entropy_median", "mean", ValueError), ("fusion", "vote", ValueError),
                                     ("tanh_scaling", "none", ValueError)],
    ep.EvidentialRetrievalLoss: [("gamma", -0.1, ValueError), ("beta", 2.0, ValueError), ("tau", -1.0, ValueError),
                                 ("calibration_set", "all", ValueError), ("reduction", "max", ValueError),
                                 ("calibrate", 1, TypeError)],
    ep.IntraVideoEvidentialLoss: [("assignment", "argmax", ValueError), ("tau", 0.0, ValueError),
                                  ("tanh_scaling", "middle", ValueError), ("fot", "release", TypeError)],
    ep.BaseRetrievalLoss: [("div_weight", -1.0, ValueError)],
    ep.TripletRankingLoss: [("video_negative", "easiest", ValueError)],
}


@pytest.mark.parametrize(
    ("cls", "name", "value", "error"),
    [(cls, *bad) for cls, bads in BAD_SETTINGS.items() for bad in bads],
    ids=[f"{cls.__name__}-{bad[0]}" for cls, bads in BAD_SETTINGS.items() for bad in bads],
)
def test_a_module_refuses_a_bad_setting_naming_it(cls, name, value, error):
    with pytest.raises(error, match=name):
        cls(**{name: value})


# --- one device policy and one mask rule ---------------------------------------------------------------------------
def test_tensors_on_different_devices_are_refused_naming_both():
    frame, clip, qv = _pair()
    with pytest.raises(ValueError, match="frame_sim and clip_sim must be on the same device, got cpu and meta"):
        F.inter_video_loss(frame, clip.to("meta"), qv)
    with pytest.raises(ValueError, match="query_video"):
        F.triplet_ranking_loss(frame, qv.to("meta"))
    sim, qmask = _groups()
    with pytest.raises(ValueError, match="query_mask must be on cpu"):
        F.flexible_ot(sim, qmask.to("meta"))
    with pytest.raises(ValueError, match="alpha_a and alpha_b"):
        F.ds_combine(torch.ones(2, 3), torch.ones(2, 3, device="meta"))


def test_masks_are_bool_or_zero_one_of_any_dtype():
    sim, qmask = _groups()
    reference = ep.FlexibleOT()(sim, qmask).plan
    for dtype in (torch.uint8, torch.int64, torch.float32, torch.float64):
        torch.testing.assert_close(ep.FlexibleOT()(sim, qmask.to(dtype)).plan, reference, rtol=0, atol=0)
    with pytest.raises(ValueError, match="query_mask must hold only 0 and 1"):
        ep.FlexibleOT()(sim, qmask.double() * 0.5)
    with pytest.raises(ValueError, match=r"query_mask must have shape \(3, 4\)"):
        ep.FlexibleOT()(sim, qmask[:, :3])


# --- one reduction convention ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["triplet", "nce", "div", "base", "inter"])
def test_mean_and_sum_reduce_the_none_rows(name):
    frame, clip, qv = _pair(q=11, v=4)
    emb = torch.randn(11, 8, dtype=torch.float64)

    def call(reduction):
        gen = torch.Generator().manual_seed(2)
        if name == "triplet":
            return F.triplet_ranking_loss(frame, qv, generator=gen, reduction=reduction)
        if name == "nce":
            return F.info_nce_loss(frame, qv, reduction=reduction)
        if name == "div":
            return F.query_diversity_loss(emb, qv, reduction=reduction)
        if name == "base":
            return F.base_retrieval_loss(frame, clip, emb, qv, generator=gen, reduction=reduction)
        return F.inter_video_loss(frame, clip, qv, reduction=reduction)

    rows = call("none")
    assert rows.shape == (11,)
    torch.testing.assert_close(call("mean"), rows.mean())
    torch.testing.assert_close(call("sum"), rows.sum())


def test_intra_reductions_are_over_videos_with_a_query():
    sim, qmask = _groups()
    qmask = qmask.clone()
    qmask[2] = False  # a video without any caption
    rows = F.intra_video_loss(sim, qmask, reduction="none")
    assert rows.shape == (3,) and float(rows[2]) == 0.0
    torch.testing.assert_close(F.intra_video_loss(sim, qmask), rows[:2].mean())
    torch.testing.assert_close(F.intra_video_loss(sim, qmask, reduction="sum"), rows.sum())


def test_details_carry_the_scalar_as_loss():
    frame, clip, qv = _pair()
    sim, qmask = _groups()
    emb = torch.randn(9, 8, dtype=torch.float64)
    for details, plain in (
        (F.inter_video_loss_details(frame, clip, qv), F.inter_video_loss(frame, clip, qv)),
        (F.intra_video_loss_details(sim, qmask), F.intra_video_loss(sim, qmask)),
        (F.base_retrieval_loss_details(frame, clip, emb, qv, hard_negative_topk=1),
         F.base_retrieval_loss(frame, clip, emb, qv, hard_negative_topk=1)),
    ):
        assert torch.equal(details.loss, plain)


# --- the validation switch -------------------------------------------------------------------------------------------
def test_validation_switch_module_argument_and_global_default():
    frame, clip, qv = _pair()
    frame[0, 0] = float("nan")
    with pytest.raises(ValueError, match="frame_sim must be finite"):
        ep.EvidentialRetrievalLoss()(frame, clip, qv)
    assert torch.isnan(ep.EvidentialRetrievalLoss(validate_args=False)(frame, clip, qv))
    assert ep.default_validate_args() is True
    try:
        ep.set_default_validate_args(False)
        assert torch.isnan(F.inter_video_loss(frame, clip, qv))
        with pytest.raises(ValueError, match="finite"):  # an explicit True still validates
            F.inter_video_loss(frame, clip, qv, validate_args=True)
    finally:
        ep.set_default_validate_args(True)
    with pytest.raises(TypeError, match="bool"):
        ep.set_default_validate_args(1)


def test_identification_runs_only_when_used(monkeypatch):
    import evidential_prvr.functional._inter_video as inter_module

    frame, clip, qv = _pair()
    calls = []
    original = inter_module._identify
    monkeypatch.setattr(inter_module, "_identify", lambda *a, **k: calls.append(1) or original(*a, **k))
    F.inter_video_loss(frame, clip, qv, calibrate=False)
    assert calls == []
    F.inter_video_loss_details(frame, clip, qv, calibrate=False)
    F.inter_video_loss(frame, clip, qv, calibrate=True)
    assert len(calls) == 2


# --- compile-ready --------------------------------------------------------------------------------------------------
def _compile_cases():
    frame = torch.rand(12, 4, requires_grad=True)
    clip = torch.rand(12, 4, requires_grad=True)
    qv = torch.arange(12) % 4
    sim = torch.rand(4, 3, 16, requires_grad=True)
    qmask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    return {
        "inter": (ep.EvidentialRetrievalLoss.from_preset("release", "tvr", validate_args=False), (frame, clip, qv)),
        "fot": (ep.FlexibleOT.from_preset("release", "tvr", grad="autodiff", validate_args=False), (sim, qmask)),
        "intra": (ep.IntraVideoEvidentialLoss.from_preset("release", "tvr", validate_args=False), (sim, qmask)),
    }


@pytest.mark.parametrize("name", ["inter", "fot", "intra"])
def test_compiles_whole_without_validation_forward_and_backward(name):
    torch._dynamo.reset()
    module, args = _compile_cases()[name]
    compiled = torch.compile(module, fullgraph=True, backend="aot_eager")

    def scalar(out):
        return out if isinstance(out, torch.Tensor) else out.plan.sum() + out.dustbin.sum()

    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    eager = torch.autograd.grad(scalar(module(*args)), leaves)
    value = scalar(compiled(*args))
    torch.testing.assert_close(value, scalar(module(*args)))
    for got, expected in zip(torch.autograd.grad(value, leaves), eager):
        torch.testing.assert_close(got, expected)


def test_validation_on_breaks_the_graph():
    torch._dynamo.reset()
    module, args = _compile_cases()["inter"]
    module.validate_args = True
    # the value checks read tensors on the host: no full graph
    with pytest.raises(torch._dynamo.exc.TorchDynamoException, match="data-dependent"):
        torch.compile(module, fullgraph=True, backend="aot_eager")(*args)
