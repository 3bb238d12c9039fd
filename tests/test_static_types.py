"""What a user's type checker sees: typical user code checks clean with the expected types, mistakes are
reported, and the keyword arguments written out in the source are the registry sections' fields, by name and type."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest

try:
    from typing import get_overloads
except ImportError:  # Python 3.10
    from typing_extensions import get_overloads

import evidential_prvr as ep
from evidential_prvr import functional as F
from evidential_prvr import presets
from evidential_prvr.presets import BaseLossSettings, InterVideoSettings, IntraVideoSettings, TransportSettings

HERE = Path(__file__).parent / "typing"


def _all(schema, *but):
    return tuple(f.name for f in dataclasses.fields(schema) if f.name not in but)


IDENTIFICATION = ("beta", "tau", "tanh_scaling", "entropy_median", "matched", "fusion")
WEIGHTS = ("frame_nce_weight", "clip_nce_weight", "div_weight")
#: The callables whose keyword arguments are a registry section's fields: (callable, section, the fields it takes).
WRITTEN_OUT = [
    (F.flexible_ot, TransportSettings, _all(TransportSettings)),
    (F.identify, InterVideoSettings, IDENTIFICATION),
    (F.inter_video_loss, InterVideoSettings, _all(InterVideoSettings)),
    (F.intra_video_loss, IntraVideoSettings, _all(IntraVideoSettings)),
    (F.intra_video_loss, TransportSettings, _all(TransportSettings, "grad")),  # the label's transport: detached
    (F.base_retrieval_loss, BaseLossSettings, _all(BaseLossSettings, "hard_negative_topk")),  # None: random
    (ep.FlexibleOT.__init__, TransportSettings, _all(TransportSettings)),
    (ep.UncertaintyGuidedIdentifier.__init__, InterVideoSettings, IDENTIFICATION),
    (ep.EvidentialRetrievalLoss.__init__, InterVideoSettings, _all(InterVideoSettings)),
    (ep.IntraVideoEvidentialLoss.__init__, IntraVideoSettings, _all(IntraVideoSettings)),
    (ep.BaseRetrievalLoss.__init__, BaseLossSettings, _all(BaseLossSettings)),
]


@pytest.mark.parametrize("fn, schema, names", WRITTEN_OUT, ids=lambda x: getattr(x, "__qualname__", ""))
def test_written_out_keywords_are_the_section_fields_with_their_types(fn, schema, names):
    params = inspect.signature(fn).parameters
    fields = {f.name: f for f in dataclasses.fields(schema)}
    for name in names:
        assert name in params, f"{fn.__qualname__} lacks the field {name!r} of {schema.__name__}"
        p = params[name]
        assert p.kind is p.KEYWORD_ONLY
        assert str(p.annotation) == str(fields[name].type), (fn.__qualname__, name)
        assert p.default is not p.empty, (fn.__qualname__, name)  # the default is the signature's, not the section's
    assert not any(p.kind is p.VAR_KEYWORD for p in params.values())


#: Each loss with details: its loss function and its details function (two real defs with one parameter list).
ENTRY_POINTS = [(F.inter_video_loss, F.inter_video_loss_details), (F.intra_video_loss, F.intra_video_loss_details),
                (F.base_retrieval_loss, F.base_retrieval_loss_details),
                (ep.EvidentialRetrievalLoss.forward, ep.EvidentialRetrievalLoss.details),
                (ep.IntraVideoEvidentialLoss.forward, ep.IntraVideoEvidentialLoss.details),
                (ep.BaseRetrievalLoss.forward, ep.BaseRetrievalLoss.details),
                (ep.HolmesCriterion.forward, ep.HolmesCriterion.details)]


@pytest.mark.parametrize("loss, details", ENTRY_POINTS, ids=lambda f: f.__qualname__)
def test_a_loss_and_its_details_share_one_signature_without_overloads(loss, details):
    assert inspect.signature(loss).parameters == inspect.signature(details).parameters
    assert inspect.signature(loss).return_annotation in ("Tensor", "torch.Tensor")
    assert "details" not in inspect.signature(loss).parameters and "return_details" not in str(inspect.signature(loss))
    assert get_overloads(loss) == [] and get_overloads(details) == []
    assert loss.__name__ in ("forward", details.__name__.removesuffix("_details")) and loss.__doc__ != details.__doc__


OVERRIDES = [
    (ep.FlexibleOT, _all(TransportSettings), {"validate_args"}),
    (ep.UncertaintyGuidedIdentifier, IDENTIFICATION, {"validate_args", "distributed", "threshold_decay"}),
    (ep.EvidentialRetrievalLoss, _all(InterVideoSettings), {"reduction", "validate_args", "distributed"}),
    (ep.IntraVideoEvidentialLoss, _all(IntraVideoSettings), {"fot", "reduction", "validate_args", "distributed"}),
    (ep.BaseRetrievalLoss, _all(BaseLossSettings) + WEIGHTS,
     {"use_hard_negatives", "reduction", "validate_args", "distributed"}),
]


@pytest.mark.parametrize("cls, fields, extras", OVERRIDES, ids=lambda x: getattr(x, "__name__", ""))
def test_from_preset_overrides_are_the_constructor_arguments(cls, fields, extras):
    """``from_preset`` is typed from the constructor (``cls: _PresetClass[N, D, P, M]``, ``**overrides: P.kwargs``), whose
    parameters are the section's fields and the module's options; each of them is accepted as an override."""
    params = inspect.signature(cls.from_preset).parameters
    assert params["overrides"].annotation == "P.kwargs" and params["args"].annotation == "P.args"
    assert inspect.signature(cls.from_preset.__func__).parameters["cls"].annotation == "_PresetClass[N, D, P, M]"
    constructor = inspect.signature(cls).parameters
    assert set(constructor) == set(fields) | extras
    for name, p in constructor.items():
        if name != "fot":  # a module: FlexibleOT() is not its default, None is
            assert getattr(cls.from_preset("release", "tvr", **{name: p.default}), name) == p.default, name


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory):
    """mypy's messages on both user files, in one run (about 12 s without a cache)."""
    api = pytest.importorskip("mypy.api")
    cache = tmp_path_factory.mktemp("mypy_cache")
    out, err, _ = api.run(["--cache-dir", str(cache), "--follow-imports", "silent", "--no-error-summary",
                           "--hide-error-context", "--no-pretty", str(HERE / "user_code.py"),
                           str(HERE / "user_errors.py")])
    assert not err.strip(), err
    return out


