"""DAB's constants in the one registry (:func:`evidential_prvr.presets.dab_settings`) and the ``from_preset`` of
its modules."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

from evidential_prvr.choices import DAB_DATASETS, DAB_PRESETS
from evidential_prvr.presets import DABSettings, dab_settings
from evidential_prvr.probabilistic import (
    ConditionedDistributionBridge,
    DistributionBridge,
    GaussianEmbeddingHead,
    TokenUncertaintyHead,
)

#: What the DAB summary states (``../shared/papers``: Key Designs 1-2 and the implementation details), written
#: here from the text, not from the registry; ``logvar_weight_init`` is the library's choice where the text is
#: silent (zero: the identity start).
PAPER = {"logvar_init": -2.0, "logvar_bounds": (-6.0, 2.0), "logvar_weight_init": "zero", "n_steps": 32,
         "total_steps": 1000,
         "step_range": (0.2, 0.6), "contraction": 0.8, "weight_decay": 0.02, "encoder_lr": 1e-6, "head_lr": 1e-4,
         "warmup_ratio": 0.1, "batch_size": 32, "epochs": 10}

MODULES = [
    (GaussianEmbeddingHead, {"dim_in": 6, "dim_out": 4}, ("logvar_init", "logvar_bounds", "logvar_weight_init")),
    (TokenUncertaintyHead, {"dim_in": 6, "dim_out": 4}, ("logvar_init", "logvar_bounds", "logvar_weight_init")),
    (DistributionBridge, {"dim": 4}, ("n_steps", "total_steps", "step_range", "logvar_bounds")),
    (ConditionedDistributionBridge, {"dim": 4},
     ("n_steps", "total_steps", "step_range", "contraction", "logvar_bounds")),
]


def test_the_registry_holds_the_papers_numbers():
    assert dataclasses.asdict(dab_settings("paper")) == PAPER
    assert all(dab_settings("paper", name) == dab_settings("paper") for name in DAB_DATASETS)  # one setting for all
    assert DAB_PRESETS == ("paper",)


@pytest.mark.parametrize(("argument", "call"), [("preset", lambda: dab_settings("release")),
                                                 ("dataset", lambda: dab_settings("paper", "msrvtt"))])
def test_an_unknown_name_is_refused_naming_the_argument(argument, call):
    with pytest.raises(ValueError, match=rf"{argument} must be one of"):
        call()


@pytest.mark.parametrize(("cls", "sizes", "fields"), MODULES, ids=lambda x: getattr(x, "__name__", ""))
def test_from_preset_sets_the_registry_values_which_are_the_constructor_defaults(cls, sizes, fields):
    settings = dab_settings("paper")
    defaults = {name: p.default for name, p in inspect.signature(cls.__init__).parameters.items()}
    assert {name: defaults[name] for name in fields} == {name: getattr(settings, name) for name in fields}
    torch.manual_seed(0)
    from_preset = cls.from_preset("paper", "msr-vtt", **sizes)
    torch.manual_seed(0)
    built = cls(**sizes)
    assert from_preset.state_dict().keys() == built.state_dict().keys()
    for name, value in built.state_dict().items():
        assert torch.equal(from_preset.state_dict()[name], value), name


def test_an_override_replaces_the_preset_value():
    bridge = ConditionedDistributionBridge.from_preset("paper", dim=4, n_steps=3, contraction=0.5)
    assert bridge.n_steps == 3
    head = GaussianEmbeddingHead.from_preset("paper", None, 6, 4, logvar_init=-1.0)
    assert torch.allclose(head.logvar.bias, torch.full((4,), -1.0))
    with pytest.raises(TypeError, match="unexpected override"):
        DistributionBridge.from_preset("paper", dim=4, contraction=0.5)  # the unconditioned bridge has none


def test_the_settings_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        dab_settings("paper").n_steps = 8  # type: ignore[misc]
    assert isinstance(dab_settings("paper"), DABSettings)


@pytest.mark.parametrize("cls", [GaussianEmbeddingHead, TokenUncertaintyHead], ids=lambda c: c.__name__)
def test_the_log_variance_weights_start_as_named_and_draw_the_same_stream(cls):
    starts = {}
    for name in ("zero", "small", "pytorch"):
        torch.manual_seed(0)
        starts[name] = cls(6, 4, logvar_weight_init=name).logvar.weight.detach()
        starts[name + " next draw"] = torch.rand(3)  # what is drawn after the head: the same for every start
    assert torch.count_nonzero(starts["zero"]) == 0
    assert torch.allclose(starts["small"], starts["pytorch"] * 1e-3) and torch.count_nonzero(starts["pytorch"]) > 0
    assert torch.equal(starts["zero next draw"], starts["pytorch next draw"])
    assert torch.equal(starts["small next draw"], starts["pytorch next draw"])
    with pytest.raises(ValueError, match="logvar_weight_init must be one of 'zero', 'small', 'pytorch'; got 'ones'"):
        cls(6, 4, logvar_weight_init="ones")
    # the zero start: every input gets the bias as its log-variance
    head = cls(6, 4)
    x = torch.randn(5, 3, 6) if cls is TokenUncertaintyHead else torch.randn(5, 6)
    logvar = head(x) if cls is TokenUncertaintyHead else head(x).logvar
    assert torch.equal(logvar, torch.full((5, 4), -2.0))
