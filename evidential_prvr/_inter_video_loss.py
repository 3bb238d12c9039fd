"""Module of the inter-video evidential objective L_inter (Holmes Eq. 15-18): see
:func:`evidential_prvr.functional.inter_video_loss`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from evidential_prvr._distributed import batch_rows, shared_gathers
from evidential_prvr._docs import insert_docs
from evidential_prvr._entry_points import details_method, loss_method
from evidential_prvr._identification import UncertaintyGuidedIdentifier, _IdentificationAttributes
from evidential_prvr._module_bases import LossOptions, _SettingsLoss
from evidential_prvr._overrides import (
    module_from_settings,
    settings_constructor,
    settings_fields,
    settings_of,
    settings_properties,
)
from evidential_prvr.choices import CalibrationSet, DatasetName, InterTerm, Preset, Reduction
from evidential_prvr.functional._identification import IDENTIFICATION_PARAMETERS, BranchPair
from evidential_prvr.functional._inter_video import (
    CALIBRATION_PARAMETERS,
    InterVideoLossDetails,
    InterVideoSettings,
    run_inter_video_loss,
)
from evidential_prvr.presets import module_settings


@settings_properties(InterVideoSettings)
@insert_docs(identification=IDENTIFICATION_PARAMETERS, calibration=CALIBRATION_PARAMETERS)
class EvidentialRetrievalLoss(_SettingsLoss[InterVideoSettings], _IdentificationAttributes):
    """Inter-video evidential loss with uncertainty-guided label calibration (Holmes Eq. 15-18).

    Holds the hyperparameters of :func:`~evidential_prvr.functional.inter_video_loss`, whose
    documentation gives the equations; ``forward`` is one call of it.

    The hyperparameters are keyword-only, the fields of its :meth:`settings`
    (:class:`~evidential_prvr.presets.InterVideoSettings`: the keyword arguments of
    :func:`~evidential_prvr.functional.inter_video_loss` as one object), also readable and assignable as
    attributes.

    :meth:`from_preset`: ``"paper"``: τ = 0.1, inside scaling, candidate median, any positive at the maximum,
    β = 0.3, γ = 0.2, uncertainty-dominant fusion. ``"release"`` with ``dataset="tvr" | "activitynet" |
    "charades"`` (or ``"act"``, ``"cha"``): outside scaling with τ = 0.05 / 0.04 / 0.08, batch lower
    median, ``argmax == label``, β = 0.3, γ = 0.2, uncertainty-dominant fusion.

    Parameters
    ----------
    {identification}
    {calibration}
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
        gamma: float
        calibrate: bool
        calibration_set: CalibrationSet
        terms: tuple[InterTerm, ...]

    @dataclass(frozen=True, kw_only=True)
    class _Arguments(LossOptions, InterVideoSettings):
        """The constructor's arguments: the L_inter settings and the loss options."""

    @settings_constructor(_Arguments)
    def __init__(self, arguments: _Arguments) -> None:
        super().__init__(settings_of(arguments, InterVideoSettings), arguments)

    @classmethod
    def from_settings(cls, settings: InterVideoSettings, *, reduction: Reduction = "mean",
                      validate_args: bool | None = None, distributed: bool = False) -> EvidentialRetrievalLoss:
        """The loss of an :class:`~evidential_prvr.presets.InterVideoSettings` (e.g. a registry section)."""
        return module_from_settings(cls, InterVideoSettings, settings, reduction=reduction, validate_args=validate_args,
                                    distributed=distributed)

    @classmethod
    def _preset_arguments(cls, preset: Preset, dataset: DatasetName | None) -> dict[str, Any]:
        return settings_fields(module_settings(preset, dataset).inter)

    def identifier(self) -> UncertaintyGuidedIdentifier:
        """A :class:`~evidential_prvr.UncertaintyGuidedIdentifier` with this loss's identification settings."""
        return UncertaintyGuidedIdentifier.from_settings(self._settings, validate_args=self.validate_args,
                                                         distributed=self.distributed)

    def _loss(
        self,
        details: bool,
        frame_sim: torch.Tensor,
        clip_sim: torch.Tensor,
        query_video: torch.Tensor,
        *,
        calibrate: bool | None = None,
        running_thresholds: BranchPair | None = None,
    ) -> torch.Tensor | InterVideoLossDetails:
        with shared_gathers():
            frame_sim, clip_sim, query_video = batch_rows(self.distributed, type(self).__name__, frame_sim, clip_sim,
                                                          query_video)
            return run_inter_video_loss(frame_sim, clip_sim, query_video, self._settings, self.reduction,
                                        details, self.validate_args, calibrate=calibrate,
                                        running=running_thresholds)

    forward = loss_method(_loss, """:math:`L_{inter}` of ``frame_sim``, ``clip_sim`` ``[Q, V]`` and the positives
        ``query_video`` (``LongTensor [Q]`` or ``{0, 1}`` matrix ``[Q, V]``). ``calibrate``, when given,
        replaces the module's ``calibrate`` for this call (how :class:`~evidential_prvr.HolmesCriterion` runs
        the warm-up stage). running_thresholds: the frame and clip branches' thresholds smoothed across
        batches (:func:`~evidential_prvr.functional.ema_thresholds`; how the criterion's threshold_decay
        reaches the identification), None: the in-batch rule of Eq. 11.""")
    details = details_method(_loss, InterVideoLossDetails, """The arguments of :meth:`forward`; returns what
        L_inter computed (:class:`~evidential_prvr.InterVideoLossDetails`, whose ``loss`` is what :meth:`forward`
        returns; the identification runs even without calibration). Called directly, it does not run the
        module's hooks.""")

    if TYPE_CHECKING:  # nn.Module.__call__ is untyped: calling the module is calling forward
        __call__ = forward
