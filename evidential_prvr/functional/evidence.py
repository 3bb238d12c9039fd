"""Evidence, subjective opinions and uncertainties of a Dirichlet over K candidates (Holmes §3.2).

These functions turn query-candidate similarities into Dirichlet parameters (Holmes Eq. 3-4) and read
off the quantities used by uncertainty-guided identification: belief masses and epistemic uncertainty
(Eq. 5), label consistency (Eq. 7) and aleatoric uncertainty (Eq. 9). Half-precision inputs are upcast
to float32; results come back in the compute dtype.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from evidential_prvr._checks import check_choice, check_finite, check_positive, check_tensor, compute_dtype
from evidential_prvr.functional.targets import normalized_target, positive_mask

__all__ = ["Opinion", "TANH_SCALINGS", "evidence", "opinion", "expected_entropy", "label_consistency"]

TANH_SCALINGS = ("inside", "outside")
"""Where the temperature of Holmes Eq. 3 is applied: ``"inside"`` (paper) or ``"outside"`` (release)."""


class Opinion(NamedTuple):
    """Subjective opinion of a Dirichlet (Holmes Eq. 5).

    ``belief``: belief masses :math:`b_{ij} = (\\alpha_{ij} - 1) / S_i`, same shape as ``alpha``;
    ``uncertainty``: epistemic uncertainty :math:`u_i = K / S_i`, shape ``alpha.shape[:-1]``;
    ``strength``: Dirichlet strength :math:`S_i = \\sum_j \\alpha_{ij}`, shape ``alpha.shape[:-1]``.
    """

    belief: torch.Tensor
    uncertainty: torch.Tensor
    strength: torch.Tensor


def check_alpha(alpha: torch.Tensor, name: str = "alpha", *, at_least_one: bool = True) -> None:
    """Validate Dirichlet parameters ``[..., K]``: finite, and >= 1 (evidence + 1) or > 0."""
    check_tensor(alpha, name, floating=True)
    if alpha.dim() == 0:
        raise ValueError(f"{name} must have at least 1 dimension (the K classes last), got a 0-D tensor")
    if alpha.numel() == 0:
        raise ValueError(f"{name} must be non-empty (at least one row and one class), got shape {tuple(alpha.shape)}")
    check_finite(alpha, name)
    if at_least_one and alpha.numel() and bool((alpha < 1).any()):
        raise ValueError(f"{name} must be >= 1 everywhere (alpha = evidence + 1), got min {float(alpha.min())}")
    if not at_least_one and alpha.numel() and bool((alpha <= 0).any()):
        raise ValueError(f"{name} must be > 0 everywhere, got min {float(alpha.min())}")


def _check_similarity(sim: torch.Tensor, name: str) -> None:
    check_tensor(sim, name, floating=True)
    check_finite(sim, name)


def evidence(sim: torch.Tensor, tau: float = 0.1, tanh_scaling: str = "inside") -> torch.Tensor:
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
        Similarities of any shape (typically cosine similarities ``[B, K]``); must be finite.
    tau : float
        Temperature :math:`\\tau > 0` (paper default 0.1).
    tanh_scaling : {"inside", "outside"}
        Where :math:`\\tau` is applied, see above.

    Returns
    -------
    torch.Tensor
        Evidence, same shape as ``sim``, in the compute dtype (float16/bfloat16 upcast to float32).
    """
    _check_similarity(sim, "sim")
    check_positive(tau, "tau")
    check_choice(tanh_scaling, "tanh_scaling", TANH_SCALINGS)
    return evidence_kernel(sim.to(compute_dtype(sim)), tau, tanh_scaling)


def opinion(alpha: torch.Tensor) -> Opinion:
    """Belief masses, epistemic uncertainty and strength of a Dirichlet (Holmes Eq. 4-5).

    .. math::

        S_i = \\sum_{j=1}^K \\alpha_{ij}, \\qquad b_{ij} = \\frac{\\alpha_{ij} - 1}{S_i}, \\qquad
        u_i = \\frac{K}{S_i}, \\qquad u_i + \\sum_j b_{ij} = 1.

    Parameters
    ----------
    alpha : torch.Tensor
        Dirichlet parameters ``[..., K]`` with :math:`\\alpha \\ge 1` (evidence + 1, Eq. 4).

    Returns
    -------
    Opinion
        Named tuple ``(belief, uncertainty, strength)``.
    """
    check_alpha(alpha)
    return opinion_kernel(alpha.to(compute_dtype(alpha)))


