"""Gaussian (probabilistic) embeddings for retrieval: DAB's distribution bridge and HUD's pieces.

Convention: every Gaussian is diagonal and stored as ``(mu, logvar)`` with ``logvar = log σ²``.
Pure functions live in :mod:`~evidential_prvr.functional.gaussian`,
:mod:`~evidential_prvr.functional.dab` and
:mod:`~evidential_prvr.functional.hud` (also exported from
:mod:`evidential_prvr.functional`); ``nn.Module`` wrappers in
:mod:`~evidential_prvr.probabilistic.dab`, :mod:`~evidential_prvr.probabilistic.hud` and
:mod:`~evidential_prvr.probabilistic.alignment`.
"""

from evidential_prvr.functional import dab as dab_functional
from evidential_prvr.functional import gaussian
from evidential_prvr.functional import hud as hud_functional
# The pure functions are defined in the functional layer; this package re-exports them by their modules' __all__.
from evidential_prvr.functional.dab import *  # noqa: F401,F403
from evidential_prvr.functional.gaussian import *  # noqa: F401,F403
from evidential_prvr.functional.hud import *  # noqa: F401,F403
from evidential_prvr.probabilistic import alignment, dab, hud
from evidential_prvr.probabilistic.alignment import DABAlignment, DABAlignmentOutput, DABGaussians
from evidential_prvr.probabilistic.dab import (
    DistributionBridge,
    GaussianEmbeddingHead,
    ProbabilisticAlignmentContrastiveLoss,
    TokenUncertaintyHead,
)
from evidential_prvr.probabilistic.hud import (
    BatchClassificationLoss,
    BiasedMaxSimilarity,
    ComposeByWeights,
    HolisticAtomisticConsistencyLoss,
    ProbabilisticTextEmbedding,
)

# Each submodule lists its own public names; the package re-exports all of them.
__all__ = [
    *gaussian.__all__,
    *dab_functional.__all__,
    *hud_functional.__all__,
    *dab.__all__,
    *hud.__all__,
    *alignment.__all__,
]
