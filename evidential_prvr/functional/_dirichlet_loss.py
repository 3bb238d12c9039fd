"""Expected squared error of a Dirichlet against a (soft) label: the evidential loss L_U (Holmes Eq. 17)."""

from __future__ import annotations

import torch

from evidential_prvr._checks import (
    check_choice,
    check_finite,
    check_same_device,
    check_tensor,
    compute_dtype,
    should_validate,
)
from evidential_prvr.choices import REDUCTIONS, Reduction
from evidential_prvr.functional._evidence import check_alpha


def dirichlet_mse_loss(
    alpha: torch.Tensor, target: torch.Tensor, reduction: Reduction = "mean", *, validate_args: bool | None = None
) -> torch.Tensor:
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
        multi-hot matrices use :func:`~evidential_prvr.functional.normalized_target` first.
    reduction : {"mean", "sum", "none"}
        How the per-row losses (summed over the K classes) are reduced over rows.
    validate_args : bool, optional
        Check that ``alpha`` is finite and positive and ``target`` finite (host synchronisations).

    Returns
    -------
    torch.Tensor
        Scalar for ``"mean"``/``"sum"``; shape ``alpha.shape[:-1]`` for ``"none"``. Compute dtype.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import dirichlet_mse_loss
    >>> alpha = torch.tensor([[9.0, 1.0]])  # mean (0.9, 0.1), strength 10
    >>> dirichlet_mse_loss(alpha, torch.tensor([[1.0, 0.0]]))  # 2 * 0.01 + 2 * 0.09 / 11
    tensor(0.0364)

    References
    ----------
    Holmes (ICML 2026), Eq. 17 and App. B.4; Sensoy et al., NeurIPS 2018, Eq. 5.
    """
    validate = should_validate(validate_args)
    check_alpha(alpha, at_least_one=False, validate=validate)
    check_tensor(target, "target", floating=True)
    if target.shape != alpha.shape:
        raise ValueError(
            f"target must have the same shape as alpha {tuple(alpha.shape)}, got {tuple(target.shape)}"
        )
    check_same_device(alpha=alpha, target=target)
    if validate:
        check_finite(target, "target")
    check_choice(reduction, "reduction", REDUCTIONS)
    dtype = compute_dtype(alpha)
    return reduce_rows(_dirichlet_mse(alpha.to(dtype), target.to(dtype)), reduction)


def _dirichlet_mse(a: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
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
