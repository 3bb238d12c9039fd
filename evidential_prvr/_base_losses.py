r"""``nn.Module`` wrappers of the basic retrieval losses and the combined objective L_base.

L_base is what a MS-SL / GMMFormer-style PRVR model trains with before any Holmes term is added
(Holmes App. B.1, Eq. 22 plus the query-diversity loss of Eq. 23):

.. math::

    L_{base} = L^{trip}_f + L^{trip}_c + \lambda_f L^{nce}_f + \lambda_c L^{nce}_c + \lambda_{div} L_{div}.
"""

from __future__ import annotations

import torch
from torch import nn

from evidential_prvr._checks import check_choice, check_in_range, check_positive, check_positive_int
from evidential_prvr.functional._dirichlet_loss import REDUCTIONS
from evidential_prvr.functional._retrieval_losses import (
    NCE_VIDEO_TO_TEXT,
    VIDEO_NEGATIVES,
    BaseRetrievalLossDetails,
    base_retrieval_loss,
    check_base_loss_settings,
    info_nce_loss,
    query_diversity_loss,
    triplet_ranking_loss,
)
from evidential_prvr.presets import apply_overrides, holmes_settings

__all__ = ["TripletRankingLoss", "InfoNCELoss", "QueryDiversityLoss", "BaseRetrievalLoss"]


def _base_settings(preset: str, dataset: str | None, owner: str):
    return holmes_settings(preset, dataset).require("base", f"{owner}.from_preset({preset!r})")


