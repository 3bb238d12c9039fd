"""Module of intra-video evidential learning L_intra (Holmes §3.3): see
:func:`evidential_prvr.functional.intra_video_loss`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from evidential_prvr._distributed import gather_rows, lift_rows, shared_gathers, warn_per_rank
from evidential_prvr._docs import VALUE_CHECKS, insert_docs
from evidential_prvr._entry_points import details_method, loss_method
from evidential_prvr._flexible_ot import FlexibleOT
from evidential_prvr._module_bases import LossOptions, _SettingsLoss
from evidential_prvr._overrides import (
    module_from_settings,
    settings_constructor,
    settings_fields,
    settings_of,
    settings_properties,
)
from evidential_prvr.choices import DatasetName, IntraAssignment, Preset, Reduction, TanhScaling
from evidential_prvr.distributed import is_distributed
from evidential_prvr.functional._intra_video import (
    INTRA_PARAMETERS,
    IntraVideoLossDetails,
    IntraVideoSettings,
    run_intra_video_loss,
)
from evidential_prvr.presets import module_settings


@settings_properties(IntraVideoSettings)
@insert_docs(intra=INTRA_PARAMETERS, value_checks=VALUE_CHECKS)
class IntraVideoEvidentialLoss(_SettingsLoss[IntraVideoSettings]):
    """L_intra: evidential loss of each query over its video's clips against a transport label (Holmes §3.3).

    Holds a :class:`~evidential_prvr.FlexibleOT` (the transport producing the label) and the evidence
    settings of :func:`~evidential_prvr.functional.intra_video_loss`, whose documentation gives the
    equations; ``forward`` is one call of it. Its :meth:`settings` are the evidence settings; the
    transport's are ``self.fot.settings()``.

    :meth:`from_preset`: ``"release"``: ``FlexibleOT.from_preset("release", dataset)``,
    :math:`\\tau_{\\text{intra}}` = 0.06 (TVR) or 0.08 (ActivityNet, Charades), ``"outside"`` scaling, evidence
    of the min-max normalised similarities. ``"paper"``: ``FlexibleOT.from_preset("paper")`` and the evidence of
    Eq. 3 as written (``"inside"``, :math:`\\tau = 0.1`, raw similarities). Its ``fot`` (also positional)
    replaces the preset's transport.

    Parameters
    ----------
    fot : FlexibleOT, optional
        The transport settings (default ``FlexibleOT()``, the release's). Its ``normalize`` also
        decides which similarities feed the evidence. Its ``grad`` is ignored: the label is always a
        stop-gradient target.
    {intra}
    reduction : {"mean", "sum", "none"}
        Over the videos with a valid query (``"none"``: ``[B]``).
    {value_checks}
    distributed : bool
        Multi-process training (:doc:`/guide/distributed`): each rank passes its own videos' batch; the
        per-video terms stay local and the reduction runs over the videos of every rank. For the
        release's ``minmax_over="block"`` build the batch with the global ``max_queries`` (as
        :class:`~evidential_prvr.HolmesCriterion` does), since the padded block enters the min-max.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr import IntraVideoEvidentialLoss
    >>> loss_fn = IntraVideoEvidentialLoss.from_preset("release", dataset="tvr")
    >>> sim = torch.rand(4, 5, 32, requires_grad=True)
    >>> loss_fn(sim, torch.ones(4, 5, dtype=torch.bool)).backward()

    References
    ----------
    Holmes (ICML 2026), §3.3 and Table 3 (rows 10-12).
    """

    if TYPE_CHECKING:  # the attributes that settings_properties adds (the fields of IntraVideoSettings)
        tau: float
        tanh_scaling: TanhScaling
        assignment: IntraAssignment

    @dataclass(frozen=True, kw_only=True)
    class _Arguments(LossOptions, IntraVideoSettings):
        """The constructor's arguments: the transport (also positional), the evidence
        settings and the loss options."""

        fot: FlexibleOT | None = field(default=None, kw_only=False)

    @settings_constructor(_Arguments)
    def __init__(self, arguments: _Arguments) -> None:
        fot = FlexibleOT() if arguments.fot is None else arguments.fot
        if not isinstance(fot, FlexibleOT):
            raise TypeError(f"fot must be a FlexibleOT, got {type(fot).__name__}")
        super().__init__(settings_of(arguments, IntraVideoSettings), arguments)
        if arguments.assignment == "fot" and fot.dustbin_quantile is None:
            raise ValueError("assignment='fot' needs a transport with a dustbin; got fot.dustbin_quantile=None")
        self.fot = fot

    @classmethod
    def from_settings(cls, settings: IntraVideoSettings, fot: FlexibleOT | None = None, *, reduction: Reduction = "mean",
                      validate_args: bool | None = None, distributed: bool = False) -> IntraVideoEvidentialLoss:
        """The loss of an :class:`~evidential_prvr.presets.IntraVideoSettings` (e.g. a registry section) and
        a transport (default ``FlexibleOT()``)."""
        return module_from_settings(cls, IntraVideoSettings, settings, fot=fot, reduction=reduction,
                                    validate_args=validate_args, distributed=distributed)

    @classmethod
    def _preset_arguments(cls, preset: Preset, dataset: DatasetName | None) -> dict[str, Any]:
        sections = module_settings(preset, dataset)
        return {**settings_fields(sections.intra), "fot": FlexibleOT.from_settings(sections.transport)}

    def _loss(
        self,
        details: bool,
        sim: torch.Tensor,
        query_mask: torch.Tensor | None = None,
        clip_mask: torch.Tensor | None = None,
    ) -> torch.Tensor | IntraVideoLossDetails:
        if not (self.distributed and is_distributed()):
            if not self.distributed:
                warn_per_rank(type(self).__name__)
            return run_intra_video_loss(sim, query_mask, clip_mask, self._settings, self.fot.settings(),
                                        self.reduction, details, self.validate_args)
        local = run_intra_video_loss(sim, query_mask, clip_mask, self._settings, self.fot.settings(), "none", True,
                                     self.validate_args)
        assert isinstance(local, IntraVideoLossDetails)
        has_query = (torch.ones(sim.shape[:1], dtype=torch.bool, device=sim.device) if query_mask is None
                     else (query_mask != 0).any(dim=1))
        with shared_gathers():  # the per-video terms stay local; the reduction is over every rank's videos
            per_video = lift_rows(local.per_video, "videos")
            has_query = gather_rows(has_query, "videos")
        if self.reduction == "none":
            loss = per_video
        else:
            loss = (per_video * has_query).sum()
            if self.reduction == "mean":
                loss = loss / has_query.sum().clamp_min(1).to(per_video.dtype)
        return dataclasses.replace(local, loss=loss) if details else loss

    forward = loss_method(_loss, """L_intra of ``sim [B, Mq, Mc]`` with the masks ``query_mask [B, Mq]`` and
        ``clip_mask [B, Mc]`` (e.g. from :func:`~evidential_prvr.build_intra_video_batch`).""")
    details = details_method(_loss, IntraVideoLossDetails, """The arguments of :meth:`forward`; returns what
        L_intra computed (:class:`~evidential_prvr.IntraVideoLossDetails`, whose ``loss`` is what
        :meth:`forward` returns). Called directly, it does not run the module's hooks.""")

    if TYPE_CHECKING:  # nn.Module.__call__ is untyped: calling the module is calling forward
        __call__ = forward
