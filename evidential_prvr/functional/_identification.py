"""Uncertainty-guided identification of precise, polysemous and under-determined queries (Holmes §3.2).

Each branch (frame scale, clip scale) partitions the queries of a batch with its epistemic uncertainty
u, label consistency c and aleatoric uncertainty ξ (Holmes Eq. 10-12); the two partitions are then
fused (Eq. 13-14 or one of the Table 3 alternatives). Identification is a discrete decision: it runs
without gradients and returns detached tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

import torch

from evidential_prvr._checks import (
    check_choice,
    check_finite,
    check_in_range,
    check_same_device,
    check_same_shape,
    check_tensor,
    compute_dtype,
    should_validate,
)
from evidential_prvr._settings import check_identification_options
from evidential_prvr.choices import (
    FUSIONS,
    EntropyMedian,
    Fusion,
    MatchRule,
    TanhScaling,
)
from evidential_prvr.functional._evidence import _evidence, _expected_entropy, _label_consistency, _opinion
from evidential_prvr.functional._scores import check_score_layout, check_score_pair_shapes
from evidential_prvr.functional._targets import correctly_matched, normalized_target, positive_mask

__all__ = [
    "QueryType",
    "BranchIdentification",
    "Identification",
    "RunningThresholds",
    "identify",
    "fuse_query_types",
    "ema_thresholds",
]


class QueryType(IntEnum):
    """Query categories, numbered by the uncertainty-dominance order of Holmes Eq. 13 (S_p ≺ S_n ≺ S_u).

    Examples
    --------
    >>> from evidential_prvr import QueryType
    >>> QueryType.PRECISE < QueryType.POLYSEMOUS < QueryType.UNDERDETERMINED
    True
    >>> QueryType(2).name
    'UNDERDETERMINED'

    References
    ----------
    Holmes (ICML 2026), Eq. 10, 12 and 13.
    """

    PRECISE = 0
    POLYSEMOUS = 1
    UNDERDETERMINED = 2


@dataclass
class BranchIdentification:
    """Identification of one branch (frame or clip scale); all tensors are detached.

    Attributes
    ----------
    query_type : torch.Tensor
        ``LongTensor [Q]`` of :class:`QueryType` values after the entropy refinement (Eq. 12).
    initial_query_type : torch.Tensor
        ``LongTensor [Q]`` before the refinement (Eq. 10): PRECISE for :math:`\\tilde S_p`,
        POLYSEMOUS for :math:`\\tilde S_n`, UNDERDETERMINED for :math:`S_u`.
    epistemic : torch.Tensor
        Epistemic uncertainty u ``[Q]`` (Eq. 5).
    consistency : torch.Tensor
        Label consistency c ``[Q]`` (Eq. 7).
    aleatoric : torch.Tensor
        Aleatoric uncertainty ξ ``[Q]`` (Eq. 9).
    correctly_matched : torch.Tensor
        ``bool [Q]``, the set :math:`S^{tp}` of Eq. 11.
    uncertainty_threshold : torch.Tensor
        0-D tensor :math:`\\beta_u` (Eq. 11).
    consistency_threshold : torch.Tensor
        0-D tensor :math:`\\beta_p` (Eq. 11).
    entropy_threshold : torch.Tensor
        0-D tensor, the median of ξ used by Eq. 12 (NaN under ``"candidates"`` when there is no candidate).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import identify
    >>> sim = torch.tensor([[0.9, 0.1, 0.0], [0.5, 0.5, 0.4], [0.0, 0.1, 0.05]])
    >>> frame = identify(sim, sim, torch.tensor([0, 1, 2])).frame
    >>> frame.correctly_matched, frame.consistency_threshold
    (tensor([ True,  True, False]), tensor(0.5000))

    References
    ----------
    Holmes (ICML 2026), Eq. 5, 7 and 9-12.
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
        ``LongTensor [Q]``, fused :class:`QueryType` (Eq. 14 or the chosen fusion rule).
    initial_query_type : torch.Tensor
        ``LongTensor [Q]``, the branches' initial types (Eq. 10) fused with the same rule; its
        POLYSEMOUS entries form the fused :math:`\\tilde S_n` used by ``calibration_set="initial"``.
    frame : BranchIdentification
        Frame-scale branch.
    clip : BranchIdentification
        Clip-scale branch.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import identify
    >>> sim = torch.tensor([[0.9, 0.1, 0.0], [0.5, 0.5, 0.4], [0.0, 0.1, 0.05]])
    >>> result = identify(sim, sim, torch.tensor([0, 1, 2]))
    >>> result.query_type, result.initial_query_type
    (tensor([0, 1, 2]), tensor([0, 0, 2]))

    References
    ----------
    Holmes (ICML 2026), Eq. 10-14.
    """

    query_type: torch.Tensor
    initial_query_type: torch.Tensor
    frame: BranchIdentification
    clip: BranchIdentification


def fuse_query_types(frame_type: torch.Tensor, clip_type: torch.Tensor, fusion: Fusion) -> torch.Tensor:
    """Fuse two per-branch type tensors (Holmes Eq. 13-14 and Table 3 rows 5-7).

    ``"uncertainty_dominant"`` keeps the type higher in the order PRECISE ≺ POLYSEMOUS ≺ UNDERDETERMINED
    (elementwise max, Eq. 14); ``"confidence_dominant"`` keeps the lower one (min); ``"frame"`` and
    ``"clip"`` trust one branch.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import fuse_query_types
    >>> fuse_query_types(torch.tensor([0, 1, 2]), torch.tensor([1, 0, 0]), "uncertainty_dominant")
    tensor([1, 1, 2])

    References
    ----------
    Holmes (ICML 2026), Eq. 13-14 and Table 3.
    """
    check_choice(fusion, "fusion", FUSIONS)
    for name, types in (("frame_type", frame_type), ("clip_type", clip_type)):
        check_tensor(types, name)
        if types.is_floating_point() or types.is_complex() or types.dtype == torch.bool:
            raise TypeError(f"{name} must have an integer dtype (QueryType codes), got {types.dtype}")
    check_same_shape(frame_type, clip_type, "frame_type", "clip_type")
    if fusion == "uncertainty_dominant":
        return torch.maximum(frame_type, clip_type)
    if fusion == "confidence_dominant":
        return torch.minimum(frame_type, clip_type)
    return frame_type.clone() if fusion == "frame" else clip_type.clone()


class RunningThresholds(NamedTuple):
    """The smoothed thresholds one branch carries from batch to batch (see :func:`ema_thresholds`).

    Attributes
    ----------
    values : torch.Tensor
        ``[2]``: the running :math:`(\\beta_u, \\beta_p)`.
    seen : torch.Tensor
        0-D ``bool``: whether a batch with a correctly matched query has been observed.
    decay : float
        The decay :math:`d \\in [0, 1)`.
    """

    values: torch.Tensor
    seen: torch.Tensor
    decay: float


BranchPair = tuple[RunningThresholds, RunningThresholds]
"""The running thresholds of the frame and the clip branch, in that order."""


def check_decay(decay: object, name: str = "threshold_decay") -> float:
    """``decay`` as a float in ``[0, 1)``; ``TypeError`` / ``ValueError`` naming ``name`` otherwise."""
    check_in_range(decay, name, 0.0, 1.0, high_inclusive=False)  # type: ignore[arg-type]
    return float(decay)  # type: ignore[arg-type]


def ema_thresholds(
    batch: torch.Tensor, running: torch.Tensor, observed: torch.Tensor, seen: torch.Tensor, decay: float
) -> torch.Tensor:
    """Exponential moving average of the identification thresholds across batches (an extension of
    Holmes Eq. 11 beyond the paper).

    Holmes sets :math:`\\beta_u, \\beta_p` (Eq. 11) from the correctly matched queries of the current
    batch alone; this carries them from batch to batch. With :math:`\\beta^{(t)}` the in-batch thresholds
    of batch :math:`t` (Eq. 11, the clamps to :math:`1-\\beta` and :math:`\\beta` included) and
    :math:`\\bar\\beta^{(t-1)}` the running value,

    .. math::

        \\bar\\beta^{(t)} =
        \\begin{cases}
        d\\,\\bar\\beta^{(t-1)} + (1-d)\\,\\beta^{(t)} & S^{tp}_t \\ne \\emptyset
            \\text{ and an earlier batch had } S^{tp} \\ne \\emptyset, \\\\
        \\beta^{(t)} & S^{tp}_t \\ne \\emptyset \\text{ for the first time}, \\\\
        \\bar\\beta^{(t-1)} & S^{tp}_t = \\emptyset \\text{ after a first observation}, \\\\
        \\beta^{(t)} = (1-\\beta,\\ \\beta) & \\text{no batch so far had } S^{tp} \\ne \\emptyset.
        \\end{cases}

    Before the first correctly matched query the in-batch rule's own fallback holds; the first observation
    starts the average (no bias towards an arbitrary initial value); a batch without a correctly matched
    query carries no evidence and leaves the average unchanged. :math:`d = 0` is the in-batch rule on every
    batch with a correctly matched query. The running value stays inside Eq. 11's bounds
    (:math:`\\bar\\beta_u \\le 1-\\beta`, :math:`\\bar\\beta_p \\ge \\beta`): it is a convex
    combination of in-batch values that are. The thresholds partition the queries by Eq. 10 and 12 as
    before (:func:`identify`).

    Parameters
    ----------
    batch : torch.Tensor
        The in-batch thresholds (any shape, e.g. ``[2]`` for :math:`(\\beta_u, \\beta_p)`).
    running : torch.Tensor
        The running values, the shape of ``batch`` (ignored while ``seen`` is false).
    observed : torch.Tensor
        ``bool``, broadcastable: whether this batch has a correctly matched query.
    seen : torch.Tensor
        ``bool``, broadcastable: whether an earlier batch had one.
    decay : float
        :math:`d \\in [0, 1)`.

    Returns
    -------
    torch.Tensor
        The thresholds for this batch, which are also the new running values (differentiable in ``batch``
        and ``running``).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import ema_thresholds
    >>> yes, no = torch.tensor(True), torch.tensor(False)
    >>> ema_thresholds(torch.tensor([0.5, 0.4]), torch.tensor([0.7, 0.3]), yes, yes, 0.9)
    tensor([0.6800, 0.3100])
    >>> ema_thresholds(torch.tensor([0.5, 0.4]), torch.tensor([0.7, 0.3]), yes, no, 0.9)  # first observation
    tensor([0.5000, 0.4000])

    References
    ----------
    Holmes (ICML 2026), Eq. 10-14 (the thresholds of Eq. 11); the smoothing is not in the paper.
    """
    decay = check_decay(decay, "decay")
    check_tensor(batch, "batch", floating=True)
    check_tensor(running, "running", floating=True)
    check_tensor(observed, "observed")
    check_tensor(seen, "seen")
    if running.shape != batch.shape:
        raise ValueError(f"running must have the shape of batch {tuple(batch.shape)}, got {tuple(running.shape)}")
    if observed.dtype != torch.bool or seen.dtype != torch.bool:
        raise TypeError(f"observed and seen must be bool tensors, got {observed.dtype} and {seen.dtype}")
    return _ema_thresholds(batch, running, observed, seen, decay)


def _ema_thresholds(
    batch: torch.Tensor, running: torch.Tensor, observed: torch.Tensor, seen: torch.Tensor, decay: float
) -> torch.Tensor:
    """:func:`ema_thresholds` without checks."""
    averaged = decay * running + (1.0 - decay) * batch
    return torch.where(seen, torch.where(observed, averaged, running), batch)


def check_score_pair(frame_sim: object, clip_sim: object, query_video: object, validate: bool) -> torch.Tensor:
    """Validate ``frame_sim [Q, V]``, ``clip_sim [Q, V]`` and their positives; return the positive mask."""
    check_tensor(frame_sim, "frame_sim", ndim=2, floating=True)
    check_tensor(clip_sim, "clip_sim", ndim=2, floating=True)
    assert isinstance(frame_sim, torch.Tensor) and isinstance(clip_sim, torch.Tensor)
    check_score_pair_shapes(frame_sim, clip_sim, "frame_sim", "clip_sim")
    if frame_sim.shape[0] == 0 or frame_sim.shape[1] == 0:
        raise ValueError(f"frame_sim must hold at least one query and one video, got shape {tuple(frame_sim.shape)}")
    check_tensor(query_video, "query_video", ndim=(1, 2))
    assert isinstance(query_video, torch.Tensor)
    check_score_layout(frame_sim, "frame_sim", query_video)
    check_same_device(frame_sim=frame_sim, clip_sim=clip_sim, query_video=query_video)
    if validate:
        check_finite(frame_sim, "frame_sim")
        check_finite(clip_sim, "clip_sim")
    return positive_mask(query_video, frame_sim.shape[1], frame_sim.shape[0], validate=validate)


def identify(
    frame_sim: torch.Tensor,
    clip_sim: torch.Tensor,
    query_video: torch.Tensor,
    *,
    beta: float = 0.3,
    tau: float = 0.1,
    tanh_scaling: TanhScaling = "inside",
    entropy_median: EntropyMedian = "candidates",
    matched: MatchRule = "any_positive",
    fusion: Fusion = "uncertainty_dominant",
    validate_args: bool | None = None,
    running_thresholds: BranchPair | None = None,
) -> Identification:
    """Partition queries into precise / polysemous / under-determined (Holmes Eq. 10-14).

    Per branch, with :math:`\\alpha = e + 1` from the evidence of Eq. 3:

    .. math::

        \\beta_u = \\min(u^{tp}, 1-\\beta), \\qquad \\beta_p = \\max(\\beta, c^{tp}),

    with :math:`u^{tp} = \\max_{i\\in S^{tp}} u_i`, :math:`c^{tp} = \\min_{i\\in S^{tp}} c_i` over the
    correctly matched queries :math:`S^{tp}`; if :math:`S^{tp}=\\emptyset` then
    :math:`\\beta_u = 1-\\beta`, :math:`\\beta_p = \\beta`. A query is under-determined if
    :math:`u > \\beta_u`; otherwise a *candidate* precise query if :math:`c \\ge \\beta_p` and
    polysemous if not (Eq. 10). Candidates are refined by ξ (Eq. 12):

    * ``entropy_median="candidates"`` (paper): a candidate stays precise iff ξ is strictly below the
      median (NumPy semantics: mean of the two middle values) of ξ over the candidates;
    * ``entropy_median="batch"`` (official release): a candidate becomes polysemous iff ξ is strictly
      above the lower median (``torch.median``) of ξ over the whole batch.

    The two branch types are fused by ``fusion`` (:func:`fuse_query_types`).

    Parameters
    ----------
    frame_sim, clip_sim : torch.Tensor
        Frame- and clip-scale similarities ``[Q, V]`` (queries × videos), finite.
    query_video : torch.Tensor
        ``LongTensor [Q]`` of positive videos or ``{0, 1}`` matrix ``[Q, V]``.
    beta : float
        :math:`\\beta \\in [0, 1]` of Eq. 11 (default 0.3).
    tau : float
        Evidence temperature of Eq. 3 (> 0).
    tanh_scaling : {"inside", "outside"}
        Evidence form, see :func:`~evidential_prvr.functional.evidence`.
    entropy_median : {"candidates", "batch"}
        Median rule of Eq. 12: over the precise candidates (paper) or the whole batch (release).
    matched : {"any_positive", "argmax"}
        The correctly matched set of Eq. 11, see :func:`~evidential_prvr.functional.correctly_matched`
        (paper: ``"any_positive"``; release: ``"argmax"``, ties to the first index).
    fusion : {"uncertainty_dominant", "confidence_dominant", "frame", "clip"}
        Partition fusion rule (Eq. 14, Table 3 rows 5-7).
    validate_args : bool, optional
        Check values (finite scores, valid positives); host synchronisations.
    running_thresholds : tuple, optional
        The frame and the clip branch's thresholds smoothed across batches (:func:`ema_thresholds`; what
        :class:`~evidential_prvr.UncertaintyGuidedIdentifier` carries with ``threshold_decay``); ``None``: the in-batch thresholds of Eq. 11.

    Returns
    -------
    Identification
        Fused types and both branches' statistics, detached.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import identify
    >>> sim = torch.tensor([[0.9, 0.1, 0.0], [0.5, 0.5, 0.4], [0.0, 0.1, 0.05]])
    >>> identify(sim, sim, torch.tensor([0, 1, 2])).query_type  # precise, polysemous, under-determined
    tensor([0, 1, 2])

    References
    ----------
    Holmes (ICML 2026), §3.2, Eq. 10-14.
    """
    check_identification_options(beta=beta, tau=tau, tanh_scaling=tanh_scaling, entropy_median=entropy_median,
                                 matched=matched, fusion=fusion)
    mask = check_score_pair(frame_sim, clip_sim, query_video, should_validate(validate_args))
    dtype = torch.promote_types(compute_dtype(frame_sim), compute_dtype(clip_sim))
    with torch.no_grad():
        f = frame_sim.detach().to(dtype)
        c = clip_sim.detach().to(dtype)
        alpha_f = _evidence(f, tau, tanh_scaling) + 1.0
        alpha_c = _evidence(c, tau, tanh_scaling) + 1.0
        return _identify(alpha_f, alpha_c, f, c, mask, beta=beta, entropy_median=entropy_median, matched=matched,
                         fusion=fusion, running=running_thresholds)


def _numpy_median(values: torch.Tensor, member: torch.Tensor) -> torch.Tensor:
    """NumPy median of ``values[member]`` without a host sync (NaN when ``member`` is empty)."""
    count = member.sum()
    ordered = values.masked_fill(~member, float("inf")).sort().values
    last = values.shape[0] - 1
    low = ((count - 1).clamp_min(0) // 2).clamp_max(last)
    high = (count // 2).clamp_max(last)
    middle = ordered.gather(0, torch.stack([low, high]))  # gather, not ordered[low]: a tensor index is traced
    median = 0.5 * (middle[0] + middle[1])
    return torch.where(count > 0, median, torch.full_like(median, float("nan")))


def _branch_rule(
    u: torch.Tensor, c: torch.Tensor, xi: torch.Tensor, matched: torch.Tensor, beta: float, entropy_median: EntropyMedian,
    running: RunningThresholds | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Holmes Eq. 11-12 on one branch's ``u``, ``c``, ``xi`` and correctly-matched set: the query types, the
    initial types (before the ξ split), the thresholds β_u, β_p and the ξ median (``running``: the
    thresholds smoothed across batches, :func:`ema_thresholds`)."""
    any_matched = matched.any()
    u_tp = u.masked_fill(~matched, float("-inf")).amax()
    c_tp = c.masked_fill(~matched, float("inf")).amin()
    beta_u = torch.where(any_matched, u_tp.clamp_max(1.0 - beta), torch.full_like(u_tp, 1.0 - beta))
    beta_p = torch.where(any_matched, c_tp.clamp_min(beta), torch.full_like(c_tp, beta))
    if running is not None:
        # the state may live on another device than the scores (a criterion never moved with .to())
        smoothed = _ema_thresholds(torch.stack([beta_u, beta_p]), running.values.to(u.device, u.dtype), any_matched,
                                   running.seen.to(u.device), running.decay)
        beta_u, beta_p = smoothed[0], smoothed[1]
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
    return query_type, initial, beta_u, beta_p, median


