"""Module of the inter-video evidential objective L_inter (Holmes Eq. 15-18): see
:func:`evidential_prvr.functional.inter_video_loss`."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from evidential_prvr._identification import UncertaintyGuidedIdentifier
from evidential_prvr.functional._identification import IdentificationSettings
from evidential_prvr.functional._inter_video import (
    INTER_TERMS,
    InterVideoLossDetails,
    check_inter_settings,
    inter_video_loss,
)
from evidential_prvr.presets import apply_overrides, holmes_settings

__all__ = ["EvidentialRetrievalLoss"]


class EvidentialRetrievalLoss(nn.Module):
    """Inter-video evidential loss with uncertainty-guided label calibration (Holmes Eq. 15-18).

    Holds the hyperparameters of :func:`~evidential_prvr.functional.inter_video_loss`, whose
    documentation gives the equations; ``forward`` is one call of it.

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
        beta: float = 0.3,
        gamma: float = 0.2,
        tau: float = 0.1,
        tanh_scaling: str = "inside",
        entropy_median: str = "candidates",
        matched: str = "any_positive",
        fusion: str = "uncertainty_dominant",
        calibrate: bool = True,
        calibration_set: str = "refined",
        terms: Sequence[str] = INTER_TERMS,
        reduction: str = "mean",
        validate_args: bool | None = None,
    ) -> None:
        super().__init__()
        IdentificationSettings(beta, tau, tanh_scaling, entropy_median, matched, fusion)  # validates
        terms = check_inter_settings(gamma, calibrate, calibration_set, terms, reduction)
        self.beta = float(beta)
        self.gamma = float(gamma)
        self.tau = float(tau)
        self.tanh_scaling = tanh_scaling
        self.entropy_median = entropy_median
        self.matched = matched
        self.fusion = fusion
        self.calibrate = calibrate
        self.calibration_set = calibration_set
        self.terms = terms
        self.reduction = reduction
        self.validate_args = validate_args

    @classmethod
    def from_preset(cls, preset: str, dataset: str | None = None, **overrides: object) -> EvidentialRetrievalLoss:
        """The paper's or the release's settings (:func:`evidential_prvr.presets.holmes_settings`);
        ``overrides`` (e.g. ``calibrate=False``) replace preset values, an unknown one raises ``TypeError``.

        ``"paper"``: τ = 0.1, inside scaling, candidate median, any positive at the maximum, β = 0.3,
        γ = 0.2, uncertainty-dominant fusion. ``"release"`` with ``dataset="tvr" | "activitynet" |
        "charades"`` (or ``"act"``, ``"cha"``): outside scaling with τ = 0.05 / 0.04 / 0.08, batch lower
        median, ``argmax == label``, β = 0.3, γ = 0.2, uncertainty-dominant fusion.
        """
        inter = holmes_settings(preset, dataset).inter
        kwargs = dict(beta=inter.beta, gamma=inter.gamma, tau=inter.tau, tanh_scaling=inter.tanh_scaling,
                      entropy_median=inter.entropy_median, matched=inter.matched, fusion=inter.fusion,
                      calibrate=True, calibration_set="refined", terms=INTER_TERMS, reduction="mean",
                      validate_args=None)
        return cls(**apply_overrides(kwargs, overrides, cls.__name__))

    def identifier(self) -> UncertaintyGuidedIdentifier:
        """A :class:`~evidential_prvr.UncertaintyGuidedIdentifier` with this loss's identification settings."""
        return UncertaintyGuidedIdentifier(self.beta, self.tau, self.tanh_scaling, self.entropy_median, self.matched,
                                           self.fusion, self.validate_args)

    def settings(self) -> dict[str, object]:
        """The keyword arguments of :func:`~evidential_prvr.functional.inter_video_loss` this module passes."""
        return dict(beta=self.beta, gamma=self.gamma, tau=self.tau, tanh_scaling=self.tanh_scaling,
                    entropy_median=self.entropy_median, matched=self.matched, fusion=self.fusion,
                    calibrate=self.calibrate, calibration_set=self.calibration_set, terms=self.terms,
                    reduction=self.reduction)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.settings().items())

    def forward(
        self, frame_sim: torch.Tensor, clip_sim: torch.Tensor, query_video: torch.Tensor, return_details: bool = False
    ) -> torch.Tensor | InterVideoLossDetails:
        """:math:`L_{inter}` of ``frame_sim``, ``clip_sim`` ``[Q, V]`` and the positives ``query_video``
        (``LongTensor [Q]`` or ``{0, 1}`` matrix ``[Q, V]``); details on request."""
        return inter_video_loss(frame_sim, clip_sim, query_video, **self.settings(), return_details=return_details,
                                validate_args=self.validate_args)
