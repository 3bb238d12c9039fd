"""Module of intra-video evidential learning L_intra (Holmes §3.3): see
:func:`evidential_prvr.functional.intra_video_loss`."""

from __future__ import annotations

import torch
from torch import nn

from evidential_prvr._checks import check_choice, check_positive
from evidential_prvr._flexible_ot import FlexibleOT
from evidential_prvr.functional._dirichlet_loss import REDUCTIONS
from evidential_prvr.functional._evidence import TANH_SCALINGS
from evidential_prvr.functional._intra_video import INTRA_ASSIGNMENTS, IntraVideoLossDetails, intra_video_loss
from evidential_prvr.presets import apply_overrides, holmes_settings

__all__ = ["IntraVideoEvidentialLoss"]


class IntraVideoEvidentialLoss(nn.Module):
    """L_intra: evidential loss of each query over its video's clips against a transport label (Holmes §3.3).

    Holds a :class:`~evidential_prvr.FlexibleOT` (the transport producing the label) and the evidence
    settings of :func:`~evidential_prvr.functional.intra_video_loss`, whose documentation gives the
    equations; ``forward`` is one call of it.

    Parameters
    ----------
    fot : FlexibleOT, optional
        The transport settings (default ``FlexibleOT()``, the release's). Its ``normalize`` also
        decides which similarities feed the evidence. Its ``grad`` is ignored: the label is always a
        stop-gradient target.
    tau : float
        Evidence temperature :math:`\\tau_{\\text{intra}}`.
    tanh_scaling : {"outside", "inside"}
        Evidence form (release: ``"outside"``).
    assignment : {"fot", "ot", "softmax"}
        The soft label: flexible transport (default), OT without dustbin (Table 3 row 12) or a
        softmax over the clips at the transport's ε (row 11).
    reduction : {"mean", "sum", "none"}
        Over the videos with a valid query (``"none"``: ``[B]``).
    validate_args : bool, optional
        Value checks of the inputs (host synchronisations); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`.

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
        tau: float = 0.06,
        tanh_scaling: str = "outside",
        assignment: str = "fot",
        reduction: str = "mean",
        validate_args: bool | None = None,
    ) -> None:
        super().__init__()
        if fot is None:
            fot = FlexibleOT()
        if not isinstance(fot, FlexibleOT):
            raise TypeError(f"fot must be a FlexibleOT, got {type(fot).__name__}")
        check_positive(tau, "tau")
        check_choice(tanh_scaling, "tanh_scaling", TANH_SCALINGS)
        check_choice(assignment, "assignment", INTRA_ASSIGNMENTS)
        check_choice(reduction, "reduction", REDUCTIONS)
        if assignment == "fot" and fot.dustbin_quantile is None:
            raise ValueError("assignment='fot' needs a transport with a dustbin; got fot.dustbin_quantile=None")
        self.fot = fot
        self.tau = float(tau)
        self.tanh_scaling = tanh_scaling
        self.assignment = assignment
        self.reduction = reduction
        self.validate_args = validate_args

    @classmethod
    def from_preset(cls, preset: str, dataset: str | None = None, **overrides: object) -> IntraVideoEvidentialLoss:
        """The release's or the paper's settings (:func:`evidential_prvr.presets.holmes_settings`).

        ``"release"``: ``FlexibleOT.from_preset("release", dataset)``, :math:`\\tau_{\\text{intra}}` = 0.06 (TVR)
        or 0.08 (ActivityNet, Charades), ``"outside"`` scaling, evidence of the min-max normalised
        similarities. ``"paper"``: ``FlexibleOT.from_preset("paper")`` and the evidence of Eq. 3 as
        written (``"inside"``, :math:`\\tau = 0.1`, raw similarities). ``overrides`` replace any
        constructor argument (``tau=``, ``assignment=``, ``fot=``, ...).
        """
        settings = holmes_settings(preset, dataset)
        kwargs = dict(fot=FlexibleOT.from_preset(preset, dataset), tau=settings.intra.tau,
                      tanh_scaling=settings.intra.tanh_scaling, assignment=settings.intra.assignment,
                      reduction="mean", validate_args=None)
        return cls(**apply_overrides(kwargs, overrides, cls.__name__))

    def settings(self) -> dict[str, object]:
        """The keyword arguments of :func:`~evidential_prvr.functional.intra_video_loss` this module passes."""
        transport = {k: v for k, v in self.fot.settings().items() if k != "grad"}
        return dict(tau=self.tau, tanh_scaling=self.tanh_scaling, assignment=self.assignment, **transport,
                    reduction=self.reduction)

    def extra_repr(self) -> str:
        return f"tau={self.tau}, tanh_scaling={self.tanh_scaling!r}, assignment={self.assignment!r}, " \
               f"reduction={self.reduction!r}"

    def forward(
        self,
        sim: torch.Tensor,
        query_mask: torch.Tensor | None = None,
        clip_mask: torch.Tensor | None = None,
        return_details: bool = False,
    ) -> torch.Tensor | IntraVideoLossDetails:
        """L_intra of ``sim [B, Mq, Mc]`` with the masks ``query_mask [B, Mq]`` and ``clip_mask [B, Mc]``
        (e.g. from :func:`~evidential_prvr.build_intra_video_batch`); details on request."""
        return intra_video_loss(sim, query_mask, clip_mask, **self.settings(), return_details=return_details,
                                validate_args=self.validate_args)
