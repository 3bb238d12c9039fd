"""evidential-prvr: uncertainty-aware partially relevant video retrieval for PyTorch.

Layers: :mod:`evidential_prvr.functional` holds pure tensor functions, one per equation of the papers
it implements; this package exports the ``nn.Module`` wrappers (hyperparameters, presets, named
outputs), the result dataclasses and the global validation switch; :mod:`evidential_prvr.presets`
holds every paper and release constant; :mod:`evidential_prvr.metrics` the retrieval metrics,
:mod:`evidential_prvr.probabilistic` the DAB and HUD modules, :mod:`evidential_prvr.distributed` the
helpers of multi-process training and :mod:`evidential_prvr.search` retrieval over large galleries (streamed
exact search, FAISS candidates).
"""

from evidential_prvr import distributed, functional, metrics, presets, probabilistic, search, uncertainty
from evidential_prvr._checks import default_validate_args, set_default_validate_args
from evidential_prvr._module_bases import PresetModule
from evidential_prvr.functional._scores import max_similarity

# Results of the functional layer
from evidential_prvr.functional._evidence import Opinion
from evidential_prvr.functional._dempster_shafer import DempsterShaferOutput
from evidential_prvr.functional._identification import BranchIdentification, Identification, QueryType
from evidential_prvr.functional._inter_video import InterVideoLossDetails
from evidential_prvr.functional._flexible_ot import FlexibleOTResult, POTProblem
from evidential_prvr.functional._intra_video import IntraVideoLossDetails
from evidential_prvr.functional._retrieval_losses import BaseRetrievalLossDetails

# Inter-video evidential learning (Holmes §3.2)
from evidential_prvr._identification import UncertaintyGuidedIdentifier
from evidential_prvr._dempster_shafer import DempsterShaferFusion
from evidential_prvr._inter_video import EvidentialRetrievalLoss

# Flexible optimal transport and intra-video evidential learning (Holmes §3.3)
from evidential_prvr._batching import IntraVideoBatch, build_intra_video_batch
from evidential_prvr._flexible_ot import FlexibleOT
from evidential_prvr._intra_video import IntraVideoEvidentialLoss

# Basic retrieval objectives (Holmes App. B.1) and the whole objective (Eq. 21)
from evidential_prvr._retrieval_losses import BaseRetrievalLoss, InfoNCELoss, QueryDiversityLoss, TripletRankingLoss
from evidential_prvr._criterion import HolmesCriterion, HolmesLossDetails

# Uncertainty at retrieval time: gallery opinions, query identification, selective confidences
from evidential_prvr.uncertainty import (
    GalleryIdentification,
    GalleryQueryIdentifier,
    GalleryUncertainty,
    SelectiveConfidence,
)

__version__ = "3.0.0"

__all__ = [
    # validation switch
    "set_default_validate_args",
    "default_validate_args",
    # the base of every module with presets
    "PresetModule",
    # scores (Holmes Eq. 1)
    "max_similarity",
    # inter-video
    "QueryType",
    "UncertaintyGuidedIdentifier",
    "Identification",
    "BranchIdentification",
    "Opinion",
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
    # basic objectives and the whole objective
    "BaseRetrievalLoss",
    "BaseRetrievalLossDetails",
    "InfoNCELoss",
    "QueryDiversityLoss",
    "TripletRankingLoss",
    "HolmesCriterion",
    "HolmesLossDetails",
    # uncertainty at retrieval time
    "GalleryUncertainty",
    "GalleryQueryIdentifier",
    "GalleryIdentification",
    "SelectiveConfidence",
    # submodules
    "distributed",
    "functional",
    "metrics",
    "presets",
    "probabilistic",
    "search",
    "uncertainty",
]
