"""Module of the inter-video evidential objective L_inter (Holmes Eq. 15-18): see
:func:`evidential_prvr.functional.inter_video_loss`."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from evidential_prvr._checks import check_choice
from evidential_prvr._identification import UncertaintyGuidedIdentifier
from evidential_prvr._loss_gathers import batch_rows, shared_gathers
from evidential_prvr._module_bases import PresetModule
from evidential_prvr._settings import check_calibration_options, check_identification_options
from evidential_prvr.choices import (
    REDUCTIONS,
    CalibrationSet,
    DatasetName,
    EntropyMedian,
    Fusion,
    InterTerm,
    MatchRule,
    Preset,
    Reduction,
    TanhScaling,
)
from evidential_prvr.functional._identification import BranchPair
from evidential_prvr.functional._inter_video import InterVideoLossDetails, inter_video_loss, inter_video_loss_details
from evidential_prvr.presets import module_settings


class EvidentialRetrievalLoss(PresetModule):
    """Inter-video evidential loss with uncertainty-guided label calibration (Holmes Eq. 15-18).

    Holds the keyword arguments of :func:`~evidential_prvr.functional.inter_video_loss`, whose documentation
    gives the equations, as plain attributes (keyword-only, checked here; a value assigned later is checked
    when the module next runs); ``forward`` is one call of it, :meth:`details` one call of
    :func:`~evidential_prvr.functional.inter_video_loss_details`.

    :meth:`from_preset`: ``"paper"``: τ = 0.1, inside scaling, candidate median, any positive at the maximum,
    β = 0.3, γ = 0.2, uncertainty-dominant fusion. ``"release"`` with ``dataset="tvr" | "activitynet" |
    "charades"`` (or ``"act"``, ``"cha"``): outside scaling with τ = 0.05 / 0.04 / 0.08, batch lower
    median, ``argmax == label``, β = 0.3, γ = 0.2, uncertainty-dominant fusion.

    Parameters
    ----------
    beta : float
        :math:`\\beta \\in [0, 1]` of Eq. 11 (default 0.3).
    tau : float
        Evidence temperature of Eq. 3 (> 0).
    tanh_scaling : {"inside", "outside"}
        Evidence form, see :func:`~evidential_prvr.functional.evidence`.
    entropy_median : {"candidates", "batch"}
        Median rule of Eq. 12: over the precise candidates (paper) or the whole batch (release).
    matched : {"any_positive", "argmax"}
        The correctly matched set of Eq. 11, see :func:`~evidential_prvr.functional.correctly_matched`
        (paper: ``"any_positive"``; release: ``"argmax"``, ties to the first index).
    fusion : {"uncertainty_dominant", "confidence_dominant", "frame", "clip"}
        Partition fusion rule (Eq. 14, Table 3 rows 5-7).
    gamma : float
        Calibration weight γ ∈ [0, 1] of Eq. 15.
    calibrate : bool
        ``False`` is the warm-up stage: every query keeps its plain label (Table 3 row 8), and the
        identification runs only when details are asked for.
    calibration_set : {"refined", "initial"}
        Calibrate the fused :math:`S^o_n` (paper) or only the fused initial polysemous set :math:`\\tilde S_n`,
        before the entropy refinement (Table 3 row 9).
    terms : tuple of {"frame", "clip", "fused"}
        The :math:`L_U` terms that enter the loss (Table 3 rows 1-3 keep fewer).
    reduction : {"mean", "sum", "none"}
        Reduction of the per-query loss over the batch.
    validate_args : bool, optional
        Value checks of the inputs (host synchronisations); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`. Off, ``forward`` has no host
        synchronisation and compiles whole with :func:`torch.compile`.
    distributed : bool
        Multi-process training (:doc:`/guide/distributed`): each rank passes its queries' scores against
        every video of the global batch ``[Q_r, V_global]`` and global video indices; the identification
        (the Eq. 11-12 medians) and the loss run over the global batch.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr import EvidentialRetrievalLoss
    >>> loss_fn = EvidentialRetrievalLoss.from_preset("release", dataset="tvr")
    >>> frame_sim = torch.tensor([[0.8, 0.1], [0.2, 0.7]], requires_grad=True)
    >>> loss = loss_fn(frame_sim, frame_sim.detach(), torch.tensor([0, 1]))
    >>> loss.backward()

    References
    ----------
    Holmes (ICML 2026), §3.2, Eq. 15-18.
    """

    def __init__(
        self,
        *,
        beta: float = 0.3,
        tau: float = 0.1,
        tanh_scaling: TanhScaling = "inside",
        entropy_median: EntropyMedian = "candidates",
        matched: MatchRule = "any_positive",
        fusion: Fusion = "uncertainty_dominant",
        gamma: float = 0.2,
        calibrate: bool = True,
        calibration_set: CalibrationSet = "refined",
        terms: tuple[InterTerm, ...] = ("frame", "clip", "fused"),
        reduction: Reduction = "mean",
        validate_args: bool | None = None,
        distributed: bool = False,
    ) -> None:
        super().__init__()
        check_identification_options(beta=beta, tau=tau, tanh_scaling=tanh_scaling, entropy_median=entropy_median,
                                     matched=matched, fusion=fusion)
        terms = check_calibration_options(gamma=gamma, calibrate=calibrate, calibration_set=calibration_set,
                                          terms=terms)
        check_choice(reduction, "reduction", REDUCTIONS)
        self.beta = beta
        self.tau = tau
        self.tanh_scaling = tanh_scaling
        self.entropy_median = entropy_median
        self.matched = matched
        self.fusion = fusion
        self.gamma = gamma
        self.calibrate = calibrate
        self.calibration_set = calibration_set
        self.terms = terms
        self.reduction = reduction
        self.validate_args = validate_args
        self.distributed = bool(distributed)

    @classmethod
    def _preset_arguments(cls, preset: Preset, dataset: DatasetName | None) -> dict[str, Any]:
        return dataclasses.asdict(module_settings(preset, dataset).inter)

    def extra_repr(self) -> str:
        return (f"beta={self.beta}, tau={self.tau}, tanh_scaling={self.tanh_scaling!r}, "
                f"entropy_median={self.entropy_median!r}, matched={self.matched!r}, fusion={self.fusion!r}, "
                f"gamma={self.gamma}, calibrate={self.calibrate}, calibration_set={self.calibration_set!r}, "
                f"terms={self.terms!r}, reduction={self.reduction!r}")

    def identifier(self) -> UncertaintyGuidedIdentifier:
        """A :class:`~evidential_prvr.UncertaintyGuidedIdentifier` with this loss's identification settings."""
        return UncertaintyGuidedIdentifier(beta=self.beta, tau=self.tau, tanh_scaling=self.tanh_scaling,
                                           entropy_median=self.entropy_median, matched=self.matched,
                                           fusion=self.fusion, validate_args=self.validate_args,
                                           distributed=self.distributed)

    def forward(
        self,
        frame_sim: torch.Tensor,
        clip_sim: torch.Tensor,
        query_video: torch.Tensor,
        *,
        calibrate: bool | None = None,
        running_thresholds: BranchPair | None = None,
    ) -> torch.Tensor:
        """:math:`L_{inter}` of ``frame_sim``, ``clip_sim`` ``[Q, V]`` and the positives
        ``query_video`` (``LongTensor [Q]`` or ``{0, 1}`` matrix ``[Q, V]``). ``calibrate``, when given,
        replaces the module's ``calibrate`` for this call (how :class:`~evidential_prvr.HolmesCriterion` runs
        the warm-up stage). running_thresholds: the frame and clip branches' thresholds smoothed across
        batches (:func:`~evidential_prvr.functional.ema_thresholds`; how the criterion's threshold_decay
        reaches the identification), None: the in-batch rule of Eq. 11."""
        with shared_gathers():
            frame_sim, clip_sim, query_video = batch_rows(self.distributed, type(self).__name__, frame_sim, clip_sim,
                                                          query_video)
            return inter_video_loss(frame_sim, clip_sim, query_video, beta=self.beta, tau=self.tau,
                                    tanh_scaling=self.tanh_scaling, entropy_median=self.entropy_median,
                                    matched=self.matched, fusion=self.fusion, gamma=self.gamma,
                                    calibrate=self.calibrate if calibrate is None else calibrate,
                                    calibration_set=self.calibration_set, terms=self.terms, reduction=self.reduction,
                                    validate_args=self.validate_args, running_thresholds=running_thresholds)

    def details(
        self,
        frame_sim: torch.Tensor,
        clip_sim: torch.Tensor,
        query_video: torch.Tensor,
        *,
        calibrate: bool | None = None,
        running_thresholds: BranchPair | None = None,
    ) -> InterVideoLossDetails:
        """The arguments of :meth:`forward`; returns what L_inter computed
        (:class:`~evidential_prvr.InterVideoLossDetails`, whose ``loss`` is what :meth:`forward` returns; the
        identification runs even without calibration). Called directly, it does not run the module's hooks."""
        with shared_gathers():
            frame_sim, clip_sim, query_video = batch_rows(self.distributed, type(self).__name__, frame_sim, clip_sim,
                                                          query_video)
            return inter_video_loss_details(frame_sim, clip_sim, query_video, beta=self.beta, tau=self.tau,
                                            tanh_scaling=self.tanh_scaling, entropy_median=self.entropy_median,
                                            matched=self.matched, fusion=self.fusion, gamma=self.gamma,
                                            calibrate=self.calibrate if calibrate is None else calibrate,
                                            calibration_set=self.calibration_set, terms=self.terms,
                                            reduction=self.reduction, validate_args=self.validate_args,
                                            running_thresholds=running_thresholds)

    if TYPE_CHECKING:  # nn.Module.__call__ is untyped: calling the module is calling forward
        __call__ = forward
