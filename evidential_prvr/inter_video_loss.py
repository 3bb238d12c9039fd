"""Inter-video evidential learning objective L_inter (Holmes Eq. 15-18)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from evidential_prvr._checks import check_choice, check_in_range, compute_dtype
from evidential_prvr.functional.dempster_shafer import ds_combine_kernel
from evidential_prvr.functional.dirichlet_loss import REDUCTIONS, dirichlet_mse_kernel, reduce_rows
from evidential_prvr.functional.evidence import evidence_kernel
from evidential_prvr.functional.targets import normalized_target
from evidential_prvr.identification import (
    Identification,
    QueryType,
    UncertaintyGuidedIdentifier,
    check_similarity_pair,
)
from evidential_prvr.presets import holmes_settings

__all__ = ["CALIBRATION_SETS", "InterVideoLossDetails", "EvidentialRetrievalLoss"]

CALIBRATION_SETS = ("refined", "initial")
"""Which polysemous set gets calibrated labels: S^o_n (Eq. 15) or the initial S̃_n (Table 3 row 9)."""


@dataclass
class InterVideoLossDetails:
    """Everything :class:`EvidentialRetrievalLoss` computed for one batch.

    Attributes
    ----------
    loss : torch.Tensor
        :math:`L_{inter}` (Eq. 18), reduced as the module's ``reduction`` says.
    frame_loss, clip_loss, fused_loss : torch.Tensor
        The three :math:`L_U` terms (Eq. 17) on the frame, clip and DS-fused opinions.
    identification : Identification
        Query types and per-branch statistics (Eq. 10-14), detached.
    target : torch.Tensor
        Calibrated labels :math:`\\hat{\\mathbf{y}}` ``[B, K]`` (Eq. 15), detached.
    frame_alpha, clip_alpha, fused_alpha : torch.Tensor
        Dirichlet parameters ``[B, K]`` of the three opinions (with gradients).
    """

    loss: torch.Tensor
    frame_loss: torch.Tensor
    clip_loss: torch.Tensor
    fused_loss: torch.Tensor
    identification: Identification
    target: torch.Tensor
    frame_alpha: torch.Tensor
    clip_alpha: torch.Tensor
    fused_alpha: torch.Tensor


class EvidentialRetrievalLoss(nn.Module):
    """Inter-video evidential loss with uncertainty-guided label calibration (Holmes Eq. 15-18).

    .. math::

        L_{inter} = L_U(\\boldsymbol\\alpha^f, \\hat{\\mathbf{y}}) + L_U(\\boldsymbol\\alpha^c, \\hat{\\mathbf{y}})
                    + L_U(\\boldsymbol\\alpha^o, \\hat{\\mathbf{y}}),
        \\qquad
        \\hat{\\mathbf{y}}_i = \\begin{cases}
            (1-\\gamma)\\mathbf{y}_i + \\tfrac{\\gamma}{2}\\big(\\sigma(\\mathbf{s}^f_i) + \\sigma(\\mathbf{s}^c_i)\\big),
                & i \\in S^o_n, \\\\
            \\mathbf{y}_i, & \\text{otherwise},
        \\end{cases}

    where :math:`\\boldsymbol\\alpha^{f,c} = e(\\mathbf{s}^{f,c}) + 1` (Eq. 3-4),
    :math:`\\boldsymbol\\alpha^o` is their Dempster-Shafer fusion (Eq. 16), :math:`\\sigma` is the softmax
    of the raw similarities (detached) and :math:`S^o_n` the fused polysemous set of
    :class:`~evidential_prvr.UncertaintyGuidedIdentifier`. :math:`\\mathbf{y}_i` is the normalised
    multi-hot label (one-hot for index targets).

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
    fusion : {"uncertainty_dominant", "confidence_dominant", "frame", "clip"}
        Partition fusion rule (Eq. 14, Table 3 rows 5-7).
    calibrate : bool
        ``False`` is the warm-up stage: every query keeps its plain label (Table 3 row 8).
    calibration_set : {"refined", "initial"}
        ``"refined"``: calibrate the fused :math:`S^o_n` (paper). ``"initial"``: calibrate only the
        fused initial polysemous set :math:`\\tilde S_n`, before the entropy refinement (Table 3 row 9).
    reduction : {"mean", "sum", "none"}
        Reduction of the per-query loss over the batch.
    """

    def __init__(
        self,
        beta: float = 0.3,
        gamma: float = 0.2,
        tau: float = 0.1,
        tanh_scaling: str = "inside",
        entropy_median: str = "candidates",
        fusion: str = "uncertainty_dominant",
        calibrate: bool = True,
        calibration_set: str = "refined",
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        check_in_range(gamma, "gamma", 0.0, 1.0)
        check_choice(calibration_set, "calibration_set", CALIBRATION_SETS)
        check_choice(reduction, "reduction", REDUCTIONS)
        if not isinstance(calibrate, bool):
            raise TypeError(f"calibrate must be a bool, got {type(calibrate).__name__}")
        self.identifier = UncertaintyGuidedIdentifier(
            beta=beta, tau=tau, tanh_scaling=tanh_scaling, entropy_median=entropy_median, fusion=fusion
        )
        self.gamma = float(gamma)
        self.calibrate = calibrate
        self.calibration_set = calibration_set
        self.reduction = reduction

    @classmethod
    def from_preset(cls, name: str, dataset: str | None = None, **overrides: object) -> EvidentialRetrievalLoss:
        """Build from a preset; ``overrides`` (e.g. ``calibrate=False``) replace preset values.

        ``"paper"``: τ = 0.1, inside scaling, candidate median, β = 0.3, γ = 0.2, uncertainty-dominant
        fusion. ``"release"`` with ``dataset="tvr" | "activitynet" | "charades"``: outside scaling with
        τ = 0.05 / 0.04 / 0.08, batch lower median, β = 0.3, γ = 0.2, uncertainty-dominant fusion.
        """
        inter = holmes_settings(name, dataset).inter
        kwargs = dict(beta=inter.beta, gamma=inter.gamma, tau=inter.tau, tanh_scaling=inter.tanh_scaling,
                      entropy_median=inter.entropy_median, fusion=inter.fusion)
        kwargs.update(overrides)
        return cls(**kwargs)  # type: ignore[arg-type]

    def extra_repr(self) -> str:
        return (
            f"gamma={self.gamma}, calibrate={self.calibrate}, calibration_set={self.calibration_set!r}, "
            f"reduction={self.reduction!r}"
        )

    def forward(
        self, frame_sim: torch.Tensor, clip_sim: torch.Tensor, target: torch.Tensor, return_details: bool = False
    ) -> torch.Tensor | InterVideoLossDetails:
        """Compute :math:`L_{inter}`.

        Parameters
        ----------
        frame_sim, clip_sim : torch.Tensor
            Frame- and clip-scale similarities ``[B, K]`` (queries × videos), finite.
        target : torch.Tensor
            ``LongTensor [B]`` of positive video indices or ``{0, 1}`` matrix ``[B, K]``.
        return_details : bool
            Return an :class:`InterVideoLossDetails` instead of the loss tensor.

        Returns
        -------
        torch.Tensor or InterVideoLossDetails
            The loss (scalar unless ``reduction="none"``), in float32 for half inputs.
        """
        mask = check_similarity_pair(frame_sim, clip_sim, target)
        dtype = torch.promote_types(compute_dtype(frame_sim), compute_dtype(clip_sim))
        s_f = frame_sim.to(dtype)
        s_c = clip_sim.to(dtype)
        ident = self.identifier
        alpha_f = evidence_kernel(s_f, ident.tau, ident.tanh_scaling) + 1.0
        alpha_c = evidence_kernel(s_c, ident.tau, ident.tanh_scaling) + 1.0
        alpha_o = ds_combine_kernel(alpha_f, alpha_c)
        label = normalized_target(mask, dtype)

        identification = None
        if self.calibrate or return_details:
            identification = ident.identify(alpha_f, alpha_c, s_f, s_c, mask)
        if self.calibrate and self.gamma > 0.0:
            types = identification.query_type if self.calibration_set == "refined" else identification.initial_query_type
            with torch.no_grad():
                soft = 0.5 * (torch.softmax(s_f.detach(), dim=-1) + torch.softmax(s_c.detach(), dim=-1))
                calibrated = (1.0 - self.gamma) * label + self.gamma * soft
                target_hat = torch.where((types == int(QueryType.POLYSEMOUS)).unsqueeze(-1), calibrated, label)
        else:
            target_hat = label

        frame_rows = dirichlet_mse_kernel(alpha_f, target_hat)
        clip_rows = dirichlet_mse_kernel(alpha_c, target_hat)
        fused_rows = dirichlet_mse_kernel(alpha_o, target_hat)
        loss = reduce_rows(frame_rows + clip_rows + fused_rows, self.reduction)
        if not return_details:
            return loss
        return InterVideoLossDetails(
            loss=loss,
            frame_loss=reduce_rows(frame_rows, self.reduction),
            clip_loss=reduce_rows(clip_rows, self.reduction),
            fused_loss=reduce_rows(fused_rows, self.reduction),
            identification=identification,
            target=target_hat,
            frame_alpha=alpha_f,
            clip_alpha=alpha_c,
            fused_alpha=alpha_o,
        )
