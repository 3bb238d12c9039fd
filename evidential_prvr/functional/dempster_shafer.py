"""Dempster's rule for two subjective opinions over the same K candidates (Holmes Eq. 16)."""

from __future__ import annotations

import torch

from evidential_prvr._checks import check_same_shape, compute_dtype
from evidential_prvr.functional.evidence import check_alpha, opinion_kernel

__all__ = ["ds_combine", "ds_conflict"]


def promote_alpha_pair(alpha_a: torch.Tensor, alpha_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate two Dirichlet parameter tensors and cast both to their common compute dtype."""
    check_alpha(alpha_a, "alpha_a")
    check_alpha(alpha_b, "alpha_b")
    check_same_shape(alpha_a, alpha_b, "alpha_a", "alpha_b")
    dtype = torch.promote_types(compute_dtype(alpha_a), compute_dtype(alpha_b))
    return alpha_a.to(dtype), alpha_b.to(dtype)


def ds_combine(alpha_a: torch.Tensor, alpha_b: torch.Tensor) -> torch.Tensor:
    """Fuse two Dirichlet opinions with Dempster's combination rule (Holmes Eq. 16).

    With opinions :math:`(\\mathbf{b}^a, u^a)` and :math:`(\\mathbf{b}^b, u^b)` from Eq. 5,

    .. math::

        b^o_k = \\frac{b^a_k b^b_k + b^a_k u^b + b^b_k u^a}{1 - \\delta}, \\qquad
        u^o = \\frac{u^a u^b}{1 - \\delta}, \\qquad
        \\delta = \\sum_{i \\ne j} b^a_i b^b_j,

    mapped back to a Dirichlet with :math:`S^o = K / u^o` and :math:`\\alpha^o = b^o S^o + 1`.
    The normaliser :math:`1-\\delta` cancels in :math:`b^o / u^o`, so the result is computed in the
    equivalent closed form (with :math:`e = \\alpha - 1`)

    .. math::

        \\alpha^o_k = 1 + e^a_k + e^b_k + \\frac{e^a_k e^b_k}{K},

    which needs no division by :math:`1-\\delta` and stays finite when :math:`u^o` underflows.

    Parameters
    ----------
    alpha_a, alpha_b : torch.Tensor
        Dirichlet parameters of the same shape ``[..., K]``, :math:`\\alpha \\ge 1`; any leading dims.

    Returns
    -------
    torch.Tensor
        Fused Dirichlet parameters :math:`\\boldsymbol\\alpha^o`, same shape, in the promoted compute dtype.
    """
    a, b = promote_alpha_pair(alpha_a, alpha_b)
    return ds_combine_kernel(a, b)


def ds_conflict(alpha_a: torch.Tensor, alpha_b: torch.Tensor) -> torch.Tensor:
    """Conflict :math:`\\delta = \\sum_{i\\ne j} b^a_i b^b_j \\in [0, 1)` between two opinions (Holmes Eq. 16).

    Computed as :math:`(\\sum_i b^a_i)(\\sum_j b^b_j) - \\sum_k b^a_k b^b_k`.

    Parameters
    ----------
    alpha_a, alpha_b : torch.Tensor
        Dirichlet parameters of the same shape ``[..., K]``, :math:`\\alpha \\ge 1`.

    Returns
    -------
    torch.Tensor
        :math:`\\delta` of shape ``alpha_a.shape[:-1]``.
    """
    a, b = promote_alpha_pair(alpha_a, alpha_b)
    return ds_conflict_kernel(opinion_kernel(a).belief, opinion_kernel(b).belief)


def ds_combine_kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Closed form of Holmes Eq. 16 on validated Dirichlet parameters of one dtype (no checks)."""
    ea = a - 1.0
    eb = b - 1.0
    return 1.0 + ea + eb + ea * eb / a.shape[-1]


def ds_conflict_kernel(belief_a: torch.Tensor, belief_b: torch.Tensor) -> torch.Tensor:
    """Conflict of Holmes Eq. 16 from two belief tensors ``[..., K]`` (no checks)."""
    conflict = belief_a.sum(dim=-1) * belief_b.sum(dim=-1) - (belief_a * belief_b).sum(dim=-1)
    return conflict.clamp_min(0.0)
