"""The whole Holmes objective in one object: L_base + L_inter + L_intra with the two-stage schedule.

:class:`HolmesCriterion` replaces the loss module of an MS-SL / GMMFormer / HLFormer-lineage codebase
(the Holmes release's ``Losses/loss.py``): build it with ``from_preset``, call :meth:`set_epoch` at the
start of every epoch, and pass it the tensors such a codebase already has. See :doc:`/guide/drop_in`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from evidential_prvr._base_losses import BaseRetrievalLoss
from evidential_prvr._batching import build_intra_video_batch
from evidential_prvr._checks import check_in_range, check_tensor
from evidential_prvr._inter_video_loss import EvidentialRetrievalLoss
from evidential_prvr._intra_video_loss import IntraVideoEvidentialLoss
from evidential_prvr.functional._inter_video import InterVideoLossDetails, inter_video_loss
from evidential_prvr.functional._intra_video import IntraVideoLossDetails
from evidential_prvr.functional._retrieval_losses import BaseRetrievalLossDetails, base_retrieval_loss
from evidential_prvr.presets import holmes_settings

__all__ = ["HolmesCriterion", "HolmesLossDetails"]


@dataclass
class HolmesLossDetails:
    """The total Holmes loss of one batch and its named parts.

    Attributes
    ----------
    loss : torch.Tensor
        :math:`L_{base} + w_{inter} L_{inter} + w_{intra} L_{intra}` (Holmes Eq. 21 with the loss weights).
    base : torch.Tensor
        L_base with its own weights (triplet + InfoNCE + L_div).
    inter : torch.Tensor
        L_inter, unweighted (0 without an inter-video loss).
    intra : torch.Tensor
        L_intra, unweighted (0 in the first stage or without an intra-video loss).
    stage : int
        1 in the warm-up stage, 2 afterwards.
    base_details : BaseRetrievalLossDetails
        Every term of L_base (``frame_triplet``, ``clip_triplet``, ``frame_nce``, ``clip_nce``, ``diversity``).
    inter_details : InterVideoLossDetails or None
        The three L_U terms, the identification and the calibrated labels.
    intra_details : IntraVideoLossDetails or None
        Per-query and per-video L_intra and the transport, when L_intra ran.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr import HolmesCriterion
    >>> criterion = HolmesCriterion.from_preset("release", dataset="tvr")
    >>> sim = torch.tensor([[0.9, 0.2], [0.3, 0.8]])
    >>> details = criterion(sim, sim, [0, 1], query_emb=torch.eye(2), return_details=True)
    >>> details.stage, details.intra_details is None  # epoch 0: first stage, no L_intra
    (1, True)

    References
    ----------
    Holmes (ICML 2026), Eq. 21 and §3.4.
    """

    loss: torch.Tensor
    base: torch.Tensor
    inter: torch.Tensor
    intra: torch.Tensor
    stage: int
    base_details: BaseRetrievalLossDetails
    inter_details: InterVideoLossDetails | None
    intra_details: IntraVideoLossDetails | None


def _as_query_video(query_video: object, device: torch.device) -> torch.Tensor:
    """A tensor of the positives; a list of ints (the release's ``text_labels``) becomes a LongTensor."""
    if isinstance(query_video, torch.Tensor):
        return query_video
    if isinstance(query_video, Sequence) and not isinstance(query_video, str) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in query_video
    ):
        return torch.tensor(list(query_video), dtype=torch.long, device=device)
    raise TypeError(f"query_video must be a tensor or a list of ints, got {type(query_video).__name__}")


