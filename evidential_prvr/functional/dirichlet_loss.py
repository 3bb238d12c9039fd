"""Expected squared error of a Dirichlet against a (soft) label: the evidential loss L_U (Holmes Eq. 17)."""

from __future__ import annotations

import torch

from evidential_prvr._checks import check_choice, check_finite, check_tensor, compute_dtype
from evidential_prvr.functional.evidence import check_alpha

__all__ = ["REDUCTIONS", "dirichlet_mse_loss"]

REDUCTIONS = ("mean", "sum", "none")
"""Reductions over rows accepted by the losses of this package."""


def dirichlet_mse_loss(alpha: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Expected squared error between :math:`\\mathbf{p}\\sim\\mathrm{Dir}(\\boldsymbol\\alpha)` and a label
    (Holmes Eq. 17, derived in App. B.4).

    .. math::

        L_U(\\boldsymbol\\alpha_i, \\hat{\\mathbf{y}}_i)
        = \\mathbb{E}\\,\\|\\hat{\\mathbf{y}}_i - \\mathbf{p}_i\\|_2^2
        = \\sum_{j=1}^K \\Big(\\hat y_{ij} - \\frac{\\alpha_{ij}}{S_i}\\Big)^2
          + \\frac{\\alpha_{ij}(S_i - \\alpha_{ij})}{S_i^2 (S_i + 1)}.

    The variance term is evaluated as :math:`\\bar p(1-\\bar p)/(S+1)` with :math:`\\bar p = \\alpha/S`,
    which never forms :math:`S^2` and so cannot overflow for very large evidence.

    Parameters
    ----------
    alpha : torch.Tensor
        Dirichlet parameters ``[..., K]``, :math:`\\alpha > 0`; any leading dimensions are rows.
    target : torch.Tensor
        Label of the same shape as ``alpha``, one-hot or soft (e.g. a calibrated label, Eq. 15, or a
        transport plan row, Eq. 20). It is used as given (not renormalised). For index targets or
        multi-hot matrices use :func:`evidential_prvr.functional.targets.normalized_target` first.
    reduction : {"mean", "sum", "none"}
        How the per-row losses (summed over the K classes) are reduced over rows.

    Returns
    -------
    torch.Tensor
        Scalar for ``"mean"``/``"sum"``; shape ``alpha.shape[:-1]`` for ``"none"``. Compute dtype.
    """
    check_alpha(alpha, at_least_one=False)
    check_tensor(target, "target", floating=True)
    if target.shape != alpha.shape:
        raise ValueError(
            f"target must have the same shape as alpha {tuple(alpha.shape)}, got {tuple(target.shape)}"
        )
    check_finite(target, "target")
    check_choice(reduction, "reduction", REDUCTIONS)
    dtype = compute_dtype(alpha)
    return reduce_rows(dirichlet_mse_kernel(alpha.to(dtype), target.to(dtype)), reduction)


def dirichlet_mse_kernel(a: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-row Holmes Eq. 17 on validated tensors of one dtype (no checks, no upcast)."""
    strength = a.sum(dim=-1, keepdim=True)
    mean = a / strength
    return ((y - mean).square() + mean * (1.0 - mean) / (strength + 1.0)).sum(dim=-1)


def reduce_rows(per_row: torch.Tensor, reduction: str) -> torch.Tensor:
    """Apply a validated reduction (``"mean"``, ``"sum"`` or ``"none"``) to per-row losses."""
    if reduction == "mean":
        return per_row.mean()
    if reduction == "sum":
        return per_row.sum()
    return per_row
