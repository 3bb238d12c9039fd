"""Evaluation-time encoding and chunked scoring for :class:`~reference_models.holmes.model.HolmesModel`.

:func:`score_matrix` computes the Holmes Eq. 1-2 scores of every query against every video without ever
holding more than a ``query_chunk × video_chunk × M`` block of the query × video × position tensor: for each
block it does one matrix product and a (masked) max over positions. It returns the ``[Q, V]`` matrices.

For galleries where ``[Q, V]`` is too large, :func:`exact_top_k` keeps only each query's top-k (the
library's streamed :func:`evidential_prvr.search.gallery_search`, same blocks, the same scores bit for
bit), and :func:`faiss_reranked_top_k` takes the candidates from a FAISS index over the clips
(:class:`evidential_prvr.search.ClipIndex`) and re-ranks them exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F

from evidential_prvr.search import ClipIndex, SearchResult, SearchScoring, gallery_search
from reference_models.holmes.model import HolmesModel, Similarities, VideoEmbeddings, max_over_positions

__all__ = ["score_matrix", "exact_top_k", "faiss_reranked_top_k", "encode_all_videos", "encode_all_queries"]


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return value


@torch.no_grad()
def score_matrix(
    model: HolmesModel,
    video_embeddings: VideoEmbeddings,
    queries: torch.Tensor,
    *,
    query_chunk: int = 512,
    video_chunk: int = 256,
) -> Similarities:
    """All query × video scores (Holmes Eq. 1-2), computed block by block.

    Parameters
    ----------
    model : HolmesModel
        Supplies the branch weights :math:`\\alpha_f, \\alpha_c` and the score of padded frames.
    video_embeddings : VideoEmbeddings
        ``clip [Nv, M_c, d]``, ``frame [Nv, M_f, d]``, ``frame_mask [Nv, M_f]``.
    queries : Tensor, shape [Nq, d]
        Query embeddings.
    query_chunk, video_chunk : int
        Block sizes; peak temporary memory is about ``query_chunk * video_chunk * max(M_c, M_f)`` scores.

    Returns
    -------
    Similarities
        ``clip``, ``frame`` and ``score``, each ``[Nq, Nv]`` on the device of ``queries``.
    """
    _positive_int(query_chunk, "query_chunk")
    _positive_int(video_chunk, "video_chunk")
    if not isinstance(queries, torch.Tensor) or queries.dim() != 2:
        raise ValueError(f"queries must be a 2-D tensor [Nq, d], got {getattr(queries, 'shape', type(queries))}")
    dim = video_embeddings.clip.shape[-1]
    if queries.shape[1] != dim or video_embeddings.frame.shape[-1] != dim:
        raise ValueError(
            f"queries [Nq, d] and video embeddings [Nv, M, d] must share d, got {tuple(queries.shape)}, "
            f"{tuple(video_embeddings.clip.shape)} and {tuple(video_embeddings.frame.shape)}"
        )
    num_queries, num_videos = queries.shape[0], len(video_embeddings)
    device = queries.device
    q = F.normalize(queries, dim=-1)
    clip_scores = torch.empty(num_queries, num_videos, dtype=q.dtype, device=device)
    frame_scores = torch.empty_like(clip_scores)
    for v0 in range(0, num_videos, video_chunk):
        block = video_embeddings.slice(v0, v0 + video_chunk).to(device)
        clips = F.normalize(block.clip.to(q.dtype), dim=-1)
        frames = F.normalize(block.frame.to(q.dtype), dim=-1)
        v1 = v0 + clips.shape[0]
        for q0 in range(0, num_queries, query_chunk):
            q_block = q[q0 : q0 + query_chunk]
            clip_scores[q0 : q0 + query_chunk, v0:v1] = max_over_positions(q_block, clips)
            frame_scores[q0 : q0 + query_chunk, v0:v1] = max_over_positions(
                q_block, frames, block.frame_mask, fill=model.padded_frame_score
            )
    return Similarities(clip=clip_scores, frame=frame_scores, score=model.combine_scores(frame_scores, clip_scores))


def _branch_arguments(model: HolmesModel, video_embeddings: VideoEmbeddings) -> dict[str, Any]:
    """The gallery and Eq. 2 settings of ``model`` (a :class:`~evidential_prvr.search.SearchScoring`) as keywords
    of the library's search functions."""
    scoring = SearchScoring(clip_weight=model.config.clip_weight, frame_weight=model.config.frame_weight,
                            padded_frame_score=model.padded_frame_score)
    return dict(frames=video_embeddings.frame, frame_mask=video_embeddings.frame_mask, scoring=scoring)


