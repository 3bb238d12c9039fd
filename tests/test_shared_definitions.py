"""Text that several definitions share, written out in each (no fragment is inserted at import); the
signatures that repeat a registry section's fields are checked against it in ``tests/test_module_idiom.py``
and ``tests/test_static_types.py``."""

from __future__ import annotations

import dataclasses
import inspect

import evidential_prvr as ep
from evidential_prvr import functional as F


def test_rendered_docstrings_hold_the_fragments():
    for obj in (ep.probabilistic.DABAlignment, ep.probabilistic.ComposeByWeights, F.identify, F.evidence,
                F.pac_loss, F.triplet_ranking_loss, ep.metrics.aurc):
        assert "{" + "validate_args}" not in obj.__doc__ and "{returns}" not in obj.__doc__
    assert "Check that the inputs are finite" in ep.probabilistic.GaussianEmbeddingHead.__doc__
    assert "frame_sim, clip_sim : torch.Tensor" in F.inter_video_loss.__doc__
    assert "in ``[0, 0.5]``" in ep.metrics.augrc.__doc__


def test_modules_and_functionals_take_the_same_fields():
    fields = {f.name for f in dataclasses.fields(ep.presets.TransportSettings)}
    module = [p.name for p in inspect.signature(ep.FlexibleOT).parameters.values() if p.kind is p.KEYWORD_ONLY]
    function = [p.name for p in inspect.signature(F.flexible_ot).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert set(module) >= fields and set(function) >= fields
    assert ep.FlexibleOT(epsilon=0.2).epsilon == 0.2
