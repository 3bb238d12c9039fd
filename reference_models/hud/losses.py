"""CoVR's training loss: the hard-negative NCE of Radenovic et al. (2023), as CoVR configures it (alpha 1, beta 0.5)."""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["hard_negative_nce", "HardNegativeNCE"]


def hard_negative_nce(query: torch.Tensor, target: torch.Tensor, temperature: float, alpha: float = 1.0,
                      beta: float = 0.5) -> torch.Tensor:
    """Hard-negative NCE over ``[B, D]`` query and target embeddings (positives on the diagonal), both directions.

    With :math:`s_{ij} = q_i^\\top t_j / T`, each direction's denominator re-weights the negatives of a row by
    :math:`w_{ij} = (B - 1)\\, e^{\\beta s_{ij}} / \\sum_{k \\ne i} e^{\\beta s_{ik}}` and the positive by
    :math:`\\alpha`; the loss is the sum of the two directions' means of
    :math:`\\log \\sum_j w_{ij} e^{s_{ij}} - s_{ii}`. ``alpha = 1, beta = 0`` is InfoNCE. Each row is normalised
    over its own negatives (CoVR's ``src/model/loss.py`` divides the query-to-target weights by another row's sum,
    a broadcasting slip; the paper's form is used here). Computed in log space.

    References
    ----------
    Radenovic et al., "Filtering, Distillation, and Hard Negatives for Vision-Language Pre-Training", CVPR 2023;
    Ventura et al., "CoVR: Learning Composed Video Retrieval from Web Video Captions", AAAI 2024.
    """
    if query.dim() != 2 or target.shape != query.shape:
        raise ValueError(f"query and target must be [B, D] of the same shape, got {tuple(query.shape)} and {tuple(target.shape)}")
    sim = query @ target.T
    sim = sim.to(torch.promote_types(sim.dtype, torch.float32)) / temperature  # half precision computed in float32
    n = sim.shape[0]
    eye = torch.eye(n, dtype=torch.bool, device=sim.device)
    losses = []
    for s in (sim, sim.T):
        beta_s = (beta * s).masked_fill(eye, float("-inf"))
        log_w = math.log(max(n - 1, 1)) + beta_s - torch.logsumexp(beta_s, dim=1, keepdim=True)
        log_w = torch.where(eye, torch.full_like(s, math.log(alpha)), log_w)
        losses.append((torch.logsumexp(s + log_w, dim=1) - s.diagonal()).mean())
    return losses[0] + losses[1]


class HardNegativeNCE(nn.Module):
    """Module form of :func:`hard_negative_nce` with CoVR's settings (alpha 1, beta 0.5, temperature 0.07)."""

    def __init__(self, alpha: float = 1.0, beta: float = 0.5, temperature: float = 0.07) -> None:
        super().__init__()
        if not alpha > 0 or not temperature > 0:
            raise ValueError(f"alpha and temperature must be > 0, got alpha={alpha}, temperature={temperature}")
        self.alpha, self.beta, self.temperature = float(alpha), float(beta), float(temperature)

    def forward(self, query: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Scalar loss of ``[B, D]`` composed queries and their targets."""
        return hard_negative_nce(query, target, self.temperature, self.alpha, self.beta)
