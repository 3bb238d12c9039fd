"""The module of bridge distillation (:func:`evidential_prvr.functional.bridge_distillation_loss`)."""

from __future__ import annotations

import torch

from evidential_prvr.functional._bridge_distillation import bridge_distillation_loss
from evidential_prvr.probabilistic._dab import DistributionBridge
from evidential_prvr.probabilistic._input_checks import _InputChecks

__all__ = ["BridgeDistillationLoss"]


class BridgeDistillationLoss(_InputChecks):
    """One-step bridge distillation as a module: a student bridge against the end points of its teacher chain.

    See :func:`~evidential_prvr.functional.bridge_distillation_loss` (DAB, Key Design 2 and "Limitations &
    Future Work"). The module takes the student and the Gaussians it starts from, runs the student, and compares
    where it lands with the teacher's end points (computed by the caller, e.g. under ``torch.no_grad()``).

    Parameters
    ----------
    validate_args : bool, optional
        Check that the inputs are finite (host synchronisations); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`. Empty inputs are always refused.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import BridgeDistillationLoss, DistributionBridge
    >>> teacher = DistributionBridge(8, n_steps=4)
    >>> student = teacher.one_step_student()
    >>> start = torch.randn(5, 8), torch.full((5, 8), -2.0)
    >>> with torch.no_grad():
    ...     target = teacher(*start)
    >>> float(BridgeDistillationLoss()(student, *start, *target))  # both are the identity at initialisation
    0.0

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 2,
    "Limitations & Future Work" (one-step bridge distillation).
    """

    def __init__(self, validate_args: bool | None = None) -> None:
        super().__init__(validate_args)

    def forward(self, student: DistributionBridge, mu: torch.Tensor, logvar: torch.Tensor, teacher_mu: torch.Tensor,
                teacher_logvar: torch.Tensor) -> torch.Tensor:
        """Scalar loss: ``student(mu, logvar)`` against the teacher's end points ``(teacher_mu, teacher_logvar)``,
        all ``[..., D]``."""
        if not isinstance(student, DistributionBridge):
            raise TypeError(f"student must be a DistributionBridge (e.g. teacher.one_step_student()), got "
                            f"{type(student).__name__}")
        landed = student(mu, logvar)
        return bridge_distillation_loss(student_mu=landed.mu, student_logvar=landed.logvar, teacher_mu=teacher_mu,
                                        teacher_logvar=teacher_logvar, validate_args=self.validate_args)
