"""Retrieval metrics for PRVR: recall at K over a query × video score matrix, and the risk-coverage
metrics of selective retrieval.

R@K is the percentage of queries whose ground-truth video ranks in the top K, and SumR the sum of the
R@K (Holmes §4.1, "Metrics"; the protocol of MS-SL that every PRVR paper reports).

Users call :func:`evidential_prvr.metrics.recall_at_k` on a score matrix, or
:func:`~evidential_prvr.metrics.recall_from_ranks` on the 1-based ranks their own evaluation computed (every recall
of the library and of its reference tasks is that one function, with the default cut-offs
:data:`~evidential_prvr.metrics.DEFAULT_KS`); a system that may abstain is evaluated from one
confidence and one correctness flag per query with :func:`~evidential_prvr.metrics.risk_coverage`,
:func:`~evidential_prvr.metrics.aurc`, :func:`~evidential_prvr.metrics.e_aurc`,
:func:`~evidential_prvr.metrics.augrc` and :func:`~evidential_prvr.metrics.selective_recall`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from evidential_prvr import _recall
from evidential_prvr._checks import check_finite, check_index_vector, check_positive_int, check_tensor
from evidential_prvr._hierarchical_bootstrap import (
    LOWER_IS_BETTER,
    RunComparison,
    compare_runs,
    hierarchical_bootstrap,
    run_metric,
)
from evidential_prvr._recall import check_ks, recall_from_ranks
from evidential_prvr._risk_coverage import RiskCoverage, augrc, aurc, e_aurc, risk_coverage, selective_recall
from evidential_prvr._selective_bootstrap import SELECTIVE_METRICS, compare_selective_runs, selective_run_metric

__all__ = ["recall_at_k", "recall_from_ranks", "DEFAULT_KS", "ranks_of_ground_truth", "RiskCoverage", "risk_coverage",
           "aurc", "e_aurc", "augrc", "selective_recall", "run_metric", "hierarchical_bootstrap", "RunComparison",
           "compare_runs", "LOWER_IS_BETTER", "SELECTIVE_METRICS", "selective_run_metric", "compare_selective_runs"]

#: The cut-offs of R@K and SumR in PRVR, R@1, R@5, R@10 and R@100 (Holmes §4.1, the MS-SL protocol), the default
#: ``ks`` of every recall of the library.
DEFAULT_KS = _recall.DEFAULT_KS


def _as_tensor(x: object, name: str) -> torch.Tensor:
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    if isinstance(x, torch.Tensor):
        return x
    raise TypeError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(x).__name__}")


def ranks_of_ground_truth(scores: torch.Tensor, gt: torch.Tensor, *, query_chunk: int = 1024) -> torch.Tensor:
    """1-based rank of each query's ground-truth video: 1 + the number of *other* videos scoring >= it.

    Ties count against the model (a video tied with the ground truth ranks ahead of it). The comparison is
    done ``query_chunk`` queries at a time so that only a ``[query_chunk, Nv]`` boolean block exists at once.

    Parameters
    ----------
    scores : torch.Tensor
        ``[Nq, Nv]`` finite query-video scores (higher = more relevant).
    gt : torch.Tensor
        ``[Nq]`` integer ground-truth video index of each query.
    query_chunk : int
        Queries per block.

    Returns
    -------
    torch.Tensor
        ``[Nq]`` int64 ranks, on the device of ``scores``.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.metrics import ranks_of_ground_truth
    >>> scores = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.7]])
    >>> ranks_of_ground_truth(scores, torch.tensor([0, 1, 0]))
    tensor([1, 1, 2])

    References
    ----------
    Holmes (ICML 2026), §4.1 "Metrics"; Dong et al., "Partially Relevant Video Retrieval" (MS-SL), ACM MM 2022.
    """
    check_tensor(scores, "scores", ndim=2, floating=True)
    num_queries, num_videos = scores.shape
    if num_queries == 0 or num_videos == 0:
        raise ValueError(f"scores must have at least one query and one video, got shape {tuple(scores.shape)}")
    check_finite(scores, "scores")
    check_index_vector(gt, "gt", length=num_queries, upper=num_videos)
    check_positive_int(query_chunk, "query_chunk")
    gt = gt.to(scores.device)
    ranks = torch.empty(num_queries, dtype=torch.long, device=scores.device)
    for start in range(0, num_queries, query_chunk):
        block = scores[start : start + query_chunk]
        gt_score = block.gather(1, gt[start : start + query_chunk].unsqueeze(1))
        # the ground truth always ties with itself, so this count is exactly 1 + (other videos >= it)
        ranks[start : start + query_chunk] = (block >= gt_score).sum(dim=1)
    return ranks


def recall_at_k(
    scores: torch.Tensor | np.ndarray,
    gt: torch.Tensor | np.ndarray,
    ks: Sequence[int] = DEFAULT_KS,
    *,
    query_chunk: int = 1024,
) -> dict[str, float]:
    """Recall at K in percent for one ground-truth video per query, and their sum ``SumR``.

    ``R@k`` is the percentage of queries whose ground-truth video ranks within the top ``k``, the rank
    being 1 + the number of other videos scoring >= the ground truth (ties count against the model; see
    :func:`ranks_of_ground_truth`). ``SumR`` is the sum of the ``R@k`` values (the PRVR convention with
    ``ks=(1, 5, 10, 100)``). It is :func:`recall_from_ranks` of :func:`ranks_of_ground_truth`.

    Parameters
    ----------
    scores : torch.Tensor or numpy.ndarray
        ``[Nq, Nv]`` finite query-video scores.
    gt : torch.Tensor or numpy.ndarray
        ``[Nq]`` integer ground-truth video index of each query.
    ks : sequence of int
        Distinct cut-offs ``k >= 1`` (default :data:`DEFAULT_KS`).
    query_chunk : int
        Queries compared at a time (bounds the temporary memory).

    Returns
    -------
    dict
        ``{"R@1": ..., "R@5": ..., ..., "SumR": ...}`` with keys following ``ks``, as Python floats.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.metrics import recall_at_k
    >>> scores = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.7]])
    >>> {k: round(v, 1) for k, v in recall_at_k(scores, torch.tensor([0, 1, 0]), ks=(1, 2)).items()}
    {'R@1': 66.7, 'R@2': 100.0, 'SumR': 166.7}

    References
    ----------
    Holmes (ICML 2026), §4.1 "Metrics"; Dong et al., "Partially Relevant Video Retrieval" (MS-SL), ACM MM 2022.
    """
    scores_t = _as_tensor(scores, "scores")
    gt_t = _as_tensor(gt, "gt")
    cuts = check_ks(ks)  # before the ranks: a bad ks is reported without scoring anything
    return recall_from_ranks(ranks_of_ground_truth(scores_t, gt_t, query_chunk=query_chunk), cuts)
