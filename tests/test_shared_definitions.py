"""The helpers that let a definition be written once: docstring fragments (``_docs.insert_docs``) and a
settings dataclass's fields as keyword arguments (``_overrides.settings_keywords``)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import evidential_prvr as ep
from evidential_prvr import functional as F
from evidential_prvr._docs import FINITE_INPUTS, insert_docs
from evidential_prvr._overrides import settings_keywords


def test_insert_docs_replaces_the_marker_line_with_the_indented_fragment():
    @insert_docs(checks="a : int\n    The a.")
    def f():
        """Summary.

        Parameters
        ----------
        {checks}
        """

    assert "        a : int\n            The a.\n" in f.__doc__
    assert "{checks}" not in f.__doc__


def test_insert_docs_refuses_a_fragment_without_its_marker():
    with pytest.raises(ValueError, match="no line {typo}"):
        @insert_docs(typo="x")
        def f():
            """Summary without the marker."""


def test_rendered_docstrings_hold_the_fragments():
    for obj in (ep.probabilistic.DABAlignment, ep.probabilistic.ComposeByWeights, F.identify, F.evidence,
                F.pac_loss, F.triplet_ranking_loss, ep.metrics.aurc):
        assert "{" + "validate_args}" not in obj.__doc__ and "{returns}" not in obj.__doc__
    assert FINITE_INPUTS.splitlines()[1].strip() in ep.probabilistic.GaussianEmbeddingHead.__doc__
    assert "frame_sim, clip_sim : torch.Tensor" in F.inter_video_loss.__doc__
    assert "in ``[0, 0.5]``" in ep.metrics.augrc.__doc__


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Schema:
    alpha: float = 1.0
    beta: str = "b"

    def __post_init__(self):
        if self.alpha <= 0:
            raise ValueError(f"alpha must be > 0, got {self.alpha}")


@settings_keywords(_Schema)
def _op(x, *, settings: _Schema, scale: float = 2.0):
    return x, settings, scale


def test_settings_keywords_builds_the_checked_settings_from_the_keywords():
    assert _op(1) == (1, _Schema(), 2.0)
    assert _op(1, beta="c", scale=3.0) == (1, _Schema(beta="c"), 3.0)
    with pytest.raises(ValueError, match="alpha must be > 0"):
        _op(1, alpha=-1.0)


def test_settings_keywords_signature_lists_the_fields_keyword_only():
    params = inspect.signature(_op).parameters
    assert list(params) == ["x", "alpha", "beta", "scale"]
    assert params["alpha"].kind is inspect.Parameter.KEYWORD_ONLY and params["alpha"].default == 1.0


def test_settings_keywords_keeps_pythons_errors():
    with pytest.raises(TypeError, match=r"_op\(\) got an unexpected keyword argument 'gamma'"):
        _op(1, gamma=0.1)
    with pytest.raises(TypeError, match=r"_op\(\) got an unexpected keyword argument 'settings'"):
        _op(1, settings=_Schema())
    with pytest.raises(TypeError, match="positional argument"):
        _op(1, 2.0)  # a field is keyword-only


def test_settings_keywords_subset_leaves_the_other_fields_at_their_default():
    @settings_keywords(_Schema, fields=("beta",))
    def op(*, settings: _Schema):
        return settings

    assert list(inspect.signature(op).parameters) == ["beta"]
    assert op(beta="z") == _Schema(beta="z")
    with pytest.raises(TypeError, match="alpha"):
        op(alpha=2.0)


def test_modules_and_functionals_take_the_same_fields():
    assert ep.FlexibleOT(epsilon=0.2).settings() == F._flexible_ot.TransportSettings(epsilon=0.2)
    fot = F.flexible_ot
    names = [p.name for p in inspect.signature(fot).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert set(names) >= {f.name for f in dataclasses.fields(F._flexible_ot.TransportSettings)}
