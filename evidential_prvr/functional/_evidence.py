"""Evidence, subjective opinions and uncertainties of a Dirichlet over K candidates (Holmes §3.2).

These functions turn query-candidate similarities into Dirichlet parameters (Holmes Eq. 3-4) and read
off the quantities used by uncertainty-guided identification: belief masses and epistemic uncertainty
(Eq. 5), label consistency (Eq. 7) and aleatoric uncertainty (Eq. 9). Half-precision inputs are upcast
to float32; results come back in the compute dtype.

The private ``_evidence``, ``_opinion``, ... functions are the same computations without argument
checks; the library's losses validate once and call them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from evidential_prvr._checks import (
    check_choice,
    check_finite,
    check_positive,
    check_tensor,
    compute_dtype,
    should_validate,
)
from evidential_prvr.choices import TANH_SCALINGS, TanhScaling
from evidential_prvr.functional._targets import normalized_target, positive_mask


@dataclass(frozen=True)
class Opinion:
    """Subjective opinion of a Dirichlet (Holmes Eq. 5).

    Attributes
    ----------
    belief : torch.Tensor
        Belief masses :math:`b_{ij} = (\\alpha_{ij} - 1) / S_i`, same shape as ``alpha``.
    uncertainty : torch.Tensor
        Epistemic uncertainty :math:`u_i = K / S_i`, shape ``alpha.shape[:-1]``.
    strength : torch.Tensor
        Dirichlet strength :math:`S_i = \\sum_j \\alpha_{ij}`, shape ``alpha.shape[:-1]``.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import opinion
    >>> op = opinion(torch.tensor([[3.0, 1.0]]))
    >>> op.strength, op.uncertainty + op.belief.sum(dim=-1)
    (tensor([4.]), tensor([1.]))

    References
    ----------
    Holmes (ICML 2026), Eq. 5.
    """

    belief: torch.Tensor
    uncertainty: torch.Tensor
    strength: torch.Tensor


def check_alpha(alpha: object, name: str = "alpha", *, at_least_one: bool = True, validate: bool = True) -> None:
    """Validate Dirichlet parameters ``[..., K]``: a non-empty floating tensor; with ``validate`` also
    finite and >= 1 (evidence + 1) or > 0."""
    check_tensor(alpha, name, floating=True)
    assert isinstance(alpha, torch.Tensor)
    if alpha.dim() == 0:
        raise ValueError(f"{name} must have at least 1 dimension (the K classes last), got a 0-D tensor")
    if alpha.numel() == 0:
        raise ValueError(f"{name} must be non-empty (at least one row and one class), got shape {tuple(alpha.shape)}")
    if not validate:
        return
    check_finite(alpha, name)
    if at_least_one and bool((alpha < 1).any()):
        raise ValueError(f"{name} must be >= 1 everywhere (alpha = evidence + 1), got min {float(alpha.min())}")
    if not at_least_one and bool((alpha <= 0).any()):
        raise ValueError(f"{name} must be > 0 everywhere, got min {float(alpha.min())}")


def evidence(
    sim: torch.Tensor, tau: float = 0.1, tanh_scaling: TanhScaling = "inside", *, validate_args: bool | None = None
) -> torch.Tensor:
    """Non-negative evidence from similarities (Holmes Eq. 3).

    .. math::

        e_{ij} = \\exp\\big(\\tanh(s_{ij} / \\tau)\\big) \\quad (\\text{"inside"}, \\text{paper}),
        \\qquad
        e_{ij} = \\exp\\big(\\tanh(s_{ij}) / \\tau\\big) \\quad (\\text{"outside"}, \\text{release}).

    With ``"inside"`` the evidence lies in :math:`[e^{-1}, e]` whatever :math:`\\tau`; with ``"outside"``
    (the official Holmes release) it spans :math:`[e^{-1/\\tau}, e^{1/\\tau}]`. The exponent is capped at
    :math:`\\tfrac12\\log(\\text{float max}) - 1` of the compute dtype (about 43 in float32) so that
    evidence, and products of two evidences as in :func:`ds_combine`, never overflow; the cap only
    binds for ``"outside"`` with :math:`\\tau < 0.023` in float32, where the gradient is then zero.

    Parameters
    ----------
    sim : torch.Tensor
        Similarities of any shape (typically cosine similarities ``[Q, V]``); must be finite.
    tau : float
        Temperature :math:`\\tau > 0` (paper default 0.1).
    tanh_scaling : {"inside", "outside"}
        Where :math:`\\tau` is applied, see above.
    validate_args : bool, optional
        Check that ``sim`` is finite (a host synchronisation); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`.

    Returns
    -------
    torch.Tensor
        Evidence, same shape as ``sim``, in the compute dtype (float16/bfloat16 upcast to float32).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import evidence
    >>> evidence(torch.tensor([0.0, 0.1]), tau=0.1)
    tensor([1.0000, 2.1417])

    References
    ----------
    Holmes: "Revisiting Uncertainty: On Evidential Learning for Partially Relevant Video Retrieval",
    ICML 2026, Eq. 3.
    """
    check_tensor(sim, "sim", floating=True)
    if should_validate(validate_args):
        check_finite(sim, "sim")
    check_positive(tau, "tau")
    check_choice(tanh_scaling, "tanh_scaling", TANH_SCALINGS)
    return _evidence(sim.to(compute_dtype(sim)), tau, tanh_scaling)


def opinion(alpha: torch.Tensor, *, validate_args: bool | None = None) -> Opinion:
    """Belief masses, epistemic uncertainty and strength of a Dirichlet (Holmes Eq. 4-5).

    .. math::

        S_i = \\sum_{j=1}^K \\alpha_{ij}, \\qquad b_{ij} = \\frac{\\alpha_{ij} - 1}{S_i}, \\qquad
        u_i = \\frac{K}{S_i}, \\qquad u_i + \\sum_j b_{ij} = 1.

    Parameters
    ----------
    alpha : torch.Tensor
        Dirichlet parameters ``[..., K]`` with :math:`\\alpha \\ge 1` (evidence + 1, Eq. 4).
    validate_args : bool, optional
        Check that ``alpha`` is finite and >= 1 (a host synchronisation).

    Returns
    -------
    Opinion
        ``belief``, ``uncertainty`` and ``strength``.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import opinion
    >>> op = opinion(torch.tensor([[3.0, 1.0]]))
    >>> op.belief, op.uncertainty
    (tensor([[0.5000, 0.0000]]), tensor([0.5000]))

    References
    ----------
    Holmes (ICML 2026), Eq. 4-5; Sensoy et al., "Evidential Deep Learning to Quantify Classification
    Uncertainty", NeurIPS 2018.
    """
    check_alpha(alpha, validate=should_validate(validate_args))
    return _opinion(alpha.to(compute_dtype(alpha)))


def expected_entropy(alpha: torch.Tensor, *, validate_args: bool | None = None) -> torch.Tensor:
    """Aleatoric uncertainty: expected Shannon entropy of :math:`\\mathrm{Dir}(\\alpha)` (Holmes Eq. 9).

    .. math::

        \\xi_i = \\mathbb{E}_{\\mathbf{p}\\sim\\mathrm{Dir}(\\boldsymbol\\alpha_i)}[H(\\mathbf{p})]
        = \\sum_{k=1}^K \\frac{\\alpha_{ik}}{S_i}\\big(\\psi(S_i + 1) - \\psi(\\alpha_{ik} + 1)\\big).

    Parameters
    ----------
    alpha : torch.Tensor
        Dirichlet parameters ``[..., K]``, :math:`\\alpha > 0`.
    validate_args : bool, optional
        Check that ``alpha`` is finite and positive (a host synchronisation).

    Returns
    -------
    torch.Tensor
        :math:`\\xi` of shape ``alpha.shape[:-1]``, in nats, within :math:`[0, \\log K)`.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import expected_entropy
    >>> expected_entropy(torch.tensor([[1.0, 1.0]]))  # uniform Dirichlet over two classes: 1/2 nat
    tensor([0.5000])

    References
    ----------
    Holmes (ICML 2026), Eq. 9 and App. B.3.
    """
    check_alpha(alpha, at_least_one=False, validate=should_validate(validate_args))
    return _expected_entropy(alpha.to(compute_dtype(alpha)))


def label_consistency(
    sim: torch.Tensor, query_video: torch.Tensor, *, validate_args: bool | None = None
) -> torch.Tensor:
    """Label consistency :math:`c_i = \\max(0, \\mathbf{s}_i \\cdot \\mathbf{y}_i)` (Holmes Eq. 7).

    With several positives :math:`\\mathbf{y}_i` is the normalised multi-hot label, so :math:`c_i` is the
    mean similarity over the positives, clipped at 0.

    Parameters
    ----------
    sim : torch.Tensor
        Similarities ``[Q, V]``; must be finite.
    query_video : torch.Tensor
        ``LongTensor [Q]`` of positive videos or ``{0, 1}`` matrix ``[Q, V]``.
    validate_args : bool, optional
        Check values (finite scores, valid positives); host synchronisations.

    Returns
    -------
    torch.Tensor
        :math:`c` of shape ``[Q]``, in the compute dtype.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import label_consistency
    >>> label_consistency(torch.tensor([[0.7, 0.2], [-0.3, 0.1]]), torch.tensor([0, 0]))
    tensor([0.7000, 0.0000])

    References
    ----------
    Holmes (ICML 2026), Eq. 7.
    """
    check_tensor(sim, "sim", ndim=2, floating=True)
    validate = should_validate(validate_args)
    if validate:
        check_finite(sim, "sim")
    mask = positive_mask(query_video, sim.shape[1], sim.shape[0], validate=validate)
    if mask.device != sim.device:
        raise ValueError(f"sim and query_video must be on the same device, got {sim.device} and {mask.device}")
    dtype = compute_dtype(sim)
    return _label_consistency(sim.to(dtype), normalized_target(mask, dtype))


def _evidence(x: torch.Tensor, tau: float, tanh_scaling: TanhScaling) -> torch.Tensor:
    """Holmes Eq. 3 on an already validated floating tensor (no checks, no upcast)."""
    exponent = torch.tanh(x / tau) if tanh_scaling == "inside" else torch.tanh(x) / tau
    cap = 0.5 * math.log(torch.finfo(x.dtype).max) - 1.0
    return torch.exp(exponent.clamp_max(cap))


def _opinion(a: torch.Tensor) -> Opinion:
    """Holmes Eq. 5 on already validated Dirichlet parameters (no checks, no upcast)."""
    strength = a.sum(dim=-1)
    belief = (a - 1.0) / strength.unsqueeze(-1)
    uncertainty = a.shape[-1] / strength
    return Opinion(belief, uncertainty, strength)


def _expected_entropy(a: torch.Tensor) -> torch.Tensor:
    """Holmes Eq. 9 on already validated Dirichlet parameters (no checks, no upcast)."""
    strength = a.sum(dim=-1, keepdim=True)
    terms = (a / strength) * (torch.digamma(strength + 1.0) - torch.digamma(a + 1.0))
    return terms.sum(dim=-1)


def _label_consistency(sim: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """Holmes Eq. 7 for a similarity matrix and a normalised label of the same dtype (no checks)."""
    return (sim * label).sum(dim=-1).clamp_min(0.0)