class HolmesCriterion(nn.Module):
    """The Holmes training objective with its schedule (Holmes Eq. 21, §3.4).

    .. math::

        L = L_{base} + w_{inter} L_{inter} + w_{intra} L_{intra}.

    **Schedule.** Call :meth:`set_epoch` (0-based) before each epoch. In the first
    ``warmup_stage_epochs`` epochs L_inter runs without label calibration and L_intra is off; from
    then on both are on (Holmes §3.4). Hard triplet negatives start at ``hard_negative_epoch``.

    Parameters
    ----------
    base : BaseRetrievalLoss
        L_base (triplet, InfoNCE and query-diversity terms with their weights).
    inter : EvidentialRetrievalLoss, optional
        L_inter; its ``calibrate`` says whether the second stage calibrates (``False``: Table 3 row 8).
        ``None``: no inter-video term.
    intra : IntraVideoEvidentialLoss, optional
        L_intra; ``None``: no intra-video term (Table 3 row 10).
    inter_weight, intra_weight : float
        :math:`w_{inter}`, :math:`w_{intra}` (the release's ``loss_factor[4]`` and ``[3]``).
    warmup_stage_epochs : int
        Epochs of the first stage.
    hard_negative_epoch : int
        First epoch with hard triplet negatives.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr import HolmesCriterion
    >>> criterion = HolmesCriterion.from_preset("release", dataset="tvr")
    >>> criterion.set_epoch(25)  # second stage: calibration, L_intra and hard negatives on
    >>> q, v, mc, d = 6, 3, 8, 16
    >>> query_video = [0, 0, 1, 1, 2, 2]  # the release's text_labels
    >>> frame_sim, clip_sim = torch.rand(q, v), torch.rand(q, v)
    >>> details = criterion(frame_sim, clip_sim, query_video, query_emb=torch.randn(q, d),
    ...                     clip_emb=torch.randn(v, mc, d), return_details=True)
    >>> details.stage, sorted(details.base_details.__dict__)[:2]
    (2, ['clip_nce', 'clip_triplet'])

    References
    ----------
    Holmes (ICML 2026), Eq. 21 and §3.4.
    """

    def __init__(
        self,
        base: BaseRetrievalLoss,
        inter: EvidentialRetrievalLoss | None = None,
        intra: IntraVideoEvidentialLoss | None = None,
        *,
        inter_weight: float = 0.2,
        intra_weight: float = 0.8,
        warmup_stage_epochs: int = 20,
        hard_negative_epoch: int = 20,
    ) -> None:
        super().__init__()
        if not isinstance(base, BaseRetrievalLoss):
            raise TypeError(f"base must be a BaseRetrievalLoss, got {type(base).__name__}")
        if inter is not None and not isinstance(inter, EvidentialRetrievalLoss):
            raise TypeError(f"inter must be an EvidentialRetrievalLoss or None, got {type(inter).__name__}")
        if intra is not None and not isinstance(intra, IntraVideoEvidentialLoss):
            raise TypeError(f"intra must be an IntraVideoEvidentialLoss or None, got {type(intra).__name__}")
        for name, module in (("base", base), ("inter", inter), ("intra", intra)):
            if module is not None and module.reduction == "none":
                raise ValueError(f"{name} must reduce to a scalar (reduction 'mean' or 'sum'), got 'none'")
        check_in_range(inter_weight, "inter_weight", 0.0, float("inf"), high_inclusive=False)
        check_in_range(intra_weight, "intra_weight", 0.0, float("inf"), high_inclusive=False)
        for name, value in (("warmup_stage_epochs", warmup_stage_epochs), ("hard_negative_epoch", hard_negative_epoch)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        self.base = base
        self.inter = inter
        self.intra = intra
        self.inter_weight = float(inter_weight)
        self.intra_weight = float(intra_weight)
        self.warmup_stage_epochs = warmup_stage_epochs
        self.hard_negative_epoch = hard_negative_epoch
        self.epoch = 0

    @classmethod
    def from_preset(cls, preset: str, dataset: str | None = None, **overrides: object) -> HolmesCriterion:
        """The whole objective of a preset: ``"release"`` (``dataset`` = ``"tvr"``, ``"activitynet"`` /
        ``"act"`` or ``"charades"`` / ``"cha"``) or ``"paper"`` (a ``dataset`` is needed for the weights).

        ``overrides``: ``base``, ``inter``, ``intra`` (modules, or ``None`` to drop a term),
        ``inter_weight``, ``intra_weight``, ``warmup_stage_epochs``, ``hard_negative_epoch``, and
        ``validate_args`` (applied to the three default losses). Anything else raises ``TypeError``.
        """
        settings = holmes_settings(preset, dataset)
        owner = f"{cls.__name__}.from_preset({preset!r})"
        weights, schedule = settings.require("weights", owner), settings.require("schedule", owner)
        allowed = {"base", "inter", "intra", "inter_weight", "intra_weight", "warmup_stage_epochs",
                   "hard_negative_epoch", "validate_args"}
        unknown = sorted(set(overrides) - allowed)
        if unknown:
            raise TypeError(f"{owner} got unexpected override(s) {', '.join(map(repr, unknown))}; "
                            f"accepted: {', '.join(sorted(allowed))}")
        validate = overrides.pop("validate_args", None)
        defaults: dict[str, object] = {
            "base": BaseRetrievalLoss.from_preset(preset, dataset, validate_args=validate),
            "inter": EvidentialRetrievalLoss.from_preset(preset, dataset, validate_args=validate),
            "intra": IntraVideoEvidentialLoss.from_preset(preset, dataset, validate_args=validate),
            "inter_weight": weights.inter,
            "intra_weight": weights.intra,
            "warmup_stage_epochs": schedule.warmup_stage_epochs,
            "hard_negative_epoch": schedule.hard_negative_epoch,
        }
        defaults.update(overrides)
        base = defaults.pop("base")
        return cls(base, defaults.pop("inter"), defaults.pop("intra"), **defaults)  # type: ignore[arg-type]

    def set_epoch(self, epoch: int) -> None:
        """Select the stage and the triplet negatives for ``epoch`` (0-based)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")
        self.epoch = epoch

    @property
    def stage(self) -> int:
        """1 in the warm-up stage (no calibration, no L_intra), 2 afterwards."""
        return 1 if self.epoch < self.warmup_stage_epochs else 2

    @property
    def hard_negatives(self) -> bool:
        """Whether the triplet losses of the current epoch draw hard negatives."""
        return self.epoch >= self.hard_negative_epoch

    def extra_repr(self) -> str:
        return (f"inter_weight={self.inter_weight}, intra_weight={self.intra_weight}, "
                f"warmup_stage_epochs={self.warmup_stage_epochs}, hard_negative_epoch={self.hard_negative_epoch}, "
                f"epoch={self.epoch}")

    def forward(
        self,
        frame_sim: torch.Tensor,
        clip_sim: torch.Tensor,
        query_video: torch.Tensor | Sequence[int],
        *,
        query_emb: torch.Tensor,
        clip_emb: torch.Tensor | None = None,
        frame_logits: torch.Tensor | None = None,
        clip_logits: torch.Tensor | None = None,
        clip_mask: torch.Tensor | None = None,
        max_queries: int | None = None,
        generator: torch.Generator | None = None,
        return_details: bool = False,
    ) -> torch.Tensor | HolmesLossDetails:
        """The loss of one training batch.

        Parameters
        ----------
        frame_sim, clip_sim : torch.Tensor
            ``[Q, V]`` frame- and clip-scale max-cosine scores (Holmes Eq. 1).
        query_video : torch.Tensor or list of int
            The video of each caption: ``LongTensor [Q]``, a list of ints (the release's
            ``text_labels``) or a ``{0, 1}`` matrix ``[Q, V]``.
        query_emb : torch.Tensor
            ``[Q, d]`` query embeddings for L_div and the intra-video transport (the release encodes
            the queries a second time, with fresh dropout, for these).
        clip_emb : torch.Tensor, optional
            ``[V, Mc, d]`` clip embeddings of the batch's videos; needed when L_intra is on.
        frame_logits, clip_logits : torch.Tensor, optional
            ``[Q, V]`` unnormalised scores for InfoNCE (the release's ``*_scale_scores_``).
        clip_mask : torch.Tensor, optional
            ``[V, Mc]`` valid clips.
        max_queries : int, optional
            Most captions of one video in the batch, if known on the host (saves a synchronisation).
        generator : torch.Generator, optional
            Random source of the triplet negatives.
        return_details : bool
            Return a :class:`HolmesLossDetails` with every part instead of the total.

        Returns
        -------
        torch.Tensor or HolmesLossDetails
        """
        check_tensor(frame_sim, "frame_sim", ndim=2, floating=True)
        positives = _as_query_video(query_video, frame_sim.device)
        stage = self.stage
        base = self.base.settings()
        base["hard_negative_topk"] = self.base.hard_negative_topk if self.hard_negatives else None
        base_details = base_retrieval_loss(
            frame_sim, clip_sim, query_emb, positives, frame_logits=frame_logits, clip_logits=clip_logits, **base,
            generator=generator, return_details=True, validate_args=self.base.validate_args,
        )
        assert isinstance(base_details, BaseRetrievalLossDetails)
        zero = base_details.loss.new_zeros(())
        inter = intra = zero
        inter_details = intra_details = None
        if self.inter is not None:
            settings = self.inter.settings()
            settings["calibrate"] = self.inter.calibrate and stage == 2
            # details (and with them the identification) only when asked for or used by the calibration
            out = inter_video_loss(frame_sim, clip_sim, positives, **settings, return_details=return_details,
                                   validate_args=self.inter.validate_args)
            if isinstance(out, InterVideoLossDetails):
                inter_details, inter = out, out.loss
            else:
                inter = out
        if self.intra is not None and stage == 2:
            if clip_emb is None:
                raise ValueError("clip_emb [V, Mc, d] is required in the second stage, where L_intra is on")
            if positives.dim() != 1:
                raise ValueError("L_intra needs one video per caption: pass query_video as indices [Q]")
            groups = build_intra_video_batch(query_emb, positives, clip_emb, clip_mask, max_queries=max_queries,
                                             validate_args=self.intra.validate_args)
            out = self.intra(groups.sim, groups.query_mask, groups.clip_mask, return_details=return_details)
            if isinstance(out, IntraVideoLossDetails):
                intra_details, intra = out, out.loss
            else:
                intra = out
        total = base_details.loss + self.inter_weight * inter + self.intra_weight * intra
        if not return_details:
            return total
        return HolmesLossDetails(total, base_details.loss, inter, intra, stage, base_details, inter_details,
                                 intra_details)
