r"""Basic PRVR retrieval losses: triplet ranking, InfoNCE and query diversity (Holmes App. B.1).

These are the ``L_base`` terms every MS-SL / GMMFormer-style model trains with (Holmes Eq. 22-23). They
work on an in-batch score matrix ``scores[q, v]`` between ``Q`` queries and ``V`` videos, where
``query_video[q]`` is the index of the one video that query ``q`` describes (a video may have several
queries). All reductions are vectorised: no Python loop runs over the batch.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from evidential_prvr._checks import (
    check_choice,
    check_in_range,
    check_index_vector,
    check_positive,
    check_positive_int,
    check_tensor,
    compute_dtype,
)

__all__ = ["triplet_ranking_loss", "info_nce_loss", "query_diversity_loss"]

VideoNegative = Literal["hardest", "pool"]
NCEVideoToText = Literal["release", "paper"]


def _check_scores(scores: object, query_video: object) -> tuple[int, int]:
    check_tensor(scores, "scores", ndim=2, floating=True)
    assert isinstance(scores, torch.Tensor)
    num_queries, num_videos = scores.shape
    if num_queries == 0 or num_videos == 0:
        raise ValueError(f"scores must have at least one query and one video, got shape {tuple(scores.shape)}")
    check_index_vector(query_video, "query_video", length=num_queries, upper=num_videos)
    return num_queries, num_videos


def _ownership(query_video: torch.Tensor, num_videos: int) -> torch.Tensor:
    """``own[q, v]`` is True when query ``q`` describes video ``v``."""
    videos = torch.arange(num_videos, device=query_video.device)
    return query_video.unsqueeze(1) == videos.unsqueeze(0)


def _sample_negatives(
    scores: torch.Tensor, positive: torch.Tensor, pool: int | None, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, the column of one negative drawn uniformly from the ``pool`` highest-scoring negatives.

    ``pool=None`` draws from all negatives of the row. Returns the column indices ``[R]`` and a mask of the
    rows that have at least one negative.
    """
    num_negatives = (~positive).sum(dim=1)
    pool_size = num_negatives if pool is None else num_negatives.clamp(max=pool)
    ranked = scores.detach().masked_fill(positive, float("-inf"))
    # negatives first, hardest first; the positives (-inf) sort last and are never picked below
    order = torch.argsort(ranked, dim=1, descending=True, stable=True)
    uniform = torch.rand(scores.shape[0], device=scores.device, generator=generator, dtype=torch.float64)
    pick = (uniform * pool_size.clamp(min=1)).long().clamp(max=scores.shape[1] - 1)
    pick = torch.minimum(pick, (pool_size - 1).clamp(min=0))
    columns = order.gather(1, pick.unsqueeze(1)).squeeze(1)
    return columns, num_negatives > 0


