"""Module of intra-video evidential learning L_intra (Holmes §3.3): see
:func:`evidential_prvr.functional.intra_video_loss`."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from evidential_prvr._checks import check_choice
from evidential_prvr._flexible_ot import FlexibleOT
from evidential_prvr._loss_gathers import gather_rows, lift_rows, shared_gathers, warn_per_rank
from evidential_prvr._module_bases import PresetModule
from evidential_prvr._settings import check_intra_options
from evidential_prvr.choices import REDUCTIONS, DatasetName, IntraAssignment, Preset, Reduction, TanhScaling
from evidential_prvr.distributed import is_distributed
from evidential_prvr.functional._intra_video import IntraVideoLossDetails, intra_video_loss_details
from evidential_prvr.presets import module_settings


class IntraVideoEvidentialLoss(PresetModule):
    """L_intra: evidential loss of each query over its video's clips against a transport label (Holmes §3.3).

    Holds a :class:`~evidential_prvr.FlexibleOT` (the transport producing the label, ``self.fot``) and the evidence
    settings of :func:`~evidential_prvr.functional.intra_video_loss`, whose documentation gives the equations, as
    plain attributes (checked here; a value assigned later, here or on ``self.fot``, is checked when the module
    next runs). :meth:`details` is one call of :func:`~evidential_prvr.functional.intra_video_loss_details` with
    them and the transport's (its reduction over every rank's videos with ``distributed=True``); ``forward``
    returns its ``loss``.

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
    tau : float
        Evidence temperature :math:`\\tau_{\\text{intra}} > 0` of the query-clip evidence.
    tanh_scaling : {"outside", "inside"}
        Evidence form, see :func:`~evidential_prvr.functional.evidence` (release: ``"outside"``).
    assignment : {"fot", "ot", "softmax"}
        ``"fot"``: flexible transport with dustbin (default); ``"ot"``: the same transport without
        dustbin (Table 3 row 12); ``"softmax"``: :math:`\\mathrm{softmax}_j(\\bar s_{ij}/\\varepsilon)`
        over the valid clips with the transport's :math:`\\varepsilon` (Table 3 row 11; the paper does
        not give its temperature).
    reduction : {"mean", "sum", "none"}
        Over the videos with a valid query (``"none"``: ``[B]``).
    validate_args : bool, optional
        Value checks (host synchronisations); ``None`` follows :func:`evidential_prvr.set_default_validate_args`.
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

    def __init__(
        self,
        fot: FlexibleOT | None = None,
        *,
        tau: float = 0.06,
        tanh_scaling: TanhScaling = "outside",
        assignment: IntraAssignment = "fot",
        reduction: Reduction = "mean",
        validate_args: bool | None = None,
        distributed: bool = False,
    ) -> None:
        super().__init__()
        check_intra_options(tau=tau, tanh_scaling=tanh_scaling, assignment=assignment)
        check_choice(reduction, "reduction", REDUCTIONS)
        fot = FlexibleOT() if fot is None else fot
        if not isinstance(fot, FlexibleOT):
            raise TypeError(f"fot must be a FlexibleOT, got {type(fot).__name__}")
        if assignment == "fot" and fot.dustbin_quantile is None:
            raise ValueError("assignment='fot' needs a transport with a dustbin; got fot.dustbin_quantile=None")
        self.fot = fot
        self.tau = tau
        self.tanh_scaling = tanh_scaling
        self.assignment = assignment
        self.reduction = reduction
        self.validate_args = validate_args
        self.distributed = bool(distributed)

    @classmethod
    def _preset_arguments(cls, preset: Preset, dataset: DatasetName | None) -> dict[str, Any]:
        sections = module_settings(preset, dataset)
        return {**dataclasses.asdict(sections.intra), "fot": FlexibleOT(**dataclasses.asdict(sections.transport))}

    def extra_repr(self) -> str:
        return (f"tau={self.tau}, tanh_scaling={self.tanh_scaling!r}, assignment={self.assignment!r}, "
                f"reduction={self.reduction!r}")

    def forward(
        self, sim: torch.Tensor, query_mask: torch.Tensor | None = None, clip_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """L_intra of ``sim [B, Mq, Mc]`` with the masks ``query_mask [B, Mq]`` and
        ``clip_mask [B, Mc]`` (e.g. from :func:`~evidential_prvr.build_intra_video_batch`)."""
        return self.details(sim, query_mask, clip_mask).loss

    def details(
        self, sim: torch.Tensor, query_mask: torch.Tensor | None = None, clip_mask: torch.Tensor | None = None
    ) -> IntraVideoLossDetails:
        """The arguments of :meth:`forward`; returns what L_intra computed
        (:class:`~evidential_prvr.IntraVideoLossDetails`, whose ``loss`` is what :meth:`forward` returns).
        Called directly, it does not run the module's hooks."""
        across_ranks = self.distributed and is_distributed()
        if not self.distributed:
            warn_per_rank(type(self).__name__)
        fot = self.fot
        local = intra_video_loss_details(
            sim, query_mask, clip_mask, tau=self.tau, tanh_scaling=self.tanh_scaling, assignment=self.assignment,
            epsilon=fot.epsilon, n_iters=fot.n_iters, dustbin_quantile=fot.dustbin_quantile, normalize=fot.normalize,
            minmax_over=fot.minmax_over, marginals=fot.marginals, tol=fot.tol, method=fot.method,
            reduction="none" if across_ranks else self.reduction, validate_args=self.validate_args)
        if not across_ranks:
            return local
        check_choice(self.reduction, "reduction", REDUCTIONS)
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
        return dataclasses.replace(local, loss=loss)

    if TYPE_CHECKING:  # nn.Module.__call__ is untyped: calling the module is calling forward
        __call__ = forward