def test_user_code_type_checks_with_the_expected_types(mypy_output):
    assert [line for line in mypy_output.splitlines() if "user_code.py" in line] == []


def test_user_mistakes_are_reported(mypy_output):
    out = mypy_output
    assert 'Unexpected keyword argument "n_iter" for "FlexibleOT"; did you mean "n_iters"?' in out
    assert ('Argument "method" to "FlexibleOT" has incompatible type "Literal[\'lgo\']"; '
            'expected "Literal[\'auto\', \'log\', \'scaling\']"') in out
    assert 'Argument "fusion" to "UncertaintyGuidedIdentifier" has incompatible type "Literal[\'uncertain\']"' in out
    assert 'Argument "epsilon" to "flexible_ot" has incompatible type "str"; expected "float"' in out
    assert 'Unexpected keyword argument "inter_weigth" for "from_preset" of "PresetModule"' in out
    assert ('Argument 1 to "from_preset" of "PresetModule" has incompatible type "Literal[\'relase\']"; '
            'expected "Literal[\'paper\']"') in out  # HUDObjective's one preset
    assert 'Unexpected keyword argument "kapa" for "from_preset" of "PresetModule"; did you mean "kappa"?' in out
    assert 'Unexpected keyword argument "total_epoch"' in out
    assert ('Argument "video_negative" to "from_preset" of "PresetModule" has incompatible type '
            '"Literal[\'hardset\']"; expected "Literal[\'hardest\', \'pool\']"') in out
    assert 'Unexpected keyword argument "asignment" for "intra_video_loss"; did you mean "assignment"?' in out
    assert 'Argument "fusion" to "inter_video_loss_details" has incompatible type "Literal[\'uncertain\']"' in out
    assert ('Argument "reduction" to "EvidentialRetrievalLoss" has incompatible type "Literal[\'avg\']"; '
            'expected "Literal[\'mean\', \'sum\', \'none\']"') in out
    assert 'Argument 1 to "from_preset" of "PresetModule" has incompatible type "Literal[\'relase\']"' in out
    assert 'Unexpected keyword argument "kk" for "from_preset" of "PresetModule"' in out
    assert ('Argument 2 to "from_preset" of "PresetModule" has incompatible type "Literal[\'msrvtt\']"; '
            'expected "Literal[\'msr-vtt\', \'msvd\', \'vatex\'] | None"') in out  # DAB's data sets
    assert 'Unexpected keyword argument "contractoin" for "from_preset" of "PresetModule"' in out
    assert 'Incompatible types in assignment (expression has type "str", variable has type "int")' in out  # n_iters
    revealed = [line for line in out.splitlines() if "Revealed type" in line]
    assert "epsilon: float =, n_iters: int =" in revealed[0] and "*Any" not in revealed[0]
    assert "-> evidential_prvr.functional._flexible_ot.FlexibleOTResult" in revealed[1]