def triplet_ranking_loss(
    scores: torch.Tensor,
    query_video: torch.Tensor,
    margin: float = 0.2,
    hard_negative_topk: int | None = None,
    generator: torch.Generator | None = None,
    *,
    video_negative: VideoNegative = "hardest",
) -> torch.Tensor:
    r"""Bidirectional triplet ranking loss with in-batch negatives (Holmes App. B.1, :math:`L^{trip}`).

    .. math::

        L^{trip} = \frac{1}{Q}\sum_{q}\big[m + s(q, v^-_q) - s(q, v_q)\big]_+
                 + \frac{1}{V'}\sum_{v}\big[m + s(q^-_v, v) - \bar s_v\big]_+,
        \qquad \bar s_v = \frac{1}{|T_v|}\sum_{q \in T_v} s(q, v),

    where :math:`v_q` is the video of query :math:`q`, :math:`T_v` the queries of video :math:`v` and
    :math:`V'` the number of videos that have at least one query.

    * **text → video**: per query, one negative video drawn uniformly from all other videos of the batch,
      or, when ``hard_negative_topk`` is set, uniformly from its ``hard_negative_topk`` highest-scoring
      negatives (the release uses 20 from a configurable epoch on).
    * **video → text**: a video has several positive queries, so its positive score is their *mean*
      :math:`\bar s_v` (as in the GMMFormer/Holmes release). Its negative query is drawn uniformly from the
      queries of other videos, or, with ``hard_negative_topk`` set, is the hardest one
      (``video_negative="hardest"``, the release) or drawn from the ``hard_negative_topk`` hardest
      (``video_negative="pool"``, symmetric with the text side).

    Negatives are chosen without gradient (the choice is discrete); the loss is differentiable in
    ``scores``. Rows without any negative (a batch of one video, a video whose queries are all the
    batch's) contribute zero.

    Parameters
    ----------
    scores : Tensor, shape [Q, V]
        Query-video similarities (cosine scores of Holmes Eq. 1 or Eq. 2).
    query_video : Tensor, shape [Q], integer
        Index in ``[0, V)`` of the video each query describes.
    margin : float
        The margin :math:`m > 0`.
    hard_negative_topk : int or None
        ``None`` for random negatives, otherwise the size of the hard-negative pool.
    generator : torch.Generator, optional
        Random source for the negative draw (on the device of ``scores``).
    video_negative : {"hardest", "pool"}
        Video→text hard-negative rule when ``hard_negative_topk`` is set.

    Returns
    -------
    Tensor
        Scalar loss, in float32 for half-precision input.
    """
    num_queries, num_videos = _check_scores(scores, query_video)
    check_positive(margin, "margin")
    if hard_negative_topk is not None:
        check_positive_int(hard_negative_topk, "hard_negative_topk")
    check_choice(video_negative, "video_negative", ("hardest", "pool"))
    s = scores.to(compute_dtype(scores))
    own = _ownership(query_video, num_videos)

    # text -> video
    positive_t2v = s.gather(1, query_video.unsqueeze(1)).squeeze(1)
    neg_videos, has_neg_t2v = _sample_negatives(s, own, hard_negative_topk, generator)
    negative_t2v = s.gather(1, neg_videos.unsqueeze(1)).squeeze(1)
    hinge_t2v = torch.where(has_neg_t2v, F.relu(margin + negative_t2v - positive_t2v), torch.zeros_like(positive_t2v))
    loss_t2v = hinge_t2v.sum() / num_queries

    # video -> text
    s_vt, own_vt = s.t(), own.t()
    counts = own_vt.sum(dim=1)
    positive_v2t = (s_vt * own_vt).sum(dim=1) / counts.clamp(min=1)
    pool = None if hard_negative_topk is None else (1 if video_negative == "hardest" else hard_negative_topk)
    neg_queries, has_neg_v2t = _sample_negatives(s_vt, own_vt, pool, generator)
    negative_v2t = s_vt.gather(1, neg_queries.unsqueeze(1)).squeeze(1)
    valid = has_neg_v2t & (counts > 0)
    hinge_v2t = torch.where(valid, F.relu(margin + negative_v2t - positive_v2t), torch.zeros_like(positive_v2t))
    loss_v2t = hinge_v2t.sum() / (counts > 0).sum().clamp(min=1)
    return loss_t2v + loss_v2t


def info_nce_loss(
    scores: torch.Tensor, query_video: torch.Tensor, *, video_to_text: NCEVideoToText = "release"
) -> torch.Tensor:
    r"""Bidirectional InfoNCE over unnormalised scores (Holmes App. B.1, :math:`L^{nce}`).

    "Unnormalised" means the scores are used as logits as they are: no temperature and no L2
    normalisation is applied here. In the Holmes/GMMFormer release, ``scores`` are the max over positions
    of the raw dot products between the (not L2-normalised) query and clip/frame embeddings — the
    reference model's ``clip_logits`` / ``frame_logits`` — not the cosine scores used for ranking. The
    paper writes the ratio of raw scores :math:`s/(s+\sum s^-)`; as cosines can be negative, that ratio is
    read (as the release computes it) with exponentials, i.e. a softmax over the logits:

    .. math::

        L^{nce}_{t\to v} = \frac{1}{Q}\sum_q \Big[\log\sum_{v'} e^{s(q,v')} - s(q, v_q)\Big].

    The video→text direction has two readings, both available:

    ``video_to_text="release"`` (GMMFormer/Holmes code; multiple-positive NCE per video)
        :math:`\frac{1}{V'}\sum_v \big[\log\sum_{q'} e^{s(q',v)} - \log\sum_{q\in T_v} e^{s(q,v)}\big]`
        over the :math:`V'` videos that have queries.
    ``video_to_text="paper"`` (App. B.1 as written; one term per positive pair)
        :math:`\frac{1}{Q}\sum_q \big[\log\big(e^{s(q,v_q)} + \sum_{q' \notin T_{v_q}} e^{s(q',v_q)}\big)
        - s(q, v_q)\big]`.

    The result is the sum of the two directions.

    Parameters
    ----------
    scores : Tensor, shape [Q, V]
        Query-video logits.
    query_video : Tensor, shape [Q], integer
        Index in ``[0, V)`` of the video each query describes.
    video_to_text : {"release", "paper"}
        Which video→text form to use (see above).

    Returns
    -------
    Tensor
        Scalar loss, in float32 for half-precision input.
    """
    num_queries, num_videos = _check_scores(scores, query_video)
    check_choice(video_to_text, "video_to_text", ("release", "paper"))
    s = scores.to(compute_dtype(scores))
    own = _ownership(query_video, num_videos)
    positive = s.gather(1, query_video.unsqueeze(1)).squeeze(1)
    loss_t2v = (torch.logsumexp(s, dim=1) - positive).mean()

    s_vt, own_vt = s.t(), own.t()
    neg_inf = torch.full_like(s_vt, float("-inf"))
    if video_to_text == "release":
        has_query = own_vt.any(dim=1, keepdim=True)
        # rows of videos without queries are zeroed (not -inf) so logsumexp's gradient stays finite
        positives_only = torch.where(own_vt, s_vt, neg_inf).where(has_query, torch.zeros_like(s_vt))
        per_video = torch.logsumexp(s_vt, dim=1) - torch.logsumexp(positives_only, dim=1)
        has_query = has_query.squeeze(1)
        per_video = torch.where(has_query, per_video, torch.zeros_like(per_video))
        loss_v2t = per_video.sum() / has_query.sum().clamp(min=1)
    else:
        has_negative = (~own_vt).any(dim=1, keepdim=True)
        negatives_only = torch.where(own_vt, neg_inf, s_vt).where(has_negative, torch.zeros_like(s_vt))
        negative_lse = torch.logsumexp(negatives_only, dim=1)
        negative_lse = torch.where(has_negative.squeeze(1), negative_lse, torch.full_like(negative_lse, float("-inf")))
        loss_v2t = (torch.logaddexp(positive, negative_lse[query_video]) - positive).mean()
    return loss_t2v + loss_v2t


