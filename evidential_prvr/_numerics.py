"""Numerical guards shared by the functional layer: keep gradients representable for half-precision inputs.

A function that receives a ``float16``/``bfloat16`` tensor computes in ``float32`` but returns its
gradient to the input in the input's dtype. Two operations have gradients that grow without bound at
degenerate inputs: a min-max normalisation when every entry ties (its gradient is ``1 / eps``) and an
L2 normalisation of a near-zero vector (``1 / ||x||``). For half-precision inputs their ``eps`` is raised
to a value whose reciprocal, times the loss's own factors, stays below the dtype's largest value; for
``float32``/``float64`` inputs the usual constants are kept (the release's ``1e-8`` and ``F.normalize``'s
``1e-12``), so results there are unchanged.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["HALF_DTYPES", "minmax_epsilon", "normalize_rows"]

HALF_DTYPES = (torch.float16, torch.bfloat16)


def minmax_epsilon(input_dtype: torch.dtype) -> float:
    """``eps`` of ``(x - min) / (max - min + eps)``: 1e-8, or the machine epsilon of a half-precision input."""
    return torch.finfo(input_dtype).eps if input_dtype in HALF_DTYPES else 1e-8


def normalize_rows(x: torch.Tensor, input_dtype: torch.dtype) -> torch.Tensor:
    """``x / max(||x||, eps)`` over the last dimension; ``eps`` is the square root of a half-precision
    input's machine epsilon (about 0.03 for float16), else ``F.normalize``'s 1e-12."""
    eps = math.sqrt(torch.finfo(input_dtype).eps) if input_dtype in HALF_DTYPES else 1e-12
    return F.normalize(x, dim=-1, eps=eps)
