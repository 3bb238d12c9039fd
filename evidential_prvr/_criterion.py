"""The whole Holmes objective in one object: L_base + L_inter + L_intra with the two-stage schedule.

:class:`HolmesCriterion` replaces the loss module of an MS-SL / GMMFormer / HLFormer-lineage codebase
(the Holmes release's ``Losses/loss.py``): build it with ``from_preset``, call :meth:`set_epoch` at the
start of every epoch, and pass it the tensors such a codebase already has. See :doc:`/guide/drop_in`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from evidential_prvr._batching import build_intra_video_batch
from evidential_prvr._checks import check_in_range, check_tensor
from evidential_prvr._identification import ThresholdEMA
from evidential_prvr._inter_video import EvidentialRetrievalLoss
from evidential_prvr._intra_video import IntraVideoEvidentialLoss
from evidential_prvr._loss_gathers import set_sizes, shared_gathers, warn_per_rank
from evidential_prvr._module_bases import PresetModule
from evidential_prvr._retrieval_losses import BaseRetrievalLoss
from evidential_prvr.choices import DatasetName, Preset
from evidential_prvr.distributed import is_distributed, rank_offset
from evidential_prvr.functional._inter_video import InterVideoLossDetails
from evidential_prvr.functional._intra_video import IntraVideoLossDetails
from evidential_prvr.functional._retrieval_losses import BaseRetrievalLossDetails
from evidential_prvr.functional._scores import check_score_layout, check_score_pair_shapes
from evidential_prvr.presets import module_settings

_LOG = logging.getLogger("evidential_prvr")
SCHEDULE_SWITCHES = ("warmup_stage_epochs", "hard_negative_epoch")
"""The two schedule switches of :class:`HolmesCriterion` (``from_preset(..., total_epochs=n)`` maps the preset's
onto ``n`` epochs)."""

__all__ = ["HolmesCriterion", "HolmesLossDetails", "scaled_switch_epoch"]


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
    >>> details = criterion.details(sim, sim, [0, 1], query_emb=torch.eye(2))
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


def scaled_switch_epoch(switch: int, epochs: int, release_epochs: int) -> int:
    """A preset's switch epoch mapped onto a schedule of ``epochs`` epochs, in proportion to the
    preset's own ``release_epochs``.

    The result is ``switch * epochs / release_epochs`` rounded to the nearest integer (halves up), and at
    least 1 when the preset's switch is after epoch 0, so the first epoch stays in the warm-up stage as in
    the release. E.g. the release's switch at epoch 20 of 100 becomes epoch 1 of 6, 6 of 30, 10 of 50.

    Examples
    --------
    >>> from evidential_prvr._criterion import scaled_switch_epoch
    >>> [scaled_switch_epoch(20, n, 100) for n in (1, 6, 30, 50, 100, 200)]
    [1, 1, 6, 10, 20, 40]

    References
    ----------
    Holmes (ICML 2026), §3.4 and §4.2 (the two-stage schedule, 20 of 100 epochs).
    """
    if switch <= 0:
        return 0
    return max(1, math.floor(switch * epochs / release_epochs + 0.5))


def _check_epoch_count(value: object, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


def _as_query_video(query_video: object, device: torch.device) -> torch.Tensor:
    """A tensor of the positives; a list of ints (the release's ``text_labels``) becomes a LongTensor."""
    if isinstance(query_video, torch.Tensor):
        return query_video
    if isinstance(query_video, Sequence) and not isinstance(query_video, str) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in query_video
    ):
        return torch.tensor(list(query_video), dtype=torch.long, device=device)
    raise TypeError(f"query_video must be a tensor or a list of ints, got {type(query_video).__name__}")


def _check_not_transposed(frame_sim: torch.Tensor, query_video: object) -> None:
    """Refuse scores passed as ``[V, Q]`` with the message of :func:`check_score_layout`, before the embeddings
    are checked (whose message would otherwise blame ``clip_emb``)."""
    if isinstance(query_video, torch.Tensor) and query_video.dim() in (1, 2):
        layout = query_video
    elif isinstance(query_video, Sequence) and not isinstance(query_video, str):
        layout = torch.empty(len(query_video), device="meta")
    else:
        return  # _as_query_video reports it
    rows, cols = frame_sim.shape
    if rows != layout.shape[0] and cols == layout.shape[0]:
        check_score_layout(frame_sim, "frame_sim", layout)


