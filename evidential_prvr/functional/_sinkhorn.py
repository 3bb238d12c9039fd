"""Batched, masked entropic optimal transport by Sinkhorn iterations (Holmes Eq. 19, App. B.5).

One call solves B independent problems of the same padded size ``[n, m]``. Rows or columns whose
marginal mass is zero are *masked*: they take no part in the problem and their plan entries are
exactly zero, so problems with different numbers of valid rows and columns share one batch.

Two numerically different but mathematically identical iteration schemes are offered:

* ``"log"``: the potentials are updated with ``logsumexp`` over the whole ``[B, n, m]`` tensor
  (stable for any :math:`\\varepsilon` and similarity range);
* ``"scaling"``: Sinkhorn-Knopp matrix scaling, :math:`u = a / K\\tilde v`, :math:`v = b / K^\\top u` on
  the Gibbs matrix :math:`K = e^{C - \\max C}` (computed once; :math:`C = S/\\varepsilon`), with
  :math:`\\tilde v = v / \\max v`, so that an iteration costs two batched products and no
  exponential. Every entry of :math:`K` lies in :math:`[e^{-R}, 1]` with
  :math:`R = \\max C - \\min C` over the valid entries, hence :math:`K\\tilde v \\in [e^{-R}, m]`
  and :math:`u, v` stay within :math:`e^{\\pm R}` times ratios of the marginals: nothing
  overflows or vanishes as long as :math:`R` is below :func:`scaling_range_bound` of the dtype.

``method="auto"`` picks ``"scaling"`` when that bound holds for every problem of the batch and
``"log"`` otherwise. Deciding needs the range of the scores: one host synchronisation before the
loop (none inside it), or none at all when the caller knows a bound (:func:`flexible_ot` with
min-max normalised similarities does) or when validation is off (then ``"auto"`` means ``"log"``).

The iterations are one eager loop of a few small tensor operations each (the loops at the end of this
file). To fuse them, compile the caller: ``torch.compile(FlexibleOT(...))``, or
``torch.compile(flexible_ot)`` / ``torch.compile(sinkhorn)``. The loop traces into one graph
(``fullgraph=True``) when nothing reads a tensor on the host: ``tol=None``, and either validation off or,
for ``method="auto"``, a range known beforehand (:func:`flexible_ot` with min-max normalisation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch

from evidential_prvr._checks import (
    check_choice,
    check_floating_dtype,
    check_positive,
    check_positive_int,
    check_tensor,
    compute_dtype,
    should_validate,
)
from evidential_prvr.choices import SINKHORN_GRADS, SINKHORN_METHODS, SinkhornGrad, SinkhornMethod

__all__ = [
    "SINKHORN_METHODS",
    "SINKHORN_GRADS",
    "SinkhornGrad",
    "SinkhornMethod",
    "scaling_range_bound",
    "select_sinkhorn_method",
    "sinkhorn",
]

_SCALING_SAFETY = 0.7


def scaling_range_bound(dtype: torch.dtype) -> float:
    """Largest range :math:`\\max C - \\min C` of ``scores / epsilon`` the ``"scaling"`` path accepts.

    It is 70% of :math:`-\\log(\\text{smallest normal})` of ``dtype``: about 61.1 in float32 and
    496 in float64. Within it every Gibbs-matrix entry :math:`e^{C - \\max C}` is a normal number, and the
    remaining 30% (about 26 in float32) leaves room for :math:`\\log` of the sizes and marginal ratios
    that the scaling vectors also carry, so they stay finite and non-zero. When the plan is
    differentiated (``grad="autodiff"``) the scheme is used only within half this range: the backward
    pass divides by squares of the scaling denominators, which must stay normal too.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import scaling_range_bound
    >>> round(scaling_range_bound(torch.float32), 1), round(scaling_range_bound(torch.float64), 1)
    (61.1, 495.9)

    References
    ----------
    Holmes (ICML 2026), App. B.5, Eq. 32-34; Peyré and Cuturi, "Computational Optimal Transport", 2019, §4.4.
    """
    check_floating_dtype(dtype, "dtype")
    return _SCALING_SAFETY * -math.log(torch.finfo(dtype).tiny)


def select_sinkhorn_method(
    scores: torch.Tensor,
    epsilon: float,
    a: torch.Tensor | None = None,
    b: torch.Tensor | None = None,
    *,
    differentiating: bool = False,
) -> str:
    """The iteration scheme ``method="auto"`` uses for this batch: ``"scaling"`` or ``"log"``.

    ``"scaling"`` is returned when, for every problem of the batch, the range of ``scores / epsilon``
    over its valid entries (rows with ``a > 0``, columns with ``b > 0``; all entries when ``a``/``b``
    are omitted) is at most :func:`scaling_range_bound` of the compute dtype, halved with
    ``differentiating=True`` (the plan is differentiated: ``grad="autodiff"`` on scores that require
    grad). This costs one host synchronisation.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import select_sinkhorn_method
    >>> select_sinkhorn_method(torch.rand(4, 3, 5), epsilon=0.1)
    'scaling'
    >>> select_sinkhorn_method(torch.rand(4, 3, 5), epsilon=1e-3)
    'log'

    References
    ----------
    Holmes (ICML 2026), App. B.5; Peyré and Cuturi, "Computational Optimal Transport", 2019, §4.4.
    """
    check_tensor(scores, "scores", ndim=3, floating=True)
    check_positive(epsilon, "epsilon")
    batch, n, m = scores.shape
    if a is not None:
        _check_marginal(a, "a", batch, n, scores.device, validate=False)
    if b is not None:
        _check_marginal(b, "b", batch, m, scores.device, validate=False)
    dtype = compute_dtype(scores)
    x = scores.detach().to(dtype)
    valid = torch.ones_like(x, dtype=torch.bool)
    if a is not None:
        valid = valid & (a > 0).unsqueeze(2)
    if b is not None:
        valid = valid & (b > 0).unsqueeze(1)
    _, low, high = _fill_invalid(x, valid)
    spread = float((high - low).max()) / epsilon if x.shape[0] else 0.0
    return "scaling" if spread <= _auto_bound(dtype, differentiating) else "log"


def _auto_bound(dtype: torch.dtype, differentiating: bool) -> float:
    """Largest range of ``scores / epsilon`` the scaling scheme takes; the backward pass divides by squares of
    the scaling denominators, so half the range keeps them normal when the plan is differentiated."""
    return scaling_range_bound(dtype) / (2.0 if differentiating else 1.0)


def _check_marginal(x: object, name: str, batch: int, size: int, device: torch.device, validate: bool) -> None:
    check_tensor(x, name, ndim=2, floating=True)
    assert isinstance(x, torch.Tensor)
    if tuple(x.shape) != (batch, size):
        raise ValueError(f"{name} must have shape {(batch, size)} to match scores, got {tuple(x.shape)}")
    if x.device != device:
        raise ValueError(f"scores and {name} must be on the same device, got {device} and {x.device}")
    if validate and (not bool(torch.isfinite(x).all()) or bool((x < 0).any())):
        raise ValueError(f"{name} must be finite and non-negative (0 marks a masked entry)")


def sinkhorn(
    scores: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    epsilon: float,
    n_iters: int = 50,
    tol: float | None = None,
    method: SinkhornMethod = "auto",
    grad: SinkhornGrad = "autodiff",
    check_every: int = 10,
    *,
    validate_args: bool | None = None,
) -> torch.Tensor:
    """Entropic optimal transport plans of a batch of masked problems (Holmes Eq. 19, 28-34).

    Solves, for every problem :math:`k` of the batch,

    .. math::

        \\mathbf{P}^\\star = \\arg\\max_{\\mathbf{P} \\geq 0,\\ \\mathbf{P}\\mathbf{1} = \\mathbf{a},\\
        \\mathbf{P}^\\top\\mathbf{1} = \\mathbf{b}} \\langle \\mathbf{P}, \\mathbf{S} \\rangle
        + \\varepsilon H(\\mathbf{P}), \\qquad H(\\mathbf{P}) = -\\sum_{ij} P_{ij} \\log P_{ij},

    i.e. POT's ``ot.sinkhorn(a, b, M=-S, reg=epsilon)``, with the Sinkhorn fixed point of App. B.5
    (Eq. 34) written on log-potentials :math:`f, g` and :math:`C = \\mathbf{S}/\\varepsilon`:

    .. math::

        f_i \\leftarrow \\log a_i - \\log\\sum_j e^{C_{ij} + g_j}, \\qquad
        g_j \\leftarrow \\log b_j - \\log\\sum_i e^{C_{ij} + f_i}, \\qquad
        P_{ij} = e^{C_{ij} + f_i + g_j}.

    Each iteration updates :math:`f` (rows) and then :math:`g` (columns), starting from zero
    potentials, exactly as POT's ``ot.batch`` log-Sinkhorn; after any number of iterations the
    column marginals hold to rounding and the row marginals converge.

    Parameters
    ----------
    scores : torch.Tensor
        Gains :math:`\\mathbf{S}` ``[B, n, m]`` to maximise (a similarity, i.e. minus a cost). Entries
        in masked rows or columns are ignored and may hold any value, even NaN.
    a : torch.Tensor
        Row marginals ``[B, n]``, non-negative; 0 masks the row.
    b : torch.Tensor
        Column marginals ``[B, m]``, non-negative; 0 masks the column. For every problem with both a
        valid row and a valid column, ``a`` and ``b`` must have the same total mass (to 1e-5
        relative, or 8 machine epsilons of a half-precision marginal). Problems with no valid row
        or no valid column get an all-zero plan.
    epsilon : float
        Entropic regularisation :math:`\\varepsilon > 0`.
    n_iters : int
        Number of Sinkhorn iterations (upper bound when ``tol`` is given).
    tol : float or None
        If given, stop early once the largest L1 violation of the row marginals over the batch is
        ``<= tol``. It is checked every ``check_every`` iterations only, so the loop synchronises
        with the host once per ``check_every`` iterations; with ``None`` it never does.
    method : {"auto", "log", "scaling"}
        Iteration scheme (see the module documentation); ``"auto"`` picks ``"scaling"`` where it is
        provably safe (:func:`select_sinkhorn_method`; ``"log"`` when validation is off). Forcing
        ``"scaling"`` beyond the safe range raises ``ValueError`` (checked only with validation on).
    grad : {"autodiff", "detach"}
        ``"autodiff"`` backpropagates through the iterations to ``scores``; ``"detach"`` returns a
        plan without gradient (a stop-gradient target). The marginals never receive gradients.
    check_every : int
        Iterations between two convergence checks when ``tol`` is given.
    validate_args : bool, optional
        Check the marginals (finite, non-negative, balanced) and the scores (finite at valid
        entries); host synchronisations. ``None`` follows :func:`evidential_prvr.set_default_validate_args`.

    Returns
    -------
    torch.Tensor
        The plan ``[B, n, m]`` in the compute dtype (float16/bfloat16 are computed in float32).
        Entries in masked rows or columns are exactly 0.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import sinkhorn
    >>> scores = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    >>> plan = sinkhorn(scores, torch.full((1, 2), 0.5), torch.full((1, 2), 0.5), epsilon=0.1)
    >>> plan.round(decimals=3)  # almost all mass on the diagonal at this small epsilon
    tensor([[[0.5000, 0.0000],
             [0.0000, 0.5000]]])

    References
    ----------
    Holmes (ICML 2026), Eq. 19 and App. B.5; Cuturi, "Sinkhorn Distances: Lightspeed Computation of
    Optimal Transport", NeurIPS 2013; Peyré and Cuturi, "Computational Optimal Transport", 2019, §4.4.
    """
    check_tensor(scores, "scores", ndim=3, floating=True)
    batch, n, m = scores.shape
    if n < 1 or m < 1:
        raise ValueError(f"scores must have at least one row and one column, got shape {tuple(scores.shape)}")
    validate = should_validate(validate_args)
    _check_marginal(a, "a", batch, n, scores.device, validate)
    _check_marginal(b, "b", batch, m, scores.device, validate)
    check_positive(epsilon, "epsilon")
    check_positive_int(n_iters, "n_iters")
    if tol is not None:
        check_positive(tol, "tol")
    check_positive_int(check_every, "check_every")
    check_choice(method, "method", SINKHORN_METHODS)
    check_choice(grad, "grad", SINKHORN_GRADS)
    if validate:
        dtype = compute_dtype(scores)
        mass_tol = max(1e-5, 8 * torch.finfo(a.dtype).eps, 8 * torch.finfo(b.dtype).eps)
        row_valid, col_valid = a > 0, b > 0
        solvable = row_valid.any(dim=1) & col_valid.any(dim=1)
        mass_a, mass_b = a.detach().to(dtype).sum(dim=1), b.detach().to(dtype).sum(dim=1)
        mismatch = (mass_a - mass_b).abs() > mass_tol * torch.maximum(mass_a, mass_b)
        if bool((mismatch & solvable).any()):
            k = int(torch.nonzero(mismatch & solvable)[0, 0])
            raise ValueError(f"a and b must have the same total mass in every problem (balanced transport), got "
                             f"{float(mass_a[k]):.6g} and {float(mass_b[k]):.6g} in problem {k}")
        valid = row_valid.unsqueeze(2) & col_valid.unsqueeze(1)
        if not bool(torch.isfinite(torch.where(valid, scores.detach(), 0.0)).all()):
            raise ValueError("scores must be finite at the valid (unmasked) entries, got NaN or Inf")
    return _sinkhorn(scores, a, b, _SinkhornArgs(epsilon, n_iters, tol, method, grad), check_every, validate=validate)


class LoopSettings(Protocol):
    """The settings the Sinkhorn loop reads: :class:`~evidential_prvr.presets.TransportSettings` has them."""

    @property
    def epsilon(self) -> float: ...
    @property
    def n_iters(self) -> int: ...
    @property
    def tol(self) -> float | None: ...
    @property
    def method(self) -> SinkhornMethod: ...
    @property
    def grad(self) -> SinkhornGrad: ...


@dataclass(frozen=True)
class _SinkhornArgs:
    """The loop settings of one :func:`sinkhorn` call (checked there)."""

    epsilon: float
    n_iters: int
    tol: float | None
    method: SinkhornMethod
    grad: SinkhornGrad


def _sinkhorn(
    scores: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    settings: LoopSettings,
    check_every: int = 10,
    *,
    validate: bool = True,
    score_range: float | None = None,
) -> torch.Tensor:
    """:func:`sinkhorn` without argument validation, for callers that build valid problems themselves.

    ``score_range``: an upper bound on the range of ``scores`` over valid entries known to the caller
    (e.g. 1 for min-max normalised similarities); with it ``method="auto"`` decides without looking at
    the data. Otherwise ``"auto"`` reads the range (one host synchronisation) when ``validate`` is
    true and takes ``"log"`` when it is false. ``validate`` also enables the safety check of a forced
    ``"scaling"``.
    """
    dtype = compute_dtype(scores)
    differentiating = settings.grad == "autodiff" and torch.is_grad_enabled() and scores.requires_grad
    bound = _auto_bound(dtype, differentiating)
    method = settings.method
    if method == "auto" and score_range is not None:
        method = "scaling" if score_range / settings.epsilon <= bound else "log"
    elif method != "log" and validate:  # the one host sync before the loop
        spread = _valid_spread(scores.detach().to(dtype), a, b) / settings.epsilon
        if method == "auto":
            method = "scaling" if spread <= bound else "log"
        elif spread > bound:
            raise ValueError(
                "method='scaling' is unsafe here: the range of scores/epsilon over valid entries exceeds "
                f"{bound:.1f} for {dtype}; use method='log' or 'auto'"
            )
    elif method == "auto":
        method = "log"
    solve = _scaling_loop if method == "scaling" else _log_loop
    with torch.set_grad_enabled(differentiating):
        x = scores.to(dtype) if settings.grad == "autodiff" else scores.detach().to(dtype)
        return solve(x, a.detach().to(dtype), b.detach().to(dtype), settings.epsilon, settings.n_iters, settings.tol,
                     check_every)


def _valid_spread(scores: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest range of ``scores`` over the valid entries of a problem (0 for one with nothing to transport)."""
    valid = (a > 0).unsqueeze(2) & (b > 0).unsqueeze(1)
    _, low, high = _fill_invalid(scores, valid)
    return float((high - low).max())


