"""Retrieval targets: turn index or multi-hot targets into validated masks and label matrices.

A PRVR batch may hold the same video more than once, so a query can have several positive columns.
Targets are accepted in two forms:

* a ``LongTensor`` of shape ``[B]`` holding the positive column index of every query, or
* a ``{0, 1}`` matrix of shape ``[B, K]`` (bool, integer or floating dtype) with at least one positive
  per row.

**Several positives.** Every function of :mod:`evidential_prvr.functional` that takes a ``target``
reduces it to the *normalised multi-hot* label :math:`\\mathbf{y}_i = \\mathbf{m}_i / \\sum_j m_{ij}`
(one-hot when there is one positive), so that the label lies on the probability simplex like the
Dirichlet mean it is compared with. Consequently

* the label consistency (Holmes Eq. 7) :math:`c_i = \\max(0, \\mathbf{s}_i\\cdot\\mathbf{y}_i)` is the
  mean similarity over the positives (duplicated videos have equal similarities, so this is also their
  common value);
* a query is *correctly matched* (Holmes Eq. 11, :math:`\\mathcal{S}^{tp}`) when one of its positives
  attains the row maximum of the similarities, i.e. the arg max is any positive (ties included).
"""

from __future__ import annotations

import torch

from evidential_prvr._checks import check_tensor

__all__ = ["positive_mask", "normalized_target", "correctly_matched"]


def positive_mask(target: torch.Tensor, num_classes: int, batch_size: int, name: str = "target") -> torch.Tensor:
    """Validate ``target`` and return a boolean ``[B, K]`` mask of its positive columns.

    Parameters
    ----------
    target : torch.Tensor
        ``LongTensor [B]`` of positive column indices, or a ``{0, 1}`` matrix ``[B, K]`` with at least
        one positive per row.
    num_classes : int
        ``K``, the number of columns (candidate videos).
    batch_size : int
        ``B``, the number of rows (queries).
    name : str
        Argument name used in error messages.

    Returns
    -------
    torch.Tensor
        ``bool`` tensor of shape ``[B, K]`` on the device of ``target``.

    Raises
    ------
    TypeError
        If ``target`` is not a tensor, or a 1-D target is not of an integer dtype.
    ValueError
        If the shape does not match ``[B]`` / ``[B, K]``, an index is out of ``[0, K)``, a matrix entry
        is not 0 or 1, or a row has no positive.
    """
    check_tensor(target, name, ndim=(1, 2))
    if target.dim() == 1:
        if target.is_floating_point() or target.dtype == torch.bool or target.is_complex():
            raise TypeError(f"{name} given as indices [B] must have an integer dtype, got {target.dtype}")
        if target.shape[0] != batch_size:
            raise ValueError(f"{name} must have shape [{batch_size}] (one index per query), got {tuple(target.shape)}")
        if target.numel() and bool(((target < 0) | (target >= num_classes)).any()):
            raise ValueError(
                f"{name} indices must lie in [0, {num_classes}), got values in "
                f"[{int(target.min())}, {int(target.max())}]"
            )
        cols = torch.arange(num_classes, device=target.device)
        return target.unsqueeze(-1) == cols
    if tuple(target.shape) != (batch_size, num_classes):
        raise ValueError(f"{name} must have shape [{batch_size}, {num_classes}] (multi-hot), got {tuple(target.shape)}")
    if target.dtype == torch.bool:
        mask = target
    else:
        if target.is_complex():
            raise TypeError(f"{name} must be a real tensor, got {target.dtype}")
        if bool(((target != 0) & (target != 1)).any()):
            raise ValueError(f"{name} given as a matrix must hold only 0 and 1 entries (multi-hot), got other values")
        mask = target != 0
    if target.numel() and not bool(mask.any(dim=-1).all()):
        raise ValueError(f"{name} must have at least one positive per row, got a row without positives")
    return mask


def normalized_target(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The normalised multi-hot label :math:`\\mathbf{m}_i / \\sum_j m_{ij}` of a positive mask ``[B, K]``."""
    y = mask.to(dtype)
    return y / y.sum(dim=-1, keepdim=True).clamp_min(1.0)


def correctly_matched(sim: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Boolean ``[B]``: some positive of the row attains the row maximum of ``sim`` (Holmes Eq. 11, S^tp)."""
    best_positive = sim.masked_fill(~mask, float("-inf")).amax(dim=-1)
    return best_positive >= sim.amax(dim=-1)