def _identify_branch(
    alpha: torch.Tensor, sim: torch.Tensor, mask: torch.Tensor, label: torch.Tensor, *, beta: float,
    entropy_median: EntropyMedian, matched: MatchRule, running: RunningThresholds | None = None,
) -> BranchIdentification:
    """Holmes Eq. 10-12 for one branch on validated, detached tensors of one dtype."""
    u = _opinion(alpha).uncertainty
    c = _label_consistency(sim, label)
    xi = _expected_entropy(alpha)
    correct = correctly_matched(sim, mask, matched)
    query_type, initial, beta_u, beta_p, median = _branch_rule(u, c, xi, correct, beta, entropy_median, running)
    return BranchIdentification(query_type, initial, u, c, xi, correct, beta_u, beta_p, median)


def _identify(
    frame_alpha: torch.Tensor,
    clip_alpha: torch.Tensor,
    frame_sim: torch.Tensor,
    clip_sim: torch.Tensor,
    mask: torch.Tensor,
    *,
    beta: float,
    entropy_median: EntropyMedian,
    matched: MatchRule,
    fusion: Fusion,
    running: BranchPair | None = None,
) -> Identification:
    """Identification from already computed Dirichlet parameters with checked hyperparameters (no validation;
    inputs detached here); ``running``: the frame and clip branches' smoothed thresholds (:func:`ema_thresholds`)."""
    frame_running, clip_running = (None, None) if running is None else running
    with torch.no_grad():
        label = normalized_target(mask, frame_alpha.dtype)
        frame = _identify_branch(frame_alpha.detach(), frame_sim.detach(), mask, label, beta=beta,
                                 entropy_median=entropy_median, matched=matched, running=frame_running)
        clip = _identify_branch(clip_alpha.detach(), clip_sim.detach(), mask, label, beta=beta,
                                entropy_median=entropy_median, matched=matched, running=clip_running)
        fused = fuse_query_types(frame.query_type, clip.query_type, fusion)
        initial = fuse_query_types(frame.initial_query_type, clip.initial_query_type, fusion)
    return Identification(fused, initial, frame, clip)