def _check_clip_emb(frame_sim: torch.Tensor, clip_sim: torch.Tensor, clip_emb: object) -> None:
    """``clip_emb [V, Mc, d]`` must hold the videos of the score columns; say how to fix it otherwise."""
    check_tensor(clip_emb, "clip_emb", ndim=3, floating=True)
    assert isinstance(clip_emb, torch.Tensor)
    num_queries, num_videos = frame_sim.shape
    if clip_emb.shape[0] == num_videos:
        return
    if num_videos == num_queries:
        raise ValueError(
            f"frame_sim and clip_sim are square {tuple(frame_sim.shape)} while clip_emb holds {clip_emb.shape[0]} "
            f"videos: the scores must be [num_queries, num_videos] = [{num_queries}, {clip_emb.shape[0]}]. A "
            f"caption × caption matrix (MS-SL's training scores) scores no other video; compute the scores with "
            f"evidential_prvr.max_similarity(query_emb, frame_emb, frame_mask) and (..., clip_emb, clip_mask)"
        )
    raise ValueError(
        f"clip_emb must be [num_videos, Mc, d] with num_videos = {num_videos} (the columns of frame_sim), got "
        f"shape {tuple(clip_emb.shape)}"
    )


_PARTS: dict[str, type] = {"base": BaseRetrievalLoss, "inter": EvidentialRetrievalLoss,
                           "intra": IntraVideoEvidentialLoss}


