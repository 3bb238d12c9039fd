"""Selective-retrieval metrics: risk-coverage curves, AURC, E-AURC, AUGRC and selective recall.

A retrieval system that may abstain answers only the queries whose *confidence* reaches a threshold.
Each query has a confidence (higher = more trusted) and a correctness flag (its top-1 video is the
ground truth, or more generally any per-query hit such as ``rank <= k``).

**Ties.** The operating points are one per *unique* confidence value (the convention of fd-shifts'
``RiskCoverageStats``): with the distinct values :math:`t_1 > t_2 > \\dots > t_m`, the point
:math:`j` accepts :math:`A_j = \\{i : \\kappa_i \\ge t_j\\}`. Queries of equal confidence are accepted or
rejected together, so every value below is invariant to the order of the inputs (an implementation that
sorts and sweeps one query at a time, such as torch-uncertainty's ``AURC``, breaks ties by the sort order
instead).

With :math:`n` queries, :math:`N_j = |A_j|` and :math:`W_j` the wrong ones in :math:`A_j`:

.. math::

    \\text{coverage}_j = \\frac{N_j}{n}, \\qquad
    \\text{risk}_j = \\frac{W_j}{N_j} \\;\\text{(selective risk)}, \\qquad
    \\text{grisk}_j = \\frac{W_j}{n} \\;\\text{(generalised risk)}.

References
----------
Geifman, Y. and El-Yaniv, R. Selective classification for deep neural networks. NeurIPS 2017.
Geifman, Y., Uziel, G. and El-Yaniv, R. Bias-reduced uncertainty estimation for deep neural classifiers.
ICLR 2019 (E-AURC).
Traub, J. et al. Overcoming common flaws in the evaluation of selective classification systems. NeurIPS
2024 (AUGRC).
Holmes: Revisiting Uncertainty: On Evidential Learning for Partially Relevant Video Retrieval. ICML 2026
(the evidential confidences these metrics rank).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from evidential_prvr._checks import as_mask, check_finite, check_same_device, check_tensor, should_validate


class RiskCoverage(NamedTuple):
    """Operating points of a risk-coverage curve, by increasing coverage (decreasing threshold).

    The result of :func:`risk_coverage`. ``coverage`` and ``risk`` are 1-D tensors of one entry per unique
    confidence value; entry ``j`` belongs to the threshold ``torch.unique(confidence).flip(0)[j]``.

    Attributes
    ----------
    coverage : torch.Tensor
        Share of the queries answered at each operating point, increasing; the last entry is 1.
    risk : torch.Tensor
        Selective risk (share of wrong answers among the answered queries) at each operating point.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.metrics import risk_coverage
    >>> confidence = torch.tensor([0.9, 0.7, 0.7, 0.2])
    >>> coverage, risk = risk_coverage(confidence, torch.tensor([True, True, False, False]))
    >>> coverage.tolist(), risk.tolist()
    ([0.25, 0.75, 1.0], [0.0, 0.3333333333333333, 0.5])
    >>> thresholds = torch.unique(confidence).flip(0)  # the threshold of each point
    >>> thresholds.tolist()
    [0.8999999761581421, 0.699999988079071, 0.20000000298023224]

    References
    ----------
    Geifman and El-Yaniv, Selective classification for deep neural networks, NeurIPS 2017; used to evaluate
    the confidences of Holmes' evidential opinions (Holmes, ICML 2026, Eq. 5, 9, 16).
    """

    coverage: torch.Tensor
    risk: torch.Tensor


class _Steps(NamedTuple):
    accepted: torch.Tensor  # N_j, int64, one per unique confidence (descending threshold)
    wrong: torch.Tensor  # W_j, int64
    n: int


def _float_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64


def _validate(confidence: object, correct: object, validate_args: bool | None) -> torch.Tensor:
    """Check ``confidence [Q]`` (float) and ``correct [Q]`` (bool or 0/1); return ``correct`` as bool."""
    check_tensor(confidence, "confidence", ndim=1, floating=True)
    check_tensor(correct, "correct", ndim=1)
    assert isinstance(confidence, torch.Tensor) and isinstance(correct, torch.Tensor)
    check_same_device(confidence=confidence, correct=correct)
    if confidence.shape[0] == 0:
        raise ValueError("confidence must hold at least one query, got shape (0,)")
    if correct.shape != confidence.shape:
        raise ValueError(
            f"correct must have the shape of confidence {tuple(confidence.shape)}, got {tuple(correct.shape)}"
        )
    validate = should_validate(validate_args)
    if validate:
        check_finite(confidence, "confidence")
    return as_mask(correct, "correct", confidence.shape, confidence.device, validate=validate)


def _steps(confidence: torch.Tensor, correct: torch.Tensor) -> _Steps:
    """Cumulative accepted and wrong counts at each unique confidence value (descending)."""
    n = confidence.shape[0]
    order = torch.argsort(confidence, descending=True, stable=True)
    ordered = confidence[order]
    wrong = torch.cumsum((~correct[order]).to(torch.int64), 0)
    last_of_group = torch.ones(n, dtype=torch.bool, device=confidence.device)
    last_of_group[:-1] = ordered[1:] != ordered[:-1]
    accepted = torch.arange(1, n + 1, device=confidence.device)[last_of_group]
    return _Steps(accepted, wrong[last_of_group], n)


class _Curve(NamedTuple):
    correct: torch.Tensor  # the validated ``correct`` as bool
    steps: _Steps
    dtype: torch.dtype  # of the returned values


def _curve(confidence: object, correct: object, validate_args: bool | None) -> _Curve:
    """Validated inputs, their operating points and the result dtype (the start of every curve metric)."""
    mask = _validate(confidence, correct, validate_args)
    assert isinstance(confidence, torch.Tensor)
    return _Curve(mask, _steps(confidence, mask), _float_dtype(confidence.device))


def _risk_points(curve: _Curve) -> tuple[torch.Tensor, torch.Tensor]:
    """Coverage and selective risk at each operating point."""
    accepted = curve.steps.accepted.to(curve.dtype)
    return accepted / curve.steps.n, curve.steps.wrong.to(curve.dtype) / accepted


def risk_coverage(
    confidence: torch.Tensor, correct: torch.Tensor, *, validate_args: bool | None = None
) -> RiskCoverage:
    """Selective risk against coverage, one operating point per unique confidence value.

    .. math::

        \\text{coverage}_j = \\frac{|\\{i : \\kappa_i \\ge t_j\\}|}{n}, \\qquad
        \\text{risk}_j = \\frac{|\\{i : \\kappa_i \\ge t_j,\\ \\text{wrong}_i\\}|}{|\\{i : \\kappa_i \\ge t_j\\}|},

    for the distinct confidences :math:`t_1 > \\dots > t_m` (see the module docstring for the tie rule).
    The last point is always coverage 1 with the overall error rate.

    Parameters
    ----------
    confidence : torch.Tensor
        Float ``[Q]``, higher = more trusted; finite.
    correct : torch.Tensor
        ``bool [Q]`` (or 0/1 values): the query's answer is right (e.g. its top-1 video is the ground truth).
    validate_args : bool, optional
        Run the value checks (finite confidence, 0/1 ``correct``); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`. Shape, dtype and device are always checked.

    Returns
    -------
    RiskCoverage
        ``(coverage, risk)``, 1-D float64 tensors (float32 on MPS) by increasing coverage, on the input device.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.metrics import risk_coverage
    >>> curve = risk_coverage(torch.tensor([0.9, 0.8, 0.8, 0.1]), torch.tensor([True, True, False, False]))
    >>> curve.coverage.tolist(), curve.risk.tolist()
    ([0.25, 0.75, 1.0], [0.0, 0.3333333333333333, 0.5])

    References
    ----------
    Geifman and El-Yaniv, Selective classification for deep neural networks, NeurIPS 2017; the tie rule of
    fd-shifts (Traub et al., NeurIPS 2024). Used to evaluate the confidences of Holmes' evidential opinions
    (Holmes, ICML 2026, Eq. 5, 9, 16).
    """
    return RiskCoverage(*_risk_points(_curve(confidence, correct, validate_args)))


def aurc(confidence: torch.Tensor, correct: torch.Tensor, *, validate_args: bool | None = None) -> torch.Tensor:
    """Area under the risk-coverage curve (lower is better).

    The operating points of :func:`risk_coverage` are joined by straight lines (trapezoidal rule) and the
    curve is extended flat from the first point down to coverage 0, as in fd-shifts:

    .. math::

        \\mathrm{AURC} = c_1 r_1 + \\sum_{j=2}^{m} (c_j - c_{j-1})\\,\\frac{r_j + r_{j-1}}{2}.

    A confidence that ties every query gives the error rate; a random one about the error rate as well.

    Parameters
    ----------
    confidence, correct, validate_args
        As in :func:`risk_coverage`.

    Returns
    -------
    torch.Tensor
        0-D float64 tensor (float32 on MPS) in ``[0, 1]``.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.metrics import aurc
    >>> # points (1/3, 0), (2/3, 1/2), (1, 2/3): 0 + (1/3)(1/4) + (1/3)(7/12) = 5/18
    >>> round(float(aurc(torch.tensor([3.0, 2.0, 1.0]), torch.tensor([True, False, False]))), 6)
    0.277778

    References
    ----------
    Geifman, Uziel and El-Yaniv, Bias-reduced uncertainty estimation for deep neural classifiers, ICLR 2019;
    applied to Holmes (ICML 2026) opinions.
    """
    curve = risk_coverage(confidence, correct, validate_args=validate_args)
    return _trapezoid(curve.coverage, curve.risk, start_flat=True)


def augrc(confidence: torch.Tensor, correct: torch.Tensor, *, validate_args: bool | None = None) -> torch.Tensor:
    """Area under the generalised risk-coverage curve (lower is better).

    The generalised risk :math:`W_j / n` (the share of all queries that are accepted *and* wrong) against
    coverage, trapezoidal, starting from :math:`(0, 0)` as in fd-shifts:

    .. math::

        \\mathrm{AUGRC} = \\frac{c_1 g_1}{2} + \\sum_{j=2}^{m} (c_j - c_{j-1})\\,\\frac{g_j + g_{j-1}}{2},
        \\qquad g_j = \\frac{W_j}{n}.

    It weighs every rejected error equally instead of emphasising the few most confident queries; a
    confidence that ties all queries gives half the error rate, a perfect one :math:`\\approx r^2/2`.

    Parameters
    ----------
    confidence, correct, validate_args
        As in :func:`risk_coverage`.

    Returns
    -------
    torch.Tensor
        0-D float64 tensor (float32 on MPS) in ``[0, 0.5]``.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.metrics import augrc
    >>> round(float(augrc(torch.tensor([1.0, 1.0]), torch.tensor([True, False]))), 6)
    0.25

    References
    ----------
    Traub et al., Overcoming common flaws in the evaluation of selective classification systems, NeurIPS
    2024; applied to Holmes (ICML 2026) opinions.
    """
    _, steps, dtype = _curve(confidence, correct, validate_args)
    return _trapezoid(steps.accepted.to(dtype) / steps.n, steps.wrong.to(dtype) / steps.n, start_flat=False)


def e_aurc(confidence: torch.Tensor, correct: torch.Tensor, *, validate_args: bool | None = None) -> torch.Tensor:
    """Excess AURC: :func:`aurc` minus the AURC of an ideal confidence with the same errors.

    The ideal confidence ranks every correct query above every wrong one, all values distinct. With
    :math:`n` queries of which :math:`n_c` are correct its operating points are :math:`c_k = k/n`,
    :math:`r_k = \\max(0, k - n_c)/k` for :math:`k = 1..n`, integrated by the same rule as :func:`aurc`:

    .. math::

        \\mathrm{E\\text{-}AURC} = \\mathrm{AURC} - \\Big(\\frac{r_1}{n}
        + \\sum_{k=2}^{n} \\frac{r_k + r_{k-1}}{2n}\\Big).

    So a perfect ranking scores exactly 0, and a confidence without ties scores :math:`\\ge 0` (its risk is at
    least the ideal one at every coverage :math:`k/n`). Ties can make it slightly negative: the ideal risk
    :math:`1 - n_c/k` is concave in :math:`k`, so the straight segment across a plateau of equal confidences
    runs below it (fd-shifts notes the same for its ``aurc_optimal``). The closed form
    :math:`r + (1-r)\\ln(1-r)` of Geifman et al., which fd-shifts uses for binary residuals, is the
    :math:`n \\to \\infty` limit of this optimum and lies :math:`O(1/n)` below it.

    Parameters
    ----------
    confidence, correct, validate_args
        As in :func:`risk_coverage`.

    Returns
    -------
    torch.Tensor
        0-D float64 tensor (float32 on MPS).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.metrics import e_aurc
    >>> float(e_aurc(torch.tensor([3.0, 2.0, 1.0]), torch.tensor([True, True, False])))
    0.0

    References
    ----------
    Geifman, Uziel and El-Yaniv, Bias-reduced uncertainty estimation for deep neural classifiers, ICLR 2019;
    applied to Holmes (ICML 2026) opinions.
    """
    curve = _curve(confidence, correct, validate_args)
    mask, steps, dtype = curve
    area = _trapezoid(*_risk_points(curve), start_flat=True)
    k = torch.arange(1, steps.n + 1, device=confidence.device, dtype=dtype)
    n_correct = mask.sum().to(dtype)
    optimal_risk = (k - n_correct).clamp_min(0.0) / k
    return area - _trapezoid(k / steps.n, optimal_risk, start_flat=True)


def selective_recall(
    confidence: torch.Tensor,
    correct: torch.Tensor,
    coverages: Sequence[float] = (0.5, 0.8),
    *,
    validate_args: bool | None = None,
) -> torch.Tensor:
    """Recall (percent of hits) among the most confident queries at given coverages.

    For a coverage :math:`c` the system answers :math:`c\\,n` queries: every query above the threshold
    and, when the boundary falls inside a group of equal confidences, the matching fraction of that group
    (the expectation of a random tie-break, so the result does not depend on the input order):

    .. math::

        \\mathrm{R}@c = 100\\,\\frac{H_{j-1} + (c\\,n - N_{j-1})\\,(H_j - H_{j-1})/(N_j - N_{j-1})}{c\\,n},

    where :math:`j` is the first operating point with :math:`N_j \\ge c\\,n` and :math:`H_j = N_j - W_j`
    the hits accepted there (:math:`N_0 = H_0 = 0`). With ``correct`` the top-1 hits this is R@1 at
    coverage :math:`c`; pass ``ranks <= k`` for R@k.

    Parameters
    ----------
    confidence, correct, validate_args
        As in :func:`risk_coverage`.
    coverages : sequence of float
        Coverages in ``(0, 1]``.

    Returns
    -------
    torch.Tensor
        Float64 ``[len(coverages)]`` (float32 on MPS), percentages.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.metrics import selective_recall
    >>> conf = torch.tensor([0.9, 0.7, 0.5, 0.3])
    >>> selective_recall(conf, torch.tensor([True, False, True, False]), (0.25, 0.5, 1.0)).tolist()
    [100.0, 50.0, 50.0]

    References
    ----------
    Geifman and El-Yaniv, Selective classification for deep neural networks, NeurIPS 2017; R@K of the PRVR
    protocol (Holmes, ICML 2026, §4.1).
    """
    mask = _validate(confidence, correct, validate_args)
    if isinstance(coverages, (str, bytes)) or not isinstance(coverages, Sequence) or len(coverages) == 0:
        raise TypeError(f"coverages must be a non-empty sequence of floats, got {coverages!r}")
    for value in coverages:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
            raise ValueError(f"coverages must lie in (0, 1], got {value!r}")
    steps = _steps(confidence, mask)
    dtype = _float_dtype(confidence.device)
    device = confidence.device
    zero = torch.zeros(1, dtype=torch.int64, device=device)
    accepted = torch.cat([zero, steps.accepted])
    hits = accepted - torch.cat([zero, steps.wrong])
    target = torch.tensor([float(c) for c in coverages], dtype=dtype, device=device) * steps.n
    # first operating point whose accepted count reaches the target (rounding guard: never past the end)
    j = torch.searchsorted(accepted.to(dtype), target - 1e-9 * steps.n).clamp(1, accepted.shape[0] - 1)
    before, group = accepted[j - 1].to(dtype), (accepted[j] - accepted[j - 1]).to(dtype)
    hits_before, group_hits = hits[j - 1].to(dtype), (hits[j] - hits[j - 1]).to(dtype)
    answered = hits_before + (target - before) * group_hits / group
    return 100.0 * answered / target


def _trapezoid(x: torch.Tensor, y: torch.Tensor, *, start_flat: bool) -> torch.Tensor:
    """Trapezoidal area under ``(x, y)`` (``x`` increasing) from ``x = 0``: flat at ``y[0]`` or from 0."""
    first = x[0] * y[0] if start_flat else 0.5 * x[0] * y[0]
    return first + (0.5 * (x[1:] - x[:-1]) * (y[1:] + y[:-1])).sum()
