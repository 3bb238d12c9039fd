"""Dynamic co-evidential aggregator: Dempster-Shafer fusion of two branch opinions (Holmes Eq. 16)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from evidential_prvr.functional.dempster_shafer import promote_alpha_pair, ds_combine_kernel, ds_conflict_kernel
from evidential_prvr.functional.evidence import opinion_kernel

__all__ = ["DempsterShaferOutput", "DempsterShaferFusion"]


@dataclass
class DempsterShaferOutput:
    """Fused opinion of two Dirichlet opinions.

    Attributes
    ----------
    alpha : torch.Tensor
        Fused Dirichlet parameters :math:`\\alpha^o` ``[..., K]``.
    belief : torch.Tensor
        Fused belief masses :math:`b^o` ``[..., K]``.
    uncertainty : torch.Tensor
        Fused epistemic uncertainty :math:`u^o` ``[...]``.
    conflict : torch.Tensor
        Conflict :math:`\\delta \\in [0, 1)` between the two inputs ``[...]``.
    """

    alpha: torch.Tensor
    belief: torch.Tensor
    uncertainty: torch.Tensor
    conflict: torch.Tensor


class DempsterShaferFusion(nn.Module):
    """Parameter-free Dempster-Shafer fusion of two opinions (Holmes Eq. 16).

    Wraps :func:`evidential_prvr.functional.ds_combine` and :func:`evidential_prvr.functional.ds_conflict`
    and also returns the fused opinion (Eq. 5) of the fused Dirichlet. Differentiable.
    """

    def forward(self, alpha_a: torch.Tensor, alpha_b: torch.Tensor) -> DempsterShaferOutput:
        """Fuse ``alpha_a`` and ``alpha_b`` (same shape ``[..., K]``, :math:`\\alpha \\ge 1`)."""
        a, b = promote_alpha_pair(alpha_a, alpha_b)
        fused = ds_combine_kernel(a, b)
        fused_opinion = opinion_kernel(fused)
        conflict = ds_conflict_kernel(opinion_kernel(a).belief, opinion_kernel(b).belief)
        return DempsterShaferOutput(fused, fused_opinion.belief, fused_opinion.uncertainty, conflict)
