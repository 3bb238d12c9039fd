"""Dempster's rule for two subjective opinions over the same K candidates (Holmes Eq. 16)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from evidential_prvr._checks import check_same_device, check_same_shape, compute_dtype, should_validate
from evidential_prvr.functional._evidence import Opinion, _opinion, check_alpha


@dataclass
class DempsterShaferOutput:
    """Fused opinion of two Dirichlet opinions (Holmes Eq. 16).

    Attributes
    ----------
    alpha : torch.Tensor
        Fused Dirichlet parameters :math:`\\alpha^o` ``[..., K]`` (``inf`` where they exceed the dtype,
        which only happens with validation off).
    belief : torch.Tensor
        Fused belief masses :math:`b^o` ``[..., K]``, always finite.
    uncertainty : torch.Tensor
        Fused epistemic uncertainty :math:`u^o` ``[...]``, always finite.
    conflict : torch.Tensor
        Conflict :math:`\\delta \\in [0, 1)` between the two inputs ``[...]``.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import dempster_shafer_fusion
    >>> dempster_shafer_fusion(torch.tensor([3.0, 1.0]), torch.tensor([1.0, 3.0])).conflict
    tensor(0.2500)

    References
    ----------
    Holmes (ICML 2026), Eq. 16.
    """

    alpha: torch.Tensor
    belief: torch.Tensor
    uncertainty: torch.Tensor
    conflict: torch.Tensor


def _promote_pair(alpha_a: torch.Tensor, alpha_b: torch.Tensor, validate: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate two Dirichlet parameter tensors and cast both to their common compute dtype."""
    check_alpha(alpha_a, "alpha_a", validate=False)
    check_alpha(alpha_b, "alpha_b", validate=False)
    check_same_shape(alpha_a, alpha_b, "alpha_a", "alpha_b")
    check_same_device(alpha_a=alpha_a, alpha_b=alpha_b)
    if validate:
        check_alpha(alpha_a, "alpha_a")
        check_alpha(alpha_b, "alpha_b")
    dtype = torch.promote_types(compute_dtype(alpha_a), compute_dtype(alpha_b))
    return alpha_a.to(dtype), alpha_b.to(dtype)


def ds_combine(alpha_a: torch.Tensor, alpha_b: torch.Tensor, *, validate_args: bool | None = None) -> torch.Tensor:
    """Fuse two Dirichlet opinions with Dempster's combination rule (Holmes Eq. 16).

    With opinions :math:`(\\mathbf{b}^a, u^a)` and :math:`(\\mathbf{b}^b, u^b)` from Eq. 5,

    .. math::

        b^o_k = \\frac{b^a_k b^b_k + b^a_k u^b + b^b_k u^a}{1 - \\delta}, \\qquad
        u^o = \\frac{u^a u^b}{1 - \\delta}, \\qquad
        \\delta = \\sum_{i \\ne j} b^a_i b^b_j,

    mapped back to a Dirichlet with :math:`S^o = K / u^o` and :math:`\\alpha^o = b^o S^o + 1`.
    The normaliser :math:`1-\\delta` cancels in :math:`b^o / u^o`, so the result is computed in the
    equivalent closed form (with :math:`e = \\alpha - 1`)

    .. math::

        \\alpha^o_k = 1 + e^a_k + e^b_k + \\frac{e^a_k e^b_k}{K},

    which needs no division by :math:`1-\\delta` and stays finite when :math:`u^o` underflows.

    Parameters
    ----------
    alpha_a, alpha_b : torch.Tensor
        Dirichlet parameters of the same shape ``[..., K]``, :math:`\\alpha \\ge 1`; any leading dims.
    validate_args : bool, optional
        Check that the inputs are finite and >= 1, and that the fused parameters do not overflow the
        dtype (host synchronisations).

    Returns
    -------
    torch.Tensor
        Fused Dirichlet parameters :math:`\\boldsymbol\\alpha^o`, same shape, in the promoted compute dtype.

    Raises
    ------
    ValueError
        With validation on, if :math:`\\alpha^o` is not representable in the compute dtype (e.g.
        :math:`\\alpha \\approx 10^{20}` in float32): pass float64 inputs, or read the fused beliefs
        and uncertainty from :func:`dempster_shafer_fusion`, which never overflow.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import ds_combine
    >>> ds_combine(torch.tensor([3.0, 1.0]), torch.tensor([2.0, 2.0]))  # 1 + e_a + e_b + e_a e_b / 2
    tensor([5., 2.])

    References
    ----------
    Holmes (ICML 2026), Eq. 16; Han et al., "Trusted Multi-View Classification", ICLR 2021.
    """
    return _checked_combine(alpha_a, alpha_b, validate_args)[0]


