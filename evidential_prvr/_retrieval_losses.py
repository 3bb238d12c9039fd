r"""``nn.Module`` wrappers of the basic retrieval losses and the combined objective L_base.

L_base is what a MS-SL / GMMFormer-style PRVR model trains with before any Holmes term is added
(Holmes App. B.1, Eq. 22 plus the query-diversity loss of Eq. 23):

.. math::

    L_{base} = L^{trip}_f + L^{trip}_c + \lambda_f L^{nce}_f + \lambda_c L^{nce}_c + \lambda_{div} L_{div}.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from evidential_prvr._checks import check_choice
from evidential_prvr._loss_gathers import batch_rows, lift_rows, shared_gathers, warn_per_rank
from evidential_prvr._module_bases import PresetModule
from evidential_prvr._settings import (
    BaseLossSettings,
    check_base_options,
    check_diversity_options,
    check_loss_weights,
    check_triplet_options,
)
from evidential_prvr.choices import (
    NCE_VIDEO_TO_TEXT,
    REDUCTIONS,
    DatasetName,
    NCEVideoToText,
    Preset,
    Reduction,
    VideoNegative,
)
from evidential_prvr.distributed import is_distributed
from evidential_prvr.functional._dirichlet_loss import reduce_rows
from evidential_prvr.functional._retrieval_losses import (
    BaseRetrievalLossDetails,
    _base_retrieval_loss,
    info_nce_loss,
    query_diversity_loss,
    triplet_ranking_loss,
)
from evidential_prvr.presets import module_settings


def _base_section(cls: type, preset: Preset, dataset: DatasetName | None) -> BaseLossSettings:
    """The preset's L_base settings (a paper preset has none of its own: a ``dataset`` is needed)."""
    section: BaseLossSettings = module_settings(preset, dataset).require("base", f"{cls.__name__}.from_preset({preset!r})")
    return section


class TripletRankingLoss(PresetModule):
    """Bidirectional in-batch triplet ranking loss (Holmes App. B.1); ``forward`` is one call of
    :func:`~evidential_prvr.functional.triplet_ranking_loss`.

    Hard negatives are switched on and off during training with the attribute ``use_hard_negatives`` (the
    release turns them on at epoch 20); ``hard_negative_topk`` is the pool size used when they are on.
    :meth:`from_preset` takes the margin, the pool size and the video negative of the preset's L_base.

    Parameters
    ----------
    margin : float
        Margin of the hinge (>= 0).
    hard_negative_topk : int
        Pool of the hardest negatives the text→video negative is drawn from while ``use_hard_negatives``.
    use_hard_negatives : bool
        Start with hard negatives on.
    video_negative : {"hardest", "pool"}
        Video→text negative with hard negatives on: the hardest (release) or one drawn from the pool.
    reduction : {"mean", "sum", "none"}
        Over the queries.
    validate_args : bool, optional
        Value checks (host synchronisations); ``None`` follows :func:`evidential_prvr.set_default_validate_args`.
    distributed : bool
        Multi-process training (:doc:`/guide/distributed`): each rank passes its rows ``[Q_r, V_global]``;
        the negatives are those of the global batch, drawn as one process draws them.

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
        video_negative: VideoNegative = "hardest",
        reduction: Reduction = "mean",
        validate_args: bool | None = None,
        distributed: bool = False,
    ) -> None:
        super().__init__()
        check_triplet_options(margin, hard_negative_topk, video_negative)
        check_choice(reduction, "reduction", REDUCTIONS)
        self.margin = float(margin)
        self.hard_negative_topk = hard_negative_topk
        self.use_hard_negatives = bool(use_hard_negatives)
        self.video_negative = video_negative
        self.reduction = reduction
        self.validate_args = validate_args
        self.distributed = bool(distributed)

    @classmethod
    def _preset_arguments(cls, preset: Preset, dataset: DatasetName | None) -> dict[str, Any]:
        base = _base_section(cls, preset, dataset)
        return {"margin": base.margin, "hard_negative_topk": base.hard_negative_topk,
                "video_negative": base.video_negative}

    def forward(
        self, sim: torch.Tensor, query_video: torch.Tensor, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Loss of a ``[Q, V]`` score matrix and its positives ``query_video`` (``[Q]`` or ``[Q, V]``); with
        ``distributed=True`` this rank's rows ``[Q_r, V_global]`` (the negatives of the global batch, drawn
        as the single process draws them)."""
        with shared_gathers():
            sim, query_video = batch_rows(self.distributed, type(self).__name__, sim, query_video)
            return triplet_ranking_loss(
                sim, query_video, self.margin, self.hard_negative_topk if self.use_hard_negatives else None,
                generator, video_negative=self.video_negative, reduction=self.reduction,
                validate_args=self.validate_args)

    def extra_repr(self) -> str:
        return (
            f"margin={self.margin}, hard_negative_topk={self.hard_negative_topk}, "
            f"use_hard_negatives={self.use_hard_negatives}, video_negative={self.video_negative!r}"
        )


