"""Module of the inter-video evidential objective L_inter (Holmes Eq. 15-18): see
:func:`evidential_prvr.functional.inter_video_loss`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Literal, TypedDict, overload

import torch

from evidential_prvr._distributed import batch_rows, shared_gathers
from evidential_prvr._identification import UncertaintyGuidedIdentifier
from evidential_prvr._module_bases import _SettingsLoss
from evidential_prvr._overrides import (
    module_from_settings,
    settings_from_preset,
    settings_properties,
)
from evidential_prvr.functional._identification import BranchPair
from evidential_prvr.functional._inter_video import InterVideoLossDetails, InterVideoSettings, run_inter_video_loss
from evidential_prvr.presets import module_settings

if sys.version_info >= (3, 11):
    from typing import Unpack
else:
    from typing_extensions import Unpack

__all__ = ["EvidentialRetrievalLoss", "EvidentialRetrievalLossOverrides"]


class EvidentialRetrievalLossOverrides(TypedDict, total=False):
    """The keyword overrides of :meth:`EvidentialRetrievalLoss.from_preset`: the fields of
    :class:`~evidential_prvr.presets.InterVideoSettings`, ``reduction``, ``validate_args`` and ``distributed``."""

    beta: float
    tau: float
    tanh_scaling: str
    entropy_median: str
    matched: str
    fusion: str
    gamma: float
    calibrate: bool
    calibration_set: str
    terms: tuple[str, ...]
    reduction: str
    validate_args: bool | None
    distributed: bool


@settings_properties(InterVideoSettings)
class EvidentialRetrievalLoss(_SettingsLoss):
    """Inter-video evidential loss with uncertainty-guided label calibration (Holmes Eq. 15-18).

    Holds the hyperparameters of :func:`~evidential_prvr.functional.inter_video_loss`, whose
    documentation gives the equations; ``forward`` is one call of it.

    The hyperparameters are keyword-only, the fields of its :meth:`settings`
    (:class:`~evidential_prvr.presets.InterVideoSettings`), also readable and assignable as attributes.

    Parameters
    ----------
    beta : float
        Identification threshold β ∈ [0, 1] (Eq. 11).
    gamma : float
        Calibration weight γ ∈ [0, 1] (Eq. 15).
    tau : float
        Evidence temperature (> 0, Eq. 3).
    tanh_scaling : {"inside", "outside"}
        Evidence form: paper (``"inside"``) or official release (``"outside"``).
    entropy_median : {"candidates", "batch"}
        Median rule of Eq. 12: paper (``"candidates"``) or release (``"batch"``).
    matched : {"any_positive", "argmax"}
        Correctly matched set of Eq. 11: paper or release (``argmax == label``, ties to the first index).
    fusion : {"uncertainty_dominant", "confidence_dominant", "frame", "clip"}
        Partition fusion rule (Eq. 14, Table 3 rows 5-7).
    calibrate : bool
        ``False`` is the warm-up stage: every query keeps its plain label (Table 3 row 8). Switch it
        during training with the attribute (or use :class:`~evidential_prvr.HolmesCriterion`).
    calibration_set : {"refined", "initial"}
        Calibrate the fused :math:`S^o_n` (paper) or only the initial :math:`\\tilde S_n` (Table 3 row 9).
    terms : sequence of {"frame", "clip", "fused"}
        :math:`L_U` terms in the loss (Table 3 rows 1-3 keep fewer).
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

    if TYPE_CHECKING:  # the attributes that settings_properties adds (the fields of InterVideoSettings)
        beta: float
        tau: float
        tanh_scaling: str
        entropy_median: str
        matched: str
        fusion: str
        gamma: float
        calibrate: bool
        calibration_set: str
        terms: tuple[str, ...]
        _settings: InterVideoSettings

    def __init__(
        self,
        *,
        beta: float = 0.3,
        tau: float = 0.1,
        tanh_scaling: str = "inside",
        entropy_median: str = "candidates",
        matched: str = "any_positive",
        fusion: str = "uncertainty_dominant",
        gamma: float = 0.2,
        calibrate: bool = True,
        calibration_set: str = "refined",
        terms: tuple[str, ...] = ("frame", "clip", "fused"),
        reduction: str = "mean",
        validate_args: bool | None = None,
        distributed: bool = False,
    ) -> None:
        settings = InterVideoSettings(beta=beta, tau=tau, tanh_scaling=tanh_scaling, entropy_median=entropy_median,
                                      matched=matched, fusion=fusion, gamma=gamma, calibrate=calibrate,
                                      calibration_set=calibration_set, terms=terms)
        super().__init__(settings, reduction, validate_args)
        self.distributed = bool(distributed)

    @classmethod
    def from_settings(cls, settings: InterVideoSettings, *, reduction: str = "mean",
                      validate_args: bool | None = None, distributed: bool = False) -> EvidentialRetrievalLoss:
        """The loss of an :class:`~evidential_prvr.presets.InterVideoSettings` (e.g. a registry section)."""
        return module_from_settings(cls, InterVideoSettings, settings, reduction=reduction, validate_args=validate_args,
                                    distributed=distributed)

    @classmethod
    def from_preset(
        cls, preset: str, dataset: str | None = None, **overrides: Unpack[EvidentialRetrievalLossOverrides]
    ) -> EvidentialRetrievalLoss:
        """The paper's or the release's settings (:func:`evidential_prvr.presets.holmes_settings`;
        ``dataset=None``: TVR's); ``overrides`` (e.g. ``calibrate=False``) replace preset values, an
        unknown one raises ``TypeError``.

        ``"paper"``: τ = 0.1, inside scaling, candidate median, any positive at the maximum, β = 0.3,
        γ = 0.2, uncertainty-dominant fusion. ``"release"`` with ``dataset="tvr" | "activitynet" |
        "charades"`` (or ``"act"``, ``"cha"``): outside scaling with τ = 0.05 / 0.04 / 0.08, batch lower
        median, ``argmax == label``, β = 0.3, γ = 0.2, uncertainty-dominant fusion.
        """
        return settings_from_preset(cls, module_settings(preset, dataset).inter, overrides,
                                    ("reduction", "validate_args", "distributed"))

    def identifier(self) -> UncertaintyGuidedIdentifier:
        """A :class:`~evidential_prvr.UncertaintyGuidedIdentifier` with this loss's identification settings."""
        return UncertaintyGuidedIdentifier.from_settings(self._settings, validate_args=self.validate_args,
                                                         distributed=self.distributed)

    def settings(self) -> InterVideoSettings:
        """The loss's settings (frozen): the keyword arguments of
        :func:`~evidential_prvr.functional.inter_video_loss` as one object."""
        return self._settings

    @overload
    def forward(self, frame_sim: torch.Tensor, clip_sim: torch.Tensor, query_video: torch.Tensor,
                return_details: Literal[False] = ..., *, calibrate: bool | None = ...,
                running_thresholds: BranchPair | None = ...) -> torch.Tensor: ...

    @overload
    def forward(self, frame_sim: torch.Tensor, clip_sim: torch.Tensor, query_video: torch.Tensor,
                return_details: Literal[True], *, calibrate: bool | None = ...,
                running_thresholds: BranchPair | None = ...) -> InterVideoLossDetails: ...

    @overload
    def forward(self, frame_sim: torch.Tensor, clip_sim: torch.Tensor, query_video: torch.Tensor,
                return_details: bool = ..., *, calibrate: bool | None = ...,
                running_thresholds: BranchPair | None = ...) -> torch.Tensor | InterVideoLossDetails: ...

    def forward(
        self,
        frame_sim: torch.Tensor,
        clip_sim: torch.Tensor,
        query_video: torch.Tensor,
        return_details: bool = False,
        *,
        calibrate: bool | None = None,
        running_thresholds: BranchPair | None = None,
    ) -> torch.Tensor | InterVideoLossDetails:
        """:math:`L_{inter}` of ``frame_sim``, ``clip_sim`` ``[Q, V]`` and the positives ``query_video``
        (``LongTensor [Q]`` or ``{0, 1}`` matrix ``[Q, V]``); details on request. ``calibrate``, when
        given, replaces the module's ``calibrate`` for this call (how :class:`~evidential_prvr.HolmesCriterion`
        runs the warm-up stage). ``running_thresholds``: the frame and clip branches' thresholds smoothed
        across batches (:func:`~evidential_prvr.functional.ema_thresholds`; how the criterion's
        ``threshold_decay`` reaches the identification), ``None``: the in-batch rule of Eq. 11."""
        with shared_gathers():
            frame_sim, clip_sim, query_video = batch_rows(self.distributed, type(self).__name__, frame_sim, clip_sim,
                                                          query_video)
            return run_inter_video_loss(frame_sim, clip_sim, query_video, self._settings, self.reduction,
                                        return_details, self.validate_args, calibrate=calibrate,
                                        running=running_thresholds)

    if TYPE_CHECKING:  # nn.Module.__call__ is untyped: calling the module is calling forward
        __call__ = forward
