"""Gaussian (probabilistic) embeddings for retrieval: DAB's distribution bridge and HUD's pieces.

Convention: every Gaussian is diagonal and stored as ``(mu, logvar)`` with ``logvar = log σ²``.
Pure functions live in :mod:`~evidential_prvr.probabilistic.gaussian`,
:mod:`~evidential_prvr.probabilistic.dab_functional` and
:mod:`~evidential_prvr.probabilistic.hud_functional` (also exported from
:mod:`evidential_prvr.functional`); ``nn.Module`` wrappers in
:mod:`~evidential_prvr.probabilistic.dab`, :mod:`~evidential_prvr.probabilistic.hud` and
:mod:`~evidential_prvr.probabilistic.alignment`.
"""

from evidential_prvr.probabilistic.alignment import DABAlignment, DABAlignmentOutput, DABGaussians
from evidential_prvr.probabilistic.dab import (
    DistributionBridge,
    GaussianEmbeddingHead,
    ProbabilisticAlignmentContrastiveLoss,
    TokenUncertaintyHead,
)
from evidential_prvr.probabilistic.dab_functional import (
    bridge_step_sizes,
    combine_video_log_variances,
    pac_loss,
    sinusoidal_time_embedding,
)
from evidential_prvr.probabilistic.gaussian import (
    DiagonalGaussian,
    kl_margin,
    pairwise_gaussian_kl,
    pairwise_wasserstein2,
    reparameterised_sample,
)
from evidential_prvr.probabilistic.hud import (
    BatchClassificationLoss,
    BiasedMaxSimilarity,
    ComposeByWeights,
    HolisticAtomisticConsistencyLoss,
    ProbabilisticTextEmbedding,
)
from evidential_prvr.probabilistic.hud_functional import (
    batch_classification_loss,
    biased_max_similarity,
    holistic_atomistic_consistency_loss,
)

__all__ = [
    "DiagonalGaussian",
    "pairwise_gaussian_kl",
    "pairwise_wasserstein2",
    "kl_margin",
    "reparameterised_sample",
    "pac_loss",
    "sinusoidal_time_embedding",
    "bridge_step_sizes",
    "combine_video_log_variances",
    "biased_max_similarity",
    "batch_classification_loss",
    "holistic_atomistic_consistency_loss",
    "GaussianEmbeddingHead",
    "TokenUncertaintyHead",
    "DistributionBridge",
    "ProbabilisticAlignmentContrastiveLoss",
    "ProbabilisticTextEmbedding",
    "ComposeByWeights",
    "BiasedMaxSimilarity",
    "BatchClassificationLoss",
    "HolisticAtomisticConsistencyLoss",
    "DABAlignment",
    "DABAlignmentOutput",
    "DABGaussians",
]