def query_diversity_loss(
    query_emb: torch.Tensor,
    query_video: torch.Tensor,
    alpha: float = 32.0,
    delta: float = 0.2,
    lam: float = 1.0,
) -> torch.Tensor:
    r"""Query-diversity loss pushing apart the queries of the same video (Holmes Eq. 23, :math:`L_{div}`).

    .. math::

        L_{div} = \frac{1}{n}\sum_{i \ne j} \mathbb{1}[v_i = v_j]\,
                  (1 + \cos(q_i, q_j))^{\lambda}\,\log\!\big(1 + e^{\alpha(\cos(q_i, q_j) + \delta)}\big),
        \qquad n = Q.

    This is Eq. 23 with the focal factor :math:`(1+\cos)^\lambda` of the GMMFormerV2/Holmes release
    (:math:`\lambda = 0` gives the paper's Eq. 23 exactly). Pairs are ordered (each unordered pair counts
    twice) and the normaliser :math:`n` is the number of queries :math:`Q` in the batch, as in the release.
    :math:`\log(1+e^x)` is evaluated as a stable softplus.

    Parameters
    ----------
    query_emb : Tensor, shape [Q, d]
        Query embeddings (L2-normalised internally).
    query_video : Tensor, shape [Q], integer
        Video index of each query; only its equality pattern matters.
    alpha : float
        Scale :math:`\alpha > 0` (32 in the release).
    delta : float
        Margin :math:`\delta` (0.15 for TVR, 0.2 otherwise in the release).
    lam : float
        Focal exponent :math:`\lambda \ge 0` (1 in the release).

    Returns
    -------
    Tensor
        Scalar loss, in float32 for half-precision input.
    """
    check_tensor(query_emb, "query_emb", ndim=2, floating=True)
    num_queries = query_emb.shape[0]
    if num_queries == 0:
        raise ValueError(f"query_emb must hold at least one query, got shape {tuple(query_emb.shape)}")
    check_index_vector(query_video, "query_video", length=num_queries, upper=torch.iinfo(torch.int64).max)
    check_positive(alpha, "alpha")
    check_in_range(delta, "delta", -2.0, 2.0)
    check_in_range(lam, "lam", 0.0, 64.0)
    dtype = compute_dtype(query_emb)
    q = F.normalize(query_emb.to(dtype), dim=-1)
    cos = q @ q.t()
    eye = torch.eye(num_queries, dtype=torch.bool, device=q.device)
    same_video = (query_video.unsqueeze(1) == query_video.unsqueeze(0)) & ~eye
    # clamp: rounding can push 1 + cos slightly below 0, and x**lam has an infinite slope at 0 for lam < 1
    focal = (1.0 + cos).clamp(min=torch.finfo(dtype).tiny).pow(lam)
    terms = focal * F.softplus(alpha * (cos + delta))
    return torch.where(same_video, terms, torch.zeros_like(terms)).sum() / num_queries