class InfoNCELoss(PresetModule):
    """Bidirectional InfoNCE over unnormalised scores (Holmes App. B.1); ``forward`` is one call of
    :func:`~evidential_prvr.functional.info_nce_loss`. :meth:`from_preset` takes the preset's video→text form.

    Parameters
    ----------
    video_to_text : {"release", "paper"}
        Video→text term: the release's multiple-positive NCE per video, or App. B.1 as written (one term
        per positive pair); see :func:`~evidential_prvr.functional.info_nce_loss`.
    reduction : {"mean", "sum", "none"}
        Over the queries.
    validate_args : bool, optional
        Value checks (host synchronisations); ``None`` follows :func:`evidential_prvr.set_default_validate_args`.
    distributed : bool
        Multi-process training (:doc:`/guide/distributed`): each rank passes its rows ``[Q_r, V_global]``.

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

    def __init__(self, video_to_text: NCEVideoToText = "release", reduction: Reduction = "mean",
                 validate_args: bool | None = None, distributed: bool = False) -> None:
        super().__init__()
        check_choice(video_to_text, "video_to_text", NCE_VIDEO_TO_TEXT)
        check_choice(reduction, "reduction", REDUCTIONS)
        self.video_to_text = video_to_text
        self.reduction = reduction
        self.validate_args = validate_args
        self.distributed = bool(distributed)

    @classmethod
    def _preset_arguments(cls, preset: Preset, dataset: DatasetName | None) -> dict[str, Any]:
        return {"video_to_text": _base_section(cls, preset, dataset).nce_video_to_text}

    def forward(self, sim: torch.Tensor, query_video: torch.Tensor) -> torch.Tensor:
        """Loss of a ``[Q, V]`` logit matrix and its positives ``query_video`` (``[Q]`` or ``[Q, V]``); with
        ``distributed=True`` this rank's rows ``[Q_r, V_global]``."""
        with shared_gathers():
            sim, query_video = batch_rows(self.distributed, type(self).__name__, sim, query_video)
            return info_nce_loss(sim, query_video, video_to_text=self.video_to_text, reduction=self.reduction,
                                 validate_args=self.validate_args)

    def extra_repr(self) -> str:
        return f"video_to_text={self.video_to_text!r}"


