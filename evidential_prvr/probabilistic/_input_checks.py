"""Small helpers shared by the DAB and HUD modules (log-variance bounds, dtype, masks)."""

from __future__ import annotations

import torch
from torch import nn

from evidential_prvr._checks import check_finite, check_nonempty, check_positive_int, check_tensor, should_validate

DEFAULT_LOGVAR_BOUNDS = (-6.0, 2.0)


class _InputChecks(nn.Module):
    """Base of the DAB and HUD modules: ``validate_args``, the switch of their finiteness checks."""

    def __init__(self, validate_args: bool | None = None) -> None:
        super().__init__()
        self.validate_args = validate_args


def check_bounds(bounds: object, name: str = "logvar_bounds") -> tuple[float, float]:
    """Validate a ``(low, high)`` pair of finite log-variance bounds with ``low < high``."""
    if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
        raise ValueError(f"{name} must be a pair (low, high), got {bounds!r}")
    low, high = (float(b) for b in bounds)
    if not (float("-inf") < low < high < float("inf")):
        raise ValueError(f"{name} must be finite with low < high, got {bounds!r}")
    return low, high


def check_inputs(validate_args: bool | None, **tensors: torch.Tensor | None) -> None:
    """Every given tensor is non-empty (always) and finite (when validation is on); ``None`` is skipped."""
    validate = should_validate(validate_args)
    for name, tensor in tensors.items():
        if tensor is None:
            continue
        check_nonempty(tensor, name)
        if validate:
            check_finite(tensor, name)


def check_dim(x: torch.Tensor, name: str, dim: int) -> None:
    """Raise ``ValueError`` unless the last dimension of ``x`` is ``dim``."""
    if x.dim() == 0 or x.shape[-1] != dim:
        raise ValueError(f"{name} must have last dimension {dim}, got shape {tuple(x.shape)}")


def check_features(x: torch.Tensor, name: str, dim: int, ndim: int | tuple[int, ...] | None = None) -> None:
    """Raise unless ``x`` is a floating tensor (of ``ndim`` dimensions when given) whose last dimension is ``dim``."""
    check_tensor(x, name, ndim=ndim, floating=True)
    check_dim(x, name, dim)


def check_sizes(**sizes: object) -> None:
    """Raise unless every given size is a positive int (checked in the order given, each by its name)."""
    for name, size in sizes.items():
        check_positive_int(size, name)


def hidden_size(hidden_dim: int | None, dim: int) -> int:
    """A module's MLP hidden size: ``hidden_dim`` (a positive int) when given, else ``dim``."""
    if hidden_dim is None:
        return dim
    check_positive_int(hidden_dim, "hidden_dim")
    return hidden_dim


def key_padding(mask: torch.Tensor | None) -> torch.Tensor | None:
    """The ``key_padding_mask`` of :class:`torch.nn.MultiheadAttention` (True = ignore) for a True-is-valid mask."""
    return None if mask is None else ~mask


def to_module_dtype(x: torch.Tensor, module: nn.Module) -> torch.Tensor:
    """Cast ``x`` to the dtype of the module's parameters (half inputs run in float32 weights)."""
    return x.to(next(module.parameters()).dtype)


def check_token_mask(
    mask: torch.Tensor | None, tokens: torch.Tensor, name: str = "mask", validate_args: bool | None = None
) -> None:
    """Validate a ``[B, T]`` boolean mask (True = valid token); with validation on (a host synchronisation),
    also that every row has at least one valid token."""
    if mask is None:
        return
    check_tensor(mask, name, ndim=2)
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a bool tensor (True = valid token), got {mask.dtype}")
    if tuple(mask.shape) != tuple(tokens.shape[:2]):
        raise ValueError(f"{name} must have shape {tuple(tokens.shape[:2])} ([B, T]), got {tuple(mask.shape)}")
    if should_validate(validate_args) and not bool(mask.any(dim=1).all()):
        empty = torch.nonzero(~mask.any(dim=1)).flatten()[:5].tolist()
        raise ValueError(f"every row of {name} needs at least one valid (True) token; rows {empty} have none")


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``[B, T, D]`` over ``T``, counting only tokens where ``mask`` is True."""
    if mask is None:
        return x.mean(dim=1)
    weights = mask.to(x.dtype).unsqueeze(-1)
    return (x * weights).sum(dim=1) / weights.sum(dim=1)
