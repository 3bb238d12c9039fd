r"""Basic PRVR retrieval losses: triplet ranking, InfoNCE, query diversity and their sum L_base
(Holmes App. B.1, Eq. 22-23).

These are the terms every MS-SL / GMMFormer-style model trains with. They work on an in-batch score
matrix ``sim[q, v]`` between ``Q`` queries and ``V`` videos and the positives ``query_video`` (the
video index of each query, or a ``{0, 1}`` matrix ``[Q, V]``). No Python loop runs over the batch.

**Reductions.** Every loss is a mean over per-query contributions :math:`\ell_q`: ``reduction="none"``
returns them (``[Q]``), ``"mean"`` their mean (the loss as defined below) and ``"sum"`` their sum. A
video-side term (video → text) is shared among the video's queries so that the mean of the
contributions is exactly the loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from evidential_prvr._checks import (
    check_choice,
    check_finite,
    check_same_device,
    check_same_shape,
    check_tensor,
    compute_dtype,
    should_validate,
)
from evidential_prvr._numerics import normalize_rows
from evidential_prvr._settings import (
    check_base_options,
    check_diversity_options,
    check_loss_weights,
    check_triplet_options,
)
from evidential_prvr.choices import (
    NCE_VIDEO_TO_TEXT,
    REDUCTIONS,
    NCEVideoToText,
    Reduction,
    VideoNegative,
)
from evidential_prvr.functional._dirichlet_loss import reduce_rows
from evidential_prvr.functional._scores import check_score_layout, check_score_pair_shapes
from evidential_prvr.functional._targets import positive_mask

__all__ = [
    "BaseRetrievalLossDetails",
    "triplet_ranking_loss",
    "info_nce_loss",
    "query_diversity_loss",
    "base_retrieval_loss",
    "base_retrieval_loss_details",
]


def _check_sim(sim: object, query_video: object, name: str, validate: bool) -> torch.Tensor:
    """Validate a ``[Q, V]`` score matrix and its positives; return the positive mask ``bool [Q, V]``."""
    check_tensor(sim, name, ndim=2, floating=True)
    assert isinstance(sim, torch.Tensor)
    num_queries, num_videos = sim.shape
    if num_queries == 0 or num_videos == 0:
        raise ValueError(f"{name} must have at least one query and one video, got shape {tuple(sim.shape)}")
    check_tensor(query_video, "query_video", ndim=(1, 2))
    assert isinstance(query_video, torch.Tensor)
    check_score_layout(sim, name, query_video)
    check_same_device(**{name: sim, "query_video": query_video})
    if validate:
        check_finite(sim, name)
    return positive_mask(query_video, num_videos, num_queries, validate=validate)


def _sample_negatives(
    sim: torch.Tensor, positive: torch.Tensor, pool: int | None, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, the column of one negative drawn uniformly from the ``pool`` highest-scoring negatives.

    ``pool=None`` draws from all negatives of the row. Returns the column indices ``[R]`` and a mask of the
    rows that have at least one negative.
    """
    num_negatives = (~positive).sum(dim=1)
    pool_size = num_negatives if pool is None else num_negatives.clamp(max=pool)
    ranked = sim.detach().masked_fill(positive, float("-inf"))
    # negatives first, hardest first; the positives (-inf) sort last and are never picked below
    order = torch.argsort(ranked, dim=1, descending=True, stable=True)
    uniform = torch.rand(sim.shape[0], device=sim.device, generator=generator, dtype=torch.float64)
    pick = (uniform * pool_size.clamp(min=1)).long().clamp(max=sim.shape[1] - 1)
    pick = torch.minimum(pick, (pool_size - 1).clamp(min=0))
    columns = order.gather(1, pick.unsqueeze(1)).squeeze(1)
    return columns, num_negatives > 0


