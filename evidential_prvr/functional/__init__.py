"""Pure tensor functions: one per equation, typed, stateless and free of I/O.

This is the one public path of every function; the modules that implement them are private. The
``nn.Module`` wrappers in :mod:`evidential_prvr` hold hyperparameters and call these functions.
"""

# Query × video scores (Holmes Eq. 1)
from evidential_prvr.functional._scores import max_similarity

# Evidence, opinions and uncertainties (Holmes Eq. 3-9)
from evidential_prvr.functional._evidence import evidence, expected_entropy, label_consistency, opinion
from evidential_prvr.functional._targets import correctly_matched, normalized_target, positive_mask

# Dempster-Shafer fusion and the evidential loss (Holmes Eq. 16-17)
from evidential_prvr.functional._dempster_shafer import dempster_shafer_fusion, ds_combine, ds_conflict
from evidential_prvr.functional._dirichlet_loss import dirichlet_mse_loss

# Identification, calibration and L_inter (Holmes Eq. 10-18)
from evidential_prvr.functional._identification import ema_thresholds, fuse_query_types, identify
from evidential_prvr.functional._inter_video import calibrated_target, inter_video_loss, inter_video_loss_details

# Entropic optimal transport, flexible OT and L_intra (Holmes Eq. 19-20, App. B.5)
from evidential_prvr.functional._sinkhorn import scaling_range_bound, select_sinkhorn_method, sinkhorn
from evidential_prvr.functional._flexible_ot import flexible_ot
from evidential_prvr.functional._intra_video import intra_video_loss, intra_video_loss_details

# Basic retrieval losses (Holmes App. B.1, Eq. 22-23)
from evidential_prvr.functional._retrieval_losses import (
    base_retrieval_loss,
    base_retrieval_loss_details,
    info_nce_loss,
    query_diversity_loss,
    triplet_ranking_loss,
)

# Gaussian embeddings (DAB, HUD)
from evidential_prvr.functional._gaussian import kl_margin, pairwise_gaussian_kl, pairwise_wasserstein2, reparameterised_sample
from evidential_prvr.functional._gaussian import paired_gaussian_kl, paired_wasserstein2
from evidential_prvr.functional._gaussian import pairwise_gaussian_kl_prepared, prepare_kl_sources
from evidential_prvr.functional._dab import bounded_contraction, bridge_step_sizes, combine_video_log_variances, pac_loss, sinusoidal_time_embedding
from evidential_prvr.functional._bridge_distillation import bridge_distillation_loss
from evidential_prvr.functional._hud import batch_classification_loss, biased_max_similarity, holistic_atomistic_consistency_loss

# Uncertainty at retrieval time: gallery opinions, query types, selective confidences (Holmes §3.2)
from evidential_prvr.functional._gallery import gallery_opinion
from evidential_prvr.functional._query_types import (
    batch_rule_query_types,
    fit_query_thresholds,
    identify_query_types,
    macro_f1,
)
from evidential_prvr.functional._selective import selective_confidence

__all__ = [
    # scores
    "max_similarity",
    # evidence and opinions
    "evidence",
    "opinion",
    "expected_entropy",
    "label_consistency",
    "positive_mask",
    "normalized_target",
    "correctly_matched",
    # fusion and loss
    "ds_combine",
    "dempster_shafer_fusion",
    "ds_conflict",
    "dirichlet_mse_loss",
    # inter-video
    "identify",
    "fuse_query_types",
    "ema_thresholds",
    "calibrated_target",
    "inter_video_loss",
    "inter_video_loss_details",
    # transport and intra-video
    "sinkhorn",
    "select_sinkhorn_method",
    "scaling_range_bound",
    "flexible_ot",
    "intra_video_loss",
    "intra_video_loss_details",
    # basic objectives
    "triplet_ranking_loss",
    "info_nce_loss",
    "query_diversity_loss",
    "base_retrieval_loss",
    "base_retrieval_loss_details",
    # Gaussian embeddings (DAB, HUD)
    "pairwise_gaussian_kl",
    "prepare_kl_sources",
    "pairwise_gaussian_kl_prepared",
    "pairwise_wasserstein2",
    "paired_gaussian_kl",
    "paired_wasserstein2",
    "kl_margin",
    "reparameterised_sample",
    "pac_loss",
    "sinusoidal_time_embedding",
    "bridge_step_sizes",
    "bounded_contraction",
    "bridge_distillation_loss",
    "combine_video_log_variances",
    "biased_max_similarity",
    "batch_classification_loss",
    "holistic_atomistic_consistency_loss",
    # uncertainty at retrieval time
    "gallery_opinion",
    "identify_query_types",
    "fit_query_thresholds",
    "batch_rule_query_types",
    "macro_f1",
    "selective_confidence",
]
