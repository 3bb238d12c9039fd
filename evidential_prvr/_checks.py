"""Argument checks shared by the whole library.

Every public function validates its inputs with these helpers so that bad input fails early with a
``TypeError`` or ``ValueError`` that names the argument, what was expected and what was received,
instead of a NaN or an obscure error deep inside a kernel.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import torch

_VALIDATE_ARGS = True

__all__ = [
    "set_default_validate_args",
    "default_validate_args",
    "should_validate",
    "as_mask",
    "check_same_device",
    "check_nonempty",
    "check_tensor",
    "check_finite",
    "check_same_shape",
    "check_positive",
    "check_in_range",
    "check_choice",
    "check_positive_int",
    "check_floating_dtype",
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


def check_nonempty(x: torch.Tensor, name: str) -> None:
    """Raise ``ValueError`` if any dimension of ``x`` is 0 (an empty batch or an empty token set)."""
    if x.numel() == 0:
        raise ValueError(f"{name} must not be empty (every dimension >= 1), got shape {tuple(x.shape)}")


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


def check_floating_dtype(value: object, name: str) -> None:
    """Raise ``TypeError`` unless ``value`` is a floating-point ``torch.dtype``."""
    if not isinstance(value, torch.dtype):
        raise TypeError(f"{name} must be a floating-point torch.dtype, got {type(value).__name__}")
    if not value.is_floating_point:
        raise TypeError(f"{name} must be a floating-point torch.dtype, got {value}")


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


def check_square_scores(x: object, name: str, validate_args: bool | None) -> None:
    """Raise unless ``x`` is a non-empty, floating, square ``[B, B]`` score or cost matrix (positives on the
    diagonal) that is finite (finiteness only with validation on: a host synchronisation)."""
    check_tensor(x, name, ndim=2, floating=True)
    assert isinstance(x, torch.Tensor)
    check_square(x, name)
    check_nonempty(x, name)
    if should_validate(validate_args):
        check_finite(x, name)


def set_default_validate_args(value: bool) -> None:
    """Switch argument validation on or off for every function and module that is not told otherwise.

    Mirrors :meth:`torch.distributions.Distribution.set_default_validate_args`. Validation is on by
    default. Checks that need the values of a tensor (finiteness, ranges, index bounds) synchronise
    with the host; with validation off they are skipped, so a ``forward`` has no host synchronisation
    from argument checking and can be captured whole by :func:`torch.compile`. Shape, dtype and device
    checks cost nothing and always run.

    Parameters
    ----------
    value : bool
        ``True`` to validate (default), ``False`` to skip the value checks.

    Examples
    --------
    >>> import evidential_prvr
    >>> evidential_prvr.set_default_validate_args(False)  # e.g. before torch.compile
    >>> evidential_prvr.default_validate_args()
    False
    >>> evidential_prvr.set_default_validate_args(True)

    References
    ----------
    The same switch as PyTorch's :meth:`torch.distributions.Distribution.set_default_validate_args`.
    """
    global _VALIDATE_ARGS
    if not isinstance(value, bool):
        raise TypeError(f"value must be a bool, got {type(value).__name__}")
    _VALIDATE_ARGS = value


def default_validate_args() -> bool:
    """Whether argument validation is on for callers that pass ``validate_args=None`` (the default).

    Examples
    --------
    >>> import evidential_prvr
    >>> evidential_prvr.default_validate_args()
    True

    References
    ----------
    See :func:`set_default_validate_args`.
    """
    return _VALIDATE_ARGS


def should_validate(validate_args: bool | None) -> bool:
    """Resolve a ``validate_args`` argument: ``None`` follows :func:`set_default_validate_args`."""
    if validate_args is None:
        return _VALIDATE_ARGS
    if not isinstance(validate_args, bool):
        raise TypeError(f"validate_args must be a bool or None, got {type(validate_args).__name__}")
    return validate_args


def as_mask(
    mask: object,
    name: str,
    shape: Sequence[int],
    device: torch.device,
    *,
    validate: bool = True,
) -> torch.Tensor:
    """The one mask rule of the library: a ``bool`` tensor, or 0/1 values of any real dtype.

    Returns a ``bool`` tensor of exactly ``shape``. Raises ``TypeError`` for a non-tensor or a
    complex tensor, ``ValueError`` for another shape, another device or (when ``validate``) a value
    other than 0 and 1. No broadcasting.
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (bool, or 0/1 values), got {type(mask).__name__}")
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(mask.shape)}")
    if mask.device != device:
        raise ValueError(f"{name} must be on {device} like the scores, got {mask.device}")
    if mask.dtype == torch.bool:
        return mask
    if mask.is_complex():
        raise TypeError(f"{name} must be a real tensor (bool, or 0/1 values), got {mask.dtype}")
    if validate and mask.numel() and bool(((mask != 0) & (mask != 1)).any()):
        other = mask[(mask != 0) & (mask != 1)].flatten()[0].item()
        raise ValueError(f"{name} must hold only 0 and 1 (or be a bool tensor), got other values such as {other}")
    return mask != 0


def check_same_device(**tensors: torch.Tensor | None) -> None:
    """Raise ``ValueError`` naming two arguments if the given tensors are not all on one device.

    ``None`` entries are skipped. The library never moves an argument silently.
    """
    first_name = first_device = None
    for name, tensor in tensors.items():
        if tensor is None:
            continue
        if first_device is None:
            first_name, first_device = name, tensor.device
        elif tensor.device != first_device:
            raise ValueError(
                f"{first_name} and {name} must be on the same device, got {first_device} and {tensor.device}"
            )