def expected_entropy(alpha: torch.Tensor) -> torch.Tensor:
    """Aleatoric uncertainty: expected Shannon entropy of :math:`\\mathrm{Dir}(\\alpha)` (Holmes Eq. 9).

    .. math::

        \\xi_i = \\mathbb{E}_{\\mathbf{p}\\sim\\mathrm{Dir}(\\boldsymbol\\alpha_i)}[H(\\mathbf{p})]
        = \\sum_{k=1}^K \\frac{\\alpha_{ik}}{S_i}\\big(\\psi(S_i + 1) - \\psi(\\alpha_{ik} + 1)\\big).

    Parameters
    ----------
    alpha : torch.Tensor
        Dirichlet parameters ``[..., K]``, :math:`\\alpha > 0`.

    Returns
    -------
    torch.Tensor
        :math:`\\xi` of shape ``alpha.shape[:-1]``, in nats, within :math:`[0, \\log K)`.
    """
    check_alpha(alpha, at_least_one=False)
    return expected_entropy_kernel(alpha.to(compute_dtype(alpha)))


def label_consistency(sim: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Label consistency :math:`c_i = \\max(0, \\mathbf{s}_i \\cdot \\mathbf{y}_i)` (Holmes Eq. 7).

    With several positives :math:`\\mathbf{y}_i` is the normalised multi-hot label, so :math:`c_i` is the
    mean similarity over the positives clipped at 0 (see :mod:`evidential_prvr.functional.targets`).

    Parameters
    ----------
    sim : torch.Tensor
        Similarities ``[B, K]``; must be finite.
    target : torch.Tensor
        ``LongTensor [B]`` of positive indices or ``{0, 1}`` matrix ``[B, K]``.

    Returns
    -------
    torch.Tensor
        :math:`c` of shape ``[B]``, in the compute dtype.
    """
    check_tensor(sim, "sim", ndim=2, floating=True)
    check_finite(sim, "sim")
    mask = positive_mask(target, sim.shape[1], sim.shape[0])
    dtype = compute_dtype(sim)
    return label_consistency_kernel(sim.to(dtype), normalized_target(mask, dtype))


# Unchecked kernels: the public functions above validate once and call these; the modules validate
# their inputs themselves and call the kernels directly to avoid repeated checks (host syncs).


def evidence_kernel(x: torch.Tensor, tau: float, tanh_scaling: str) -> torch.Tensor:
    """Holmes Eq. 3 on an already validated floating tensor (no checks, no upcast)."""
    exponent = torch.tanh(x / tau) if tanh_scaling == "inside" else torch.tanh(x) / tau
    cap = 0.5 * math.log(torch.finfo(x.dtype).max) - 1.0
    return torch.exp(exponent.clamp_max(cap))


def opinion_kernel(a: torch.Tensor) -> Opinion:
    """Holmes Eq. 5 on already validated Dirichlet parameters (no checks, no upcast)."""
    strength = a.sum(dim=-1)
    belief = (a - 1.0) / strength.unsqueeze(-1)
    uncertainty = a.shape[-1] / strength
    return Opinion(belief, uncertainty, strength)


def expected_entropy_kernel(a: torch.Tensor) -> torch.Tensor:
    """Holmes Eq. 9 on already validated Dirichlet parameters (no checks, no upcast)."""
    strength = a.sum(dim=-1, keepdim=True)
    terms = (a / strength) * (torch.digamma(strength + 1.0) - torch.digamma(a + 1.0))
    return terms.sum(dim=-1)


def label_consistency_kernel(sim: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """Holmes Eq. 7 for a similarity matrix and a normalised label of the same dtype (no checks)."""
    return (sim * label).sum(dim=-1).clamp_min(0.0)
