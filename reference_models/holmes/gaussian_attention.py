r"""Gaussian attention (Holmes Eq. 35, App. B.6; GMMFormer) and the transformer block built from it.

Gaussian attention multiplies the scaled attention logits by a Gaussian kernel of the temporal distance
between positions before the softmax, so that each position attends mostly to its neighbourhood:

.. math::

    \mathrm{GA}(V) = \mathrm{softmax}\Big(\mathcal{M}_\sigma \odot \frac{V W^q (V W^k)^\top}{\sqrt{d_h}}\Big) V W^v.

Three kernels are offered (``kernel=``), for a sequence of ``L`` positions and a width ``w``:

``"release"`` (the official Holmes code)
    Row ``i`` is a Gaussian over the grid :math:`g_j = j / (L - 1)` (``linspace(0, 1, L)``) centred at
    :math:`c_i = i / L`, with standard deviation :math:`\sigma = \max(w, 10^{-2}) / 9`, and each row is divided
    by its maximum: :math:`\mathcal{M}(i, j) = \exp(-(g_j - c_i)^2 / 2\sigma^2) / \max_k \exp(-(g_k - c_i)^2 /
    2\sigma^2)`. The centres drift below the diagonal (by up to one grid step at the end), so the kernel is not
    symmetric. (Computed as :math:`\exp(a_{ij} - \max_k a_{ik})`, which stays finite for widths so narrow that
    every entry of a row underflows, where the division would give NaN.)
``"symmetric"``
    The same width rule on the grid :math:`p_i = i / (L - 1)` for both rows and columns:
    :math:`\mathcal{M}(i, j) = \exp(-(p_j - p_i)^2 / 2\sigma^2)`, peak 1 on the diagonal.
``"paper"`` (Holmes Eq. 35 as written)
    :math:`\mathcal{M}(i, j) = \frac{1}{2\pi} \exp(-(j - i)^2 / \sigma^2)` on raw position indices, with
    :math:`\sigma` = ``w`` in positions.

With the first two, widths are relative to the sequence length (the same width covers the same fraction of a
32-clip and a 128-frame sequence). A width of ``math.inf`` (or ``None``) is global attention: no kernel is
applied, which is plain multi-head attention.

Padded keys (``mask``) are removed in one of two ways (``attention_mask=``): ``"additive"`` adds
:math:`-10^4` to their logits (the release, BERT style), ``"exclude"`` sets them to the most negative value
of the dtype (their weight is then exactly 0).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from reference_models.engine.errors import check_choice

__all__ = [
    "GaussianKernel",
    "AttentionMask",
    "KERNELS",
    "ATTENTION_MASKS",
    "ADDITIVE_MASK_VALUE",
    "gaussian_kernel",
    "GaussianSelfAttention",
    "GaussianAttentionBlock",
]

GaussianKernel = Literal["release", "symmetric", "paper"]
AttentionMask = Literal["additive", "exclude"]
KERNELS: tuple[str, ...] = ("release", "symmetric", "paper")
ATTENTION_MASKS: tuple[str, ...] = ("additive", "exclude")

#: Added to the logits of padded keys with ``attention_mask="additive"`` (BERT's and the release's value).
ADDITIVE_MASK_VALUE = -10000.0

#: Smallest width of the ``"release"`` kernel (smaller widths are clamped to it).
_MIN_RELEASE_WIDTH = 1e-2


def gaussian_kernel(
    length: int, width: float, *, kernel: GaussianKernel = "release", device=None, dtype=None
) -> torch.Tensor:
    """The ``[length, length]`` Gaussian kernel :math:`\\mathcal{M}_\\sigma` of Holmes Eq. 35 (see module doc).

    Parameters
    ----------
    length : int
        Sequence length ``L`` (>= 1).
    width : float
        Kernel width ``w`` (> 0).
    kernel : {"release", "symmetric", "paper"}
        Kernel form.
    device, dtype
        Of the returned tensor (default CPU, float32).
    """
    if not (width > 0):
        raise ValueError(f"width must be > 0, got {width}")
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ValueError(f"length must be an int >= 1, got {length!r}")
    check_choice(kernel, "kernel", KERNELS)
    dtype = dtype or torch.float32
    positions = torch.arange(length, device=device, dtype=dtype)
    if kernel == "paper":
        return torch.exp(-((positions.unsqueeze(0) - positions.unsqueeze(1)) ** 2) / width**2) / (2 * math.pi)
    grid = positions / max(length - 1, 1)
    if kernel == "symmetric":
        std = width / 9.0
        return torch.exp(-((grid.unsqueeze(0) - grid.unsqueeze(1)) ** 2) / (2 * std**2))
    std = max(width, _MIN_RELEASE_WIDTH) / 9.0
    centres = positions / length
    exponent = -((grid.unsqueeze(0) - centres.unsqueeze(1)) ** 2) / (2 * std**2)
    # exp(a) / max exp(a) = exp(a - max a): the same kernel, but finite even where every exp(a) underflows
    return torch.exp(exponent - exponent.amax(dim=-1, keepdim=True))


class GaussianSelfAttention(nn.Module):
    """Multi-head attention whose logits are multiplied by a Gaussian kernel (Holmes Eq. 35).

    Self-attention by default; with ``keys`` it is cross-attention from ``x`` to ``keys`` (then the width
    must be global: a temporal kernel needs the same positions on both sides).

    Parameters
    ----------
    hidden_size, n_heads : int
        Model width and number of heads (``hidden_size % n_heads == 0``).
    width : float or None
        Kernel width; ``None`` or ``inf`` for global (plain) attention.
    dropout : float
        Dropout on the attention probabilities.
    kernel : {"release", "symmetric", "paper"}
        Kernel form (see module doc).
    attention_mask : {"additive", "exclude"}
        How padded keys are removed (see module doc).
    """

    def __init__(
        self,
        hidden_size: int,
        n_heads: int,
        width: float | None,
        dropout: float = 0.1,
        kernel: GaussianKernel = "release",
        attention_mask: AttentionMask = "additive",
    ) -> None:
        super().__init__()
        if hidden_size % n_heads:
            raise ValueError(f"hidden_size must be divisible by n_heads, got {hidden_size} and {n_heads}")
        check_choice(kernel, "kernel", KERNELS)
        check_choice(attention_mask, "attention_mask", ATTENTION_MASKS)
        if width is not None and not width > 0:
            raise ValueError(f"width must be > 0 or None, got {width}")
        self.n_heads = n_heads
        self.head_dim = hidden_size // n_heads
        self.width = None if width is None or math.isinf(width) else float(width)
        self.kernel: GaussianKernel = kernel
        self.attention_mask: AttentionMask = attention_mask
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(dropout)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, keys: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``x [B, Lq, d]`` attends to ``keys [B, Lk, d]`` (default ``x``); ``mask [B, Lk]`` (True = valid key).

        Returns ``[B, Lq, d]``.
        """
        context = x if keys is None else keys
        batch, length, hidden = x.shape
        q, k, v = self._split(self.query(x)), self._split(self.key(context)), self._split(self.value(context))
        logits = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # [B, h, Lq, Lk]
        if self.width is not None:
            if context.shape[1] != length:
                raise ValueError(
                    f"a Gaussian width needs as many keys as queries, got {context.shape[1]} keys for {length} queries"
                )
            kernel = gaussian_kernel(length, self.width, kernel=self.kernel, device=x.device, dtype=logits.dtype)
            logits = logits * kernel
        if mask is not None:
            invalid = ~mask[:, None, None, :]
            if self.attention_mask == "additive":
                logits = logits + invalid.to(logits.dtype) * ADDITIVE_MASK_VALUE
            else:
                logits = logits.masked_fill(invalid, torch.finfo(logits.dtype).min)
        probs = self.dropout(torch.softmax(logits, dim=-1))
        return (probs @ v).transpose(1, 2).reshape(batch, length, hidden)