def _share_video_terms(per_video: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """Per-query shares ``[Q]`` of per-video terms ``[V]`` whose mean over the videos with queries is the
    video-side loss: video ``v``'s term is split evenly among its queries and scaled so that the mean
    of the shares over all queries equals the mean of the terms over the videos that have queries."""
    counts = own.sum(dim=0).to(per_video.dtype)  # queries per video
    has_query = counts > 0
    videos_with_queries = has_query.sum().clamp(min=1).to(per_video.dtype)
    weight = torch.where(has_query, own.shape[0] / (videos_with_queries * counts.clamp(min=1)),
                         torch.zeros_like(per_video))
    return (own.to(per_video.dtype) * (per_video * weight).unsqueeze(0)).sum(dim=1)


def _positive_mean(s: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """Mean score over each row's positives (the score of the one positive for index positives)."""
    return (s * own).sum(dim=1) / own.sum(dim=1).clamp(min=1)


def triplet_ranking_loss(
    sim: torch.Tensor,
    query_video: torch.Tensor,
    margin: float = 0.2,
    hard_negative_topk: int | None = None,
    generator: torch.Generator | None = None,
    *,
    video_negative: VideoNegative = "hardest",
    reduction: Reduction = "mean",
    validate_args: bool | None = None,
) -> torch.Tensor:
    r"""Bidirectional triplet ranking loss with in-batch negatives (Holmes App. B.1, :math:`L^{trip}`).

    .. math::

        L^{trip} = \frac{1}{Q}\sum_{q}\big[m + s(q, v^-_q) - s(q, v_q)\big]_+
                 + \frac{1}{V'}\sum_{v}\big[m + s(q^-_v, v) - \bar s_v\big]_+,
        \qquad \bar s_v = \frac{1}{|T_v|}\sum_{q \in T_v} s(q, v),

    where :math:`v_q` is the video of query :math:`q` (several positives: their mean score), :math:`T_v`
    the queries of video :math:`v` and :math:`V'` the number of videos that have at least one query.

    * **text → video**: per query, one negative video drawn uniformly from all other videos of the batch,
      or, when ``hard_negative_topk`` is set, uniformly from its ``hard_negative_topk`` highest-scoring
      negatives (the release uses 20 from a configurable epoch on).
    * **video → text**: a video has several positive queries, so its positive score is their *mean*
      :math:`\bar s_v` (as in the GMMFormer/Holmes release). Its negative query is drawn uniformly from the
      queries of other videos, or, with ``hard_negative_topk`` set, is the hardest one
      (``video_negative="hardest"``, the release) or drawn from the ``hard_negative_topk`` hardest
      (``video_negative="pool"``, symmetric with the text side).

    Negatives are chosen without gradient (the choice is discrete); the loss is differentiable in
    ``sim``. Rows without any negative (a batch of one video) contribute zero.

    Parameters
    ----------
    sim : torch.Tensor
        ``[Q, V]`` query-video similarities (cosine scores of Holmes Eq. 1 or Eq. 2).
    query_video : torch.Tensor
        ``LongTensor [Q]`` video index of each query, or ``{0, 1}`` matrix ``[Q, V]``.
    margin : float
        The margin :math:`m > 0`.
    hard_negative_topk : int or None
        ``None`` for random negatives, otherwise the size of the hard-negative pool.
    generator : torch.Generator, optional
        Random source for the negative draw (on the device of ``sim``).
    video_negative : {"hardest", "pool"}
        Video→text hard-negative rule when ``hard_negative_topk`` is set.
    reduction : {"mean", "sum", "none"}
        See the module documentation.
    validate_args : bool, optional
        Check values (finite ``sim``, valid positives); host synchronisations.

    Returns
    -------
    torch.Tensor
        Scalar loss (``[Q]`` for ``"none"``), in float32 for half-precision input.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import triplet_ranking_loss
    >>> sim = torch.tensor([[0.9, 0.2], [0.3, 0.8]])
    >>> triplet_ranking_loss(sim, torch.tensor([0, 1]), margin=0.2)  # every pair beyond the margin
    tensor(0.)

    References
    ----------
    Holmes (ICML 2026), App. B.1; Faghri et al., "VSE++", BMVC 2018; Dong et al., "Partially Relevant
    Video Retrieval" (MS-SL), ACM MM 2022.
    """
    validate = should_validate(validate_args)
    own = _check_sim(sim, query_video, "sim", validate)
    check_triplet_options(margin, hard_negative_topk, video_negative, random_negatives=True)
    check_choice(reduction, "reduction", REDUCTIONS)
    return reduce_rows(_triplet_rows(sim, own, margin, hard_negative_topk, generator, video_negative), reduction)


def _triplet_rows(
    sim: torch.Tensor, own: torch.Tensor, margin: float, hard_negative_topk: int | None,
    generator: torch.Generator | None, video_negative: VideoNegative,
) -> torch.Tensor:
    """Per-query contributions ``[Q]`` of the triplet loss (validated inputs)."""
    s = sim.to(compute_dtype(sim))
    # text -> video
    positive_t2v = _positive_mean(s, own)
    neg_videos, has_neg_t2v = _sample_negatives(s, own, hard_negative_topk, generator)
    negative_t2v = s.gather(1, neg_videos.unsqueeze(1)).squeeze(1)
    hinge_t2v = torch.where(has_neg_t2v, F.relu(margin + negative_t2v - positive_t2v), torch.zeros_like(positive_t2v))
    # video -> text
    s_vt, own_vt = s.t(), own.t()
    counts = own_vt.sum(dim=1)
    positive_v2t = _positive_mean(s_vt, own_vt)
    pool = None if hard_negative_topk is None else (1 if video_negative == "hardest" else hard_negative_topk)
    neg_queries, has_neg_v2t = _sample_negatives(s_vt, own_vt, pool, generator)
    negative_v2t = s_vt.gather(1, neg_queries.unsqueeze(1)).squeeze(1)
    valid = has_neg_v2t & (counts > 0)
    hinge_v2t = torch.where(valid, F.relu(margin + negative_v2t - positive_v2t), torch.zeros_like(positive_v2t))
    return hinge_t2v + _share_video_terms(hinge_v2t, own)


def info_nce_loss(
    sim: torch.Tensor,
    query_video: torch.Tensor,
    *,
    video_to_text: NCEVideoToText = "release",
    reduction: Reduction = "mean",
    validate_args: bool | None = None,
) -> torch.Tensor:
    r"""Bidirectional InfoNCE over unnormalised scores (Holmes App. B.1, :math:`L^{nce}`).

    "Unnormalised" means the scores are used as logits as they are: no temperature and no L2
    normalisation is applied here. In the Holmes/GMMFormer release, ``sim`` are the max over positions
    of the raw dot products between the (not L2-normalised) query and clip/frame embeddings — the
    reference model's ``clip_logits`` / ``frame_logits`` — not the cosine scores used for ranking. The
    paper writes the ratio of raw scores :math:`s/(s+\sum s^-)`; as cosines can be negative, that ratio is
    read (as the release computes it) with exponentials, i.e. a softmax over the logits:

    .. math::

        L^{nce}_{t\to v} = \frac{1}{Q}\sum_q \Big[\log\sum_{v'} e^{s(q,v')} - \log\sum_{v \in P_q} e^{s(q, v)}\Big],

    with :math:`P_q` the positives of :math:`q` (one for index positives). The video→text direction has
    two readings, both available:

    ``video_to_text="release"`` (GMMFormer/Holmes code; multiple-positive NCE per video)
        :math:`\frac{1}{V'}\sum_v \big[\log\sum_{q'} e^{s(q',v)} - \log\sum_{q\in T_v} e^{s(q,v)}\big]`
        over the :math:`V'` videos that have queries.
    ``video_to_text="paper"`` (App. B.1 as written; one term per positive pair)
        :math:`\frac{1}{Q}\sum_q \big[\log\big(e^{s(q,v_q)} + \sum_{q' \notin T_{v_q}} e^{s(q',v_q)}\big)
        - s(q, v_q)\big]` (index positives only).

    The result is the sum of the two directions.

    Parameters
    ----------
    sim : torch.Tensor
        ``[Q, V]`` query-video logits.
    query_video : torch.Tensor
        ``LongTensor [Q]`` video index of each query, or ``{0, 1}`` matrix ``[Q, V]`` (``"release"`` only).
    video_to_text : {"release", "paper"}
        Which video→text form to use (see above).
    reduction : {"mean", "sum", "none"}
        See the module documentation.
    validate_args : bool, optional
        Check values (finite ``sim``, valid positives); host synchronisations.

    Returns
    -------
    torch.Tensor
        Scalar loss (``[Q]`` for ``"none"``), in float32 for half-precision input.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import info_nce_loss
    >>> info_nce_loss(torch.zeros(2, 2), torch.tensor([0, 1]))  # 2 log 2: chance in both directions
    tensor(1.3863)

    References
    ----------
    Holmes (ICML 2026), App. B.1; van den Oord et al., "Representation Learning with Contrastive
    Predictive Coding", 2018; Miech et al., "End-to-End Learning of Visual Representations from
    Uncurated Instructional Videos" (MIL-NCE), CVPR 2020.
    """
    validate = should_validate(validate_args)
    own = _check_sim(sim, query_video, "sim", validate)
    check_choice(video_to_text, "video_to_text", NCE_VIDEO_TO_TEXT)
    check_choice(reduction, "reduction", REDUCTIONS)
    if video_to_text == "paper" and query_video.dim() != 1:
        raise ValueError("video_to_text='paper' needs one positive per query: query_video must be indices [Q]")
    return reduce_rows(_info_nce_rows(sim, own, video_to_text), reduction)


def _info_nce_rows(sim: torch.Tensor, own: torch.Tensor, video_to_text: NCEVideoToText) -> torch.Tensor:
    """Per-query contributions ``[Q]`` of InfoNCE (validated inputs)."""
    s = sim.to(compute_dtype(sim))
    neg_inf = torch.full_like(s, float("-inf"))
    positives_lse = torch.logsumexp(torch.where(own, s, neg_inf), dim=1)
    rows = torch.logsumexp(s, dim=1) - positives_lse

    s_vt, own_vt = s.t(), own.t()
    neg_inf_vt = neg_inf.t()
    if video_to_text == "release":
        has_query = own_vt.any(dim=1, keepdim=True)
        # rows of videos without queries are zeroed (not -inf) so logsumexp's gradient stays finite
        positives_only = torch.where(own_vt, s_vt, neg_inf_vt).where(has_query, torch.zeros_like(s_vt))
        per_video = torch.logsumexp(s_vt, dim=1) - torch.logsumexp(positives_only, dim=1)
        per_video = torch.where(has_query.squeeze(1), per_video, torch.zeros_like(per_video))
        return rows + _share_video_terms(per_video, own)
    positive = positives_lse  # one positive per query here
    has_negative = (~own_vt).any(dim=1, keepdim=True)
    negatives_only = torch.where(own_vt, neg_inf_vt, s_vt).where(has_negative, torch.zeros_like(s_vt))
    negative_lse = torch.logsumexp(negatives_only, dim=1)
    negative_lse = torch.where(has_negative.squeeze(1), negative_lse, torch.full_like(negative_lse, float("-inf")))
    video = own.to(torch.long).argmax(dim=1)
    return rows + torch.logaddexp(positive, negative_lse[video]) - positive


def query_diversity_loss(
    query_emb: torch.Tensor,
    query_video: torch.Tensor,
    alpha: float = 32.0,
    delta: float = 0.2,
    lam: float = 1.0,
    *,
    reduction: Reduction = "mean",
    validate_args: bool | None = None,
) -> torch.Tensor:
    r"""Query-diversity loss pushing apart the queries of the same video (Holmes Eq. 23, :math:`L_{div}`).

    .. math::

        L_{div} = \frac{1}{n}\sum_{i \ne j} \mathbb{1}[v_i = v_j]\,
                  (1 + \cos(q_i, q_j))^{\lambda}\,\log\!\big(1 + e^{\alpha(\cos(q_i, q_j) + \delta)}\big),
        \qquad n = Q.

    This is Eq. 23 with the focal factor :math:`(1+\cos)^\lambda` of the GMMFormerV2/Holmes release
    (:math:`\lambda = 0` gives the paper's Eq. 23 exactly). Pairs are ordered (each unordered pair counts
    twice) and the normaliser :math:`n` is the number of queries :math:`Q` in the batch, as in the release.
    With a ``{0, 1}`` matrix of positives two queries are of the same video when they share a positive.
    :math:`\log(1+e^x)` is evaluated as a stable softplus.

    Parameters
    ----------
    query_emb : torch.Tensor
        ``[Q, d]`` query embeddings (L2-normalised internally).
    query_video : torch.Tensor
        ``[Q]`` integer video index of each query (only its equality pattern matters), or a
        ``{0, 1}`` matrix ``[Q, V]``.
    alpha : float
        Scale :math:`\alpha > 0` (32 in the release).
    delta : float
        Margin :math:`\delta` (0.15 for TVR, 0.2 otherwise in the release).
    lam : float
        Focal exponent :math:`\lambda \ge 0` (1 in the release).
    reduction : {"mean", "sum", "none"}
        See the module documentation (:math:`\ell_i = \sum_j` of query :math:`i`'s pair terms).
    validate_args : bool, optional
        Check values (finite embeddings, valid positives); host synchronisations.

    Returns
    -------
    torch.Tensor
        Scalar loss (``[Q]`` for ``"none"``), in float32 for half-precision input.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import query_diversity_loss
    >>> q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> loss = query_diversity_loss(q, torch.tensor([0, 0, 1]), delta=-0.5)  # orthogonal pair: cos = 0 < -delta
    >>> bool(loss < 1e-6)
    True

    References
    ----------
    Holmes (ICML 2026), Eq. 23; Wang et al., "GMMFormer: Gaussian-Mixture-Model Based Transformer for
    Efficient Partially Relevant Video Retrieval", AAAI 2024.
    """
    check_tensor(query_emb, "query_emb", ndim=2, floating=True)
    num_queries = query_emb.shape[0]
    if num_queries == 0:
        raise ValueError(f"query_emb must hold at least one query, got shape {tuple(query_emb.shape)}")
    check_tensor(query_video, "query_video", ndim=(1, 2))
    check_same_device(query_emb=query_emb, query_video=query_video)
    validate = should_validate(validate_args)
    if validate:
        check_finite(query_emb, "query_emb")
    check_diversity_options(alpha, delta, lam)
    check_choice(reduction, "reduction", REDUCTIONS)
    if query_video.dim() == 1:
        if query_video.is_floating_point() or query_video.dtype == torch.bool or query_video.is_complex():
            raise TypeError(f"query_video given as indices [Q] must have an integer dtype, got {query_video.dtype}")
        if query_video.shape[0] != num_queries:
            raise ValueError(f"query_video must have shape [{num_queries}] to match query_emb, got "
                             f"{tuple(query_video.shape)}")
        same_video = query_video.unsqueeze(1) == query_video.unsqueeze(0)
    else:
        own = positive_mask(query_video, query_video.shape[1], num_queries, validate=validate)
        same_video = (own.to(torch.float32) @ own.to(torch.float32).t()) > 0
    return reduce_rows(_diversity_rows(query_emb, same_video, alpha, delta, lam), reduction)


def _diversity_rows(query_emb: torch.Tensor, same_video: torch.Tensor, alpha: float, delta: float,
                    lam: float) -> torch.Tensor:
    """Per-query contributions ``[Q]`` of L_div from a ``bool [Q, Q]`` same-video matrix (validated inputs)."""
    dtype = compute_dtype(query_emb)
    q = normalize_rows(query_emb.to(dtype), query_emb.dtype)
    cos = q @ q.t()
    eye = torch.eye(q.shape[0], dtype=torch.bool, device=q.device)
    # clamp: rounding can push 1 + cos slightly below 0, and x**lam has an infinite slope at 0 for lam < 1
    focal = (1.0 + cos).clamp(min=torch.finfo(dtype).tiny).pow(lam)
    terms = focal * F.softplus(alpha * (cos + delta))
    return torch.where(same_video & ~eye, terms, torch.zeros_like(terms)).sum(dim=1)


@dataclass
class BaseRetrievalLossDetails:
    r"""The terms of L_base (each unweighted and reduced) and their weighted sum ``loss``.

    Attributes
    ----------
    loss : torch.Tensor
        :math:`L^{trip}_f + L^{trip}_c + \lambda_f L^{nce}_f + \lambda_c L^{nce}_c + \lambda_{div} L_{div}`.
    frame_triplet, clip_triplet : torch.Tensor
        Triplet ranking loss of the frame and clip branch.
    frame_nce, clip_nce : torch.Tensor
        InfoNCE of the frame and clip branch (before weighting).
    diversity : torch.Tensor
        Query-diversity loss (before weighting).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import base_retrieval_loss_details
    >>> sim = torch.tensor([[0.9, 0.2], [0.3, 0.8]])
    >>> details = base_retrieval_loss_details(sim, sim, torch.eye(2), torch.tensor([0, 1]))
    >>> details.frame_nce
    tensor(0.8761)

    References
    ----------
    Holmes (ICML 2026), App. B.1, Eq. 22-23.
    """

    loss: torch.Tensor
    frame_triplet: torch.Tensor
    clip_triplet: torch.Tensor
    frame_nce: torch.Tensor
    clip_nce: torch.Tensor
    diversity: torch.Tensor


def base_retrieval_loss(
    frame_sim: torch.Tensor,
    clip_sim: torch.Tensor,
    query_emb: torch.Tensor,
    query_video: torch.Tensor,
    *,
    frame_logits: torch.Tensor | None = None,
    clip_logits: torch.Tensor | None = None,
    margin: float = 0.2,
    frame_nce_weight: float = 0.04,
    clip_nce_weight: float = 0.02,
    div_weight: float = 0.003,
    div_alpha: float = 32.0,
    div_delta: float = 0.2,
    div_lambda: float = 1.0,
    video_negative: VideoNegative = "hardest",
    nce_video_to_text: NCEVideoToText = "release",
    hard_negative_topk: int | None = None,
    generator: torch.Generator | None = None,
    reduction: Reduction = "mean",
    validate_args: bool | None = None,
) -> torch.Tensor:
    r"""The basic PRVR objective L_base (Holmes Eq. 22 + Eq. 23).

    .. math::

        L_{base} = L^{trip}_f + L^{trip}_c + \lambda_f L^{nce}_f + \lambda_c L^{nce}_c + \lambda_{div} L_{div}.

    Triplet losses use the cosine scores (Holmes Eq. 1); InfoNCE uses the unnormalised logits when given
    (``frame_logits`` / ``clip_logits``, as the release does) and the cosine scores otherwise.

    Parameters
    ----------
    frame_sim, clip_sim : torch.Tensor
        ``[Q, V]`` cosine scores of the frame and clip branch (Holmes Eq. 1).
    query_emb : torch.Tensor
        ``[Q, d]`` query embeddings (for :math:`L_{div}`; the release passes a second, independently
        dropped-out encoding of the queries here).
    query_video : torch.Tensor
        ``LongTensor [Q]`` video index of each query, or ``{0, 1}`` matrix ``[Q, V]``.
    frame_logits, clip_logits : torch.Tensor, optional
        ``[Q, V]`` unnormalised scores for InfoNCE; default to ``frame_sim`` / ``clip_sim``.
    margin : float
        Triplet margin :math:`m > 0` (0.1 TVR, 0.2 ActivityNet/Charades in the release).
    video_negative : {"hardest", "pool"}
        Video→text hard-negative rule once hard negatives are on, see
        :func:`~evidential_prvr.functional.triplet_ranking_loss`.
    nce_video_to_text : {"release", "paper"}
        Video→text InfoNCE form, see :func:`~evidential_prvr.functional.info_nce_loss`.
    div_alpha, div_delta, div_lambda : float
        α, δ and the focal exponent λ of Eq. 23 (the release's ``neg_factor``).
    frame_nce_weight, clip_nce_weight, div_weight : float
        :math:`\lambda_f`, :math:`\lambda_c`, :math:`\lambda_{div}` (>= 0).
    hard_negative_topk : int or None
        Hard-negative pool of the triplet losses (``None``: random negatives).
    generator : torch.Generator, optional
        Random source of the triplet negatives.
    reduction : {"mean", "sum", "none"}
        Applied to every term.
    validate_args : bool, optional
        Check values (finite scores, valid positives); host synchronisations.

    Returns
    -------
    torch.Tensor
        The weighted sum (scalar unless ``reduction="none"``); :func:`base_retrieval_loss_details` returns
        every term.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import base_retrieval_loss
    >>> sim = torch.tensor([[0.9, 0.2], [0.3, 0.8], [0.7, 0.1]])
    >>> base_retrieval_loss(sim, sim, torch.eye(3), torch.tensor([0, 1, 0]), margin=0.2).shape
    torch.Size([])

    References
    ----------
    Holmes (ICML 2026), App. B.1, Eq. 22-23.
    """
    return _base_retrieval_loss(frame_sim, clip_sim, query_emb, query_video, frame_logits=frame_logits,
                                clip_logits=clip_logits, margin=margin, frame_nce_weight=frame_nce_weight,
                                clip_nce_weight=clip_nce_weight, div_weight=div_weight, div_alpha=div_alpha,
                                div_delta=div_delta, div_lambda=div_lambda, video_negative=video_negative,
                                nce_video_to_text=nce_video_to_text, hard_negative_topk=hard_negative_topk,
                                generator=generator, reduction=reduction, validate_args=validate_args,
                                diversity=None).loss


def base_retrieval_loss_details(
    frame_sim: torch.Tensor,
    clip_sim: torch.Tensor,
    query_emb: torch.Tensor,
    query_video: torch.Tensor,
    *,
    frame_logits: torch.Tensor | None = None,
    clip_logits: torch.Tensor | None = None,
    margin: float = 0.2,
    frame_nce_weight: float = 0.04,
    clip_nce_weight: float = 0.02,
    div_weight: float = 0.003,
    div_alpha: float = 32.0,
    div_delta: float = 0.2,
    div_lambda: float = 1.0,
    video_negative: VideoNegative = "hardest",
    nce_video_to_text: NCEVideoToText = "release",
    hard_negative_topk: int | None = None,
    generator: torch.Generator | None = None,
    reduction: Reduction = "mean",
    validate_args: bool | None = None,
) -> BaseRetrievalLossDetails:
    r"""Every term that :func:`base_retrieval_loss` computes, and its ``loss`` (Holmes Eq. 22 + Eq. 23).

    Parameters
    ----------
    frame_sim, clip_sim, query_emb, query_video, frame_logits, clip_logits
        The scores, embeddings and positives, as :func:`base_retrieval_loss` takes them.
    margin, video_negative, nce_video_to_text, div_alpha, div_delta, div_lambda
        The settings of :func:`base_retrieval_loss`.
    frame_nce_weight, clip_nce_weight, div_weight
        Its weights.
    hard_negative_topk, generator
        Its triplet negatives.
    reduction, validate_args
        As in :func:`base_retrieval_loss` (``reduction`` applies to every term).

    Returns
    -------
    BaseRetrievalLossDetails
        Each term unweighted; its ``loss`` is what :func:`base_retrieval_loss` returns.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import base_retrieval_loss_details
    >>> sim = torch.tensor([[0.9, 0.2], [0.3, 0.8], [0.7, 0.1]])
    >>> details = base_retrieval_loss_details(sim, sim, torch.eye(3), torch.tensor([0, 1, 0]))
    >>> details.frame_triplet, details.clip_triplet
    (tensor(0.), tensor(0.))

    References
    ----------
    Holmes (ICML 2026), App. B.1, Eq. 22-23.
    """
    return _base_retrieval_loss(frame_sim, clip_sim, query_emb, query_video, frame_logits=frame_logits,
                                clip_logits=clip_logits, margin=margin, frame_nce_weight=frame_nce_weight,
                                clip_nce_weight=clip_nce_weight, div_weight=div_weight, div_alpha=div_alpha,
                                div_delta=div_delta, div_lambda=div_lambda, video_negative=video_negative,
                                nce_video_to_text=nce_video_to_text, hard_negative_topk=hard_negative_topk,
                                generator=generator, reduction=reduction, validate_args=validate_args,
                                diversity=None)


def _base_retrieval_loss(
    frame_sim: torch.Tensor,
    clip_sim: torch.Tensor,
    query_emb: torch.Tensor,
    query_video: torch.Tensor,
    *,
    frame_logits: torch.Tensor | None,
    clip_logits: torch.Tensor | None,
    margin: float,
    frame_nce_weight: float,
    clip_nce_weight: float,
    div_weight: float,
    div_alpha: float,
    div_delta: float,
    div_lambda: float,
    video_negative: VideoNegative,
    nce_video_to_text: NCEVideoToText,
    hard_negative_topk: int | None,
    generator: torch.Generator | None,
    reduction: Reduction,
    validate_args: bool | None,
    diversity: torch.Tensor | None,
) -> BaseRetrievalLossDetails:
    """L_base (Holmes Eq. 22 + Eq. 23): the one body of :func:`base_retrieval_loss`,
    :func:`base_retrieval_loss_details` and :meth:`BaseRetrievalLoss.details <evidential_prvr.BaseRetrievalLoss.details>`.

    Checks the hyperparameters, the tensors and ``reduction``. ``hard_negative_topk=None`` draws the triplet
    negatives uniformly. ``diversity``, when given, holds the per-query L_div contributions ``[Q]`` computed
    elsewhere (the distributed path computes them on each rank's own queries) and ``query_emb`` is not used.
    """
    check_base_options(margin=margin, hard_negative_topk=hard_negative_topk, video_negative=video_negative,
                       nce_video_to_text=nce_video_to_text, div_alpha=div_alpha, div_delta=div_delta,
                       div_lambda=div_lambda, random_negatives=True)
    check_loss_weights(frame_nce_weight=frame_nce_weight, clip_nce_weight=clip_nce_weight, div_weight=div_weight)
    validate = should_validate(validate_args)
    own = _check_sim(frame_sim, query_video, "frame_sim", validate)
    check_tensor(clip_sim, "clip_sim", ndim=2, floating=True)
    check_score_layout(clip_sim, "clip_sim", query_video)
    # the pair's shapes before clip_sim's positives: fewer columns would otherwise be blamed on query_video
    check_score_pair_shapes(frame_sim, clip_sim, "frame_sim", "clip_sim")
    _check_sim(clip_sim, query_video, "clip_sim", validate)
    frame_logits = frame_sim if frame_logits is None else frame_logits
    clip_logits = clip_sim if clip_logits is None else clip_logits
    for name, logits in (("frame_logits", frame_logits), ("clip_logits", clip_logits)):
        check_tensor(logits, name, ndim=2, floating=True)
        check_same_shape(frame_sim, logits, "frame_sim", name)
        check_same_device(frame_sim=frame_sim, **{name: logits})
        if validate:
            check_finite(logits, name)
    if diversity is None:
        check_tensor(query_emb, "query_emb", ndim=2, floating=True)
        if query_emb.shape[0] != frame_sim.shape[0]:
            raise ValueError(f"query_emb must have {frame_sim.shape[0]} rows (one per query of frame_sim), "
                             f"got shape {tuple(query_emb.shape)}")
        check_same_device(frame_sim=frame_sim, query_emb=query_emb)
        if validate:
            check_finite(query_emb, "query_emb")
    elif diversity.shape != frame_sim.shape[:1]:
        raise ValueError(f"diversity must have shape [{frame_sim.shape[0]}] (one term per query of frame_sim), "
                         f"got {tuple(diversity.shape)}")
    check_choice(reduction, "reduction", REDUCTIONS)
    if nce_video_to_text == "paper" and query_video.dim() != 1:
        raise ValueError("nce_video_to_text='paper' needs one positive per query: query_video must be indices [Q]")

    if diversity is None:  # Eq. 23 over the queries that share a video
        same_video = (own.to(torch.float32) @ own.to(torch.float32).t()) > 0
        diversity = _diversity_rows(query_emb, same_video, div_alpha, div_delta, div_lambda)
    rows = {
        "frame_triplet": _triplet_rows(frame_sim, own, margin, hard_negative_topk, generator, video_negative),
        "clip_triplet": _triplet_rows(clip_sim, own, margin, hard_negative_topk, generator, video_negative),
        "frame_nce": _info_nce_rows(frame_logits, own, nce_video_to_text),
        "clip_nce": _info_nce_rows(clip_logits, own, nce_video_to_text),
        "diversity": diversity,
    }
    total = (rows["frame_triplet"] + rows["clip_triplet"] + frame_nce_weight * rows["frame_nce"]  # Eq. 22
             + clip_nce_weight * rows["clip_nce"] + div_weight * rows["diversity"])
    return BaseRetrievalLossDetails(reduce_rows(total, reduction),
                                    **{name: reduce_rows(r, reduction) for name, r in rows.items()})