class TripletRankingLoss(nn.Module):
    """Bidirectional in-batch triplet ranking loss (Holmes App. B.1); ``forward`` is one call of
    :func:`~evidential_prvr.functional.triplet_ranking_loss`.

    Hard negatives are switched on and off during training with the attribute ``use_hard_negatives`` (the
    release turns them on at epoch 20); ``hard_negative_topk`` is the pool size used when they are on.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr import TripletRankingLoss
    >>> TripletRankingLoss(margin=0.2)(torch.tensor([[0.9, 0.2], [0.3, 0.8]]), torch.tensor([0, 1]))
    tensor(0.)

    References
    ----------
    Holmes (ICML 2026), App. B.1; Faghri et al., "VSE++", BMVC 2018.
    """

    def __init__(
        self,
        margin: float = 0.2,
        hard_negative_topk: int = 20,
        use_hard_negatives: bool = False,
        video_negative: str = "hardest",
        reduction: str = "mean",
        validate_args: bool | None = None,
    ) -> None:
        super().__init__()
        check_positive(margin, "margin")
        check_positive_int(hard_negative_topk, "hard_negative_topk")
        check_choice(video_negative, "video_negative", VIDEO_NEGATIVES)
        check_choice(reduction, "reduction", REDUCTIONS)
        self.margin = float(margin)
        self.hard_negative_topk = hard_negative_topk
        self.use_hard_negatives = bool(use_hard_negatives)
        self.video_negative = video_negative
        self.reduction = reduction
        self.validate_args = validate_args

    @classmethod
    def from_preset(cls, preset: str, dataset: str | None = None, **overrides: object) -> TripletRankingLoss:
        """Margin, hard-negative pool and video negative of a preset (a ``dataset`` is needed)."""
        base = _base_settings(preset, dataset, cls.__name__)
        kwargs = dict(margin=base.margin, hard_negative_topk=base.hard_negative_topk, use_hard_negatives=False,
                      video_negative=base.video_negative, reduction="mean", validate_args=None)
        return cls(**apply_overrides(kwargs, overrides, cls.__name__))

    def forward(
        self, sim: torch.Tensor, query_video: torch.Tensor, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Loss of a ``[Q, V]`` score matrix and its positives ``query_video`` (``[Q]`` or ``[Q, V]``)."""
        return triplet_ranking_loss(
            sim, query_video, self.margin, self.hard_negative_topk if self.use_hard_negatives else None, generator,
            video_negative=self.video_negative, reduction=self.reduction, validate_args=self.validate_args,
        )

    def extra_repr(self) -> str:
        return (
            f"margin={self.margin}, hard_negative_topk={self.hard_negative_topk}, "
            f"use_hard_negatives={self.use_hard_negatives}, video_negative={self.video_negative!r}"
        )


class InfoNCELoss(nn.Module):
    """Bidirectional InfoNCE over unnormalised scores (Holmes App. B.1); ``forward`` is one call of
    :func:`~evidential_prvr.functional.info_nce_loss`.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr import InfoNCELoss
    >>> InfoNCELoss()(torch.zeros(2, 2), torch.tensor([0, 1]))
    tensor(1.3863)

    References
    ----------
    Holmes (ICML 2026), App. B.1; van den Oord et al., "Representation Learning with Contrastive
    Predictive Coding", 2018.
    """

    def __init__(self, video_to_text: str = "release", reduction: str = "mean",
                 validate_args: bool | None = None) -> None:
        super().__init__()
        check_choice(video_to_text, "video_to_text", NCE_VIDEO_TO_TEXT)
        check_choice(reduction, "reduction", REDUCTIONS)
        self.video_to_text = video_to_text
        self.reduction = reduction
        self.validate_args = validate_args

    @classmethod
    def from_preset(cls, preset: str, dataset: str | None = None, **overrides: object) -> InfoNCELoss:
        """The video→text form of a preset (a ``dataset`` is needed)."""
        base = _base_settings(preset, dataset, cls.__name__)
        kwargs = dict(video_to_text=base.nce_video_to_text, reduction="mean", validate_args=None)
        return cls(**apply_overrides(kwargs, overrides, cls.__name__))

    def forward(self, sim: torch.Tensor, query_video: torch.Tensor) -> torch.Tensor:
        """Loss of a ``[Q, V]`` logit matrix and its positives ``query_video`` (``[Q]`` or ``[Q, V]``)."""
        return info_nce_loss(sim, query_video, video_to_text=self.video_to_text, reduction=self.reduction,
                             validate_args=self.validate_args)

    def extra_repr(self) -> str:
        return f"video_to_text={self.video_to_text!r}"


class QueryDiversityLoss(nn.Module):
    """Query-diversity loss over the queries of the same video (Holmes Eq. 23); ``forward`` is one call of
    :func:`~evidential_prvr.functional.query_diversity_loss`.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr import QueryDiversityLoss
    >>> loss = QueryDiversityLoss.from_preset("release", dataset="tvr")
    >>> float(loss(torch.eye(3), torch.tensor([0, 0, 1]))) > 0
    True

    References
    ----------
    Holmes (ICML 2026), Eq. 23; Wang et al., "GMMFormer", AAAI 2024.
    """

    def __init__(self, alpha: float = 32.0, delta: float = 0.2, lam: float = 1.0, reduction: str = "mean",
                 validate_args: bool | None = None) -> None:
        super().__init__()
        check_positive(alpha, "alpha")
        check_in_range(delta, "delta", -2.0, 2.0)
        check_in_range(lam, "lam", 0.0, 64.0)
        check_choice(reduction, "reduction", REDUCTIONS)
        self.alpha, self.delta, self.lam = float(alpha), float(delta), float(lam)
        self.reduction = reduction
        self.validate_args = validate_args

    @classmethod
    def from_preset(cls, preset: str, dataset: str | None = None, **overrides: object) -> QueryDiversityLoss:
        """α, δ and λ of a preset (the release's ``neg_factor``; a ``dataset`` is needed)."""
        base = _base_settings(preset, dataset, cls.__name__)
        kwargs = dict(alpha=base.div_alpha, delta=base.div_delta, lam=base.div_lambda, reduction="mean",
                      validate_args=None)
        return cls(**apply_overrides(kwargs, overrides, cls.__name__))

    def forward(self, query_emb: torch.Tensor, query_video: torch.Tensor) -> torch.Tensor:
        """Loss of query embeddings ``[Q, d]`` grouped by ``query_video`` (``[Q]`` or ``[Q, V]``)."""
        return query_diversity_loss(query_emb, query_video, self.alpha, self.delta, self.lam,
                                    reduction=self.reduction, validate_args=self.validate_args)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, delta={self.delta}, lam={self.lam}"


class BaseRetrievalLoss(nn.Module):
    r"""The basic PRVR objective L_base (Holmes Eq. 22 + Eq. 23); ``forward`` is one call of
    :func:`~evidential_prvr.functional.base_retrieval_loss`.

    Parameters
    ----------
    margin : float
        Triplet margin (0.1 TVR, 0.2 ActivityNet/Charades in the release).
    frame_nce_weight, clip_nce_weight : float
        :math:`\lambda_f`, :math:`\lambda_c`.
    div_weight : float
        :math:`\lambda_{div}`.
    div_alpha, div_delta, div_lambda : float
        :math:`\alpha`, :math:`\delta`, :math:`\lambda` of Eq. 23.
    hard_negative_topk : int
        Hard-negative pool size, used once ``use_hard_negatives`` is True.
    use_hard_negatives : bool
        Start with hard negatives on (the release switches them on at epoch 20).
    video_negative : {"hardest", "pool"}
        Video→text hard-negative rule.
    nce_video_to_text : {"release", "paper"}
        Video→text InfoNCE form.
    reduction : {"mean", "sum", "none"}
        Applied to every term.
    validate_args : bool, optional
        Value checks of the inputs (host synchronisations).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr import BaseRetrievalLoss
    >>> loss_fn = BaseRetrievalLoss.from_preset("release", dataset="tvr")
    >>> sim = torch.tensor([[0.9, 0.2], [0.3, 0.8], [0.7, 0.1]])
    >>> loss = loss_fn(sim, sim, torch.randn(3, 8), torch.tensor([0, 1, 0]))

    References
    ----------
    Holmes (ICML 2026), App. B.1, Eq. 22-23.
    """

    def __init__(
        self,
        margin: float = 0.2,
        frame_nce_weight: float = 0.04,
        clip_nce_weight: float = 0.02,
        div_weight: float = 0.003,
        div_alpha: float = 32.0,
        div_delta: float = 0.2,
        div_lambda: float = 1.0,
        hard_negative_topk: int = 20,
        use_hard_negatives: bool = False,
        video_negative: str = "hardest",
        nce_video_to_text: str = "release",
        reduction: str = "mean",
        validate_args: bool | None = None,
    ) -> None:
        super().__init__()
        check_base_loss_settings(margin, frame_nce_weight, clip_nce_weight, div_weight, div_alpha, div_delta,
                                 div_lambda, hard_negative_topk, video_negative, nce_video_to_text, reduction)
        self.margin = float(margin)
        self.frame_nce_weight = float(frame_nce_weight)
        self.clip_nce_weight = float(clip_nce_weight)
        self.div_weight = float(div_weight)
        self.div_alpha = float(div_alpha)
        self.div_delta = float(div_delta)
        self.div_lambda = float(div_lambda)
        self.hard_negative_topk = hard_negative_topk
        self.use_hard_negatives = bool(use_hard_negatives)
        self.video_negative = video_negative
        self.nce_video_to_text = nce_video_to_text
        self.reduction = reduction
        self.validate_args = validate_args

    @classmethod
    def from_preset(cls, preset: str, dataset: str | None = None, **overrides: object) -> BaseRetrievalLoss:
        """Margin, InfoNCE and L_div weights and settings of a preset (a ``dataset`` is needed: the paper
        takes them from its code, App. A.1)."""
        settings = holmes_settings(preset, dataset)
        owner = f"{cls.__name__}.from_preset({preset!r})"
        base, weights = settings.require("base", owner), settings.require("weights", owner)
        kwargs = dict(margin=base.margin, frame_nce_weight=weights.nce_frame, clip_nce_weight=weights.nce_clip,
                      div_weight=weights.div, div_alpha=base.div_alpha, div_delta=base.div_delta,
                      div_lambda=base.div_lambda, hard_negative_topk=base.hard_negative_topk,
                      use_hard_negatives=False, video_negative=base.video_negative,
                      nce_video_to_text=base.nce_video_to_text, reduction="mean", validate_args=None)
        return cls(**apply_overrides(kwargs, overrides, cls.__name__))

    def settings(self) -> dict[str, object]:
        """The keyword arguments of :func:`~evidential_prvr.functional.base_retrieval_loss` this module passes."""
        return dict(margin=self.margin, frame_nce_weight=self.frame_nce_weight, clip_nce_weight=self.clip_nce_weight,
                    div_weight=self.div_weight, div_alpha=self.div_alpha, div_delta=self.div_delta,
                    div_lambda=self.div_lambda,
                    hard_negative_topk=self.hard_negative_topk if self.use_hard_negatives else None,
                    video_negative=self.video_negative, nce_video_to_text=self.nce_video_to_text,
                    reduction=self.reduction)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.settings().items())

    def forward(
        self,
        frame_sim: torch.Tensor,
        clip_sim: torch.Tensor,
        query_emb: torch.Tensor,
        query_video: torch.Tensor,
        *,
        frame_logits: torch.Tensor | None = None,
        clip_logits: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        return_details: bool = False,
    ) -> torch.Tensor | BaseRetrievalLossDetails:
        """L_base of the frame and clip cosine scores ``[Q, V]``, the query embeddings ``[Q, d]`` and the
        positives; InfoNCE uses ``frame_logits`` / ``clip_logits`` when given. Details on request."""
        return base_retrieval_loss(frame_sim, clip_sim, query_emb, query_video, frame_logits=frame_logits,
                                   clip_logits=clip_logits, **self.settings(), generator=generator,
                                   return_details=return_details, validate_args=self.validate_args)
