"""Query types at retrieval time: the three-fold rule with fixed, fitted or batch thresholds.

Holmes partitions queries by epistemic uncertainty u, label consistency c and aleatoric uncertainty ξ
(Eq. 10, 12). :func:`identify_query_types` applies that rule with explicit thresholds,
:func:`fit_query_thresholds` chooses them on a validation split, and :func:`batch_rule_query_types`
reproduces the paper's adaptive in-batch thresholds (Eq. 11-12) and fusion (Eq. 14) for comparison.

Type codes follow :class:`evidential_prvr.QueryType`: 0 precise, 1 polysemous, 2 under-determined.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from evidential_prvr._checks import (
    as_mask,
    check_choice,
    check_finite,
    check_in_range,
    check_positive_int,
    check_same_device,
    check_tensor,
    should_validate,
)
from evidential_prvr.choices import ENTROPY_MEDIANS, EntropyMedian
from evidential_prvr.functional._gallery import BranchOpinion, GalleryOpinion
from evidential_prvr.functional._identification import QueryType, _branch_rule

__all__ = [
    "PRECISE",
    "POLYSEMOUS",
    "UNDERDETERMINED",
    "QueryTypeThresholds",
    "identify_query_types",
    "fit_query_thresholds",
    "batch_rule_query_types",
    "macro_f1",
]

PRECISE, POLYSEMOUS, UNDERDETERMINED = (int(t) for t in QueryType)
"""Type codes, in the uncertainty-dominance order of Holmes Eq. 13 (as :class:`evidential_prvr.QueryType`)."""


@dataclass(frozen=True)
class QueryTypeThresholds:
    """Thresholds of the three-fold rule at retrieval time (Holmes Eq. 10, 12 with fixed values).

    Attributes
    ----------
    uncertainty : float
        :math:`\\beta_u`: under-determined iff :math:`u > \\beta_u` (``inf`` disables the test).
    consistency : float
        :math:`\\beta_p`: a precise query needs :math:`c \\ge \\beta_p` (``-inf`` disables it).
    aleatoric : float
        :math:`\\beta_\\xi`: a precise query needs :math:`\\xi < \\beta_\\xi` (``inf`` disables it).
    runner_up : float
        :math:`\\beta_r`: a precise query needs :math:`r < \\beta_r`, no strong alternative (``inf`` disables it).

    Examples
    --------
    >>> from evidential_prvr.uncertainty import QueryTypeThresholds
    >>> QueryTypeThresholds(uncertainty=0.5).to_dict()  # the other tests are off
    {'uncertainty': 0.5, 'consistency': -inf, 'aleatoric': inf, 'runner_up': inf}
    >>> QueryTypeThresholds(**QueryTypeThresholds(0.5, 0.3).to_dict())  # a round trip
    QueryTypeThresholds(uncertainty=0.5, consistency=0.3, aleatoric=inf, runner_up=inf)

    References
    ----------
    Holmes: Revisiting Uncertainty: On Evidential Learning for Partially Relevant Video Retrieval, ICML 2026,
    §3.2, Eq. 10-12 (fixed values in place of the adaptive thresholds of Eq. 11).
    """

    uncertainty: float = math.inf
    consistency: float = -math.inf
    aleatoric: float = math.inf
    runner_up: float = math.inf

    def __post_init__(self) -> None:
        for name in ("uncertainty", "consistency", "aleatoric", "runner_up"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise ValueError(f"{name} threshold must be a number (inf allowed, not NaN), got {value!r}")

    def to_dict(self) -> dict[str, float]:
        """``{"uncertainty": ..., "consistency": ..., "aleatoric": ..., "runner_up": ...}``."""
        return {"uncertainty": self.uncertainty, "consistency": self.consistency, "aleatoric": self.aleatoric,
                "runner_up": self.runner_up}


def _check_features(validate: bool, **features: torch.Tensor | None) -> int:
    present = {name: x for name, x in features.items() if x is not None}
    for name, x in present.items():
        check_tensor(x, name, ndim=1, floating=True)
    first = next(iter(present.values()))
    assert isinstance(first, torch.Tensor)
    n = first.shape[0]
    if n == 0:
        raise ValueError("uncertainty must hold at least one query, got shape (0,)")
    for name, x in present.items():
        assert isinstance(x, torch.Tensor)
        if x.shape[0] != n:
            raise ValueError(f"{name} must have shape [{n}] like uncertainty, got {tuple(x.shape)}")
    check_same_device(**present)
    if validate:
        for name, x in present.items():
            check_finite(x, name)
    return n


def _rule(
    u: torch.Tensor, c: torch.Tensor, xi: torch.Tensor, r: torch.Tensor | None, th: QueryTypeThresholds
) -> torch.Tensor:
    under = u > th.uncertainty
    precise = ~under & (c >= th.consistency) & (xi < th.aleatoric)
    if r is not None:
        precise = precise & (r < th.runner_up)
    return torch.where(under, UNDERDETERMINED, torch.where(precise, PRECISE, POLYSEMOUS)).to(torch.int64)


def identify_query_types(
    uncertainty: torch.Tensor,
    consistency: torch.Tensor,
    aleatoric: torch.Tensor,
    thresholds: QueryTypeThresholds,
    *,
    runner_up: torch.Tensor | None = None,
    validate_args: bool | None = None,
) -> torch.Tensor:
    """Three-fold identification with fixed thresholds (Holmes Eq. 10 and the ξ test of Eq. 12).

    .. math::

        \\text{type}_i = \\begin{cases}
        \\text{under-determined} & u_i > \\beta_u,\\\\
        \\text{precise} & u_i \\le \\beta_u,\\ c_i \\ge \\beta_p,\\ r_i < \\beta_r,\\ \\xi_i < \\beta_\\xi,\\\\
        \\text{polysemous} & \\text{otherwise.}\\end{cases}

    :math:`c` is the consistency with the answer (Eq. 7, or its label-free form) and :math:`r` the label-free
    consistency with the best alternative (see :func:`gallery_opinion`): Eq. 10 sends a query whose evidence
    points away from the label to the polysemous set, which without a label shows as a weak answer or a
    strong alternative. Eq. 12 compares ξ with the median over the batch's candidate precise queries; here
    every threshold is a number, so a query's type does not depend on which other queries are identified
    with it.

    Parameters
    ----------
    uncertainty, consistency, aleatoric : torch.Tensor
        ``[Q]`` u (Eq. 5), c (Eq. 7 or its label-free form) and ξ (Eq. 9), e.g. ``opinion.fused.*``.
    thresholds : QueryTypeThresholds
        :math:`(\\beta_u, \\beta_p, \\beta_\\xi, \\beta_r)`.
    runner_up : torch.Tensor, optional
        ``[Q]`` :math:`r`; needed when ``thresholds.runner_up`` is finite.
    validate_args : bool, optional
        Finite-value checks; ``None`` follows the global switch.

    Returns
    -------
    torch.Tensor
        ``int64 [Q]`` type codes (0 precise, 1 polysemous, 2 under-determined).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import identify_query_types
    >>> from evidential_prvr.uncertainty import QueryTypeThresholds
    >>> u, c, xi = torch.tensor([0.1, 0.1, 0.9]), torch.tensor([0.8, 0.8, 0.8]), torch.tensor([0.2, 1.5, 0.2])
    >>> identify_query_types(u, c, xi, QueryTypeThresholds(0.5, 0.3, 1.0)).tolist()
    [0, 1, 2]

    References
    ----------
    Holmes: Revisiting Uncertainty: On Evidential Learning for Partially Relevant Video Retrieval, ICML 2026,
    §3.2, Eq. 10 and 12.
    """
    _check_features(should_validate(validate_args), uncertainty=uncertainty, consistency=consistency,
                    aleatoric=aleatoric, runner_up=runner_up)
    if not isinstance(thresholds, QueryTypeThresholds):
        raise TypeError(f"thresholds must be a QueryTypeThresholds, got {type(thresholds).__name__}")
    if runner_up is None and thresholds.runner_up != math.inf:
        raise ValueError("runner_up is needed: thresholds.runner_up is finite (fitted with a runner-up feature)")
    return _rule(uncertainty, consistency, aleatoric, runner_up, thresholds)


def macro_f1(predicted: torch.Tensor, actual: torch.Tensor, num_types: int = 3) -> float:
    """Mean F1 over the types, :math:`F_1^t = 2\\,TP_t / (2\\,TP_t + FP_t + FN_t)`.

    Types that are neither predicted nor present (:math:`2TP + FP + FN = 0`) are left out of the mean.

    Parameters
    ----------
    predicted, actual : torch.Tensor
        ``int64 [Q]`` type codes in ``[0, num_types)``.
    num_types : int
        Number of types.

    Returns
    -------
    float
        Macro-F1 in ``[0, 1]`` (NaN for no query).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import macro_f1
    >>> macro_f1(torch.tensor([0, 0, 1, 2]), torch.tensor([0, 1, 1, 2]))
    0.7777777777777777

    References
    ----------
    The identification report of Holmes (ICML 2026), §3.2 query types.
    """
    check_positive_int(num_types, "num_types")
    check_tensor(predicted, "predicted", ndim=1)
    check_tensor(actual, "actual", ndim=1)
    if predicted.shape != actual.shape:
        raise ValueError(f"predicted and actual must have the same shape, got {tuple(predicted.shape)} "
                         f"and {tuple(actual.shape)}")
    check_same_device(predicted=predicted, actual=actual)
    for name, codes in (("predicted", predicted), ("actual", actual)):
        if codes.is_floating_point() or codes.is_complex() or codes.dtype == torch.bool:
            raise TypeError(f"{name} must have an integer dtype (type codes), got {codes.dtype}")
        if codes.numel() and bool(((codes < 0) | (codes >= num_types)).any()):  # read on the host below anyway
            raise ValueError(f"{name} must hold type codes in [0, {num_types}), got values in "
                             f"[{int(codes.min())}, {int(codes.max())}]")
    pairs = torch.bincount(actual.to(torch.int64) * num_types + predicted.to(torch.int64),
                           minlength=num_types * num_types).reshape(num_types, num_types).tolist()
    scores = []
    for t in range(num_types):
        tp = pairs[t][t]
        denominator = sum(pairs[t]) + sum(row[t] for row in pairs)  # = 2TP + FN + FP
        if denominator:
            scores.append(2.0 * tp / denominator)
    return sum(scores) / len(scores) if scores else math.nan


def _grid(x: torch.Tensor | None, grid: int, disabled: float) -> torch.Tensor:
    """Sorted candidate thresholds: up to ``grid`` midpoints of gaps between neighbouring values, and ``disabled``.

    With :math:`v_0 < \\dots < v_{m-1}` the distinct values of ``x``, the :math:`m-1` gaps
    :math:`(v_j, v_{j+1})` are cut into ``grid`` runs of consecutive gaps (gap :math:`j` in run
    :math:`\\lfloor j \\cdot grid / (m-1) \\rfloor`), and each run contributes the midpoint of its widest gap
    (the first on ties): all midpoints when :math:`m - 1 \\le grid`, else a natural break per run. A midpoint
    lies strictly between two values, so a threshold never ties with a query. Without ``x`` only ``disabled``.
    """
    if x is None or x.numel() == 0:
        return torch.tensor([disabled], dtype=torch.float64, device=None if x is None else x.device)
    values = torch.unique(x.to(torch.float64))  # sorted
    gaps = values[1:] - values[:-1]
    mids = values[:-1] + 0.5 * gaps
    if mids.numel() > grid:
        index = torch.arange(mids.numel(), device=x.device)
        run = index * grid // mids.numel()
        widest = torch.zeros(grid, dtype=gaps.dtype, device=x.device).scatter_reduce(0, run, gaps, "amax",
                                                                                     include_self=False)
        first = torch.full((grid,), mids.numel(), device=x.device).scatter_reduce(
            0, run, torch.where(gaps == widest[run], index, mids.numel()), "amin", include_self=False)
        mids = mids[first]
    parts = [mids.new_tensor([disabled]), mids] if disabled < 0 else [mids, mids.new_tensor([disabled])]
    return torch.cat(parts)


def _fit_macro_f1(
    u: torch.Tensor, c: torch.Tensor, xi: torch.Tensor, r: torch.Tensor | None, types: torch.Tensor, grid: int
) -> QueryTypeThresholds:
    """Exact maximum of the macro-F1 over the grid via a histogram of threshold positions and cumulative sums."""
    device = u.device
    tu, tc = _grid(u, grid, math.inf).to(device), _grid(c, grid, -math.inf).to(device)
    tr, tx = _grid(r, grid, math.inf).to(device), _grid(xi, grid, math.inf).to(device)
    def position(t: torch.Tensor, x: torch.Tensor, right: bool = True) -> torch.Tensor:
        return torch.searchsorted(t, x.to(torch.float64).contiguous(), right=right)

    # threshold index a, b, e, d: u > tu[a] <=> a < m_u (#tu < u); c >= tc[b] <=> b < m_c (#tc <= c);
    # r < tr[e] <=> e >= m_r (#tr <= r); the same for xi
    m_u, m_c, m_x = position(tu, u, False), position(tc, c), position(tx, xi)
    m_r = position(tr, r) if r is not None else torch.zeros_like(m_u)
    shape = (tu.numel() + 1, tc.numel() + 1, tr.numel() + 1, tx.numel() + 1, 3)
    flat = ((((m_u * shape[1] + m_c) * shape[2] + m_r) * shape[3] + m_x) * 3 + types)
    # counts are exact in float32 up to 2**24 queries; one pass over the whole [Gu, Gc, Gr, Gx] grid
    hist = torch.bincount(flat, minlength=math.prod(shape)).reshape(shape).to(torch.float32)
    support = hist.sum(dim=(0, 1, 2, 3))  # [3]
    kept = hist.cumsum(0)[:-1]  # [a]: m_u <= a, not under-determined at threshold a
    under = support - kept.sum(dim=(1, 2, 3))  # [Gu, 3]
    precise = kept.flip(1).cumsum(1).flip(1)[:, 1:]  # [b]: m_c > b, i.e. c >= tc[b]
    precise = precise.cumsum(2)[:, :, :-1].cumsum(3)[:, :, :, :-1]  # [Gu, Gc, Gr, Gx, 3] true types of precise
    under = under[:, None, None, None, :]
    poly = support - under - precise
    f1 = torch.zeros(precise.shape[:-1], dtype=torch.float32, device=device)
    present = torch.zeros_like(f1)
    for t, (tp, identified) in enumerate(((precise[..., PRECISE], precise.sum(-1)),
                                          (poly[..., POLYSEMOUS], poly.sum(-1)),
                                          (under[..., UNDERDETERMINED], under.sum(-1)))):
        denominator = identified + support[t]
        f1 = f1 + torch.where(denominator > 0, 2 * tp / denominator.clamp_min(1), 0.0)
        present = present + (denominator > 0).to(torch.float32)
    score = f1 / present.clamp_min(1)
    a, b, e, d = (int(i) for i in torch.unravel_index(torch.argmax(score), score.shape))
    return QueryTypeThresholds(float(tu[a]), float(tc[b]), float(tx[d]), float(tr[e]))


def _youden(feature: torch.Tensor, correct: torch.Tensor, keep_above: bool, thresholds: torch.Tensor) -> int:
    """Index of the threshold whose kept set (``>=`` or ``<``) best separates correct from wrong (Youden J)."""
    n_correct, n_wrong = int(correct.sum()), int((~correct).sum())
    disabled = int(torch.argmax(thresholds.abs()))  # the infinite entry
    if n_correct == 0 or n_wrong == 0:
        return disabled  # nothing to separate
    f = feature.to(torch.float64).unsqueeze(0)
    kept = f >= thresholds.unsqueeze(1) if keep_above else f < thresholds.unsqueeze(1)  # [G, Q]
    tpr = (kept & correct).sum(1).to(torch.float64) / n_correct
    fpr = (kept & ~correct).sum(1).to(torch.float64) / n_wrong
    return int((tpr - fpr).argmax())


def _fit_correctness(
    u: torch.Tensor, c: torch.Tensor, xi: torch.Tensor, r: torch.Tensor | None, correct: torch.Tensor, grid: int
) -> QueryTypeThresholds:
    tu = _grid(u, grid, math.inf)
    beta_u = float(tu[_youden(-u, correct, True, -tu)])
    kept = u <= beta_u
    tc = _grid(c[kept], grid, -math.inf)
    beta_p = float(tc[_youden(c[kept], correct[kept], True, tc)]) if bool(kept.any()) else -math.inf
    kept = kept & (c >= beta_p)
    beta_r = math.inf
    if r is not None and bool(kept.any()):
        tr = _grid(r[kept], grid, math.inf)
        beta_r = float(tr[_youden(r[kept], correct[kept], False, tr)])
        kept = kept & (r < beta_r)
    tx = _grid(xi[kept], grid, math.inf)
    beta_xi = float(tx[_youden(xi[kept], correct[kept], False, tx)]) if bool(kept.any()) else math.inf
    return QueryTypeThresholds(beta_u, beta_p, beta_xi, beta_r)


def fit_query_thresholds(
    uncertainty: torch.Tensor,
    consistency: torch.Tensor,
    aleatoric: torch.Tensor,
    *,
    runner_up: torch.Tensor | None = None,
    query_types: torch.Tensor | None = None,
    correct: torch.Tensor | None = None,
    grid: int = 33,
    validate_args: bool | None = None,
) -> QueryTypeThresholds:
    """Choose the thresholds of :func:`identify_query_types` on a validation split.

    Candidate values per threshold are up to ``grid`` midpoints between neighbouring distinct values of that
    feature (all of them when there are fewer; otherwise the sorted values' gaps are cut into ``grid`` runs
    and each run gives the midpoint of its widest gap), plus the value that switches its test off
    (:math:`+\\infty` for :math:`\\beta_u, \\beta_\\xi, \\beta_r`, :math:`-\\infty` for :math:`\\beta_p`; without
    ``runner_up`` its test stays off). A midpoint never ties with a query. The criterion is

    * with ``query_types`` (known types): the macro-F1 (:func:`macro_f1`) of the identification, maximised
      exactly over the full grid (a histogram of the queries' grid positions and cumulative sums, so the cost
      is :math:`O(Q + G^4)` time and memory, about 20 MB for ``grid=33``; the first maximiser in grid order
      wins ties);
    * otherwise with ``correct`` (top-1 hits): Youden's :math:`J = \\mathrm{TPR} - \\mathrm{FPR}` of each
      test as a detector of a correct top-1, fitted in the order of Eq. 10-12: :math:`\\beta_u` on all
      queries (:math:`u \\le \\beta_u` kept), then :math:`\\beta_p` (:math:`c \\ge \\beta_p`), then
      :math:`\\beta_r` (:math:`r < \\beta_r`), then :math:`\\beta_\\xi` (:math:`\\xi < \\beta_\\xi`), each on the
      queries the previous tests kept. A test that cannot separate (all kept queries correct, or all wrong)
      is switched off.

    Parameters
    ----------
    uncertainty, consistency, aleatoric : torch.Tensor
        ``[Q]`` features of the validation queries (e.g. ``opinion.fused.*``).
    runner_up : torch.Tensor, optional
        ``[Q]`` label-free consistency with the runner-up (``opinion.fused.runner_up_consistency``).
    query_types : torch.Tensor, optional
        ``int64 [Q]`` known types (0 precise, 1 polysemous, 2 under-determined).
    correct : torch.Tensor, optional
        ``bool [Q]`` top-1 hits; used when ``query_types`` is not given.
    grid : int
        Most candidate values per threshold (>= 2), besides the disabling one.
    validate_args : bool, optional
        Value checks; ``None`` follows the global switch.

    Returns
    -------
    QueryTypeThresholds

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import fit_query_thresholds, identify_query_types
    >>> u = torch.tensor([0.1, 0.2, 0.1, 0.2, 0.8, 0.9])
    >>> c = torch.full((6,), 0.5)
    >>> xi = torch.tensor([0.1, 0.2, 1.1, 1.2, 0.5, 0.5])
    >>> types = torch.tensor([0, 0, 1, 1, 2, 2])
    >>> th = fit_query_thresholds(u, c, xi, query_types=types, grid=11)
    >>> identify_query_types(u, c, xi, th).tolist()
    [0, 0, 1, 1, 2, 2]

    References
    ----------
    Holmes: Revisiting Uncertainty: On Evidential Learning for Partially Relevant Video Retrieval, ICML 2026,
    §3.2, Eq. 10-12 (the thresholds are fitted instead of adapted per batch, Eq. 11).
    """
    validate = should_validate(validate_args)
    n = _check_features(validate, uncertainty=uncertainty, consistency=consistency, aleatoric=aleatoric,
                        runner_up=runner_up)
    check_positive_int(grid, "grid")
    if grid < 2:
        raise ValueError(f"grid must be >= 2, got {grid}")
    if query_types is None and correct is None:
        raise ValueError("fit_query_thresholds needs query_types or correct (the criterion to fit)")
    if query_types is not None:
        check_tensor(query_types, "query_types", ndim=1)
        check_same_device(uncertainty=uncertainty, query_types=query_types)
        if query_types.is_floating_point() or query_types.dtype == torch.bool or query_types.is_complex():
            raise TypeError(f"query_types must have an integer dtype, got {query_types.dtype}")
        if query_types.shape[0] != n:
            raise ValueError(f"query_types must have shape [{n}], got {tuple(query_types.shape)}")
        if validate and bool(((query_types < 0) | (query_types > 2)).any()):
            raise ValueError("query_types must hold codes 0 (precise), 1 (polysemous) or 2 (under-determined), got "
                             f"values in [{int(query_types.min())}, {int(query_types.max())}]")
        return _fit_macro_f1(uncertainty, consistency, aleatoric, runner_up, query_types.to(torch.int64), grid)
    check_tensor(correct, "correct", ndim=1)
    check_same_device(uncertainty=uncertainty, correct=correct)
    assert isinstance(correct, torch.Tensor)
    mask = as_mask(correct, "correct", (n,), uncertainty.device, validate=validate)
    return _fit_correctness(uncertainty, consistency, aleatoric, runner_up, mask, grid)


def _batch_branch(branch: BranchOpinion, matched: torch.Tensor, beta: float, entropy_median: EntropyMedian) -> torch.Tensor:
    assert branch.label_consistency is not None
    return _branch_rule(branch.uncertainty, branch.label_consistency, branch.aleatoric, matched, beta,
                        entropy_median)[0]


def batch_rule_query_types(
    opinion: GalleryOpinion, *, beta: float = 0.3, entropy_median: EntropyMedian = "candidates"
) -> torch.Tensor:
    """The paper's in-batch identification applied to a gallery opinion (Holmes Eq. 10-14).

    Per branch, with :math:`S^{tp}` the queries whose top-1 (by the ranking score) is the annotated
    video, :math:`\\beta_u = \\min(\\max_{S^{tp}} u, 1-\\beta)` and :math:`\\beta_p = \\max(\\beta,
    \\min_{S^{tp}} c)` with the labelled consistency of Eq. 7 (Eq. 11), the split of Eq. 10, the median
    refinement of Eq. 12 (``"candidates"``: strict ``<`` against the NumPy median of ξ over the candidate
    precise queries; ``"batch"``: a candidate becomes polysemous iff ξ exceeds ``torch.median`` of ξ over
    all queries), and the uncertainty-dominant fusion of Eq. 14 (element-wise maximum of the codes).
    The thresholds depend on the whole set of queries passed, as inside a training batch.

    Parameters
    ----------
    opinion : GalleryOpinion
        Computed with ``target`` (needs ``label_consistency`` and ``correct``).
    beta : float
        :math:`\\beta \\in [0, 1]` of Eq. 11.
    entropy_median : {"candidates", "batch"}
        Median rule of Eq. 12.

    Returns
    -------
    torch.Tensor
        ``int64 [Q]`` fused type codes.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import batch_rule_query_types, gallery_opinion
    >>> s = torch.tensor([[0.9, 0.0, 0.0], [0.2, 0.25, 0.2], [0.0, 0.05, 0.02]])
    >>> op = gallery_opinion(s, s, k=3, target=torch.tensor([0, 0, 0]))
    >>> batch_rule_query_types(op).tolist()
    [1, 1, 2]

    References
    ----------
    Holmes: Revisiting Uncertainty: On Evidential Learning for Partially Relevant Video Retrieval, ICML 2026,
    §3.2, Eq. 10-14.
    """
    if not isinstance(opinion, GalleryOpinion):
        raise TypeError(f"opinion must be a GalleryOpinion, got {type(opinion).__name__}")
    if opinion.correct is None or opinion.frame.label_consistency is None:
        raise ValueError("batch_rule_query_types needs an opinion computed with target= (Eq. 7 and S^tp need labels)")
    check_in_range(beta, "beta", 0.0, 1.0)
    check_choice(entropy_median, "entropy_median", ENTROPY_MEDIANS)
    frame = _batch_branch(opinion.frame, opinion.correct, beta, entropy_median)
    clip = _batch_branch(opinion.clip, opinion.correct, beta, entropy_median)
    return torch.maximum(frame, clip)
