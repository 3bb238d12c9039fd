"""Query × video scores of Holmes Eq. 1 and the shape checks that tell a caller how to fix a score matrix.

Every Holmes loss reads ``[num_queries, num_videos]`` score matrices: one row per caption of the
batch, one column per video. :func:`max_similarity` builds one from embeddings (the max over a
video's frames or clips of the cosine), for codebases that score each caption against its own
video only (MS-SL's caption × caption training matrix).
"""

from __future__ import annotations

import torch

from evidential_prvr._checks import (
    as_mask,
    check_positive_int,
    check_same_device,
    check_tensor,
    compute_dtype,
    should_validate,
)
from evidential_prvr._numerics import normalize_rows

__all__ = ["max_similarity", "check_score_layout", "check_score_pair_shapes"]

_HELPER = "evidential_prvr.max_similarity(query_emb, video_emb, video_mask)"


def max_similarity(
    query_emb: torch.Tensor,
    video_emb: torch.Tensor,
    video_mask: torch.Tensor | None = None,
    *,
    normalize: bool = True,
    chunk_size: int | None = None,
    validate_args: bool | None = None,
) -> torch.Tensor:
    """Query × video scores: the maximum over a video's tokens (frames or clips) of the cosine (Holmes Eq. 1).

    .. math::

        s(q, v) = \\max_{j \\in \\text{valid}(v)} \\frac{\\mathbf q^\\top \\mathbf v_j}{\\lVert \\mathbf q\\rVert\\,
        \\lVert \\mathbf v_j\\rVert}.

    Called once with the frame embeddings and once with the clip embeddings it gives ``frame_sim``
    and ``clip_sim`` for :class:`~evidential_prvr.HolmesCriterion`.

    Parameters
    ----------
    query_emb : torch.Tensor
        ``[Q, d]`` query (caption) embeddings.
    video_emb : torch.Tensor
        ``[V, M, d]`` token embeddings of each video (``M`` frames, clips or multi-scale proposals).
    video_mask : torch.Tensor, optional
        ``[V, M]`` bool, ``True`` for a valid token (0/1 values accepted); a padded token never wins the
        maximum. Every video needs a valid token. Default: all valid.
    normalize : bool
        L2-normalise both sides (cosine, Eq. 1); ``False`` takes the maximum of the dot products.
    chunk_size : int, optional
        Videos scored at a time: the temporary ``[Q, chunk_size, M]`` block bounds the memory
        (default: all videos at once).
    validate_args : bool, optional
        Check values (finite embeddings, a valid token per video); host synchronisations. ``None``
        follows :func:`evidential_prvr.set_default_validate_args`.

    Returns
    -------
    torch.Tensor
        ``[Q, V]`` scores in the compute dtype (float32 for half inputs, computed under autocast as
        the surrounding region says).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr import max_similarity
    >>> query = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    >>> video = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [0.0, 5.0]]])  # 2 videos, 2 tokens
    >>> max_similarity(query, video, torch.tensor([[True, False], [True, False]]))
    tensor([[1.0000, 0.7071],
            [0.0000, 0.7071]])

    References
    ----------
    Holmes (ICML 2026), Eq. 1; Dong et al., "Partially Relevant Video Retrieval" (MS-SL), ACM MM 2022.
    """
    check_tensor(query_emb, "query_emb", ndim=2, floating=True)
    check_tensor(video_emb, "video_emb", ndim=3, floating=True)
    num_queries, dim = query_emb.shape
    num_videos, num_tokens, video_dim = video_emb.shape
    if num_queries == 0 or dim == 0:
        raise ValueError(f"query_emb must be [num_queries, d] with both >= 1, got shape {tuple(query_emb.shape)}")
    if num_videos == 0 or num_tokens == 0:
        raise ValueError(f"video_emb must be [num_videos, num_tokens, d] with both counts >= 1, got shape "
                         f"{tuple(video_emb.shape)}")
    if video_dim != dim:
        raise ValueError(f"video_emb must be [num_videos, num_tokens, d] = [{num_videos}, {num_tokens}, {dim}] "
                         f"(d of query_emb), got shape {tuple(video_emb.shape)}")
    check_same_device(query_emb=query_emb, video_emb=video_emb)
    if not isinstance(normalize, bool):
        raise TypeError(f"normalize must be a bool, got {type(normalize).__name__}")
    if chunk_size is not None:
        check_positive_int(chunk_size, "chunk_size")
    validate = should_validate(validate_args)
    mask = None
    if video_mask is not None:
        mask = as_mask(video_mask, "video_mask", (num_videos, num_tokens), video_emb.device, validate=validate)
    if validate:
        for name, x in (("query_emb", query_emb), ("video_emb", video_emb)):
            if not bool(torch.isfinite(x).all()):
                raise ValueError(f"{name} must be finite, got NaN or Inf values")
        if mask is not None and not bool(mask.any(dim=1).all()):
            empty = torch.nonzero(~mask.any(dim=1)).flatten()[:5].tolist()
            raise ValueError(f"video_mask must mark at least one valid token per video; videos {empty} have none")

    dtype = torch.promote_types(compute_dtype(query_emb), compute_dtype(video_emb))
    q, v = query_emb.to(dtype), video_emb.to(dtype)
    if normalize:
        q, v = normalize_rows(q, query_emb.dtype), normalize_rows(v, video_emb.dtype)
    step = num_videos if chunk_size is None else chunk_size
    blocks = []
    for start in range(0, num_videos, step):
        stop = min(start + step, num_videos)
        tokens = v[start:stop]
        scores = (tokens.reshape(-1, dim) @ q.t()).view(stop - start, num_tokens, num_queries).to(dtype)
        if mask is not None:
            scores = scores.masked_fill(~mask[start:stop].unsqueeze(-1), float("-inf"))
        blocks.append(scores.amax(dim=1))
    return torch.cat(blocks, dim=0).t()


