r"""Gaussian attention (Holmes Eq. 35, App. B.6; GMMFormer) and the multi-width block built from it.

Gaussian attention multiplies the scaled attention logits by a Gaussian kernel of the temporal distance
between positions before the softmax, so that each position attends mostly to its neighbourhood:

.. math::

    \mathrm{GA}(V) = \mathrm{softmax}\Big(\mathcal{M}_\sigma \odot \frac{V W^q (V W^k)^\top}{\sqrt{d_h}}\Big) V W^v.

Two kernels are offered (``kernel=``):

``"release"`` (default; the GMMFormer/GMMFormerV2 code that Holmes builds on)
    Positions are rescaled to ``[0, 1]``, the kernel's standard deviation is ``width / 9`` and it is
    normalised to 1 on the diagonal: :math:`\mathcal{M}(i, j) = \exp(-(p_j - p_i)^2 / (2 (w/9)^2))`.
    Widths are therefore relative to the sequence length (the same width covers the same fraction of a
    32-clip and a 128-frame sequence).
``"paper"`` (Holmes Eq. 35 as written)
    :math:`\mathcal{M}(i, j) = \frac{1}{2\pi} \exp(-(j - i)^2 / \sigma^2)` on raw position indices, with
    :math:`\sigma` = ``width`` in positions.

A width of ``math.inf`` (or ``None``) is global attention: no kernel is applied, which is exactly
standard multi-head self-attention in both modes.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "GaussianKernel",
    "gaussian_kernel",
    "GaussianSelfAttention",
    "GaussianAttentionBlock",
    "MultiWidthGaussianBlock",
]

GaussianKernel = Literal["release", "paper"]


def gaussian_kernel(
    length: int, width: float, *, kernel: GaussianKernel = "release", device=None, dtype=None
) -> torch.Tensor:
    """The ``[length, length]`` Gaussian kernel :math:`\\mathcal{M}_\\sigma` of Holmes Eq. 35 (see module doc)."""
    if not (width > 0):
        raise ValueError(f"width must be > 0, got {width}")
    positions = torch.arange(length, device=device, dtype=dtype or torch.float32)
    if kernel == "release":
        scaled = positions / max(length - 1, 1)
        std = width / 9.0
        return torch.exp(-((scaled.unsqueeze(0) - scaled.unsqueeze(1)) ** 2) / (2 * std**2))
    if kernel == "paper":
        return torch.exp(-((positions.unsqueeze(0) - positions.unsqueeze(1)) ** 2) / width**2) / (2 * math.pi)
    raise ValueError(f"kernel must be 'release' or 'paper', got {kernel!r}")


class GaussianSelfAttention(nn.Module):
    """Multi-head self-attention whose logits are multiplied by a Gaussian kernel (Holmes Eq. 35).

    Parameters
    ----------
    hidden_size, n_heads : int
        Model width and number of heads (``hidden_size % n_heads == 0``).
    width : float or None
        Kernel width; ``None`` or ``inf`` for global (plain) attention.
    dropout : float
        Dropout on the attention probabilities.
    kernel : {"release", "paper"}
        Kernel form (see module doc).
    """

    def __init__(
        self,
        hidden_size: int,
        n_heads: int,
        width: float | None,
        dropout: float = 0.1,
        kernel: GaussianKernel = "release",
    ) -> None:
        super().__init__()
        if hidden_size % n_heads:
            raise ValueError(f"hidden_size must be divisible by n_heads, got {hidden_size} and {n_heads}")
        if kernel not in ("release", "paper"):
            raise ValueError(f"kernel must be 'release' or 'paper', got {kernel!r}")
        if width is not None and not width > 0:
            raise ValueError(f"width must be > 0 or None, got {width}")
        self.n_heads = n_heads
        self.head_dim = hidden_size // n_heads
        self.width = None if width is None or math.isinf(width) else float(width)
        self.kernel: GaussianKernel = kernel
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``x [B, L, d]``, ``mask [B, L]`` (True = valid key) → ``[B, L, d]``."""
        batch, length, hidden = x.shape
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        logits = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # [B, h, L, L]
        if self.width is not None:
            kernel = gaussian_kernel(length, self.width, kernel=self.kernel, device=x.device, dtype=logits.dtype)
            logits = logits * kernel
        if mask is not None:
            logits = logits.masked_fill(~mask[:, None, None, :], torch.finfo(logits.dtype).min)
        probs = self.dropout(torch.softmax(logits, dim=-1))
        return (probs @ v).transpose(1, 2).reshape(batch, length, hidden)


