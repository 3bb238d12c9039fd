"""Uncertainty-guided identification of precise, polysemous and under-determined queries (Holmes §3.2).

Each branch (frame scale, clip scale) partitions the queries of a batch with its epistemic uncertainty
u, label consistency c and aleatoric uncertainty ξ (Holmes Eq. 10-12); the two partitions are then
fused (Eq. 13-14 or one of the Table 3 alternatives). Identification is a discrete decision: it runs
without gradients and returns detached tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import torch
from torch import nn

from evidential_prvr._checks import (
    check_choice,
    check_finite,
    check_in_range,
    check_positive,
    check_same_shape,
    check_tensor,
    compute_dtype,
)
from evidential_prvr.functional.evidence import (
    TANH_SCALINGS,
    evidence_kernel,
    expected_entropy_kernel,
    label_consistency_kernel,
    opinion_kernel,
)
from evidential_prvr.functional.targets import correctly_matched, normalized_target, positive_mask
from evidential_prvr.presets import holmes_settings

__all__ = [
    "QueryType",
    "ENTROPY_MEDIANS",
    "FUSIONS",
    "BranchIdentification",
    "Identification",
    "UncertaintyGuidedIdentifier",
    "fuse_query_types",
]

ENTROPY_MEDIANS = ("candidates", "batch")
"""Median rules of Holmes Eq. 12: ``"candidates"`` (paper) or ``"batch"`` (release)."""

FUSIONS = ("uncertainty_dominant", "confidence_dominant", "frame", "clip")
"""Partition fusion rules: Holmes Eq. 14 and the Table 3 alternatives (rows 5-7)."""


class QueryType(IntEnum):
    """Query categories, numbered by the uncertainty-dominance order of Holmes Eq. 13 (S_p ≺ S_n ≺ S_u)."""

    PRECISE = 0
    POLYSEMOUS = 1
    UNDERDETERMINED = 2


@dataclass
class BranchIdentification:
    """Identification of one branch (frame or clip scale); all tensors are detached.

    Attributes
    ----------
    query_type : torch.Tensor
        ``LongTensor [B]`` of :class:`QueryType` values after the entropy refinement (Eq. 12).
    initial_query_type : torch.Tensor
        ``LongTensor [B]`` before the refinement (Eq. 10): PRECISE for :math:`\\tilde S_p`,
        POLYSEMOUS for :math:`\\tilde S_n`, UNDERDETERMINED for :math:`S_u`.
    epistemic : torch.Tensor
        Epistemic uncertainty u ``[B]`` (Eq. 5).
    consistency : torch.Tensor
        Label consistency c ``[B]`` (Eq. 7).
    aleatoric : torch.Tensor
        Aleatoric uncertainty ξ ``[B]`` (Eq. 9).
    correctly_matched : torch.Tensor
        ``bool [B]``, the set :math:`S^{tp}` of Eq. 11.
    uncertainty_threshold : torch.Tensor
        0-D tensor :math:`\\beta_u` (Eq. 11).
    consistency_threshold : torch.Tensor
        0-D tensor :math:`\\beta_p` (Eq. 11).
    entropy_threshold : torch.Tensor
        0-D tensor, the median of ξ used by Eq. 12 (NaN under ``"candidates"`` when there is no candidate).
    """

    query_type: torch.Tensor
    initial_query_type: torch.Tensor
    epistemic: torch.Tensor
    consistency: torch.Tensor
    aleatoric: torch.Tensor
    correctly_matched: torch.Tensor
    uncertainty_threshold: torch.Tensor
    consistency_threshold: torch.Tensor
    entropy_threshold: torch.Tensor


@dataclass
class Identification:
    """Fused identification of a batch of queries.

    Attributes
    ----------
    query_type : torch.Tensor
        ``LongTensor [B]``, fused :class:`QueryType` (Eq. 14 or the chosen fusion rule).
    initial_query_type : torch.Tensor
        ``LongTensor [B]``, the branches' initial types (Eq. 10) fused with the same rule; its
        POLYSEMOUS entries form the fused :math:`\\tilde S_n` used by ``calibration_set="initial"``.
    frame : BranchIdentification
        Frame-scale branch.
    clip : BranchIdentification
        Clip-scale branch.
    """

    query_type: torch.Tensor
    initial_query_type: torch.Tensor
    frame: BranchIdentification
    clip: BranchIdentification


def fuse_query_types(frame_type: torch.Tensor, clip_type: torch.Tensor, fusion: str) -> torch.Tensor:
    """Fuse two per-branch type tensors (Holmes Eq. 13-14 and Table 3 rows 5-7).

    ``"uncertainty_dominant"`` keeps the type higher in the order PRECISE ≺ POLYSEMOUS ≺ UNDERDETERMINED
    (elementwise max, Eq. 14); ``"confidence_dominant"`` keeps the lower one (min); ``"frame"`` and
    ``"clip"`` trust one branch.
    """
    check_choice(fusion, "fusion", FUSIONS)
    if fusion == "uncertainty_dominant":
        return torch.maximum(frame_type, clip_type)
    if fusion == "confidence_dominant":
        return torch.minimum(frame_type, clip_type)
    return frame_type.clone() if fusion == "frame" else clip_type.clone()


def check_similarity_pair(frame_sim: object, clip_sim: object, target: object) -> torch.Tensor:
    """Validate ``frame_sim [B, K]``, ``clip_sim [B, K]`` and ``target``; return the positive mask."""
    check_tensor(frame_sim, "frame_sim", ndim=2, floating=True)
    check_tensor(clip_sim, "clip_sim", ndim=2, floating=True)
    check_same_shape(frame_sim, clip_sim, "frame_sim", "clip_sim")
    if frame_sim.shape[0] == 0 or frame_sim.shape[1] == 0:
        raise ValueError(f"frame_sim must hold at least one query and one video, got shape {tuple(frame_sim.shape)}")
    if frame_sim.device != clip_sim.device:
        raise ValueError(f"frame_sim and clip_sim must be on the same device, got {frame_sim.device} and {clip_sim.device}")
    check_finite(frame_sim, "frame_sim")
    check_finite(clip_sim, "clip_sim")
    check_tensor(target, "target")
    if target.device != frame_sim.device:
        raise ValueError(f"target must be on the device of frame_sim ({frame_sim.device}), got {target.device}")
    return positive_mask(target, frame_sim.shape[1], frame_sim.shape[0])


def _numpy_median(values: torch.Tensor, member: torch.Tensor) -> torch.Tensor:
    """NumPy median of ``values[member]`` without a host sync (NaN when ``member`` is empty)."""
    count = member.sum()
    ordered = values.masked_fill(~member, float("inf")).sort().values
    last = values.shape[0] - 1
    low = ((count - 1).clamp_min(0) // 2).clamp_max(last)
    high = (count // 2).clamp_max(last)
    median = 0.5 * (ordered[low] + ordered[high])
    return torch.where(count > 0, median, torch.full_like(median, float("nan")))


def _identify_branch(
    alpha: torch.Tensor, sim: torch.Tensor, mask: torch.Tensor, label: torch.Tensor, beta: float, entropy_median: str
) -> BranchIdentification:
    """Holmes Eq. 10-12 for one branch on validated, detached tensors of one dtype."""
    u = opinion_kernel(alpha).uncertainty
    c = label_consistency_kernel(sim, label)
    xi = expected_entropy_kernel(alpha)
    matched = correctly_matched(sim, mask)
    any_matched = matched.any()
    u_tp = u.masked_fill(~matched, float("-inf")).amax()
    c_tp = c.masked_fill(~matched, float("inf")).amin()
    beta_u = torch.where(any_matched, u_tp.clamp_max(1.0 - beta), torch.full_like(u_tp, 1.0 - beta))
    beta_p = torch.where(any_matched, c_tp.clamp_min(beta), torch.full_like(c_tp, beta))
    under = u > beta_u
    candidate = ~under & (c >= beta_p)
    if entropy_median == "candidates":
        median = _numpy_median(xi, candidate)
        precise = candidate & (xi < median)
    else:
        median = xi.median()
        precise = candidate & ~(xi > median)
    under_code = int(QueryType.UNDERDETERMINED)
    poly = torch.full_like(matched, int(QueryType.POLYSEMOUS), dtype=torch.long)
    zero = torch.zeros_like(poly)
    query_type = torch.where(under, under_code, torch.where(precise, zero, poly))
    initial = torch.where(under, under_code, torch.where(candidate, zero, poly))
    return BranchIdentification(query_type, initial, u, c, xi, matched, beta_u, beta_p, median)


class UncertaintyGuidedIdentifier(nn.Module):
    """Partition queries into precise / polysemous / under-determined (Holmes Eq. 10-14).

    Per branch, with :math:`\\alpha = e + 1` from the evidence of Eq. 3:

    .. math::

        \\beta_u = \\min(u^{tp}, 1-\\beta), \\qquad \\beta_p = \\max(\\beta, c^{tp}),

    with :math:`u^{tp} = \\max_{i\\in S^{tp}} u_i`, :math:`c^{tp} = \\min_{i\\in S^{tp}} c_i` over the
    correctly matched queries :math:`S^{tp}` (a positive attains the row maximum); if
    :math:`S^{tp}=\\emptyset` then :math:`\\beta_u = 1-\\beta`, :math:`\\beta_p = \\beta`. A query is
    under-determined if :math:`u > \\beta_u`; otherwise a *candidate* precise query if
    :math:`c \\ge \\beta_p` and polysemous if not (Eq. 10). Candidates are refined by ξ (Eq. 12):

    * ``entropy_median="candidates"`` (paper): a candidate stays precise iff ξ is strictly below the
      median (NumPy semantics: mean of the two middle values) of ξ over the candidates;
    * ``entropy_median="batch"`` (official release): a candidate becomes polysemous iff ξ is strictly
      above the lower median (``torch.median``) of ξ over the whole batch.

    The two branch types are fused by ``fusion`` (:func:`fuse_query_types`).

    Parameters
    ----------
    beta : float
        :math:`\\beta \\in [0, 1]` of Eq. 11 (default 0.3).
    tau : float
        Evidence temperature of Eq. 3 (> 0).
    tanh_scaling : {"inside", "outside"}
        Evidence form, see :func:`evidential_prvr.functional.evidence`.
    entropy_median : {"candidates", "batch"}
        Median rule of Eq. 12, see above.
    fusion : {"uncertainty_dominant", "confidence_dominant", "frame", "clip"}
        Partition fusion rule.
    """

    def __init__(
        self,
        beta: float = 0.3,
        tau: float = 0.1,
        tanh_scaling: str = "inside",
        entropy_median: str = "candidates",
        fusion: str = "uncertainty_dominant",
    ) -> None:
        super().__init__()
        check_in_range(beta, "beta", 0.0, 1.0)
        check_positive(tau, "tau")
        check_choice(tanh_scaling, "tanh_scaling", TANH_SCALINGS)
        check_choice(entropy_median, "entropy_median", ENTROPY_MEDIANS)
        check_choice(fusion, "fusion", FUSIONS)
        self.beta = float(beta)
        self.tau = float(tau)
        self.tanh_scaling = tanh_scaling
        self.entropy_median = entropy_median
        self.fusion = fusion

    @classmethod
    def from_preset(cls, name: str, dataset: str | None = None) -> UncertaintyGuidedIdentifier:
        """Build from the ``"paper"`` or ``"release"`` preset (see :func:`evidential_prvr.presets.inter_video_preset`)."""
        inter = holmes_settings(name, dataset).inter
        return cls(inter.beta, inter.tau, inter.tanh_scaling, inter.entropy_median, inter.fusion)

    def extra_repr(self) -> str:
        return (
            f"beta={self.beta}, tau={self.tau}, tanh_scaling={self.tanh_scaling!r}, "
            f"entropy_median={self.entropy_median!r}, fusion={self.fusion!r}"
        )

    def forward(self, frame_sim: torch.Tensor, clip_sim: torch.Tensor, target: torch.Tensor) -> Identification:
        """Identify the query types of a batch.

        Parameters
        ----------
        frame_sim, clip_sim : torch.Tensor
            Frame- and clip-scale similarities ``[B, K]`` (queries × videos), finite.
        target : torch.Tensor
            ``LongTensor [B]`` of positive indices or ``{0, 1}`` matrix ``[B, K]`` (several positives:
            see :mod:`evidential_prvr.functional.targets`).

        Returns
        -------
        Identification
        """
        mask = check_similarity_pair(frame_sim, clip_sim, target)
        dtype = torch.promote_types(compute_dtype(frame_sim), compute_dtype(clip_sim))
        with torch.no_grad():
            f = frame_sim.detach().to(dtype)
            c = clip_sim.detach().to(dtype)
            alpha_f = evidence_kernel(f, self.tau, self.tanh_scaling) + 1.0
            alpha_c = evidence_kernel(c, self.tau, self.tanh_scaling) + 1.0
            return self.identify(alpha_f, alpha_c, f, c, mask)

    def identify(
        self,
        frame_alpha: torch.Tensor,
        clip_alpha: torch.Tensor,
        frame_sim: torch.Tensor,
        clip_sim: torch.Tensor,
        mask: torch.Tensor,
    ) -> Identification:
        """Identification from already computed Dirichlet parameters (no validation; inputs are detached).

        Used by :class:`~evidential_prvr.EvidentialRetrievalLoss` to avoid computing the evidence twice.
        ``mask`` is the boolean positive mask ``[B, K]`` returned by
        :func:`evidential_prvr.functional.targets.positive_mask`; all float inputs share one dtype.
        """
        with torch.no_grad():
            label = normalized_target(mask, frame_alpha.dtype)
            frame = _identify_branch(
                frame_alpha.detach(), frame_sim.detach(), mask, label, self.beta, self.entropy_median
            )
            clip = _identify_branch(clip_alpha.detach(), clip_sim.detach(), mask, label, self.beta, self.entropy_median)
            fused = fuse_query_types(frame.query_type, clip.query_type, self.fusion)
            initial = fuse_query_types(frame.initial_query_type, clip.initial_query_type, self.fusion)
        return Identification(fused, initial, frame, clip)
