"""Retrieval positives: index vectors or multi-hot matrices, validated into one boolean mask.

A PRVR batch may hold the same video more than once, so a query can have several positive columns.
Every function that takes the positives of a score matrix ``[Q, V]`` calls the argument
``query_video`` and accepts two forms:

* a ``LongTensor`` of shape ``[Q]`` holding the positive column (video) of every query, or
* a ``{0, 1}`` matrix of shape ``[Q, V]`` (bool, integer or floating dtype) with at least one positive
  per row.

**Several positives.** The evidential functions reduce the positives to the *normalised multi-hot*
label :math:`\\mathbf{y}_i = \\mathbf{m}_i / \\sum_j m_{ij}` (one-hot for one positive), so the label lies
on the probability simplex like the Dirichlet mean it is compared with. Consequently the label
consistency (Holmes Eq. 7) :math:`c_i = \\max(0, \\mathbf{s}_i\\cdot\\mathbf{y}_i)` is the mean similarity
over the positives.
"""

from __future__ import annotations

import torch

from evidential_prvr._checks import check_choice, check_floating_dtype, check_tensor
from evidential_prvr.choices import MATCH_RULES, MatchRule


def positive_mask(
    query_video: torch.Tensor, num_videos: int, num_queries: int, *, name: str = "query_video", validate: bool = True
) -> torch.Tensor:
    """Validate the positives of a ``[Q, V]`` score matrix and return them as a ``bool [Q, V]`` mask.

    Parameters
    ----------
    query_video : torch.Tensor
        ``LongTensor [Q]`` of positive column indices, or a ``{0, 1}`` matrix ``[Q, V]`` with at
        least one positive per row.
    num_videos : int
        ``V``, the number of columns.
    num_queries : int
        ``Q``, the number of rows.
    name : str
        Argument name used in error messages.
    validate : bool
        Check the values (index range, 0/1 entries, a positive per row). These checks synchronise
        with the host; shapes and dtypes are always checked.

    Returns
    -------
    torch.Tensor
        ``bool`` tensor of shape ``[Q, V]`` on the device of ``query_video``.

    Raises
    ------
    TypeError
        If ``query_video`` is not a tensor, or a 1-D one is not of an integer dtype.
    ValueError
        If the shape is not ``[Q]`` / ``[Q, V]``, an index is outside ``[0, V)``, a matrix entry is
        not 0 or 1, or a row has no positive.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import positive_mask
    >>> positive_mask(torch.tensor([1, 0]), num_videos=3, num_queries=2)
    tensor([[False,  True, False],
            [ True, False, False]])

    References
    ----------
    Holmes (ICML 2026), Eq. 7 and 11 (the label :math:`\\mathbf{y}_i`).
    """
    check_tensor(query_video, name, ndim=(1, 2))
    if query_video.dim() == 1:
        if query_video.is_floating_point() or query_video.dtype == torch.bool or query_video.is_complex():
            raise TypeError(f"{name} given as indices [Q] must have an integer dtype, got {query_video.dtype}")
        if query_video.shape[0] != num_queries:
            raise ValueError(
                f"{name} must have shape [{num_queries}] (one video index per query), got {tuple(query_video.shape)}"
            )
        if validate and query_video.numel() and bool(((query_video < 0) | (query_video >= num_videos)).any()):
            raise ValueError(
                f"{name} indices must lie in [0, {num_videos}), got values in "
                f"[{int(query_video.min())}, {int(query_video.max())}]"
            )
        cols = torch.arange(num_videos, device=query_video.device)
        return query_video.unsqueeze(-1) == cols
    if tuple(query_video.shape) != (num_queries, num_videos):
        raise ValueError(
            f"{name} must have shape [{num_queries}, {num_videos}] (multi-hot), got {tuple(query_video.shape)}"
        )
    if query_video.is_complex():
        raise TypeError(f"{name} must be a real tensor, got {query_video.dtype}")
    if query_video.dtype == torch.bool:
        mask = query_video
    else:
        if validate and bool(((query_video != 0) & (query_video != 1)).any()):
            raise ValueError(f"{name} given as a matrix must hold only 0 and 1 entries (multi-hot), got other values")
        mask = query_video != 0
    if validate and mask.numel() and not bool(mask.any(dim=-1).all()):
        raise ValueError(f"{name} must have at least one positive per row, got a row without positives")
    return mask


def normalized_target(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The normalised multi-hot label :math:`\\mathbf{m}_i / \\sum_j m_{ij}` of a positive mask ``[Q, V]``.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import normalized_target
    >>> normalized_target(torch.tensor([[True, True, False]]), torch.float64)
    tensor([[0.5000, 0.5000, 0.0000]], dtype=torch.float64)

    References
    ----------
    Holmes (ICML 2026), Eq. 7, 15 and 17 (the label :math:`\\mathbf{y}_i`).
    """
    _check_bool_mask(mask, "mask")
    check_floating_dtype(dtype, "dtype")
    y = mask.to(dtype)
    return y / y.sum(dim=-1, keepdim=True).clamp_min(1.0)


def _check_bool_mask(mask: object, name: str) -> None:
    check_tensor(mask, name)
    assert isinstance(mask, torch.Tensor)
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a bool tensor (as positive_mask returns), got {mask.dtype}")


def correctly_matched(sim: torch.Tensor, mask: torch.Tensor, rule: MatchRule = "any_positive") -> torch.Tensor:
    """Boolean ``[Q]``: the query is correctly matched, the set :math:`S^{tp}` of Holmes Eq. 11.

    Parameters
    ----------
    sim : torch.Tensor
        Scores ``[Q, V]``.
    mask : torch.Tensor
        ``bool [Q, V]`` positives (from :func:`positive_mask`).
    rule : {"any_positive", "argmax"}
        ``"any_positive"`` (paper): some positive attains the row maximum, ties included.
        ``"argmax"`` (official release): the first index of the row maximum is a positive, i.e.
        ``argmax(s_i) == label`` with ties broken towards the lowest index.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import correctly_matched
    >>> sim = torch.tensor([[0.5, 0.5, 0.1]])
    >>> correctly_matched(sim, torch.tensor([[False, True, False]]), "any_positive")
    tensor([True])
    >>> correctly_matched(sim, torch.tensor([[False, True, False]]), "argmax")
    tensor([False])

    References
    ----------
    Holmes (ICML 2026), Eq. 11; the ``"argmax"`` rule follows the official release.
    """
    check_choice(rule, "rule", MATCH_RULES)
    check_tensor(sim, "sim", ndim=2)
    _check_bool_mask(mask, "mask")
    if mask.shape != sim.shape:
        raise ValueError(f"mask must have shape {tuple(sim.shape)} like sim, got {tuple(mask.shape)}")
    if rule == "argmax":
        return mask.gather(-1, sim.argmax(dim=-1, keepdim=True)).squeeze(-1)
    best_positive = sim.masked_fill(~mask, float("-inf")).amax(dim=-1)
    return best_positive >= sim.amax(dim=-1)