class GaussianAttentionBlock(nn.Module):
    """Transformer block with Gaussian attention (post-norm): attention + residual + LayerNorm, then an
    optional feed-forward layer + residual + LayerNorm (GMMFormerV2 uses a 4× feed-forward layer;
    ``ffn_multiplier=0`` gives the GMMFormer v1 block with only an output projection)."""

    def __init__(
        self,
        hidden_size: int,
        n_heads: int,
        width: float | None,
        dropout: float = 0.1,
        ffn_multiplier: int = 4,
        kernel: GaussianKernel = "release",
    ) -> None:
        super().__init__()
        self.attention = GaussianSelfAttention(hidden_size, n_heads, width, dropout, kernel)
        self.output = nn.Linear(hidden_size, hidden_size)
        self.norm1 = nn.LayerNorm(hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.ffn: nn.Module | None = None
        if ffn_multiplier > 0:
            self.ffn = nn.Sequential(
                nn.Linear(hidden_size, ffn_multiplier * hidden_size),
                nn.ReLU(),
                nn.Dropout(dropout),
                nn.Linear(ffn_multiplier * hidden_size, hidden_size),
                nn.Dropout(dropout),
            )
            self.norm2 = nn.LayerNorm(hidden_size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``x [B, L, d]``, ``mask [B, L]`` → ``[B, L, d]``."""
        x = self.norm1(x + self.dropout(self.output(self.attention(x, mask))))
        if self.ffn is not None:
            x = self.norm2(x + self.ffn(x))
        return x


class MultiWidthGaussianBlock(nn.Module):
    """Several Gaussian-attention blocks of different widths in parallel, fused by learned weights (App. B.6).

    ``fusion="learned"`` (default): per position, a linear score of each width's output is turned into
    softmax weights over the widths, so each position chooses its temporal scale (a light stand-in for
    GMMFormerV2's cross-attention weight predictor and HLFormer's MAIM). ``fusion="mean"``: the plain
    average of GMMFormer v1.
    """

    def __init__(
        self,
        hidden_size: int,
        n_heads: int,
        widths: tuple[float | None, ...],
        dropout: float = 0.1,
        ffn_multiplier: int = 4,
        kernel: GaussianKernel = "release",
        fusion: Literal["learned", "mean"] = "learned",
    ) -> None:
        super().__init__()
        if len(widths) == 0:
            raise ValueError("widths must hold at least one width")
        if fusion not in ("learned", "mean"):
            raise ValueError(f"fusion must be 'learned' or 'mean', got {fusion!r}")
        self.blocks = nn.ModuleList(
            GaussianAttentionBlock(hidden_size, n_heads, w, dropout, ffn_multiplier, kernel) for w in widths
        )
        self.fusion = fusion
        self.fusion_score = nn.Linear(hidden_size, 1) if fusion == "learned" else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``x [B, L, d]``, ``mask [B, L]`` → ``[B, L, d]``."""
        outputs = torch.stack([block(x, mask) for block in self.blocks], dim=-2)  # [B, L, W, d]
        if self.fusion_score is None:
            return outputs.mean(dim=-2)
        weights = F.softmax(self.fusion_score(outputs), dim=-2)  # [B, L, W, 1]
        return (weights * outputs).sum(dim=-2)