# --- the loops: the scaling and the log-domain iterations, one eager loop each ------------------------------------
def _fill_invalid(
    scores: torch.Tensor, valid: torch.Tensor, maybe_empty: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Replace masked entries by the problem's valid minimum; also return the valid min and max."""
    inf = torch.tensor(float("inf"), dtype=scores.dtype, device=scores.device)
    low = torch.where(valid, scores, inf).amin(dim=(1, 2), keepdim=True)
    high = torch.where(valid, scores, -inf).amax(dim=(1, 2), keepdim=True)
    if maybe_empty:  # problems without any valid entry get a harmless range of 0
        low = torch.where(torch.isfinite(low), low, torch.zeros_like(low))
        high = torch.where(torch.isfinite(high), high, low)
    return torch.where(valid, scores, low), low, high


def _problem(
    scores: torch.Tensor, a: torch.Tensor, b: torch.Tensor, epsilon: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``C = scores / epsilon`` with masked entries filled, its valid maximum, the marginals (problems with
    nothing to transport become a dummy uniform problem) and the entries the plan keeps."""
    batch, n, m = scores.shape
    row_valid, col_valid = a > 0, b > 0
    valid = row_valid.unsqueeze(2) & col_valid.unsqueeze(1)
    solvable = (row_valid.any(dim=1) & col_valid.any(dim=1)).view(batch, 1, 1)
    x = torch.where(valid, scores, torch.zeros((), dtype=scores.dtype, device=scores.device))
    a = torch.where(solvable.view(batch, 1), a, torch.full_like(a, 1.0 / n))
    b = torch.where(solvable.view(batch, 1), b, torch.full_like(b, 1.0 / m))
    log_gibbs, _, high = _fill_invalid(x / epsilon, valid | ~solvable, maybe_empty=False)
    return log_gibbs, high.detach(), a, b, valid & solvable


def _scaling_loop(scores: torch.Tensor, a: torch.Tensor, b: torch.Tensor, epsilon: float, n_iters: int,
                  tol: float | None, check_every: int) -> torch.Tensor:
    """Scaling iterations :math:`u = a / K\\tilde v`, :math:`v = b / K^\\top u` with batched products.

    The Gibbs matrix holds :math:`e^{C - \\max C} \\in [e^{-R}, 1]`. The column scaling is divided by its
    maximum before each row update; the plan :math:`\\mathrm{diag}(u) K \\mathrm{diag}(v)` does not
    depend on that scale, and with it :math:`K\\tilde v \\in [e^{-R}, m]`, so :math:`u` and :math:`v`
    stay within :math:`e^{\\pm R}` times ratios of the marginals and never overflow or vanish.
    """
    log_gibbs, high, a, b, keep = _problem(scores, a, b, epsilon)
    gibbs = torch.exp(log_gibbs - high)
    # u as a column [B, n, 1] and v as a row [B, 1, m]: both products are broadcast-multiply-sums.
    # The gradient through the normaliser max(v) sums to zero (the plan does not depend on it).
    a_col, b_row = a.unsqueeze(2), b.unsqueeze(1)
    v = torch.ones_like(b_row)
    u = a_col
    for it in range(1, n_iters + 1):
        u = a_col / (gibbs * (v / v.amax(dim=2, keepdim=True))).sum(dim=2, keepdim=True)
        v = b_row / (gibbs * u).sum(dim=1, keepdim=True)
        if tol is not None and it % check_every == 0 and it < n_iters:
            row_mass = u * (gibbs * v).sum(dim=2, keepdim=True)
            if _converged(row_mass.squeeze(2), a, tol):
                break
    return torch.where(keep, u * gibbs * v, torch.zeros_like(gibbs))


def _log_loop(scores: torch.Tensor, a: torch.Tensor, b: torch.Tensor, epsilon: float, n_iters: int,
              tol: float | None, check_every: int) -> torch.Tensor:
    """Log-domain iterations: every log-sum-exp runs over the full ``[B, n, m]`` tensor."""
    log_gibbs, _, a, b, keep = _problem(scores, a, b, epsilon)
    log_a, log_b = torch.log(a), torch.log(b)
    f = torch.zeros_like(log_a)
    g = torch.zeros_like(log_b)
    for it in range(1, n_iters + 1):
        f = log_a - torch.logsumexp(log_gibbs + g.unsqueeze(1), dim=2)
        g = log_b - torch.logsumexp(log_gibbs + f.unsqueeze(2), dim=1)
        if tol is not None and it % check_every == 0 and it < n_iters:
            row_mass = torch.exp(f + torch.logsumexp(log_gibbs + g.unsqueeze(1), dim=2))
            if _converged(row_mass, a, tol):
                break
    plan = torch.exp(log_gibbs + f.unsqueeze(2) + g.unsqueeze(1))
    return torch.where(keep, plan, torch.zeros_like(plan))


def _converged(row_mass: torch.Tensor, a: torch.Tensor, tol: float) -> bool:
    """Largest L1 violation of the row marginals over the batch is within ``tol`` (one host sync)."""
    return float((row_mass - a).abs().sum(dim=1).max()) <= tol
