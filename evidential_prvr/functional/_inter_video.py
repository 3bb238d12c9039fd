"""Inter-video evidential learning: calibrated labels (Holmes Eq. 15) and the objective L_inter (Eq. 18)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from evidential_prvr._checks import check_choice, check_in_range, check_tensor, compute_dtype, should_validate
from evidential_prvr._settings import check_calibration_options, check_identification_options
from evidential_prvr.choices import (
    REDUCTIONS,
    CalibrationSet,
    EntropyMedian,
    Fusion,
    InterTerm,
    MatchRule,
    Reduction,
    TanhScaling,
)
from evidential_prvr.functional._dempster_shafer import _ds_combine
from evidential_prvr.functional._dirichlet_loss import _dirichlet_mse, reduce_rows
from evidential_prvr.functional._evidence import _evidence
from evidential_prvr.functional._identification import (
    BranchPair,
    Identification,
    QueryType,
    _identify,
    check_score_pair,
)
from evidential_prvr.functional._targets import normalized_target

__all__ = [
    "InterVideoLossDetails",
    "calibrated_target",
    "inter_video_loss",
    "inter_video_loss_details",
]


@dataclass
class InterVideoLossDetails:
    """Everything :func:`~evidential_prvr.functional.inter_video_loss` computed for one batch.

    Attributes
    ----------
    loss : torch.Tensor
        :math:`L_{inter}` (Eq. 18) over the selected ``terms``, reduced as ``reduction`` says.
    frame_loss, clip_loss, fused_loss : torch.Tensor
        The three :math:`L_U` terms (Eq. 17) on the frame, clip and DS-fused opinions (each computed,
        whichever enter ``loss``).
    identification : Identification or None
        Query types and per-branch statistics (Eq. 10-14), detached; ``None`` when the loss ran
        without calibration and no details were asked for.
    target : torch.Tensor
        Calibrated labels :math:`\\hat{\\mathbf{y}}` ``[Q, V]`` (Eq. 15), detached.
    frame_alpha, clip_alpha, fused_alpha : torch.Tensor
        Dirichlet parameters ``[Q, V]`` of the three opinions (with gradients).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import inter_video_loss_details
    >>> sim = torch.tensor([[0.8, 0.1], [0.2, 0.7]])
    >>> details = inter_video_loss_details(sim, sim, torch.tensor([0, 1]))
    >>> details.target.shape, details.fused_alpha.shape
    (torch.Size([2, 2]), torch.Size([2, 2]))

    References
    ----------
    Holmes (ICML 2026), Eq. 15-18.
    """

    loss: torch.Tensor
    frame_loss: torch.Tensor
    clip_loss: torch.Tensor
    fused_loss: torch.Tensor
    identification: Identification | None
    target: torch.Tensor
    frame_alpha: torch.Tensor
    clip_alpha: torch.Tensor
    fused_alpha: torch.Tensor


def calibrated_target(
    frame_sim: torch.Tensor,
    clip_sim: torch.Tensor,
    query_video: torch.Tensor,
    query_type: torch.Tensor,
    *,
    gamma: float = 0.2,
    validate_args: bool | None = None,
) -> torch.Tensor:
    """Query-specific label calibration (Holmes Eq. 15).

    .. math::

        \\hat{\\mathbf{y}}_i = \\begin{cases}
            (1-\\gamma)\\mathbf{y}_i + \\tfrac{\\gamma}{2}\\big(\\sigma(\\mathbf{s}^f_i) + \\sigma(\\mathbf{s}^c_i)\\big),
                & i \\in S^o_n \\text{ (polysemous)}, \\\\
            \\mathbf{y}_i, & \\text{otherwise},
        \\end{cases}

    where :math:`\\sigma` is the softmax over the videos of the (detached) similarities and
    :math:`\\mathbf{y}_i` the normalised multi-hot label (one-hot for index positives).

    Parameters
    ----------
    frame_sim, clip_sim : torch.Tensor
        Frame- and clip-scale similarities ``[Q, V]``.
    query_video : torch.Tensor
        ``LongTensor [Q]`` of positive videos or ``{0, 1}`` matrix ``[Q, V]``.
    query_type : torch.Tensor
        ``LongTensor [Q]`` of :class:`~evidential_prvr.QueryType` values (e.g.
        ``identify(...).query_type``); rows equal to ``POLYSEMOUS`` are calibrated.
    gamma : float
        Calibration weight :math:`\\gamma \\in [0, 1]` (0.2).
    validate_args : bool, optional
        Check values (finite scores, valid positives and types); host synchronisations.

    Returns
    -------
    torch.Tensor
        :math:`\\hat{\\mathbf{y}}` ``[Q, V]``, rows on the probability simplex, detached, in the
        compute dtype.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import calibrated_target
    >>> sim = torch.zeros(2, 2)  # uniform softmax
    >>> calibrated_target(sim, sim, torch.tensor([0, 1]), torch.tensor([1, 0]), gamma=0.2)
    tensor([[0.9000, 0.1000],
            [0.0000, 1.0000]])

    References
    ----------
    Holmes (ICML 2026), Eq. 15.
    """
    validate = should_validate(validate_args)
    mask = check_score_pair(frame_sim, clip_sim, query_video, validate)
    check_in_range(gamma, "gamma", 0.0, 1.0)
    check_tensor(query_type, "query_type", ndim=1)
    if query_type.shape[0] != frame_sim.shape[0] or query_type.is_floating_point() or query_type.dtype == torch.bool:
        raise ValueError(
            f"query_type must be an integer tensor of shape [{frame_sim.shape[0]}], got {query_type.dtype} "
            f"{tuple(query_type.shape)}"
        )
    if query_type.device != frame_sim.device:
        raise ValueError(f"frame_sim and query_type must be on the same device, got {frame_sim.device} and "
                         f"{query_type.device}")
    if validate and bool(((query_type < 0) | (query_type > int(QueryType.UNDERDETERMINED))).any()):
        raise ValueError(f"query_type must hold QueryType values 0, 1 or 2, got values in "
                         f"[{int(query_type.min())}, {int(query_type.max())}]")
    dtype = torch.promote_types(compute_dtype(frame_sim), compute_dtype(clip_sim))
    label = normalized_target(mask, dtype)
    return _calibrated_target(frame_sim.to(dtype), clip_sim.to(dtype), label, query_type, gamma)


def _calibrated_target(
    frame_sim: torch.Tensor, clip_sim: torch.Tensor, label: torch.Tensor, query_type: torch.Tensor, gamma: float
) -> torch.Tensor:
    """Holmes Eq. 15 on validated tensors of one dtype (no checks)."""
    with torch.no_grad():
        soft = 0.5 * (torch.softmax(frame_sim.detach(), dim=-1) + torch.softmax(clip_sim.detach(), dim=-1))
        calibrated = (1.0 - gamma) * label + gamma * soft
        polysemous = (query_type == int(QueryType.POLYSEMOUS)).unsqueeze(-1)
        return torch.where(polysemous, calibrated, label)


def inter_video_loss(
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
    gamma: float = 0.2,
    calibrate: bool = True,
    calibration_set: CalibrationSet = "refined",
    terms: tuple[InterTerm, ...] = ("frame", "clip", "fused"),
    reduction: Reduction = "mean",
    validate_args: bool | None = None,
    running_thresholds: BranchPair | None = None,
) -> torch.Tensor:
    """Inter-video evidential loss with uncertainty-guided label calibration (Holmes Eq. 15-18).

    .. math::

        L_{inter} = L_U(\\boldsymbol\\alpha^f, \\hat{\\mathbf{y}}) + L_U(\\boldsymbol\\alpha^c, \\hat{\\mathbf{y}})
                    + L_U(\\boldsymbol\\alpha^o, \\hat{\\mathbf{y}}),

    where :math:`\\boldsymbol\\alpha^{f,c} = e(\\mathbf{s}^{f,c}) + 1` (Eq. 3-4),
    :math:`\\boldsymbol\\alpha^o` is their Dempster-Shafer fusion (Eq. 16), :math:`L_U` the expected
    squared error of Eq. 17 and :math:`\\hat{\\mathbf{y}}` the calibrated label of Eq. 15
    (:func:`calibrated_target`) on the polysemous set of :func:`identify`.

    Parameters
    ----------
    frame_sim, clip_sim : torch.Tensor
        Frame- and clip-scale similarities ``[Q, V]`` (queries × videos), finite.
    query_video : torch.Tensor
        ``LongTensor [Q]`` of positive videos or ``{0, 1}`` matrix ``[Q, V]``.
    beta, tau, tanh_scaling, entropy_median, matched, fusion
        Identification settings, see :func:`identify`.
    gamma : float
        Calibration weight γ ∈ [0, 1] of Eq. 15.
    calibrate : bool
        ``False`` is the warm-up stage: every query keeps its plain label (Table 3 row 8), and the
        identification runs only when details are asked for.
    calibration_set : {"refined", "initial"}
        Calibrate the fused :math:`S^o_n` (paper) or only the fused initial polysemous set :math:`\\tilde S_n`,
        before the entropy refinement (Table 3 row 9).
    terms : tuple of {"frame", "clip", "fused"}
        The :math:`L_U` terms that enter the loss (Table 3 rows 1-3 keep fewer).
    reduction : {"mean", "sum", "none"}
        Reduction of the per-query loss over the batch (``"none"``: ``[Q]``).
    validate_args : bool, optional
        Check values (finite scores, valid positives); host synchronisations.
    running_thresholds : tuple, optional
        The frame and the clip branch's thresholds smoothed across batches
        (:func:`~evidential_prvr.functional.ema_thresholds`; how :class:`~evidential_prvr.HolmesCriterion`'s
        ``threshold_decay`` reaches the identification); ``None``: the in-batch thresholds of Eq. 11.

    Returns
    -------
    torch.Tensor
        The loss (scalar unless ``reduction="none"``), in float32 for half inputs;
        :func:`inter_video_loss_details` returns what it computed on the way.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import inter_video_loss
    >>> sim = torch.tensor([[0.8, 0.1], [0.2, 0.7]], requires_grad=True)
    >>> loss = inter_video_loss(sim, sim, torch.tensor([0, 1]))
    >>> loss.backward()
    >>> round(loss.item(), 4)
    1.2708

    References
    ----------
    Holmes (ICML 2026), §3.2, Eq. 15-18.
    """
    return _inter_video_loss(frame_sim, clip_sim, query_video, beta=beta, tau=tau, tanh_scaling=tanh_scaling,
                             entropy_median=entropy_median, matched=matched, fusion=fusion, gamma=gamma,
                             calibrate=calibrate, calibration_set=calibration_set, terms=terms, reduction=reduction,
                             validate_args=validate_args, running_thresholds=running_thresholds,
                             identify_always=False).loss


def inter_video_loss_details(
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
    gamma: float = 0.2,
    calibrate: bool = True,
    calibration_set: CalibrationSet = "refined",
    terms: tuple[InterTerm, ...] = ("frame", "clip", "fused"),
    reduction: Reduction = "mean",
    validate_args: bool | None = None,
    running_thresholds: BranchPair | None = None,
) -> InterVideoLossDetails:
    """Every term that :func:`inter_video_loss` computes, and its ``loss`` (Holmes Eq. 15-18).

    The identification (Eq. 10-14) runs even with ``calibrate=False``, so the details always hold it.

    Parameters
    ----------
    frame_sim, clip_sim, query_video
        The scores and positives, as :func:`inter_video_loss` takes them.
    beta, tau, tanh_scaling, entropy_median, matched, fusion, gamma, calibrate, calibration_set, terms
        The settings of :func:`inter_video_loss`.
    reduction, validate_args, running_thresholds
        As in :func:`inter_video_loss` (``reduction`` applies to every term).

    Returns
    -------
    InterVideoLossDetails
        The three :math:`L_U` terms, the identification, the calibrated labels and the Dirichlet
        parameters; its ``loss`` is what :func:`inter_video_loss` returns.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import inter_video_loss_details
    >>> sim = torch.tensor([[0.8, 0.1], [0.2, 0.7]], requires_grad=True)
    >>> details = inter_video_loss_details(sim, sim, torch.tensor([0, 1]), calibrate=False)
    >>> details.identification is not None, details.target.shape
    (True, torch.Size([2, 2]))

    References
    ----------
    Holmes (ICML 2026), §3.2, Eq. 15-18.
    """
    return _inter_video_loss(frame_sim, clip_sim, query_video, beta=beta, tau=tau, tanh_scaling=tanh_scaling,
                             entropy_median=entropy_median, matched=matched, fusion=fusion, gamma=gamma,
                             calibrate=calibrate, calibration_set=calibration_set, terms=terms, reduction=reduction,
                             validate_args=validate_args, running_thresholds=running_thresholds,
                             identify_always=True)


def _inter_video_loss(
    frame_sim: torch.Tensor,
    clip_sim: torch.Tensor,
    query_video: torch.Tensor,
    *,
    beta: float,
    tau: float,
    tanh_scaling: TanhScaling,
    entropy_median: EntropyMedian,
    matched: MatchRule,
    fusion: Fusion,
    gamma: float,
    calibrate: bool,
    calibration_set: CalibrationSet,
    terms: tuple[InterTerm, ...],
    reduction: Reduction,
    validate_args: bool | None,
    running_thresholds: BranchPair | None,
    identify_always: bool,
) -> InterVideoLossDetails:
    """L_inter (Holmes Eq. 15-18): the one body of :func:`inter_video_loss` and :func:`inter_video_loss_details`.

    Checks the hyperparameters and the tensors. ``identify_always``: run the identification without calibration
    too (the details hold it); otherwise ``identification`` is ``None`` when ``calibrate`` is false.
    """
    check_identification_options(beta=beta, tau=tau, tanh_scaling=tanh_scaling, entropy_median=entropy_median,
                                 matched=matched, fusion=fusion)
    terms = check_calibration_options(gamma=gamma, calibrate=calibrate, calibration_set=calibration_set, terms=terms)
    check_choice(reduction, "reduction", REDUCTIONS)
    mask = check_score_pair(frame_sim, clip_sim, query_video, should_validate(validate_args))
    dtype = torch.promote_types(compute_dtype(frame_sim), compute_dtype(clip_sim))
    s_f = frame_sim.to(dtype)
    s_c = clip_sim.to(dtype)
    alpha_f = _evidence(s_f, tau, tanh_scaling) + 1.0  # Eq. 3-4
    alpha_c = _evidence(s_c, tau, tanh_scaling) + 1.0
    alpha_o = _ds_combine(alpha_f, alpha_c)  # Eq. 16
    label = normalized_target(mask, dtype)

    identification = None
    if calibrate or identify_always:  # Eq. 10-14
        identification = _identify(alpha_f, alpha_c, s_f, s_c, mask, beta=beta, entropy_median=entropy_median,
                                   matched=matched, fusion=fusion, running=running_thresholds)
    if calibrate and gamma > 0.0:
        assert identification is not None
        types = identification.query_type if calibration_set == "refined" else identification.initial_query_type
        target = _calibrated_target(s_f, s_c, label, types, gamma)  # Eq. 15
    else:
        target = label

    rows = {"frame": _dirichlet_mse(alpha_f, target), "clip": _dirichlet_mse(alpha_c, target),  # Eq. 17
            "fused": _dirichlet_mse(alpha_o, target)}
    total = rows[terms[0]]
    for term in terms[1:]:
        total = total + rows[term]  # Eq. 18
    return InterVideoLossDetails(
        loss=reduce_rows(total, reduction),
        frame_loss=reduce_rows(rows["frame"], reduction),
        clip_loss=reduce_rows(rows["clip"], reduction),
        fused_loss=reduce_rows(rows["fused"], reduction),
        identification=identification,
        target=target,
        frame_alpha=alpha_f,
        clip_alpha=alpha_c,
        fused_alpha=alpha_o,
    )