class GaussianAttentionBlock(nn.Module):
    """Post-norm transformer block with Gaussian attention.

    ``x = LayerNorm(x + Dropout(Proj(GA(x))))``, then, with ``ffn_multiplier > 0``,
    ``x = LayerNorm(x + Dropout(FFN(x)))`` where ``FFN = Linear(d, m·d) → ReLU → Dropout → Linear(m·d, d)``.
    ``output_projection=False`` drops ``Proj`` (the release's blocks have none); with ``keys`` the block
    cross-attends from ``x`` to ``keys`` (the residual stays on ``x``).

    Parameters
    ----------
    hidden_size, n_heads : int
        Model width and attention heads.
    width : float or None
        Gaussian width (``None``/``inf``: global attention).
    dropout : float
        Dropout of the attention probabilities, the residual branches and inside the feed-forward layer.
    ffn_multiplier : int
        Feed-forward size as a multiple of ``hidden_size`` (0: no feed-forward layer).
    kernel, attention_mask
        See :class:`GaussianSelfAttention`.
    output_projection : bool
        A ``Linear(d, d)`` after the attention.
    """

    def __init__(
        self,
        hidden_size: int,
        n_heads: int,
        width: float | None,
        dropout: float = 0.1,
        ffn_multiplier: int = 4,
        kernel: GaussianKernel = "release",
        attention_mask: AttentionMask = "additive",
        output_projection: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(ffn_multiplier, bool) or not isinstance(ffn_multiplier, int) or ffn_multiplier < 0:
            raise ValueError(f"ffn_multiplier must be an int >= 0, got {ffn_multiplier!r}")
        self.attention = GaussianSelfAttention(hidden_size, n_heads, width, dropout, kernel, attention_mask)
        self.output = nn.Linear(hidden_size, hidden_size) if output_projection else None
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

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, keys: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``x [B, L, d]``, ``mask [B, Lk]`` (keys), optional ``keys [B, Lk, d]`` → ``[B, L, d]``."""
        attended = self.attention(x, mask, keys)
        if self.output is not None:
            attended = self.output(attended)
        x = self.norm1(x + self.dropout(attended))
        if self.ffn is not None:
            x = self.norm2(x + self.ffn(x))
        return x
