"""evidential-prvr: uncertainty-aware partially relevant video retrieval for PyTorch.

The library has two layers: :mod:`evidential_prvr.functional` holds pure tensor functions, one per
equation of the papers it implements, and this package exports the ``nn.Module`` wrappers with
hyperparameters, presets and named outputs.
"""

from evidential_prvr import functional

# Inter-video evidential learning (Holmes §3.2)
from evidential_prvr.dempster_shafer import DempsterShaferFusion, DempsterShaferOutput
from evidential_prvr.identification import (
    BranchIdentification,
    Identification,
    QueryType,
    UncertaintyGuidedIdentifier,
)
from evidential_prvr.inter_video_loss import EvidentialRetrievalLoss, InterVideoLossDetails

# Flexible optimal transport and intra-video evidential learning (Holmes §3.3)
from evidential_prvr.batching import IntraVideoBatch, build_intra_video_batch
from evidential_prvr.flexible_ot import FlexibleOT, FlexibleOTResult, POTProblem
from evidential_prvr.intra_video_loss import IntraVideoEvidentialLoss, IntraVideoLossDetails

# Basic retrieval objectives (Holmes App. B.1) and metrics
from evidential_prvr import metrics
from evidential_prvr.base_losses import (
    BaseRetrievalLoss,
    BaseRetrievalLossOutput,
    InfoNCELoss,
    QueryDiversityLoss,
    TripletRankingLoss,
)

from evidential_prvr import probabilistic

__version__ = "0.1.0"

__all__ = [
    # inter-video
    "QueryType",
    "UncertaintyGuidedIdentifier",
    "Identification",
    "BranchIdentification",
    "DempsterShaferFusion",
    "DempsterShaferOutput",
    "EvidentialRetrievalLoss",
    "InterVideoLossDetails",
    # intra-video
    "FlexibleOT",
    "FlexibleOTResult",
    "POTProblem",
    "IntraVideoEvidentialLoss",
    "IntraVideoLossDetails",
    "IntraVideoBatch",
    "build_intra_video_batch",
    # basic objectives
    "BaseRetrievalLoss",
    "BaseRetrievalLossOutput",
    "InfoNCELoss",
    "QueryDiversityLoss",
    "TripletRankingLoss",
    # submodules
    "functional",
    "metrics",
    "probabilistic",
]

# Uncertainty at retrieval time: gallery opinions, query identification, selective confidences
from evidential_prvr import uncertainty
from evidential_prvr.uncertainty import (
    GalleryIdentification,
    GalleryQueryIdentifier,
    GalleryUncertainty,
    SelectiveConfidence,
)

__all__ += [
    "GalleryUncertainty",
    "GalleryQueryIdentifier",
    "GalleryIdentification",
    "SelectiveConfidence",
    "uncertainty",
]
