"""One-step bridge distillation (DAB, "Limitations & Future Work": "one-step bridge distillation").

DAB's distribution bridge (Key Design 2) answers a query in :math:`T'` sequential drift steps; its summary names
the distillation of that chain into one step as future work. The loss here trains a student drift to land where
the :math:`T'`-step chain (the teacher) lands, in the parameter space the bridge moves in,
:math:`x = [\\mu, \\log\\sigma^2]`.
"""

from __future__ import annotations

import torch

from evidential_prvr._checks import check_same_shape
from evidential_prvr.functional._gaussian import _check_gaussian, _common_dtype


def bridge_distillation_loss(
    student_mu: torch.Tensor,
    student_logvar: torch.Tensor,
    teacher_mu: torch.Tensor,
    teacher_logvar: torch.Tensor,
    *,
    validate_args: bool | None = None,
) -> torch.Tensor:
    """Squared distance between where a one-step student bridge and the :math:`T'`-step teacher land.

    With the teacher's end point :math:`x^{T'}_i = [\\mu^{T'}_i, \\log\\sigma^{2,T'}_i]` (the bridge of DAB
    Key Design 2 run over :math:`t = T', \\dots, 1`, its updates
    :math:`\\mu_{t-1} = \\mu_t - \\chi_t \\Delta\\mu_t`, :math:`\\log\\sigma^2_{t-1} = \\log\\sigma^2_t - \\chi_t
    \\Delta\\log\\sigma^2_t`) and the student's one-step end point :math:`x^{1}_i` from the same start, for
    :math:`N` Gaussians of dimension :math:`D`:

    .. math::

        \\mathcal{L}_{\\mathrm{distill}} = \\frac{1}{N} \\sum_{i=1}^{N}
            \\big\\lVert \\mu^{1}_i - \\mu^{T'}_i \\big\\rVert_2^2
          + \\big\\lVert \\log\\sigma^{2,1}_i - \\log\\sigma^{2,T'}_i \\big\\rVert_2^2 .

    It is the squared distance in the joint space :math:`[\\mu, \\log\\sigma^2]` that the bridge drifts in
    (and in which :func:`~evidential_prvr.functional.bounded_contraction` measures its contraction). DAB's
    summary only names the distillation as future work; the loss, the space and the sum over dimensions are this
    library's choice. The gradient flows into both arguments: pass the teacher's end point computed under
    ``torch.no_grad()`` (or detached) to train the student alone.

    Parameters
    ----------
    student_mu, student_logvar : torch.Tensor
        ``[..., D]`` the student's end point (means and log-variances).
    teacher_mu, teacher_logvar : torch.Tensor
        ``[..., D]`` the teacher's end point, the same shape.
    validate_args : bool, optional
        Check that every input is finite (a host synchronisation); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`. Shapes and dtypes are always checked.

    Returns
    -------
    torch.Tensor
        Scalar loss.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import bridge_distillation_loss
    >>> teacher = torch.zeros(2, 3), torch.zeros(2, 3)
    >>> bridge_distillation_loss(torch.ones(2, 3), torch.zeros(2, 3), *teacher)  # each item: 3 * 1^2
    tensor(3.)

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 2
    (the bridge) and "Limitations & Future Work" (one-step bridge distillation).
    """
    _check_gaussian(student_mu, student_logvar, "student", ndim=None, validate_args=validate_args)
    _check_gaussian(teacher_mu, teacher_logvar, "teacher", ndim=None, validate_args=validate_args)
    check_same_shape(student_mu, teacher_mu, "student_mu", "teacher_mu")
    dtype = _common_dtype(student_mu, student_logvar, teacher_mu, teacher_logvar)
    squared = (student_mu.to(dtype) - teacher_mu.to(dtype)).square() + (
        student_logvar.to(dtype) - teacher_logvar.to(dtype)).square()
    return squared.sum(dim=-1).mean()
