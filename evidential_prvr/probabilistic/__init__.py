"""Gaussian (probabilistic) embeddings for retrieval: DAB's distribution bridge and HUD's pieces.

Convention: every Gaussian is diagonal and stored as ``(mu, logvar)`` with ``logvar = log σ²``.
This package holds the ``nn.Module`` wrappers and result types; the pure functions they call
(``pairwise_gaussian_kl``, ``pac_loss``, ``biased_max_similarity``, ...) have their one public home in
:mod:`evidential_prvr.functional`.
"""

from evidential_prvr.functional._gaussian import DiagonalGaussian, KLSources
from evidential_prvr.probabilistic._bridge_distillation import BridgeDistillationLoss
from evidential_prvr.probabilistic._gaussian import DABAlignment, DABAlignmentOutput, DABGaussians
from evidential_prvr.probabilistic._dab import (
    ConditionedDistributionBridge,
    DistributionBridge,
    SMALL_LOGVAR_WEIGHT_SCALE,
    GaussianEmbeddingHead,
    ProbabilisticAlignmentContrastiveLoss,
    TokenUncertaintyHead,
)
from evidential_prvr.probabilistic._hud import (
    BatchClassificationLoss,
    BiasedMaxSimilarity,
    ComposeByWeights,
    HolisticAtomisticConsistencyLoss,
    ProbabilisticTextEmbedding,
)
from evidential_prvr.probabilistic._hud_objective import (
    HUD_DERIVATIVES,
    HUDComposedQuery,
    HUDObjective,
    HUDObjectiveOutput,
    HUDSwitches,
    HUDTargetTokens,
    QueryTokenAttention,
)

__all__ = [
    "DiagonalGaussian",
    "KLSources",
    # DAB
    "GaussianEmbeddingHead",
    "TokenUncertaintyHead",
    "DistributionBridge",
    "ConditionedDistributionBridge",
    "ProbabilisticAlignmentContrastiveLoss",
    "SMALL_LOGVAR_WEIGHT_SCALE",
    "BridgeDistillationLoss",
    "DABAlignment",
    "DABAlignmentOutput",
    "DABGaussians",
    # HUD
    "ProbabilisticTextEmbedding",
    "ComposeByWeights",
    "BiasedMaxSimilarity",
    "BatchClassificationLoss",
    "HolisticAtomisticConsistencyLoss",
    "HUDObjective", "HUDObjectiveOutput", "HUDComposedQuery", "HUDTargetTokens", "HUDSwitches", "HUD_DERIVATIVES", "QueryTokenAttention",
]
