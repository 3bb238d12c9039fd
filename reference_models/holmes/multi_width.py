r"""Parallel Gaussian-attention blocks of several widths and how their outputs are weighted (Holmes App. B.6).

A :class:`MultiWidthGaussianBlock` runs one :class:`~reference_models.holmes.gaussian_attention.GaussianAttentionBlock`
per width on the same input and returns, at every position :math:`l`, the mixture
:math:`\sum_w \pi_{l,w}\, o_{l,w}` of the width outputs :math:`o_{l,w}`. The weights :math:`\pi` come from one of
three *width weightings* (``weighting=``; the word "fusion" is kept for the evidence fusion of Holmes Eq. 14):

``"cross_attention"`` (the official Holmes code)
    A summary token :math:`t` is the mean of all width outputs over widths and positions. For each width,
    one shared cross-attention block (query :math:`t`, keys and values :math:`o_{\cdot,w}` with the key mask;
    attention without output projection, residual + LayerNorm, a ``d → d`` feed-forward layer, residual +
    LayerNorm) turns :math:`t` into a vector :math:`z_w`. A head
    ``Linear(d, d) → ReLU → Dropout → Linear(d, L)`` maps :math:`z_w` to one logit per position, and
    :math:`\pi_{l,\cdot} = \mathrm{softmax}_w(\mathrm{logit}_{w,l} / T)` with the temperature :math:`T` (the
    release's ``sft_factor``). The head has a fixed number of positions ``L``, so inputs must have exactly
    that length (the model pads frames to it).
``"linear"``
    :math:`\pi_{l,\cdot} = \mathrm{softmax}_w(a^\top o_{l,w} / T)` with one learned vector :math:`a` (each
    position picks its temporal scale from its own outputs).
``"mean"``
    :math:`\pi = 1 / W` (GMMFormer v1).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from reference_models.engine.errors import check_choice
from reference_models.holmes.gaussian_attention import AttentionMask, GaussianAttentionBlock, GaussianKernel

__all__ = [
    "WidthWeighting",
    "WIDTH_WEIGHTINGS",
    "CrossAttentionWidthWeights",
    "LinearWidthWeights",
    "MultiWidthGaussianBlock",
    "run_part",
]

WidthWeighting = Literal["cross_attention", "linear", "mean"]
WIDTH_WEIGHTINGS: tuple[str, ...] = ("cross_attention", "linear", "mean")


def _check_temperature(temperature: float) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature must be a number > 0, got {temperature!r}")
    return float(temperature)


class CrossAttentionWidthWeights(nn.Module):
    """Per-position softmax weights over widths from a cross-attention weight predictor (see module doc).

    Parameters
    ----------
    hidden_size, n_heads : int
        Model width and attention heads of the cross-attention block.
    n_positions : int
        Sequence length ``L`` the head predicts weights for (32 clips, 128 frames).
    dropout : float
        Dropout inside the cross-attention block and of the head.
    temperature : float
        Softmax temperature over the widths (the release's ``sft_factor``: 0.09 TVR, 0.6 ActivityNet/Charades).
    attention_mask : {"additive", "exclude"}
        How padded keys are removed in the cross-attention.
    """

    def __init__(
        self,
        hidden_size: int,
        n_heads: int,
        n_positions: int,
        dropout: float,
        temperature: float,
        attention_mask: AttentionMask = "additive",
    ) -> None:
        super().__init__()
        if isinstance(n_positions, bool) or not isinstance(n_positions, int) or n_positions < 1:
            raise ValueError(f"n_positions must be an int >= 1, got {n_positions!r}")
        self.n_positions = n_positions
        self.temperature = _check_temperature(temperature)
        self.cross = GaussianAttentionBlock(hidden_size, n_heads, None, dropout, ffn_multiplier=1,
                                            attention_mask=attention_mask, output_projection=False)
        self.hidden = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.to_positions = nn.Linear(hidden_size, n_positions)

    def forward(self, outputs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Weights ``[B, L, W]`` (summing to 1 over ``W``) for width outputs ``outputs [B, L, W, d]``."""
        batch, length, n_widths, dim = outputs.shape
        if length != self.n_positions:
            raise ValueError(
                f"the cross-attention width weights are defined for {self.n_positions} positions, got inputs "
                f"of length {length}"
            )
        token = outputs.mean(dim=(1, 2))  # [B, d]: over positions and widths, padded positions included
        per_width = outputs.permute(0, 2, 1, 3).reshape(batch * n_widths, length, dim)
        queries = token.repeat_interleave(n_widths, dim=0).unsqueeze(1)  # [B*W, 1, d]
        key_mask = None if mask is None else mask.repeat_interleave(n_widths, dim=0)
        summary = self.cross(queries, key_mask, keys=per_width).view(batch, n_widths, dim)
        logits = self.to_positions(self.dropout(F.relu(self.hidden(summary))))  # [B, W, L]
        return torch.softmax(logits.transpose(1, 2) / self.temperature, dim=-1)


class LinearWidthWeights(nn.Module):
    """Per-position softmax over widths of a linear score of each width's output (see module doc)."""

    def __init__(self, hidden_size: int, temperature: float = 1.0) -> None:
        super().__init__()
        self.temperature = _check_temperature(temperature)
        self.score = nn.Linear(hidden_size, 1)

    def forward(self, outputs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Weights ``[B, L, W]`` for ``outputs [B, L, W, d]`` (``mask`` is not needed: weights are per position)."""
        # softmax over the widths axis of [B, L, W, 1] (same arithmetic as the earlier form of this model)
        return torch.softmax(self.score(outputs) / self.temperature, dim=-2).squeeze(-1)


class MultiWidthGaussianBlock(nn.Module):
    """Gaussian-attention blocks of several widths in parallel, mixed per position (Holmes App. B.6).

    Parameters
    ----------
    hidden_size, n_heads : int
        Model width and attention heads.
    widths : tuple
        One block per width; ``None``/``inf`` is global attention.
    dropout : float
        Dropout of every block (and of the weight predictor).
    ffn_multiplier : int
        Feed-forward size of each block as a multiple of ``hidden_size``.
    kernel, attention_mask, output_projection
        See :class:`~reference_models.holmes.gaussian_attention.GaussianAttentionBlock`.
    weighting : {"cross_attention", "linear", "mean"}
        Width weighting (see module doc).
    n_positions : int, optional
        Sequence length; required by ``"cross_attention"``.
    temperature : float
        Softmax temperature of the learned weightings.
    activation_checkpointing : bool
        In training, keep only each width block's (and the width weighting's) input for the backward pass
        and run its forward again there (``torch.utils.checkpoint.checkpoint``, the random state
        restored, so dropout draws the same masks): the same values and gradients for less memory and
        about one more forward pass of time.
    """

    def __init__(
        self,
        hidden_size: int,
        n_heads: int,
        widths: tuple[float | None, ...],
        dropout: float = 0.1,
        ffn_multiplier: int = 4,
        kernel: GaussianKernel = "release",
        weighting: WidthWeighting = "cross_attention",
        *,
        n_positions: int | None = None,
        temperature: float = 1.0,
        attention_mask: AttentionMask = "additive",
        output_projection: bool = False,
        activation_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        if len(widths) == 0:
            raise ValueError("widths must hold at least one width")
        check_choice(weighting, "weighting", WIDTH_WEIGHTINGS)
        self.blocks = nn.ModuleList(
            GaussianAttentionBlock(hidden_size, n_heads, w, dropout, ffn_multiplier, kernel, attention_mask,
                                   output_projection)
            for w in widths
        )
        self.weighting = weighting
        self.activation_checkpointing = bool(activation_checkpointing)
        self.weights: nn.Module | None
        if weighting == "cross_attention":
            if n_positions is None:
                raise ValueError("n_positions is required for weighting='cross_attention'")
            self.weights = CrossAttentionWidthWeights(hidden_size, n_heads, n_positions, dropout, temperature,
                                                      attention_mask)
        elif weighting == "linear":
            self.weights = LinearWidthWeights(hidden_size, temperature)
        else:
            self.weights = None

    def width_weights(self, outputs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The weights ``[B, L, W]`` of the width outputs ``outputs [B, L, W, d]`` (uniform for ``"mean"``)."""
        if self.weights is None:
            return outputs.new_full(outputs.shape[:3], 1.0 / outputs.shape[2])
        return self.weights(outputs, mask)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``x [B, L, d]``, ``mask [B, L]`` → ``[B, L, d]``."""
        outputs = torch.stack([run_part(block, x, mask, self.activation_checkpointing) for block in self.blocks],
                              dim=-2)  # [B, L, W, d]
        if self.weights is None:
            return outputs.mean(dim=-2)
        weights = run_part(self.weights, outputs, mask, self.activation_checkpointing)
        return (weights.unsqueeze(-1) * outputs).sum(dim=-2)


def run_part(part: nn.Module, x: torch.Tensor, mask: torch.Tensor | None, checkpointed: bool) -> torch.Tensor:
    """``part(x, mask)``; with ``checkpointed`` in training, through ``torch.utils.checkpoint.checkpoint``
    (non-reentrant, random state preserved: dropout draws the masks of the first pass again)."""
    if checkpointed and part.training and torch.is_grad_enabled():
        return checkpoint(part, x, mask, use_reentrant=False, preserve_rng_state=True)
    return part(x, mask)