def _checked_combine(
    alpha_a: torch.Tensor, alpha_b: torch.Tensor, validate_args: bool | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused parameters of :func:`ds_combine` and the two promoted inputs, with the input and
    (validation on) overflow checks."""
    validate = should_validate(validate_args)
    a, b = _promote_pair(alpha_a, alpha_b, validate)
    fused = _ds_combine(a, b)
    if validate:
        _check_no_overflow(fused, a, b)
    return fused, a, b


def _check_no_overflow(fused: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    if not bool(torch.isfinite(fused).all()):
        raise ValueError(
            f"alpha_a and alpha_b are too large for {fused.dtype}: the fused Dirichlet parameters overflow "
            f"(largest inputs {float(a.max()):.3g} and {float(b.max()):.3g}); pass float64 inputs, or take the "
            "fused beliefs and uncertainty of dempster_shafer_fusion with validate_args=False"
        )


def ds_conflict(alpha_a: torch.Tensor, alpha_b: torch.Tensor, *, validate_args: bool | None = None) -> torch.Tensor:
    """Conflict :math:`\\delta = \\sum_{i\\ne j} b^a_i b^b_j \\in [0, 1)` between two opinions (Holmes Eq. 16).

    Computed as :math:`(\\sum_i b^a_i)(\\sum_j b^b_j) - \\sum_k b^a_k b^b_k`.

    Parameters
    ----------
    alpha_a, alpha_b : torch.Tensor
        Dirichlet parameters of the same shape ``[..., K]``, :math:`\\alpha \\ge 1`.
    validate_args : bool, optional
        Check that the inputs are finite and >= 1 (host synchronisations).

    Returns
    -------
    torch.Tensor
        :math:`\\delta` of shape ``alpha_a.shape[:-1]``.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import ds_conflict
    >>> ds_conflict(torch.tensor([3.0, 1.0]), torch.tensor([1.0, 3.0]))  # b_a = (1/2, 0), b_b = (0, 1/2)
    tensor(0.2500)

    References
    ----------
    Holmes (ICML 2026), Eq. 16.
    """
    a, b = _promote_pair(alpha_a, alpha_b, should_validate(validate_args))
    return _ds_conflict(_opinion(a).belief, _opinion(b).belief)


def dempster_shafer_fusion(
    alpha_a: torch.Tensor, alpha_b: torch.Tensor, *, validate_args: bool | None = None
) -> DempsterShaferOutput:
    """Fused Dirichlet, opinion and conflict of two opinions (Holmes Eq. 16, the dynamic co-evidential
    aggregator).

    Beliefs, uncertainty and conflict are computed in opinion space, as ratios of terms in
    :math:`[0, 1]` (the normaliser :math:`1-\\delta` summed from its non-negative parts), so they stay
    finite for any representable inputs, e.g. :math:`\\alpha \\approx 10^{20}` in float32. The fused
    parameters :math:`\\alpha^o` come from the closed form of :func:`ds_combine`.

    Parameters
    ----------
    alpha_a, alpha_b : torch.Tensor
        Dirichlet parameters of the same shape ``[..., K]``, :math:`\\alpha \\ge 1`.
    validate_args : bool, optional
        Check that the inputs are finite and >= 1 and that :math:`\\alpha^o` is representable
        (``ValueError`` otherwise); host synchronisations. Without validation an overflowing
        :math:`\\alpha^o` is ``inf`` while beliefs and uncertainty stay exact.

    Returns
    -------
    DempsterShaferOutput
        ``alpha``, ``belief``, ``uncertainty`` and ``conflict``.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import dempster_shafer_fusion
    >>> out = dempster_shafer_fusion(torch.tensor([3.0, 1.0]), torch.tensor([2.0, 2.0]))
    >>> out.alpha, out.belief, out.uncertainty
    (tensor([5., 2.]), tensor([0.5714, 0.1429]), tensor(0.2857))

    References
    ----------
    Holmes (ICML 2026), Eq. 16; Han et al., "Trusted Multi-View Classification", ICLR 2021.
    """
    alpha, a, b = _checked_combine(alpha_a, alpha_b, validate_args)
    return _dempster_shafer_fusion(alpha, _opinion(a), _opinion(b))


def _ds_combine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Closed form of Holmes Eq. 16 on validated Dirichlet parameters of one dtype (no checks)."""
    ea = a - 1.0
    eb = b - 1.0
    return 1.0 + ea + eb + ea * eb / a.shape[-1]


def _ds_conflict(belief_a: torch.Tensor, belief_b: torch.Tensor) -> torch.Tensor:
    """Conflict of Holmes Eq. 16 from two belief tensors ``[..., K]`` (no checks)."""
    conflict = belief_a.sum(dim=-1) * belief_b.sum(dim=-1) - (belief_a * belief_b).sum(dim=-1)
    return conflict.clamp_min(0.0)


def _dempster_shafer_fusion(alpha: torch.Tensor, op_a: Opinion, op_b: Opinion) -> DempsterShaferOutput:
    """Holmes Eq. 16 in opinion space (no checks). ``1 - δ`` is summed from its non-negative parts."""
    ua, ub = op_a.uncertainty.unsqueeze(-1), op_b.uncertainty.unsqueeze(-1)
    numerator = op_a.belief * op_b.belief + op_a.belief * ub + op_b.belief * ua
    both_uncertain = ua * ub
    normaliser = numerator.sum(dim=-1, keepdim=True) + both_uncertain  # = 1 - δ
    belief = numerator / normaliser
    uncertainty = (both_uncertain / normaliser).squeeze(-1)
    return DempsterShaferOutput(alpha, belief, uncertainty, _ds_conflict(op_a.belief, op_b.belief))
