"""Intra-video evidential learning L_intra (Holmes §3.3).

Each query of a video is an :math:`M_c`-way classification over the video's clips. The evidence of
its similarities (Holmes Eq. 3-4) is trained with the evidential loss L_U (Eq. 17) towards a soft,
stop-gradient label: the query's row of the flexible transport plan (Eq. 20), or the ablations of
Table 3 (softmax over clips, OT without dustbin).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from evidential_prvr._checks import check_choice, check_positive, compute_dtype
from evidential_prvr.flexible_ot import FlexibleOT, FlexibleOTResult
from evidential_prvr.functional.dirichlet_loss import dirichlet_mse_kernel
from evidential_prvr.functional.evidence import TANH_SCALINGS, evidence

__all__ = ["IntraVideoEvidentialLoss", "IntraVideoLossDetails", "INTRA_ASSIGNMENTS"]

INTRA_ASSIGNMENTS = ("fot", "ot", "softmax")
"""Soft labels of :class:`IntraVideoEvidentialLoss` (Holmes Table 3, rows 11-12 and the default)."""

_RELEASE_TAU = {"tvr": 0.06, "activitynet": 0.08, "charades": 0.08}


@dataclass
class IntraVideoLossDetails:
    """Everything :class:`IntraVideoEvidentialLoss` computed.

    Attributes
    ----------
    loss : torch.Tensor
        Scalar L_intra.
    per_query : torch.Tensor
        ``[B, Mq]`` L_U of every query (0 for padded queries).
    per_video : torch.Tensor
        ``[B]`` mean of ``per_query`` over each video's valid queries (0 for a video without any).
    alpha : torch.Tensor
        ``[B, Mq, Mc]`` Dirichlet parameters; 0 at padded clips (they are not classes) and padded queries.
    target : torch.Tensor
        ``[B, Mq, Mc]`` the stop-gradient soft labels (rows sum to 1 over valid clips).
    transport : FlexibleOTResult or None
        The transport result (None for ``assignment="softmax"``).
    """

    loss: torch.Tensor
    per_query: torch.Tensor
    per_video: torch.Tensor
    alpha: torch.Tensor
    target: torch.Tensor
    transport: FlexibleOTResult | None


class IntraVideoEvidentialLoss(nn.Module):
    """L_intra: evidential loss of each query over its video's clips against a transport label.

    For query :math:`i` of video :math:`k` with :math:`K_k` valid clips and similarities
    :math:`\\bar s_{ij}` (those the transport used: min-max normalised under the release settings),

    .. math::

        \\alpha_{ij} = e(\\bar s_{ij}; \\tau) + 1 \\ \\text{(Eq. 3-4)}, \\qquad
        L_{\\mathrm{intra}} = \\frac{1}{|\\mathcal V|} \\sum_{k\\in\\mathcal V} \\frac{1}{M_q^{(k)}}
        \\sum_{i} L_U\\big(\\boldsymbol\\alpha_i, \\hat{\\mathbf y}_i\\big) \\ \\text{(Eq. 17)},

    where :math:`\\hat{\\mathbf y}_i` is the query's row of the flexible transport plan normalised
    over clips (Eq. 20), detached, and :math:`\\mathcal V` the videos with at least one valid query.
    Padded clips are not classes: the classification of a query is :math:`K_k`-way over its video's
    valid clips (their :math:`\\alpha` is set to 0, which removes them exactly from :math:`S` and the
    sum of Eq. 17). The evidence keeps its gradient; the label does not.

    Parameters
    ----------
    fot : FlexibleOT, optional
        The transport producing the label (default ``FlexibleOT()``, the release settings). Its
        ``normalize`` also decides which similarities feed the evidence.
    tau : float
        Evidence temperature :math:`\\tau_{\\text{intra}}`.
    tanh_scaling : {"outside", "inside"}
        Evidence form, see :func:`~evidential_prvr.functional.evidence` (release: ``"outside"``).
    assignment : {"fot", "ot", "softmax"}
        ``"fot"``: flexible transport with dustbin (default); ``"ot"``: the same transport without
        dustbin (Table 3 row 12); ``"softmax"``: :math:`\\mathrm{softmax}_j(\\bar s_{ij}/\\varepsilon)`
        over the valid clips with the transport's :math:`\\varepsilon` (Table 3 row 11; the paper
        does not give its temperature).
    """

    def __init__(
        self,
        fot: FlexibleOT | None = None,
        tau: float = 0.08,
        tanh_scaling: str = "outside",
        assignment: str = "fot",
    ) -> None:
        super().__init__()
        if fot is None:
            fot = FlexibleOT()
        if not isinstance(fot, FlexibleOT):
            raise TypeError(f"fot must be a FlexibleOT, got {type(fot).__name__}")
        check_positive(tau, "tau")
        check_choice(tanh_scaling, "tanh_scaling", TANH_SCALINGS)
        check_choice(assignment, "assignment", INTRA_ASSIGNMENTS)
        self.fot = fot
        self.tau = float(tau)
        self.tanh_scaling = tanh_scaling
        self.assignment = assignment
        self._transport = fot.without_dustbin() if assignment == "ot" else fot

    @classmethod
    def from_preset(cls, preset: str, dataset: str = "tvr", assignment: str = "fot") -> IntraVideoEvidentialLoss:
        """The release or paper settings.

        ``"release"``: ``FlexibleOT.from_preset("release")``, :math:`\\tau_{\\text{intra}}` = 0.06 (TVR)
        or 0.08 (ActivityNet, Charades), ``"outside"`` scaling, evidence of the min-max normalised
        similarities. ``"paper"``: ``FlexibleOT.from_preset("paper")`` and the evidence of Eq. 3 as
        written (``"inside"``, :math:`\\tau = 0.1`, raw similarities); ``dataset`` is ignored.
        """
        check_choice(preset, "preset", ("release", "paper"))
        check_choice(dataset, "dataset", tuple(_RELEASE_TAU))
        if preset == "release":
            return cls(FlexibleOT.from_preset("release"), _RELEASE_TAU[dataset], "outside", assignment)
        return cls(FlexibleOT.from_preset("paper"), 0.1, "inside", assignment)

    def extra_repr(self) -> str:
        return f"tau={self.tau}, tanh_scaling={self.tanh_scaling!r}, assignment={self.assignment!r}"

    def forward(
        self,
        sim: torch.Tensor,
        query_mask: torch.Tensor | None = None,
        clip_mask: torch.Tensor | None = None,
        return_details: bool = False,
    ) -> torch.Tensor | IntraVideoLossDetails:
        """L_intra of a batch of videos.

        Parameters
        ----------
        sim : torch.Tensor
            ``[B, Mq, Mc]`` query-clip similarities of each video (e.g. from
            :func:`~evidential_prvr.build_intra_video_batch`).
        query_mask, clip_mask : torch.Tensor, optional
            ``[B, Mq]`` and ``[B, Mc]`` validity masks (see :class:`~evidential_prvr.FlexibleOT`).
        return_details : bool
            Return an :class:`IntraVideoLossDetails` instead of the scalar.

        Returns
        -------
        torch.Tensor or IntraVideoLossDetails
            The scalar loss (0 when no video has a valid query), in the compute dtype.
        """
        fot = self._transport
        qmask, cmask, valid = fot._validate(sim, query_mask, clip_mask)
        dense = query_mask is None and clip_mask is None
        if self.assignment == "softmax":
            transport = None
            similarity = fot._similarity(sim.to(compute_dtype(sim)), valid, dense)
            logits = (similarity.detach() / fot.epsilon).masked_fill(~cmask.unsqueeze(1), float("-inf"))
            target = torch.where(valid, torch.softmax(logits, dim=2), torch.zeros_like(similarity))
        else:
            transport = fot._solve(sim, qmask, cmask, valid, dense)
            similarity = transport.similarity  # keeps its gradient
            target = transport.assignment.detach()

        alpha = evidence(similarity, self.tau, self.tanh_scaling) + 1.0
        alpha = torch.where(valid, alpha, torch.zeros_like(alpha))
        # a padded query row has alpha = 0 everywhere; give it a harmless dummy row and mask it out
        safe_alpha = torch.where(qmask.unsqueeze(2), alpha, torch.ones_like(alpha))
        per_query = torch.where(qmask, dirichlet_mse_kernel(safe_alpha, target), torch.zeros_like(alpha[..., 0]))
        n_valid = qmask.sum(dim=1)
        per_video = per_query.sum(dim=1) / n_valid.clamp_min(1).to(per_query.dtype)
        has_query = n_valid > 0
        loss = (per_video * has_query).sum() / has_query.sum().clamp_min(1).to(per_query.dtype)
        if not return_details:
            return loss
        return IntraVideoLossDetails(loss, per_query, per_video, alpha, target, transport)
