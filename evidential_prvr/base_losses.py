r"""``nn.Module`` wrappers of the basic retrieval losses and the combined objective ``L_base``.

``L_base`` is what a MS-SL / GMMFormer-style PRVR model trains with before any Holmes term is added
(Holmes App. B.1, Eq. 22 plus the query-diversity loss of Eq. 23):

.. math::

    L_{base} = L^{trip}_c + L^{trip}_f + \lambda_c L^{nce}_c + \lambda_f L^{nce}_f + \lambda_{div} L_{div}.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from evidential_prvr._checks import check_choice, check_in_range, check_positive, check_positive_int
from evidential_prvr.functional.retrieval_losses import (
    NCEVideoToText,
    VideoNegative,
    info_nce_loss,
    query_diversity_loss,
    triplet_ranking_loss,
)

__all__ = [
    "TripletRankingLoss",
    "InfoNCELoss",
    "QueryDiversityLoss",
    "BaseRetrievalLoss",
    "BaseRetrievalLossOutput",
    "BASE_LOSS_PRESETS",
]


class TripletRankingLoss(nn.Module):
    """Bidirectional in-batch triplet ranking loss (Holmes App. B.1); see
    :func:`evidential_prvr.functional.triplet_ranking_loss`.

    Hard negatives are switched on and off during training with :attr:`use_hard_negatives` (the release
    turns them on at epoch 20); :attr:`hard_negative_topk` is the pool size used when they are on.
    """

    def __init__(
        self,
        margin: float = 0.2,
        hard_negative_topk: int = 20,
        use_hard_negatives: bool = False,
        video_negative: VideoNegative = "hardest",
    ) -> None:
        super().__init__()
        check_positive(margin, "margin")
        check_positive_int(hard_negative_topk, "hard_negative_topk")
        check_choice(video_negative, "video_negative", ("hardest", "pool"))
        self.margin = float(margin)
        self.hard_negative_topk = hard_negative_topk
        self.use_hard_negatives = bool(use_hard_negatives)
        self.video_negative: VideoNegative = video_negative

    def forward(
        self, scores: torch.Tensor, query_video: torch.Tensor, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Loss of a ``[Q, V]`` score matrix given each query's video index ``query_video [Q]``."""
        return triplet_ranking_loss(
            scores,
            query_video,
            margin=self.margin,
            hard_negative_topk=self.hard_negative_topk if self.use_hard_negatives else None,
            generator=generator,
            video_negative=self.video_negative,
        )

    def extra_repr(self) -> str:
        return (
            f"margin={self.margin}, hard_negative_topk={self.hard_negative_topk}, "
            f"use_hard_negatives={self.use_hard_negatives}, video_negative={self.video_negative!r}"
        )


class InfoNCELoss(nn.Module):
    """Bidirectional InfoNCE over unnormalised scores (Holmes App. B.1); see
    :func:`evidential_prvr.functional.info_nce_loss`."""

    def __init__(self, video_to_text: NCEVideoToText = "release") -> None:
        super().__init__()
        check_choice(video_to_text, "video_to_text", ("release", "paper"))
        self.video_to_text: NCEVideoToText = video_to_text

    def forward(self, scores: torch.Tensor, query_video: torch.Tensor) -> torch.Tensor:
        """Loss of a ``[Q, V]`` logit matrix given each query's video index ``query_video [Q]``."""
        return info_nce_loss(scores, query_video, video_to_text=self.video_to_text)

    def extra_repr(self) -> str:
        return f"video_to_text={self.video_to_text!r}"


class QueryDiversityLoss(nn.Module):
    """Query-diversity loss over the queries of the same video (Holmes Eq. 23); see
    :func:`evidential_prvr.functional.query_diversity_loss`."""

    def __init__(self, alpha: float = 32.0, delta: float = 0.2, lam: float = 1.0) -> None:
        super().__init__()
        check_positive(alpha, "alpha")
        check_in_range(delta, "delta", -2.0, 2.0)
        check_in_range(lam, "lam", 0.0, 64.0)
        self.alpha, self.delta, self.lam = float(alpha), float(delta), float(lam)

    def forward(self, query_emb: torch.Tensor, query_video: torch.Tensor) -> torch.Tensor:
        """Loss of query embeddings ``[Q, d]`` grouped by ``query_video [Q]``."""
        return query_diversity_loss(query_emb, query_video, alpha=self.alpha, delta=self.delta, lam=self.lam)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, delta={self.delta}, lam={self.lam}"


@dataclass
class BaseRetrievalLossOutput:
    """The terms of ``L_base`` (each unweighted) and their weighted sum ``total``.

    Attributes
    ----------
    total : Tensor
        :math:`L^{trip}_c + L^{trip}_f + \\lambda_c L^{nce}_c + \\lambda_f L^{nce}_f + \\lambda_{div} L_{div}`.
    clip_triplet, frame_triplet : Tensor
        Triplet ranking loss of the clip and frame branch.
    clip_nce, frame_nce : Tensor
        InfoNCE of the clip and frame branch (before weighting).
    diversity : Tensor
        Query-diversity loss (before weighting).
    """

    total: torch.Tensor
    clip_triplet: torch.Tensor
    frame_triplet: torch.Tensor
    clip_nce: torch.Tensor
    frame_nce: torch.Tensor
    diversity: torch.Tensor