def test_transposed_scores_are_blamed_before_the_embeddings():
    """Scores passed transposed (``[V, Q]``) beside ``clip_emb`` are blamed, not the embeddings (which once were)."""
    import torch

    criterion = ep.HolmesCriterion.from_preset("release", "tvr")
    criterion.set_epoch(25)
    query_video = [v for v in range(6) for _ in range(3)][:15]
    frame_sim, clip_sim = torch.rand(15, 6), torch.rand(15, 6)
    with pytest.raises(ValueError, match=r"frame_sim must have shape \[num_queries, num_videos\] = \[15, 6\], got "
                                         r"\(6, 15\): it looks transposed"):
        criterion(frame_sim.T, clip_sim.T, query_video, query_emb=torch.randn(15, 8), clip_emb=torch.randn(6, 4, 8))
    with pytest.raises(ValueError, match="looks transposed"):
        criterion(frame_sim.T, clip_sim.T, torch.tensor(query_video), query_emb=torch.randn(15, 8),
                  clip_emb=torch.randn(6, 4, 8))
    criterion(frame_sim, clip_sim, query_video, query_emb=torch.randn(15, 8), clip_emb=torch.randn(6, 4, 8))


@pytest.mark.parametrize("cls", [cls for cls, _, _ in OVERRIDES], ids=lambda c: c.__name__)
def test_every_constructor_argument_is_a_plain_attribute(cls):
    """torch.nn's idiom: each argument is an attribute holding the value given (no property, no settings object),
    and assigning one is an ordinary attribute assignment."""
    module = cls()
    for name, p in inspect.signature(cls).parameters.items():
        if name in ("fot", "threshold_decay"):  # a submodule, and the decay of the submodule threshold_ema
            continue
        assert not isinstance(inspect.getattr_static(cls, name, None), property), name
        assert getattr(module, name) == p.default, name
    assert not hasattr(module, "settings") and not hasattr(cls, "from_settings")


def test_the_choice_types_are_the_values_the_checks_accept():
    from typing import get_args

    from evidential_prvr import choices

    assert set(get_args(choices.DatasetName)) == set(presets.DATASET_ALIASES)
    assert presets.PRESETS == get_args(choices.Preset)
    for name in choices.__all__:
        if name.isupper():  # a tuple of values: its type is the alias defined beside it
            assert all(isinstance(value, str) or value is None for value in getattr(choices, name)), name
