"""Argument checks shared by the whole library.

Every public function validates its inputs with these helpers so that bad input fails early with a
``TypeError`` or ``ValueError`` that names the argument, what was expected and what was received,
instead of a NaN or an obscure error deep inside a kernel.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import torch

__all__ = [
    "check_tensor",
    "check_finite",
    "check_same_shape",
    "check_positive",
    "check_in_range",
    "check_choice",
    "check_positive_int",
    "compute_dtype",
    "check_index_vector",
]


def check_tensor(x: object, name: str, *, ndim: int | Sequence[int] | None = None, floating: bool = False) -> None:
    """Raise unless ``x`` is a tensor with the given number of dimensions (and a floating dtype)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if x.dim() not in allowed:
            wanted = " or ".join(f"{d}-D" for d in allowed)
            raise ValueError(f"{name} must be a {wanted} tensor, got shape {tuple(x.shape)}")
    if floating and not x.is_floating_point():
        raise TypeError(f"{name} must have a floating-point dtype, got {x.dtype}")


def check_finite(x: torch.Tensor, name: str) -> None:
    """Raise ``ValueError`` if ``x`` holds a NaN or an infinity."""
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} must be finite, got NaN or Inf values")


def check_same_shape(a: torch.Tensor, b: torch.Tensor, name_a: str, name_b: str) -> None:
    """Raise ``ValueError`` unless ``a`` and ``b`` have exactly the same shape (no broadcasting)."""
    if a.shape != b.shape:
        raise ValueError(
            f"{name_a} and {name_b} must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}"
        )


def check_positive(value: float, name: str) -> None:
    """Raise ``ValueError`` unless ``value`` is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not (value > 0 and value < float("inf")):
        raise ValueError(f"{name} must be a finite number > 0, got {value}")


def check_in_range(
    value: float, name: str, low: float, high: float, *, low_inclusive: bool = True, high_inclusive: bool = True
) -> None:
    """Raise ``ValueError`` unless ``low <= value <= high`` (bounds inclusive or not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    above = value >= low if low_inclusive else value > low
    below = value <= high if high_inclusive else value < high
    if not (above and below):
        lb = "[" if low_inclusive else "("
        hb = "]" if high_inclusive else ")"
        raise ValueError(f"{name} must lie in {lb}{low}, {high}{hb}, got {value}")


def check_choice(value: object, name: str, choices: Collection[object]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {options}; got {value!r}")


def check_positive_int(value: object, name: str) -> None:
    """Raise unless ``value`` is an ``int`` >= 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype to compute in: float16/bfloat16 are upcast to float32, wider types are kept."""
    if x.dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    return x.dtype if x.is_floating_point() else torch.get_default_dtype()


def check_index_vector(x: object, name: str, *, length: int, upper: int) -> None:
    """Raise unless ``x`` is a 1-D integer tensor of ``length`` entries, each in ``[0, upper)``."""
    check_tensor(x, name, ndim=1)
    assert isinstance(x, torch.Tensor)
    if x.dtype in (torch.bool,) or x.is_floating_point() or x.is_complex():
        raise TypeError(f"{name} must have an integer dtype, got {x.dtype}")
    if x.shape[0] != length:
        raise ValueError(f"{name} must have {length} entries, got shape {tuple(x.shape)}")
    if length and (bool((x < 0).any()) or bool((x >= upper).any())):
        low, high = int(x.min()), int(x.max())
        raise ValueError(f"{name} must hold indices in [0, {upper}), got values in [{low}, {high}]")


def check_square(x: torch.Tensor, name: str) -> None:
    """Raise ``ValueError`` unless ``x`` is a square 2-D tensor (e.g. a cost with positives on the diagonal)."""
    if x.dim() != 2 or x.shape[0] != x.shape[1]:
        raise ValueError(
            f"{name} must be a square [B, B] matrix (positives on the diagonal), got shape {tuple(x.shape)}"
        )