def check_score_layout(sim: torch.Tensor, name: str, query_video: torch.Tensor) -> None:
    """Raise ``ValueError`` unless ``sim`` is ``[num_queries, num_videos]`` for the positives ``query_video``.

    A matrix with one column per query is reported as transposed (videos × captions) with the fix.
    """
    num_queries = query_video.shape[0]
    num_videos = query_video.shape[1] if query_video.dim() == 2 else None
    rows, cols = sim.shape
    if rows == num_queries and (num_videos is None or cols == num_videos):
        return
    if cols == num_queries and (num_videos is None or rows == num_videos):
        raise ValueError(
            f"{name} must have shape [num_queries, num_videos] = [{num_queries}, {rows}], got {tuple(sim.shape)}: "
            f"it looks transposed (videos × captions); pass {name}.T (query_video holds {num_queries} captions)"
        )
    videos = cols if num_videos is None else num_videos
    raise ValueError(
        f"{name} must have shape [num_queries, num_videos] = [{num_queries}, {videos}] (one row per caption of "
        f"query_video, which holds {num_queries}), got {tuple(sim.shape)}; or query_video must hold one entry per "
        f"row: shape [{rows}]" + ("" if num_videos is None else f" or [{rows}, {cols}]")
    )


def check_score_pair_shapes(a: torch.Tensor, b: torch.Tensor, name_a: str, name_b: str) -> None:
    """Raise ``ValueError`` unless two score matrices have one shape; a square caption × caption matrix
    beside a ``[Q, V]`` one is recognised and the message points to :func:`max_similarity`."""
    if a.shape == b.shape:
        return
    for square, sq_name, other, other_name in ((a, name_a, b, name_b), (b, name_b, a, name_a)):
        if square.shape[0] == square.shape[1] == other.shape[0] and other.shape[1] != other.shape[0]:
            raise ValueError(
                f"{sq_name} is square {tuple(square.shape)} while {other_name} is {tuple(other.shape)}: both must be "
                f"[num_queries, num_videos] = [{other.shape[0]}, {other.shape[1]}]. A caption × caption matrix "
                f"(each caption against its own video's tokens, as MS-SL trains) scores no other video; compute "
                f"the [num_queries, num_videos] scores with {_HELPER}"
            )
    raise ValueError(
        f"{name_a} and {name_b} must have the same shape [num_queries, num_videos], got {tuple(a.shape)} and "
        f"{tuple(b.shape)}"
    )