@torch.no_grad()
def exact_top_k(
    model: HolmesModel,
    video_embeddings: VideoEmbeddings,
    queries: torch.Tensor,
    *,
    k: int,
    target: torch.Tensor | None = None,
    query_chunk: int = 512,
    video_chunk: int = 256,
) -> SearchResult:
    """Each query's exact top-``k`` videos by the Holmes Eq. 1-2 score, streamed (no ``[Q, V]`` matrix).

    The scores equal those of :func:`score_matrix` with the same block sizes; peak temporary memory is
    about ``query_chunk * video_chunk * max(M_c, M_f)`` scores. ``target`` (the annotated video of each
    query) adds its scores, for ranks, recall and the labelled opinions.
    """
    _positive_int(query_chunk, "query_chunk")
    _positive_int(video_chunk, "video_chunk")
    clips = video_embeddings.clip
    return gallery_search(queries, clips, k=k, target=target, query_chunk=query_chunk, video_chunk=video_chunk,
                          validate_args=False, **_branch_arguments(model, video_embeddings))


@torch.no_grad()
def faiss_reranked_top_k(
    model: HolmesModel,
    video_embeddings: VideoEmbeddings,
    queries: torch.Tensor,
    index: ClipIndex,
    *,
    k: int,
    num_candidates: int | None = None,
    target: torch.Tensor | None = None,
) -> SearchResult:
    """Top-``k`` videos per query from ``index``'s candidates (by best clip), re-ranked exactly by the Holmes
    Eq. 1-2 score over the candidates' clips and frames."""
    return index.search(queries, k, num_candidates=num_candidates, target=target,
                        **_branch_arguments(model, video_embeddings))


def _pad_positions(x: torch.Tensor, length: int, value: float | bool) -> torch.Tensor:
    if x.shape[1] == length:
        return x
    pad_shape = (x.shape[0], length - x.shape[1], *x.shape[2:])
    return torch.cat([x, x.new_full(pad_shape, value)], dim=1)


@torch.no_grad()
def encode_all_videos(model: HolmesModel, video_loader: Iterable[Any], device: torch.device | str) -> VideoEmbeddings:
    """Encode every video of a loader whose batches have ``clip_feats, frame_feats, frame_mask``.

    Runs in eval mode (the model's previous mode is restored) without gradients; batches padded to
    different frame counts are padded (and masked) to the longest.
    """
    was_training = model.training
    model.eval()
    try:
        parts = [
            model.encode_videos(
                batch.clip_feats.to(device), batch.frame_feats.to(device), batch.frame_mask.to(device)
            )
            for batch in video_loader
        ]
    finally:
        model.train(was_training)
    if not parts:
        raise ValueError("video_loader yielded no batch")
    frames = max(p.frame.shape[1] for p in parts)
    return VideoEmbeddings(
        clip=torch.cat([p.clip for p in parts]),
        frame=torch.cat([_pad_positions(p.frame, frames, 0.0) for p in parts]),
        frame_mask=torch.cat([_pad_positions(p.frame_mask, frames, False) for p in parts]),
    )


@torch.no_grad()
def encode_all_queries(model: HolmesModel, query_loader: Iterable[Any], device: torch.device | str) -> torch.Tensor:
    """Encode every query of a loader whose batches have ``query_feats, query_mask`` into ``[Nq, d]``.

    Runs in eval mode (the model's previous mode is restored) without gradients.
    """
    was_training = model.training
    model.eval()
    try:
        parts = [
            model.encode_queries(batch.query_feats.to(device), batch.query_mask.to(device)) for batch in query_loader
        ]
    finally:
        model.train(was_training)
    if not parts:
        raise ValueError("query_loader yielded no batch")
    return torch.cat(parts)