class QueryDiversityLoss(PresetModule):
    """Query-diversity loss over the queries of the same video (Holmes Eq. 23); ``forward`` is one call of
    :func:`~evidential_prvr.functional.query_diversity_loss`. :meth:`from_preset` takes α, δ and λ of the
    preset's L_base (the release's ``neg_factor``).

    Parameters
    ----------
    alpha, delta, lam : float
        Scale :math:`\\alpha > 0`, margin :math:`\\delta` and focal exponent :math:`\\lambda \\ge 0` of Eq. 23.
    reduction : {"mean", "sum", "none"}
        Over the queries.
    validate_args : bool, optional
        Value checks (host synchronisations); ``None`` follows :func:`evidential_prvr.set_default_validate_args`.
    distributed : bool
        Multi-process training (:doc:`/guide/distributed`): each rank passes its own queries (a video's
        captions on one rank); the terms stay local and the reduction is over the global batch.

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

    def __init__(self, alpha: float = 32.0, delta: float = 0.2, lam: float = 1.0, reduction: Reduction = "mean",
                 validate_args: bool | None = None, distributed: bool = False) -> None:
        super().__init__()
        check_diversity_options(alpha, delta, lam)
        check_choice(reduction, "reduction", REDUCTIONS)
        self.alpha, self.delta, self.lam = float(alpha), float(delta), float(lam)
        self.reduction = reduction
        self.validate_args = validate_args
        self.distributed = bool(distributed)

    @classmethod
    def _preset_arguments(cls, preset: Preset, dataset: DatasetName | None) -> dict[str, Any]:
        base = _base_section(cls, preset, dataset)
        return {"alpha": base.div_alpha, "delta": base.div_delta, "lam": base.div_lambda}

    def forward(self, query_emb: torch.Tensor, query_video: torch.Tensor) -> torch.Tensor:
        """Loss of query embeddings ``[Q, d]`` grouped by ``query_video`` (``[Q]`` or ``[Q, V]``). With
        ``distributed=True`` each rank passes its own queries (a video's captions on one rank): the terms
        stay local and the reduction is over the global batch."""
        if not (self.distributed and is_distributed()):
            warn_per_rank(type(self).__name__)
            return query_diversity_loss(query_emb, query_video, self.alpha, self.delta, self.lam,
                                        reduction=self.reduction, validate_args=self.validate_args)
        rows = query_diversity_loss(query_emb, query_video, self.alpha, self.delta, self.lam, reduction="none",
                                    validate_args=self.validate_args)
        with shared_gathers():
            return reduce_rows(lift_rows(rows, "queries"), self.reduction)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, delta={self.delta}, lam={self.lam}"


class BaseRetrievalLoss(PresetModule):
    r"""The basic PRVR objective L_base (Holmes Eq. 22 + Eq. 23); ``forward`` computes what
    :func:`~evidential_prvr.functional.base_retrieval_loss` computes.

    The hyperparameters are keyword-only plain attributes, checked here (a value assigned later is checked when
    the module next runs). :meth:`details` calls the body of
    :func:`~evidential_prvr.functional.base_retrieval_loss_details` with them (with ``distributed=True``, L_div on
    this rank's queries); ``forward`` returns its ``loss``. :meth:`from_preset` takes the preset's ``base`` section
    and its L_base weights.

    Parameters
    ----------
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
    hard_negative_topk : int
        Hard-negative pool size, used once ``use_hard_negatives`` is True.
    use_hard_negatives : bool
        Start with hard negatives on (the release switches them on at epoch 20).
    reduction : {"mean", "sum", "none"}
        Applied to every term.
    validate_args : bool, optional
        Value checks (host synchronisations); ``None`` follows :func:`evidential_prvr.set_default_validate_args`.
    distributed : bool
        Multi-process training (:doc:`/guide/distributed`): each rank passes its queries' scores against
        every video of the global batch ``[Q_r, V_global]`` and global video indices; the triplet and
        InfoNCE terms run over the global batch, L_div over the rank's own queries.

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
        *,
        margin: float = 0.2,
        frame_nce_weight: float = 0.04,
        clip_nce_weight: float = 0.02,
        div_weight: float = 0.003,
        div_alpha: float = 32.0,
        div_delta: float = 0.2,
        div_lambda: float = 1.0,
        video_negative: VideoNegative = "hardest",
        nce_video_to_text: NCEVideoToText = "release",
        hard_negative_topk: int = 20,
        use_hard_negatives: bool = False,
        reduction: Reduction = "mean",
        validate_args: bool | None = None,
        distributed: bool = False,
    ) -> None:
        super().__init__()
        check_base_options(margin=margin, hard_negative_topk=hard_negative_topk, video_negative=video_negative,
                           nce_video_to_text=nce_video_to_text, div_alpha=div_alpha, div_delta=div_delta,
                           div_lambda=div_lambda)
        check_loss_weights(frame_nce_weight=frame_nce_weight, clip_nce_weight=clip_nce_weight, div_weight=div_weight)
        check_choice(reduction, "reduction", REDUCTIONS)
        self.margin = margin
        self.frame_nce_weight = frame_nce_weight
        self.clip_nce_weight = clip_nce_weight
        self.div_weight = div_weight
        self.div_alpha = div_alpha
        self.div_delta = div_delta
        self.div_lambda = div_lambda
        self.video_negative = video_negative
        self.nce_video_to_text = nce_video_to_text
        self.hard_negative_topk = hard_negative_topk
        self.use_hard_negatives = bool(use_hard_negatives)
        self.reduction = reduction
        self.validate_args = validate_args
        self.distributed = bool(distributed)

    @classmethod
    def _preset_arguments(cls, preset: Preset, dataset: DatasetName | None) -> dict[str, Any]:
        owner = f"{cls.__name__}.from_preset({preset!r})"
        sections = module_settings(preset, dataset)
        weights = sections.require("weights", owner)
        return {**dataclasses.asdict(sections.require("base", owner)), "frame_nce_weight": weights.nce_frame,
                "clip_nce_weight": weights.nce_clip, "div_weight": weights.div}

    def extra_repr(self) -> str:
        return (f"margin={self.margin}, div_delta={self.div_delta}, hard_negative_topk={self.hard_negative_topk}, "
                f"video_negative={self.video_negative!r}, nce_video_to_text={self.nce_video_to_text!r}, "
                f"div_alpha={self.div_alpha}, div_lambda={self.div_lambda}, frame_nce_weight={self.frame_nce_weight}, "
                f"clip_nce_weight={self.clip_nce_weight}, div_weight={self.div_weight}, reduction={self.reduction!r}, "
                f"use_hard_negatives={self.use_hard_negatives}")

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
        hard_negatives: bool | None = None,
    ) -> torch.Tensor:
        """L_base of the frame and clip cosine scores ``[Q, V]``, the query embeddings
        ``[Q, d]`` and the positives; InfoNCE uses ``frame_logits`` / ``clip_logits`` when given.
        ``hard_negatives``, when given, replaces ``use_hard_negatives`` for this call (how
        :class:`~evidential_prvr.HolmesCriterion` applies its schedule); ``generator`` draws the triplet
        negatives."""
        return self.details(frame_sim, clip_sim, query_emb, query_video, frame_logits=frame_logits,
                            clip_logits=clip_logits, generator=generator, hard_negatives=hard_negatives).loss

    def details(
        self,
        frame_sim: torch.Tensor,
        clip_sim: torch.Tensor,
        query_emb: torch.Tensor,
        query_video: torch.Tensor,
        *,
        frame_logits: torch.Tensor | None = None,
        clip_logits: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        hard_negatives: bool | None = None,
    ) -> BaseRetrievalLossDetails:
        """The arguments of :meth:`forward`; returns every term
        (:class:`~evidential_prvr.BaseRetrievalLossDetails`, whose ``loss`` is what :meth:`forward` returns).
        Called directly, it does not run the module's hooks."""
        hard = self.use_hard_negatives if hard_negatives is None else bool(hard_negatives)
        diversity = None
        with shared_gathers():
            if self.distributed and is_distributed():
                # L_div pairs the captions of one video: computed on this rank's queries, lifted to the global batch
                diversity = lift_rows(query_diversity_loss(query_emb, query_video, self.div_alpha, self.div_delta,
                                                           self.div_lambda, reduction="none",
                                                           validate_args=self.validate_args), "queries")
            frame_sim, clip_sim, query_video = batch_rows(
                self.distributed, type(self).__name__, frame_sim, clip_sim, query_video)
            frame_logits, clip_logits = batch_rows(self.distributed, type(self).__name__, frame_logits, clip_logits)
            return _base_retrieval_loss(
                frame_sim, clip_sim, query_emb, query_video, frame_logits=frame_logits, clip_logits=clip_logits,
                margin=self.margin, frame_nce_weight=self.frame_nce_weight, clip_nce_weight=self.clip_nce_weight,
                div_weight=self.div_weight, div_alpha=self.div_alpha, div_delta=self.div_delta,
                div_lambda=self.div_lambda, video_negative=self.video_negative,
                nce_video_to_text=self.nce_video_to_text, hard_negative_topk=self.hard_negative_topk if hard else None,
                generator=generator, reduction=self.reduction, validate_args=self.validate_args, diversity=diversity)

    if TYPE_CHECKING:  # nn.Module.__call__ is untyped: calling the module is calling forward
        __call__ = forward
