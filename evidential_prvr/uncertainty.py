"""Uncertainty at retrieval time: gallery opinions, query identification and selective confidences.

Holmes learns evidential opinions (§3.2) but uses them only inside its training loss. These modules put
them to work when a trained model answers queries against a gallery:

* :class:`GalleryUncertainty` -- frame, clip and fused Dirichlet opinions of every query over its top-k
  candidates (Eq. 3-5, 7, 9, 16), independent of the gallery's size;
* :class:`GalleryQueryIdentifier` -- precise / polysemous / under-determined per query with fixed
  thresholds, thresholds fitted on a validation split (:meth:`GalleryQueryIdentifier.fit`), or the paper's
  in-batch rule (Eq. 10-14);
* :class:`SelectiveConfidence` -- one named confidence per query for selective retrieval, evaluated with
  :func:`evidential_prvr.metrics.aurc` and friends.

Each module holds its hyperparameters and its ``forward`` is one call of the pure function of
:mod:`evidential_prvr.functional` (:func:`~evidential_prvr.functional.gallery_opinion`,
:func:`~evidential_prvr.functional.identify_query_types`,
:func:`~evidential_prvr.functional.selective_confidence`).
"""

from __future__ import annotations

from evidential_prvr._gallery import GalleryUncertainty
from evidential_prvr._query_types import GalleryIdentification, GalleryQueryIdentifier
from evidential_prvr._selective import SelectiveConfidence
from evidential_prvr.choices import CONFIDENCES, IDENTIFICATION_RULES
from evidential_prvr.functional._gallery import BranchOpinion, GalleryOpinion
from evidential_prvr.functional._query_types import QueryTypeThresholds
from evidential_prvr.functional._selective import EVIDENTIAL_CONFIDENCES

__all__ = [
    "GalleryUncertainty",
    "GalleryQueryIdentifier",
    "GalleryIdentification",
    "SelectiveConfidence",
    "GalleryOpinion",
    "BranchOpinion",
    "QueryTypeThresholds",
    "CONFIDENCES",
    "EVIDENTIAL_CONFIDENCES",
    "IDENTIFICATION_RULES",
]
