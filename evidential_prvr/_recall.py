"""Recall at K from 1-based ranks: the one definition that the score-matrix recall
(:func:`evidential_prvr.metrics.recall_at_k`), the search result
(:meth:`evidential_prvr.search.SearchResult.recall_at_k`), the comparison statistics
(:func:`evidential_prvr.metrics.run_metric`) and every reference task use, with its one default cut-offs and its
one check of them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

#: The cut-offs of R@K and SumR in PRVR, R@1, R@5, R@10 and R@100 (Holmes §4.1, the MS-SL protocol).
DEFAULT_KS: tuple[int, ...] = (1, 5, 10, 100)


def check_ks(ks: object) -> tuple[int, ...]:
    """``ks`` as a tuple of ints, or a ``TypeError`` / ``ValueError`` naming the argument.

    A non-empty sequence of distinct integers ``>= 1`` (Python or NumPy integers; not bools).
    """
    if isinstance(ks, (str, bytes)) or not isinstance(ks, Sequence):
        raise TypeError(f"ks must be a sequence of ints, got {type(ks).__name__}")
    if len(ks) == 0:
        raise ValueError("ks must hold at least one cut-off, got an empty sequence")
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"ks must hold ints, got {k!r} ({type(k).__name__})")
        if k < 1:
            raise ValueError(f"ks must hold cut-offs >= 1, got {tuple(ks)}")
    cuts = tuple(int(k) for k in ks)
    if len(set(cuts)) != len(cuts):
        raise ValueError(f"ks must hold distinct values, got {cuts}")
    return cuts


def hits_within(ranks: torch.Tensor, ks: tuple[int, ...]) -> torch.Tensor:
    """``[..., len(ks)]`` bool: whether each rank is within each cut-off (``rank <= k``)."""
    cutoffs = torch.tensor(ks, dtype=ranks.dtype, device=ranks.device)
    return ranks.unsqueeze(-1) <= cutoffs


def recall_from_ranks(ranks: torch.Tensor | np.ndarray | Sequence[int], ks: Sequence[int] = DEFAULT_KS) -> dict[str, float]:
    r"""Recall at K in percent from the 1-based rank of each query's ground truth, and their sum ``SumR``.

    With the ranks :math:`r_1, \dots, r_Q` (1 = first):

    .. math::

       \mathrm{R@}K = \frac{100}{Q} \sum_q [r_q \le K], \qquad \mathrm{SumR} = \sum_{K \in \mathcal{K}} \mathrm{R@}K.

    Every recall of the library and of its reference tasks is this function (or, for the comparison statistics
    over resampled queries, :func:`evidential_prvr.metrics.run_metric`, which computes the same figures); how a
    task ranks (ties, excluded videos, several positives) is the task's, the recall of the ranks is this.

    Parameters
    ----------
    ranks : torch.Tensor, numpy.ndarray or sequence of int
        ``[Q]`` integer ranks ``>= 1`` (``Q >= 1``).
    ks : sequence of int
        Distinct cut-offs :math:`\mathcal{K}`, each ``>= 1`` (default :data:`DEFAULT_KS`, the PRVR protocol's).

    Returns
    -------
    dict
        ``{"R@1": ..., "R@5": ..., ..., "SumR": ...}`` with keys following ``ks``, as Python floats.

    Raises
    ------
    TypeError
        ``ranks`` not integers, ``ks`` not a sequence of ints.
    ValueError
        ``ranks`` not ``[Q]`` with ``Q >= 1`` or below 1 (0-based ranks: add 1), ``ks`` empty, below 1 or repeated.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.metrics import recall_from_ranks
    >>> recall_from_ranks(torch.tensor([1, 3, 12, 2]), ks=(1, 5, 10))
    {'R@1': 25.0, 'R@5': 75.0, 'R@10': 75.0, 'SumR': 175.0}

    References
    ----------
    Holmes (ICML 2026), §4.1 "Metrics"; Dong et al., "Partially Relevant Video Retrieval" (MS-SL), ACM MM 2022.
    """
    cuts = check_ks(ks)
    if isinstance(ranks, np.ndarray):
        ranks = torch.from_numpy(ranks)
    elif not isinstance(ranks, torch.Tensor):
        if isinstance(ranks, (str, bytes)) or not isinstance(ranks, Sequence):
            raise TypeError(f"ranks must be a torch.Tensor, numpy.ndarray or sequence of ints, got {type(ranks).__name__}")
        ranks = torch.tensor(list(ranks))
    if ranks.dtype == torch.bool or ranks.is_floating_point() or ranks.is_complex():
        raise TypeError(f"ranks must have an integer dtype, got {ranks.dtype}")
    if ranks.dim() != 1 or ranks.shape[0] == 0:
        raise ValueError(f"ranks must be [Q] with Q >= 1, got shape {tuple(ranks.shape)}")
    low = int(ranks.min())
    if low < 1:
        raise ValueError(f"ranks must be 1-based (>= 1; add 1 to 0-based ranks), got a minimum of {low}")
    hits = hits_within(ranks, cuts).sum(dim=0).double()
    recalls = (100.0 * hits / ranks.shape[0]).tolist()
    result = {f"R@{k}": float(r) for k, r in zip(cuts, recalls)}
    result["SumR"] = float(sum(recalls))
    return result