class HolmesCriterion(PresetModule):
    """The Holmes training objective with its schedule (Holmes Eq. 21, §3.4).

    .. math::

        L = L_{base} + w_{inter} L_{inter} + w_{intra} L_{intra}.

    **Parts.** ``forward`` calls the ``forward`` of its three parts, ``self.base``, ``self.inter`` and
    ``self.intra``; replacing one (``criterion.inter = MyLoss()``, or a subclass passed to the constructor
    or to ``from_preset``) changes the total. What the parts share is computed once and passed: the
    positives (as a tensor), the stage (``calibrate=`` of ``inter``), the hard-negative switch
    (``hard_negatives=`` of ``base``) and the grouped intra-video batch. A replacement part takes the
    same arguments as the module it replaces: its ``forward`` returns a tensor and its ``details`` its
    details dataclass (with a ``loss``), called by :meth:`details`.

    **Schedule.** Call :meth:`set_epoch` (0-based) before each epoch. In the first
    ``warmup_stage_epochs`` epochs L_inter runs without label calibration and L_intra is off; from
    then on both are on (Holmes §3.4). Hard triplet negatives start at ``hard_negative_epoch``. The
    release switches both at epoch 20 of 100, for every data set; ``from_preset(..., total_epochs=n)``
    maps them onto a run of ``n`` epochs. Each change of stage or of the negatives is logged at INFO on the
    logger ``"evidential_prvr"`` (once per change), and ``details.stage`` says the stage of a batch.

    **Presets.** :meth:`~evidential_prvr.PresetModule.from_preset` builds the whole objective of ``"release"`` or ``"paper"`` (the paper
    takes its loss weights and schedule from the release; :func:`evidential_prvr.presets.holmes_settings`,
    ``dataset=None``: TVR's; for a data set of one's own, ``None`` or
    ``evidential_prvr.presets.closest_dataset(captions_per_video)``): the three losses' ``from_preset`` of that
    preset (each built with the call's ``validate_args`` and ``distributed``), the preset's loss weights and
    its switches. Each constructor argument of the call replaces the preset's: ``base``, ``inter``, ``intra``
    (modules, or ``None`` to drop ``inter`` or ``intra``), the weights, ``warmup_stage_epochs`` and
    ``hard_negative_epoch``. ``total_epochs=n`` (the caller's number of epochs) maps both switches of the
    preset (20 of 100 epochs in the release) onto ``n`` in proportion (``switch * n / preset_epochs`` to the
    nearest epoch, halves up, at least 1; 20 of 100 becomes 1 of 6, 6 of 30, 10 of 50), unless the call sets
    a switch itself, and a switch that still lies beyond ``n`` warns.

    Parameters
    ----------
    base : BaseRetrievalLoss, optional
        L_base (triplet, InfoNCE and query-diversity terms with their weights); ``None``:
        ``BaseRetrievalLoss()`` with this criterion's ``validate_args`` and ``distributed``.
    inter : EvidentialRetrievalLoss, optional
        L_inter; its ``calibrate`` says whether the second stage calibrates (``False``: Table 3 row 8).
        ``None``: no inter-video term.
    intra : IntraVideoEvidentialLoss, optional
        L_intra; ``None``: no intra-video term (Table 3 row 10).
    inter_weight, intra_weight : float
        :math:`w_{inter}`, :math:`w_{intra}` (the release's ``loss_factor[4]`` and ``[3]``).
    warmup_stage_epochs : int
        Epochs of the first stage (the first epoch of stage 2, 0-based).
    hard_negative_epoch : int
        First epoch with hard triplet negatives (a codebase's ``hard_negative_start_epoch``).
    total_epochs : int, optional
        The caller's number of epochs, when known: a switch at or beyond it warns once (that part of
        Holmes would never run). In :meth:`~evidential_prvr.PresetModule.from_preset` it also maps the preset's switches onto the run.
    validate_args : bool, optional
        Check the inputs for non-finite values (host synchronisations) in the parts this class builds: the
        default ``base`` and :meth:`~evidential_prvr.PresetModule.from_preset`'s three losses; ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`. Parts passed in keep their own.
    distributed : bool
        Multi-process training under ``DistributedDataParallel`` (:doc:`/guide/distributed`): each rank
        passes its queries' scores against every video of the global batch ``[Q_r, V_global]``, global
        video indices, its queries' embeddings and its own videos' clip embeddings; the loss is the
        single-process loss of the global batch on every rank. The parts of this package must be built
        with the same ``distributed`` (``from_preset(..., distributed=True)`` does it).
    threshold_decay : float, optional
        ``None`` (default; the ``paper`` and ``release`` presets): L_inter identifies the queries with the
        in-batch thresholds of Eq. 11. A decay :math:`d \\in [0, 1)`: the thresholds are smoothed across
        batches (:func:`~evidential_prvr.functional.ema_thresholds`, an extension beyond the paper); the
        state is the submodule ``threshold_ema`` (buffers in ``state_dict``, so a resumed run continues
        exactly), updated by every call in ``train()`` mode, from the first stage on (so that it is warm when
        the calibration starts). With ``distributed=True`` the update uses the global batch's thresholds: every
        rank holds the same state. Needs ``inter`` to be an :class:`EvidentialRetrievalLoss`.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr import HolmesCriterion
    >>> criterion = HolmesCriterion.from_preset("release", dataset="tvr")
    >>> criterion.set_epoch(25)  # second stage: calibration, L_intra and hard negatives on
    >>> q, v, mc, d = 6, 3, 8, 16
    >>> query_video = [0, 0, 1, 1, 2, 2]  # the release's text_labels
    >>> frame_sim, clip_sim = torch.rand(q, v), torch.rand(q, v)
    >>> details = criterion.details(frame_sim, clip_sim, query_video, query_emb=torch.randn(q, d),
    ...                             clip_emb=torch.randn(v, mc, d))
    >>> details.stage, sorted(details.base_details.__dict__)[:2]
    (2, ['clip_nce', 'clip_triplet'])
    >>> short = HolmesCriterion.from_preset("release", "tvr", total_epochs=30)  # a 30-epoch run
    >>> short.warmup_stage_epochs, short.hard_negative_epoch
    (6, 6)

    References
    ----------
    Holmes (ICML 2026), Eq. 21 and §3.4.
    """

    def __init__(
        self,
        base: BaseRetrievalLoss | None = None,
        inter: EvidentialRetrievalLoss | None = None,
        intra: IntraVideoEvidentialLoss | None = None,
        *,
        inter_weight: float = 0.2,
        intra_weight: float = 0.8,
        warmup_stage_epochs: int = 20,
        hard_negative_epoch: int = 20,
        total_epochs: int | None = None,
        validate_args: bool | None = None,
        distributed: bool = False,
        threshold_decay: float | None = None,
    ) -> None:
        super().__init__()
        if base is None:
            base = BaseRetrievalLoss(validate_args=validate_args, distributed=distributed)
        for name, module, optional in (("base", base, False), ("inter", inter, True), ("intra", intra, True)):
            if module is None and optional:
                continue
            own = _PARTS[name]
            if not isinstance(module, nn.Module) or (
                    not isinstance(module, own) and isinstance(module, tuple(_PARTS.values()))):
                kind = "an nn.Module" + (" or None" if optional else "")
                raise TypeError(f"{name} must be {kind} with the forward of {own.__name__} (a subclass, or a module "
                                f"taking the same arguments), got {type(module).__name__}")
            if getattr(module, "reduction", "mean") == "none":
                raise ValueError(f"{name} must reduce to a scalar (reduction 'mean' or 'sum'), got 'none'")
            if getattr(module, "distributed", bool(distributed)) != bool(distributed):
                raise ValueError(f"{name}.distributed is {module.distributed} but the criterion's distributed is "
                                 f"{bool(distributed)}: build the parts with distributed={bool(distributed)} (or use "
                                 f"from_preset(..., distributed={bool(distributed)}))")
        check_in_range(inter_weight, "inter_weight", 0.0, float("inf"), high_inclusive=False)
        check_in_range(intra_weight, "intra_weight", 0.0, float("inf"), high_inclusive=False)
        _check_epoch_count(warmup_stage_epochs, "warmup_stage_epochs", 0)
        _check_epoch_count(hard_negative_epoch, "hard_negative_epoch", 0)
        if total_epochs is not None:
            _check_epoch_count(total_epochs, "total_epochs", 1)
        self.base = base
        self.inter = inter
        self.intra = intra
        self.inter_weight = float(inter_weight)
        self.intra_weight = float(intra_weight)
        self.warmup_stage_epochs = warmup_stage_epochs
        self.hard_negative_epoch = hard_negative_epoch
        self.total_epochs = total_epochs
        self.validate_args = validate_args
        self.distributed = bool(distributed)
        if threshold_decay is not None and not isinstance(inter, EvidentialRetrievalLoss):
            raise ValueError(f"threshold_decay={threshold_decay} smooths the thresholds of L_inter's identification, so "
                             f"inter must be an EvidentialRetrievalLoss, got {type(inter).__name__}")
        self.threshold_ema = None if threshold_decay is None else ThresholdEMA(threshold_decay)
        self.epoch = 0
        self._reported: tuple[int, bool] | None = None
        if total_epochs is not None:
            self._warn_beyond_schedule(total_epochs)

    def _warn_beyond_schedule(self, total_epochs: int) -> None:
        late = [f"{what} starts at epoch {epoch} (0-based)" for what, epoch, on in (
            ("stage 2 (label calibration and L_intra)", self.warmup_stage_epochs,
             self.inter is not None or self.intra is not None),
            ("hard triplet negatives", self.hard_negative_epoch, True)) if on and epoch >= total_epochs]
        if late:
            warnings.warn(
                f"HolmesCriterion: {' and '.join(late)}, beyond a schedule of {total_epochs} epochs, so it never "
                f"runs; build it with from_preset(..., total_epochs={total_epochs}) (the preset's switches scaled "
                f"to your run) or set warmup_stage_epochs= / hard_negative_epoch=", UserWarning, stacklevel=3)

    @classmethod
    def _preset_arguments(cls, preset: Preset, dataset: DatasetName | None) -> dict[str, Any]:
        return cls._preset_arguments_given(preset, dataset, {})

    @classmethod
    def _preset_arguments_given(cls, preset: Preset, dataset: DatasetName | None,
                                given: Mapping[str, Any]) -> dict[str, Any]:
        """The preset's loss weights and switches (mapped onto the call's ``total_epochs`` when it gives one)
        and the three parts the call does not give, built with the call's ``validate_args`` and
        ``distributed``."""
        owner = f"{cls.__name__}.from_preset({preset!r})"
        sections = module_settings(preset, dataset)
        weights, schedule = sections.require("weights", owner), sections.require("schedule", owner)
        switches = {name: getattr(schedule, name) for name in SCHEDULE_SWITCHES}
        total_epochs = given.get("total_epochs")
        if total_epochs is not None:
            _check_epoch_count(total_epochs, "total_epochs", 1)
            switches = {name: scaled_switch_epoch(epoch, total_epochs, schedule.epochs)
                        for name, epoch in switches.items()}
        validate, distributed = given.get("validate_args"), bool(given.get("distributed", False))
        arguments: dict[str, Any] = {"inter_weight": weights.inter, "intra_weight": weights.intra, **switches}
        if "base" not in given:
            arguments["base"] = BaseRetrievalLoss.from_preset(preset, dataset, validate_args=validate,
                                                              distributed=distributed)
        if "inter" not in given:
            arguments["inter"] = EvidentialRetrievalLoss.from_preset(preset, dataset, validate_args=validate,
                                                                     distributed=distributed)
        if "intra" not in given:
            arguments["intra"] = IntraVideoEvidentialLoss.from_preset(preset, dataset, validate_args=validate,
                                                                      distributed=distributed)
        return arguments

    def set_epoch(self, epoch: int) -> None:
        """Select the stage and the triplet negatives for ``epoch`` (0-based); a change is logged at INFO."""
        self.epoch = _check_epoch_count(epoch, "epoch", 0)
        state = (self.stage, self.hard_negatives)
        if state != self._reported:
            self._reported = state
            what = ("stage 1 of 2: L_inter without label calibration, no L_intra" if state[0] == 1 else
                    "stage 2 of 2: label calibration and L_intra on")
            _LOG.info("HolmesCriterion: epoch %d is in %s; hard triplet negatives %s (stage 2 from epoch %d, hard "
                      "negatives from epoch %d)", epoch, what, "on" if state[1] else "off", self.warmup_stage_epochs,
                      self.hard_negative_epoch)

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
                f"epoch={self.epoch}" + (", distributed=True" if self.distributed else ""))

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
    ) -> torch.Tensor:
        """The loss of one training batch.

        Parameters
        ----------
        frame_sim, clip_sim : torch.Tensor
            ``[num_queries, num_videos]`` frame- and clip-scale max-cosine scores (Holmes Eq. 1), one row
            per caption and one column per video of the batch. Without such matrices (e.g. MS-SL's
            caption × caption training scores), build them with :func:`~evidential_prvr.functional.max_similarity`.
        query_video : torch.Tensor or list of int
            The video of each caption: ``LongTensor [Q]``, a list of ints (the release's
            ``text_labels``) or a ``{0, 1}`` matrix ``[Q, V]``.
        query_emb : torch.Tensor
            ``[Q, d]`` query embeddings for L_div and the intra-video transport (the release encodes
            the queries a second time, with fresh dropout, for these; the first encoding works too).
        clip_emb : torch.Tensor, optional
            ``[V, Mc, d]`` clip embeddings of the batch's videos (the release's 32 clips, or a
            codebase's multi-scale proposals); needed when L_intra is on.
        frame_logits, clip_logits : torch.Tensor, optional
            ``[Q, V]`` unnormalised scores for InfoNCE (the release's ``*_scale_scores_``).
        clip_mask : torch.Tensor, optional
            ``[V, Mc]`` valid clips.
        max_queries : int, optional
            Most captions of one video in the batch, if known on the host (saves a synchronisation); with
            ``distributed=True``, of the global batch.
        generator : torch.Generator, optional
            Random source of the triplet negatives.

        Returns
        -------
        torch.Tensor
            The total; :meth:`details` returns every part.

        Notes
        -----
        Checked with a message that says the fix: scores passed transposed (``[V, Q]``), a square
        caption × caption matrix beside a ``[Q, V]`` one or beside ``clip_emb`` of another video count,
        and ``clip_emb`` whose video count differs from the score columns. ``frame_sim`` and
        ``clip_sim`` passed in each other's place cannot be detected (they have the same shape).

        With ``distributed=True`` (under a process group of several ranks), the scores are this rank's
        rows ``[Q_r, V_global]``, ``query_video`` holds global video indices, ``query_emb`` is ``[Q_r, d]``
        and ``clip_emb`` ``[V_r, Mc, d]`` holds this rank's own videos (rank order: its first video's
        global index is the number of videos of the lower ranks), so each rank's captions describe its own
        videos. Every rank returns the single-process loss of the global batch; each input's gradient is
        ``world_size`` times its single-process gradient (DDP's mean then gives the single-process one).
        The optional arguments must be given on every rank or on none.
        """
        out = self._loss(frame_sim=frame_sim, clip_sim=clip_sim, query_video=query_video, query_emb=query_emb,
                         clip_emb=clip_emb, frame_logits=frame_logits, clip_logits=clip_logits, clip_mask=clip_mask,
                         max_queries=max_queries, generator=generator, details=False)
        assert isinstance(out, torch.Tensor)  # details=False: the total only
        return out

    def details(
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
    ) -> HolmesLossDetails:
        """The arguments of :meth:`forward`; returns the total
        and every part (:class:`HolmesLossDetails`, whose ``loss`` is what :meth:`forward` returns). Called
        directly, it does not run the module's hooks."""
        out = self._loss(frame_sim=frame_sim, clip_sim=clip_sim, query_video=query_video, query_emb=query_emb,
                         clip_emb=clip_emb, frame_logits=frame_logits, clip_logits=clip_logits, clip_mask=clip_mask,
                         max_queries=max_queries, generator=generator, details=True)
        assert isinstance(out, HolmesLossDetails)
        return out

    if TYPE_CHECKING:  # nn.Module.__call__ is untyped: calling the module is calling forward
        __call__ = forward

    def _local_videos(self, positives: torch.Tensor, num_videos: int, clip_emb: torch.Tensor | None,
                      max_queries: int | None) -> tuple[torch.Tensor, int | None]:
        """Under a process group: this rank's captions as indices of its own videos (rows of ``clip_emb``)
        and the global ``max_queries``, from one gather of the batch layout (one host synchronisation)."""
        if not (self.distributed and is_distributed()):
            return positives, max_queries
        indices = positives.dim() == 1 and not positives.is_floating_point() and positives.dtype != torch.bool
        # [captions, videos, smallest and largest video index, most captions of one video]
        layout = torch.tensor([positives.shape[0], 0 if clip_emb is None else clip_emb.shape[0], 0, -1, 0],
                              dtype=torch.long, device=positives.device)
        if indices and positives.numel():
            layout[2], layout[3] = positives.min(), positives.max()
            layout[4] = torch.unique(positives, return_counts=True)[1].max()
        gathered = [torch.empty_like(layout) for _ in range(torch.distributed.get_world_size())]
        torch.distributed.all_gather(gathered, layout)
        table = torch.stack(gathered).tolist()
        video_sizes = [row[1] for row in table]
        set_sizes("queries", [row[0] for row in table])
        set_sizes("videos", video_sizes)
        if not indices or clip_emb is None:
            return positives, max_queries
        if sum(video_sizes) != num_videos:
            raise ValueError(f"with distributed=True the scores must have one column per video of the global batch "
                             f"and clip_emb this rank's videos: the ranks' clip_emb hold {video_sizes} videos "
                             f"(sum {sum(video_sizes)}), the scores have {num_videos} columns")
        outside = [rank for rank, row in enumerate(table) if row[0] and not (
            rank_offset(video_sizes, rank) <= row[2] and row[3] < rank_offset(video_sizes, rank) + row[1])]
        if outside:
            raise ValueError(f"with distributed=True each rank's captions must describe its own videos (query_video "
                             f"holds global video indices, clip_emb the rank's own videos, in rank order); the "
                             f"captions of rank(s) {outside} point outside their videos (videos per rank: "
                             f"{video_sizes})")
        if max_queries is None:
            max_queries = max(max(row[4] for row in table), 1)
        return positives - rank_offset(video_sizes), max_queries

    def _loss(
        self,
        *,
        frame_sim: torch.Tensor,
        clip_sim: torch.Tensor,
        query_video: torch.Tensor | Sequence[int],
        query_emb: torch.Tensor,
        clip_emb: torch.Tensor | None,
        frame_logits: torch.Tensor | None,
        clip_logits: torch.Tensor | None,
        clip_mask: torch.Tensor | None,
        max_queries: int | None,
        generator: torch.Generator | None,
        details: bool,
    ) -> torch.Tensor | HolmesLossDetails:
        """What :meth:`forward` and :meth:`details` compute. ``details=False`` (:meth:`forward`) calls the parts'
        ``forward`` and returns the total only; ``details=True`` calls their ``details`` and returns a
        :class:`HolmesLossDetails`. With ``distributed=True`` under a process group, the parts share one scope
        of gathers."""
        if not self.distributed:
            warn_per_rank(type(self).__name__)
        with shared_gathers() if self.distributed and is_distributed() else contextlib.nullcontext():
            return self._batch_loss(frame_sim=frame_sim, clip_sim=clip_sim, query_video=query_video,
                                    query_emb=query_emb, clip_emb=clip_emb, frame_logits=frame_logits,
                                    clip_logits=clip_logits, clip_mask=clip_mask, max_queries=max_queries,
                                    generator=generator, details=details)

    def _batch_loss(
        self,
        *,
        frame_sim: torch.Tensor,
        clip_sim: torch.Tensor,
        query_video: torch.Tensor | Sequence[int],
        query_emb: torch.Tensor,
        clip_emb: torch.Tensor | None,
        frame_logits: torch.Tensor | None,
        clip_logits: torch.Tensor | None,
        clip_mask: torch.Tensor | None,
        max_queries: int | None,
        generator: torch.Generator | None,
        details: bool,
    ) -> torch.Tensor | HolmesLossDetails:
        check_tensor(frame_sim, "frame_sim", ndim=2, floating=True)
        check_tensor(clip_sim, "clip_sim", ndim=2, floating=True)
        check_score_pair_shapes(frame_sim, clip_sim, "frame_sim", "clip_sim")
        _check_not_transposed(frame_sim, query_video)
        across_ranks = self.distributed and is_distributed()
        if clip_emb is not None:
            if across_ranks:  # this rank's videos: checked against the global columns below
                check_tensor(clip_emb, "clip_emb", ndim=3, floating=True)
            else:
                _check_clip_emb(frame_sim, clip_sim, clip_emb)
        positives = _as_query_video(query_video, frame_sim.device)
        local_videos, max_queries = self._local_videos(positives, frame_sim.shape[1], clip_emb, max_queries)
        stage = self.stage
        base_part = self.base.details if details else self.base
        base_out = base_part(frame_sim, clip_sim, query_emb, positives, frame_logits=frame_logits,
                             clip_logits=clip_logits, generator=generator, hard_negatives=self.hard_negatives)
        base_details, base = ((base_out, base_out.loss) if isinstance(base_out, BaseRetrievalLossDetails)
                              else (None, base_out))
        zero = base.new_zeros(())
        inter = intra = zero
        inter_details = intra_details = None
        if self.inter is not None:
            # details (and with them the identification) only when asked for or used by the calibration
            calibrate = getattr(self.inter, "calibrate", True) and stage == 2
            ema = self.threshold_ema
            if ema is None:
                out = (self.inter.details if details else self.inter)(frame_sim, clip_sim, positives,
                                                                      calibrate=calibrate)
            else:  # every batch's identification runs, to keep the smoothed thresholds current
                assert isinstance(self.inter, EvidentialRetrievalLoss)
                out = self.inter.details(frame_sim, clip_sim, positives, calibrate=calibrate,
                                         running_thresholds=ema.running())
                assert out.identification is not None
                ema.record(out.identification)
            inter_details, inter = (out, out.loss) if isinstance(out, InterVideoLossDetails) else (None, out)
        if self.intra is not None and stage == 2:
            if clip_emb is None:
                raise ValueError("clip_emb [V, Mc, d] is required in the second stage, where L_intra is on")
            if positives.dim() != 1:
                raise ValueError("L_intra needs one video per caption: pass query_video as indices [Q]")
            groups = build_intra_video_batch(query_emb, local_videos, clip_emb, clip_mask, max_queries=max_queries,
                                             validate_args=getattr(self.intra, "validate_args", None))
            intra_part = self.intra.details if details else self.intra
            intra_out = intra_part(groups.sim, groups.query_mask, groups.clip_mask)
            intra_details, intra = ((intra_out, intra_out.loss) if isinstance(intra_out, IntraVideoLossDetails)
                                    else (None, intra_out))
        total = base + self.inter_weight * inter + self.intra_weight * intra
        if not details:
            return total
        assert base_details is not None  # base.details returns them
        return HolmesLossDetails(total, base, inter, intra, stage, base_details, inter_details, intra_details)
