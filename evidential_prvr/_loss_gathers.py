"""What the ``distributed=True`` losses share: one set of gathers per training step, per-rank terms
lifted into the global batch, and the once-only warning of a loss that sees only its rank's slice.

See :mod:`evidential_prvr.distributed` for the contract and :doc:`/guide/distributed` for the design.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import cast, overload

import torch
import torch.distributed as dist

from evidential_prvr.distributed import _all_gather_padded, gather_sizes, gather_with_grad, is_distributed, rank_offset

__all__ = ["shared_gathers", "set_sizes", "gather_rows", "lift_rows", "batch_rows", "warn_per_rank"]

_WARNED = False
_SCOPE: dict[object, object] | None = None



@contextlib.contextmanager
def shared_gathers(sizes: dict[str, list[int]] | None = None) -> Iterator[None]:
    """Within this scope, gathering the same tensor twice returns the first result (one gather of the
    scores serves L_base and L_inter), and the sizes of a role (``"queries"``, ``"videos"``) are gathered
    once. Nested scopes share the outermost one. Every rank runs the same calls in the same order."""
    global _SCOPE
    if _SCOPE is not None:
        if sizes:
            _SCOPE.update({("sizes", k): v for k, v in sizes.items()})
        yield
        return
    _SCOPE = {("sizes", k): v for k, v in (sizes or {}).items()}
    try:
        yield
    finally:
        _SCOPE = None


def set_sizes(role: str, sizes: list[int]) -> None:
    """Record the sizes of ``role`` in the current scope (the criterion gathers the layout once)."""
    if _SCOPE is not None:
        _SCOPE[("sizes", role)] = list(sizes)


def _role_sizes(role: str, size: int, device: torch.device) -> list[int]:
    key = ("sizes", role)
    if _SCOPE is not None and key in _SCOPE:
        return cast("list[int]", _SCOPE[key])  # a ("sizes", role) entry holds that role's sizes
    sizes = gather_sizes(size, device)
    if _SCOPE is not None:
        _SCOPE[key] = sizes
    return sizes


def gather_rows(tensor: torch.Tensor, role: str) -> torch.Tensor:
    """All ranks' rows of ``tensor`` (dim 0 is ``role``: ``"queries"`` or ``"videos"``), differentiable."""
    key = ("rows", id(tensor), role)
    if _SCOPE is not None and key in _SCOPE:
        return cast("tuple[torch.Tensor, torch.Tensor]", _SCOPE[key])[1]  # a "rows" entry: (input, gathered)
    out = gather_with_grad(tensor, sizes=_role_sizes(role, tensor.shape[0], tensor.device))
    if _SCOPE is not None:
        _SCOPE[key] = (tensor, out)  # the input is kept so that its id is not reused within the scope
    return out


def lift_rows(rows: torch.Tensor, role: str) -> torch.Tensor:
    """Per-row terms computed on this rank alone (per-video terms: L_intra, L_div) as the global vector:
    the values of every rank's rows, in rank order, differentiable in this rank's rows with a factor
    ``world_size`` (the factor every gathered term gets from the ranks' identical global losses)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    sizes = _role_sizes(role, rows.shape[0], rows.device)
    values = _all_gather_padded(rows.detach(), sizes, None)
    start = rank_offset(sizes, rank)
    # value: exactly the rows (the bracket is 0); gradient: world_size
    own = rows.detach() + (world * rows - world * rows.detach())
    return torch.cat([values[:start], own, values[start + rows.shape[0]:]])


@overload
def batch_rows(distributed: bool, owner: str, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]: ...


@overload
def batch_rows(distributed: bool, owner: str, *tensors: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]: ...


def batch_rows(distributed: bool, owner: str, *tensors: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """The ``[Q, ...]`` inputs of an in-batch loss: gathered over the ranks when ``distributed`` (and a
    process group runs), else as given (warning once that its batch statistics are per rank)."""
    if not distributed:
        warn_per_rank(owner)
        return tensors
    if not is_distributed():
        return tensors
    return tuple(None if t is None else gather_rows(t, "queries") for t in tensors)


def warn_per_rank(owner: str) -> None:
    """Warn once per process when a loss built without ``distributed=True`` runs under a process group."""
    global _WARNED
    if _WARNED or not is_distributed():
        return
    _WARNED = True
    warnings.warn(
        f"{owner}: torch.distributed runs {dist.get_world_size()} processes but the loss was built without "
        f"distributed=True, so its batch statistics (the Eq. 11 medians, the in-batch negatives) are those of "
        f"each rank's slice, not of the global batch; build it with distributed=True (from_preset(..., "
        f"distributed=True)) and pass [Q_rank, V_global] scores (see the guide 'Multi-process training')",
        UserWarning, stacklevel=3)
