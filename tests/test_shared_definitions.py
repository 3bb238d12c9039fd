"""The helpers that let a definition be written once: docstring fragments (``_docs.insert_docs``); the
signatures that repeat a settings dataclass's fields are checked against it in ``tests/test_settings_schema.py``
and ``tests/test_static_types.py``."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import evidential_prvr as ep
from evidential_prvr import functional as F
from evidential_prvr._docs import FINITE_INPUTS, insert_docs


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


def test_modules_and_functionals_take_the_same_fields():
    assert ep.FlexibleOT(epsilon=0.2).settings() == F._flexible_ot.TransportSettings(epsilon=0.2)
    fot = F.flexible_ot
    names = [p.name for p in inspect.signature(fot).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert set(names) >= {f.name for f in dataclasses.fields(F._flexible_ot.TransportSettings)}
