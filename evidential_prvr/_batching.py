"""Group a flat PRVR training batch into per-video blocks for the intra-video loss (Holmes §3.3).

A PRVR batch holds ``V`` videos with their clip embeddings and a flat list of ``Q`` queries, each
belonging to one video of the batch. :func:`build_intra_video_batch` regroups the queries by video
into a padded ``[V, Mq, d]`` block (``Mq`` = most queries of any video) and computes the
query-to-clip similarities ``[V, Mq, Mc]`` with the masks that :class:`~evidential_prvr.FlexibleOT`
and :class:`~evidential_prvr.IntraVideoEvidentialLoss` take. No Python loop over videos.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from evidential_prvr._checks import (
    as_mask,
    check_finite,
    check_positive_int,
    check_same_device,
    check_tensor,
    should_validate,
)
from evidential_prvr._numerics import normalize_rows


@dataclass
class IntraVideoBatch:
    """Queries of a flat batch regrouped by video.

    Attributes
    ----------
    sim : torch.Tensor
        ``[V, Mq, Mc]`` similarity of each video's queries to its clips (cosine by default); 0 at
        padded queries or clips.
    query_mask : torch.Tensor
        ``[V, Mq]`` bool, True for real queries.
    clip_mask : torch.Tensor
        ``[V, Mc]`` bool, True for real clips.
    query_index : torch.Tensor
        ``[V, Mq]`` long: position in the flat batch of each slot's query, -1 for padding. Within a
        video the queries keep their order in the flat batch.
    queries : torch.Tensor
        ``[V, Mq, d]`` the query embeddings in their slots, 0 for padding.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr import build_intra_video_batch
    >>> batch = build_intra_video_batch(torch.randn(3, 8), torch.tensor([1, 0, 1]), torch.randn(2, 4, 8))
    >>> batch.query_index
    tensor([[ 1, -1],
            [ 0,  2]])

    References
    ----------
    Holmes (ICML 2026), §3.3 (the per-video query-clip similarities of Eq. 19).
    """

    sim: torch.Tensor
    query_mask: torch.Tensor
    clip_mask: torch.Tensor
    query_index: torch.Tensor
    queries: torch.Tensor


def build_intra_video_batch(
    query_emb: torch.Tensor,
    query_video: torch.Tensor,
    clip_emb: torch.Tensor,
    clip_mask: torch.Tensor | None = None,
    *,
    cosine: bool = True,
    max_queries: int | None = None,
    validate_args: bool | None = None,
) -> IntraVideoBatch:
    """Build the padded ``[V, Mq, Mc]`` intra-video similarity batch from a flat training batch.

    Typical use in a training step, with ``Q`` query embeddings, the index of each query's video
    among the ``V`` videos of the batch, and the videos' clip embeddings::

        batch = build_intra_video_batch(query_emb, query_video, clip_emb, clip_mask)
        loss_intra = intra_loss(batch.sim, batch.query_mask, batch.clip_mask)

    Gradients flow from ``sim`` (and ``queries``) back to ``query_emb`` and ``clip_emb``.

    Parameters
    ----------
    query_emb : torch.Tensor
        ``[Q, d]`` query embeddings.
    query_video : torch.Tensor
        ``[Q]`` integer tensor: the video (0..V-1, a row of ``clip_emb``) each query describes.
    clip_emb : torch.Tensor
        ``[V, Mc, d]`` clip embeddings of the batch's videos.
    clip_mask : torch.Tensor, optional
        ``[V, Mc]`` True (or 1) for real clips; default all real.
    cosine : bool
        True (default, as in the release): cosine similarity of L2-normalised embeddings; False:
        plain dot products.
    max_queries : int, optional
        ``Mq``. By default the largest number of queries of a video in the batch (one host sync to
        read it); pass it to avoid the sync. Must be at least that number.
    validate_args : bool, optional
        Value checks (finite embeddings, video indices in range, 0/1 mask); host synchronisations.

    Returns
    -------
    IntraVideoBatch
        Similarities, masks, slot-to-query index and the regrouped query embeddings.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr import build_intra_video_batch
    >>> query_video = torch.tensor([0, 1, 0, 2, 0])  # five captions of three videos
    >>> batch = build_intra_video_batch(torch.randn(5, 16), query_video, torch.randn(3, 32, 16))
    >>> batch.sim.shape, batch.query_mask.sum(dim=1)
    (torch.Size([3, 3, 32]), tensor([3, 1, 1]))

    References
    ----------
    Holmes (ICML 2026), §3.3.
    """
    check_tensor(query_emb, "query_emb", ndim=2, floating=True)
    check_tensor(clip_emb, "clip_emb", ndim=3, floating=True)
    check_tensor(query_video, "query_video", ndim=1)
    if query_video.is_floating_point() or query_video.is_complex() or query_video.dtype == torch.bool:
        raise TypeError(f"query_video must be an integer tensor, got {query_video.dtype}")
    n_queries, dim = query_emb.shape
    n_videos, n_clips, clip_dim = clip_emb.shape
    if clip_dim != dim:
        raise ValueError(f"clip_emb must have feature size {dim} like query_emb, got shape {tuple(clip_emb.shape)}")
    if n_videos < 1 or n_clips < 1:
        raise ValueError(f"clip_emb must be [V, Mc, d] with V, Mc >= 1, got shape {tuple(clip_emb.shape)}")
    if query_video.shape[0] != n_queries:
        raise ValueError(
            f"query_video must have shape ({n_queries},) to match query_emb, got {tuple(query_video.shape)}"
        )
    check_same_device(query_emb=query_emb, query_video=query_video, clip_emb=clip_emb)
    validate = should_validate(validate_args)
    if validate:
        check_finite(query_emb, "query_emb")
        check_finite(clip_emb, "clip_emb")
        if n_queries and bool(((query_video < 0) | (query_video >= n_videos)).any()):
            raise ValueError(f"query_video must hold video indices in [0, {n_videos - 1}], got values in "
                             f"[{int(query_video.min())}, {int(query_video.max())}]")
    if clip_mask is None:
        cmask = torch.ones(n_videos, n_clips, dtype=torch.bool, device=clip_emb.device)
    else:
        cmask = as_mask(clip_mask, "clip_mask", (n_videos, n_clips), clip_emb.device, validate=validate)

    device = query_emb.device
    video = query_video.to(device=device, dtype=torch.long)
    counts = torch.zeros(n_videos, dtype=torch.long, device=device).scatter_add_(0, video, torch.ones_like(video))
    if max_queries is None:
        max_queries = max(int(counts.max()) if n_queries else 0, 1)
    else:
        check_positive_int(max_queries, "max_queries")
        if validate and n_queries and bool((counts > max_queries).any()):
            raise ValueError(f"max_queries={max_queries} is smaller than the largest number of queries of a video")

    # rank of each query within its video: stable sort by video, minus the video's first position
    order = torch.sort(video, stable=True).indices
    sorted_video = video[order]
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(n_queries, device=device) - starts[sorted_video]

    slots = sorted_video * max_queries + rank
    query_index = torch.full((n_videos * max_queries,), -1, dtype=torch.long, device=device)
    query_index = query_index.scatter(0, slots, order).view(n_videos, max_queries)
    query_mask = query_index >= 0
    # padded slots read an appended zero row (also works when the batch has no query at all)
    padded_emb = torch.cat([query_emb, query_emb.new_zeros(1, dim)], dim=0)
    gather = torch.where(query_mask, query_index, torch.full_like(query_index, n_queries)).view(-1)
    queries = padded_emb.index_select(0, gather).view(n_videos, max_queries, dim)

    q = normalize_rows(queries, queries.dtype) if cosine else queries
    c = normalize_rows(clip_emb, clip_emb.dtype) if cosine else clip_emb
    sim = torch.bmm(q, c.transpose(1, 2))
    valid = query_mask.unsqueeze(2) & cmask.unsqueeze(1)
    sim = torch.where(valid, sim, torch.zeros((), dtype=sim.dtype, device=sim.device))
    return IntraVideoBatch(sim, query_mask, cmask, query_index, queries)
