"""Pure tensor functions: one per equation, typed, stateless and free of I/O."""

# Evidence, opinions and uncertainties (Holmes Eq. 3-18)
from evidential_prvr.functional.dempster_shafer import ds_combine, ds_conflict
from evidential_prvr.functional.dirichlet_loss import dirichlet_mse_loss
from evidential_prvr.functional.evidence import Opinion, evidence, expected_entropy, label_consistency, opinion
from evidential_prvr.functional.targets import correctly_matched, normalized_target, positive_mask

# Entropic optimal transport (Holmes Eq. 19-20, App. B.5)
from evidential_prvr.functional.sinkhorn import kernel_range_bound, select_sinkhorn_method, sinkhorn

# Basic retrieval losses (Holmes App. B.1)
from evidential_prvr.functional.retrieval_losses import (
    info_nce_loss,
    query_diversity_loss,
    triplet_ranking_loss,
)

# Gaussian embeddings (DAB, HUD)
from evidential_prvr.functional.dab import (
    bridge_step_sizes,
    combine_video_log_variances,
    pac_loss,
    sinusoidal_time_embedding,
)
from evidential_prvr.functional.gaussian import (
    kl_margin,
    pairwise_gaussian_kl,
    pairwise_wasserstein2,
    reparameterised_sample,
)
from evidential_prvr.functional.hud import (
    batch_classification_loss,
    biased_max_similarity,
    holistic_atomistic_consistency_loss,
)

# Uncertainty at retrieval time: gallery opinions, query types, selective confidences (Holmes §3.2)
from evidential_prvr.functional._gallery import BranchOpinion, GalleryOpinion, gallery_opinion
from evidential_prvr.functional._query_types import (
    QueryTypeThresholds,
    batch_rule_query_types,
    fit_query_thresholds,
    identify_query_types,
    macro_f1,
)
from evidential_prvr.functional._selective import CONFIDENCES, EVIDENTIAL_CONFIDENCES, selective_confidence
