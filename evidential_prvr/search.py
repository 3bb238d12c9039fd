"""Retrieval over large galleries: streamed exact max-similarity search and FAISS candidate generation.

A PRVR gallery is a set of videos, each a bag of clip (and frame) embeddings; a query scores a video by
its best token (Holmes Eq. 1) and the two branches are combined into the ranking score (Eq. 2). At a
million clips the ``query × video × clip`` tensor of those scores does not fit in memory, and neither,
for many queries, does the ``query × video`` matrix. This module never builds either:

* :func:`gallery_search` -- the exact top-k of every query, streamed over blocks of ``query_chunk``
  queries × ``video_chunk`` videos (one matrix product and a max over the tokens per block, then a merge
  into a running top-k); peak temporary memory about ``query_chunk * video_chunk * max(M_c, M_f)`` scores.
* :class:`ClipIndex` -- a FAISS index over the clip embeddings (flat inner product, IVF or HNSW; install
  the ``faiss`` extra): top-K' candidate videos per query by their best clip, then
  :func:`rerank_candidates`, the exact max-similarity over the candidates' clips (and frames).

Both score with the same Eq. 1-2 settings, one :class:`SearchScoring` (branch weights, the score of a
padded frame, cosine or dot product) passed as ``scoring=``, and both return a :class:`SearchResult`: the
ranked candidates, their branch scores, and, given a target video per query, the target's scores, from
which :meth:`SearchResult.target_ranks` and :meth:`SearchResult.recall_at_k` follow, and
:meth:`evidential_prvr.GalleryUncertainty.search_opinion` forms the opinions over the top-k (Holmes Eq.
3-5, 7, 9, 16).
"""

from evidential_prvr._clip_index import INDEX_TYPES, ClipIndex, IndexSpec
from evidential_prvr._gallery_search import (
    SearchResult,
    SearchScoring,
    gallery_search,
    rerank_candidates,
    token_norms,
)

__all__ = [
    "SearchScoring",
    "SearchResult",
    "gallery_search",
    "rerank_candidates",
    "token_norms",
    "ClipIndex",
    "IndexSpec",
    "INDEX_TYPES",
]