#: Release settings per data set: InfoNCE weights, L_div weight, triplet margin and L_div margin δ.
BASE_LOSS_PRESETS: dict[str, dict[str, float]] = {
    "tvr": {"clip_nce_weight": 0.05, "frame_nce_weight": 0.04, "div_weight": 8e-5, "margin": 0.1, "div_delta": 0.15},
    "activitynet": {
        "clip_nce_weight": 0.02,
        "frame_nce_weight": 0.04,
        "div_weight": 0.003,
        "margin": 0.2,
        "div_delta": 0.2,
    },
    "charades": {
        "clip_nce_weight": 0.02,
        "frame_nce_weight": 0.04,
        "div_weight": 0.003,
        "margin": 0.2,
        "div_delta": 0.2,
    },
}


class BaseRetrievalLoss(nn.Module):
    r"""The basic PRVR objective ``L_base`` (Holmes Eq. 22 + Eq. 23).

    .. math::

        L_{base} = L^{trip}_c + L^{trip}_f + \lambda_c L^{nce}_c + \lambda_f L^{nce}_f + \lambda_{div} L_{div}.

    Triplet losses use the cosine scores (Holmes Eq. 1); InfoNCE uses the unnormalised logits when given
    (``clip_logits`` / ``frame_logits``, as the release does) and the cosine scores otherwise.

    Parameters
    ----------
    margin : float
        Triplet margin (0.1 TVR, 0.2 ActivityNet/Charades in the release).
    clip_nce_weight, frame_nce_weight : float
        :math:`\lambda_c`, :math:`\lambda_f`.
    div_weight : float
        :math:`\lambda_{div}`.
    div_alpha, div_delta, div_lambda : float
        :math:`\alpha`, :math:`\delta`, :math:`\lambda` of Eq. 23.
    hard_negative_topk : int
        Hard-negative pool size, used once :attr:`use_hard_negatives` is True.
    use_hard_negatives : bool
        Start with hard negatives on (the release switches them on at epoch 20).
    video_negative : {"hardest", "pool"}
        Video→text hard-negative rule (see :func:`~evidential_prvr.functional.triplet_ranking_loss`).
    nce_video_to_text : {"release", "paper"}
        Video→text InfoNCE form (see :func:`~evidential_prvr.functional.info_nce_loss`).
    """

    def __init__(
        self,
        margin: float = 0.2,
        clip_nce_weight: float = 0.02,
        frame_nce_weight: float = 0.04,
        div_weight: float = 0.003,
        div_alpha: float = 32.0,
        div_delta: float = 0.2,
        div_lambda: float = 1.0,
        hard_negative_topk: int = 20,
        use_hard_negatives: bool = False,
        video_negative: VideoNegative = "hardest",
        nce_video_to_text: NCEVideoToText = "release",
    ) -> None:
        super().__init__()
        for name, value in (
            ("clip_nce_weight", clip_nce_weight),
            ("frame_nce_weight", frame_nce_weight),
            ("div_weight", div_weight),
        ):
            check_in_range(value, name, 0.0, float("inf"), high_inclusive=False)
        self.triplet = TripletRankingLoss(margin, hard_negative_topk, use_hard_negatives, video_negative)
        self.nce = InfoNCELoss(nce_video_to_text)
        self.diversity = QueryDiversityLoss(div_alpha, div_delta, div_lambda)
        self.clip_nce_weight = float(clip_nce_weight)
        self.frame_nce_weight = float(frame_nce_weight)
        self.div_weight = float(div_weight)

    @classmethod
    def from_preset(cls, name: str, **overrides: object) -> BaseRetrievalLoss:
        """The release settings of ``"tvr"``, ``"activitynet"`` or ``"charades"`` (keyword overrides win)."""
        check_choice(name, "name", tuple(BASE_LOSS_PRESETS))
        kwargs: dict[str, object] = dict(BASE_LOSS_PRESETS[name])
        kwargs.update(overrides)
        return cls(**kwargs)  # type: ignore[arg-type]

    @property
    def use_hard_negatives(self) -> bool:
        """Whether the triplet losses currently draw hard negatives."""
        return self.triplet.use_hard_negatives

    @use_hard_negatives.setter
    def use_hard_negatives(self, enabled: bool) -> None:
        self.triplet.use_hard_negatives = bool(enabled)

    def forward(
        self,
        clip_scores: torch.Tensor,
        frame_scores: torch.Tensor,
        query_emb: torch.Tensor,
        query_video: torch.Tensor,
        *,
        clip_logits: torch.Tensor | None = None,
        frame_logits: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> BaseRetrievalLossOutput:
        """Compute ``L_base``.

        Parameters
        ----------
        clip_scores, frame_scores : Tensor, shape [Q, V]
            Cosine scores of the clip and frame branch (Holmes Eq. 1).
        query_emb : Tensor, shape [Q, d]
            Query embeddings (for :math:`L_{div}`).
        query_video : Tensor, shape [Q], integer
            Video index of each query.
        clip_logits, frame_logits : Tensor, shape [Q, V], optional
            Unnormalised scores for InfoNCE; default to ``clip_scores`` / ``frame_scores``.
        generator : torch.Generator, optional
            Random source of the triplet negatives.
        """
        clip_logits = clip_scores if clip_logits is None else clip_logits
        frame_logits = frame_scores if frame_logits is None else frame_logits
        clip_triplet = self.triplet(clip_scores, query_video, generator)
        frame_triplet = self.triplet(frame_scores, query_video, generator)
        clip_nce = self.nce(clip_logits, query_video)
        frame_nce = self.nce(frame_logits, query_video)
        diversity = self.diversity(query_emb, query_video)
        total = (
            clip_triplet
            + frame_triplet
            + self.clip_nce_weight * clip_nce
            + self.frame_nce_weight * frame_nce
            + self.div_weight * diversity
        )
        return BaseRetrievalLossOutput(total, clip_triplet, frame_triplet, clip_nce, frame_nce, diversity)
