"""Intra-video evidential learning L_intra (Holmes §3.3).

Each query of a video is an :math:`M_c`-way classification over the video's clips. The evidence of its
similarities (Holmes Eq. 3-4) is trained with the evidential loss L_U (Eq. 17) towards a soft,
stop-gradient label: the query's row of the flexible transport plan (Eq. 20), or the ablations of
Table 3 (softmax over clips, OT without dustbin).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from evidential_prvr._checks import check_choice, compute_dtype, should_validate
from evidential_prvr._settings import TransportSettings, check_intra_options
from evidential_prvr.choices import (
    REDUCTIONS,
    FOTMarginals,
    FOTNormalization,
    IntraAssignment,
    MinmaxScope,
    Reduction,
    SinkhornMethod,
    TanhScaling,
)
from evidential_prvr.functional._dirichlet_loss import _dirichlet_mse
from evidential_prvr.functional._evidence import _evidence
from evidential_prvr.functional._flexible_ot import (
    FlexibleOTResult,
    _flexible_ot,
    fot_similarity,
    prepare_fot_inputs,
)

__all__ = ["IntraVideoLossDetails", "intra_video_loss", "intra_video_loss_details"]


@dataclass
class IntraVideoLossDetails:
    """Everything :func:`~evidential_prvr.functional.intra_video_loss` computed.

    Attributes
    ----------
    loss : torch.Tensor
        L_intra reduced as ``reduction`` says.
    per_query : torch.Tensor
        ``[B, Mq]`` L_U of every query (0 for padded queries).
    per_video : torch.Tensor
        ``[B]`` mean of ``per_query`` over each video's valid queries (0 for a video without any).
    alpha : torch.Tensor
        ``[B, Mq, Mc]`` Dirichlet parameters; 0 at padded clips (they are not classes) and padded queries.
    target : torch.Tensor
        ``[B, Mq, Mc]`` the stop-gradient soft labels (rows sum to 1 over valid clips).
    transport : FlexibleOTResult or None
        The transport result (None for ``assignment="softmax"``).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import intra_video_loss_details
    >>> details = intra_video_loss_details(torch.rand(2, 3, 8))
    >>> details.per_query.shape, details.per_video.shape, bool(details.target.sum(-1).allclose(torch.ones(2, 3)))
    (torch.Size([2, 3]), torch.Size([2]), True)

    References
    ----------
    Holmes (ICML 2026), §3.3 and Eq. 17.
    """

    loss: torch.Tensor
    per_query: torch.Tensor
    per_video: torch.Tensor
    alpha: torch.Tensor
    target: torch.Tensor
    transport: FlexibleOTResult | None


def intra_video_loss(
    sim: torch.Tensor,
    query_mask: torch.Tensor | None = None,
    clip_mask: torch.Tensor | None = None,
    *,
    tau: float = 0.06,
    tanh_scaling: TanhScaling = "outside",
    assignment: IntraAssignment = "fot",
    epsilon: float = 0.1,
    n_iters: int = 50,
    dustbin_quantile: float | None = 0.3,
    normalize: FOTNormalization = "minmax",
    minmax_over: MinmaxScope = "block",
    marginals: FOTMarginals = "release",
    tol: float | None = None,
    method: SinkhornMethod = "auto",
    reduction: Reduction = "mean",
    validate_args: bool | None = None,
) -> torch.Tensor:
    """L_intra: evidential loss of each query over its video's clips against a transport label.

    For query :math:`i` of video :math:`k` with :math:`K_k` valid clips and similarities
    :math:`\\bar s_{ij}` (those the transport uses: min-max normalised under the release settings),

    .. math::

        \\alpha_{ij} = e(\\bar s_{ij}; \\tau) + 1 \\ \\text{(Eq. 3-4)}, \\qquad
        L_{\\mathrm{intra}} = \\frac{1}{|\\mathcal V|} \\sum_{k\\in\\mathcal V} \\frac{1}{M_q^{(k)}}
        \\sum_{i} L_U\\big(\\boldsymbol\\alpha_i, \\hat{\\mathbf y}_i\\big) \\ \\text{(Eq. 17)},

    where :math:`\\hat{\\mathbf y}_i` is the query's row of the flexible transport plan normalised over
    clips (Eq. 20, :func:`flexible_ot`), detached, and :math:`\\mathcal V` the videos with at least one
    valid query. Padded clips are not classes: the classification of a query is :math:`K_k`-way over
    its video's valid clips (their :math:`\\alpha` is set to 0, which removes them exactly from
    :math:`S` and the sum of Eq. 17). The evidence keeps its gradient; the label does not.

    Parameters
    ----------
    sim : torch.Tensor
        ``[B, Mq, Mc]`` query-clip similarities of each video (e.g. from
        :func:`~evidential_prvr.build_intra_video_batch`).
    query_mask, clip_mask : torch.Tensor, optional
        ``[B, Mq]`` and ``[B, Mc]`` validity masks (bool, or 0/1 values).
    tau : float
        Evidence temperature :math:`\\tau_{\\text{intra}} > 0` of the query-clip evidence.
    tanh_scaling : {"outside", "inside"}
        Evidence form, see :func:`~evidential_prvr.functional.evidence` (release: ``"outside"``).
    assignment : {"fot", "ot", "softmax"}
        ``"fot"``: flexible transport with dustbin (default); ``"ot"``: the same transport without
        dustbin (Table 3 row 12); ``"softmax"``: :math:`\\mathrm{softmax}_j(\\bar s_{ij}/\\varepsilon)`
        over the valid clips with the transport's :math:`\\varepsilon` (Table 3 row 11; the paper does
        not give its temperature).
    epsilon, n_iters, dustbin_quantile, normalize, minmax_over, marginals, tol, method
        The transport that makes the label: the keyword arguments of :func:`flexible_ot` (the release's by
        default). Its plan is always a stop-gradient label (there is no ``grad``); ``"ot"`` and ``"softmax"``
        ignore ``dustbin_quantile``, ``"fot"`` needs one. ``normalize`` also decides which similarities
        feed the evidence.
    reduction : {"mean", "sum", "none"}
        ``"mean"``: over the videos with a valid query; ``"sum"``: their sum; ``"none"``: ``[B]``
        per video (0 for a video without a valid query).
    validate_args : bool, optional
        Check values (finite similarities, 0/1 masks, a clip per video); host synchronisations.

    Returns
    -------
    torch.Tensor
        The loss (0 when no video has a valid query), in the compute dtype;
        :func:`intra_video_loss_details` returns what it computed on the way.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import intra_video_loss
    >>> sim = torch.tensor([[[0.9, 0.8, 0.1, 0.0], [0.1, 0.2, 0.9, 0.3]]], requires_grad=True)
    >>> loss = intra_video_loss(sim, tau=0.06)
    >>> loss.backward()
    >>> bool(sim.grad.abs().sum() > 0)
    True
    >>> float(intra_video_loss(sim, tau=0.06, epsilon=0.05)) > 0  # a sharper transport label
    True

    References
    ----------
    Holmes (ICML 2026), §3.3 and Table 3 (rows 10-12).
    """
    return _intra_video_loss(sim, query_mask, clip_mask, tau=tau, tanh_scaling=tanh_scaling, assignment=assignment,
                             epsilon=epsilon, n_iters=n_iters, dustbin_quantile=dustbin_quantile, normalize=normalize,
                             minmax_over=minmax_over, marginals=marginals, tol=tol, method=method, reduction=reduction,
                             validate_args=validate_args).loss


def intra_video_loss_details(
    sim: torch.Tensor,
    query_mask: torch.Tensor | None = None,
    clip_mask: torch.Tensor | None = None,
    *,
    tau: float = 0.06,
    tanh_scaling: TanhScaling = "outside",
    assignment: IntraAssignment = "fot",
    epsilon: float = 0.1,
    n_iters: int = 50,
    dustbin_quantile: float | None = 0.3,
    normalize: FOTNormalization = "minmax",
    minmax_over: MinmaxScope = "block",
    marginals: FOTMarginals = "release",
    tol: float | None = None,
    method: SinkhornMethod = "auto",
    reduction: Reduction = "mean",
    validate_args: bool | None = None,
) -> IntraVideoLossDetails:
    """Every term that :func:`intra_video_loss` computes, and its ``loss`` (Holmes §3.3).

    Parameters
    ----------
    sim, query_mask, clip_mask
        The similarities and masks, as :func:`intra_video_loss` takes them.
    tau, tanh_scaling, assignment
        The evidence settings of :func:`intra_video_loss`.
    epsilon, n_iters, dustbin_quantile, normalize, minmax_over, marginals, tol, method
        Its transport.
    reduction, validate_args
        As in :func:`intra_video_loss` (``reduction`` applies to ``loss``).

    Returns
    -------
    IntraVideoLossDetails
        The per-query and per-video terms, the Dirichlet parameters, the labels and the transport; its
        ``loss`` is what :func:`intra_video_loss` returns.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import intra_video_loss_details
    >>> sim = torch.tensor([[[0.9, 0.8, 0.1, 0.0], [0.1, 0.2, 0.9, 0.3]]], requires_grad=True)
    >>> intra_video_loss_details(sim, tau=0.06).per_query.shape
    torch.Size([1, 2])

    References
    ----------
    Holmes (ICML 2026), §3.3 and Table 3 (rows 10-12).
    """
    return _intra_video_loss(sim, query_mask, clip_mask, tau=tau, tanh_scaling=tanh_scaling, assignment=assignment,
                             epsilon=epsilon, n_iters=n_iters, dustbin_quantile=dustbin_quantile, normalize=normalize,
                             minmax_over=minmax_over, marginals=marginals, tol=tol, method=method, reduction=reduction,
                             validate_args=validate_args)


def _intra_video_loss(
    sim: torch.Tensor,
    query_mask: torch.Tensor | None,
    clip_mask: torch.Tensor | None,
    *,
    tau: float,
    tanh_scaling: TanhScaling,
    assignment: IntraAssignment,
    epsilon: float,
    n_iters: int,
    dustbin_quantile: float | None,
    normalize: FOTNormalization,
    minmax_over: MinmaxScope,
    marginals: FOTMarginals,
    tol: float | None,
    method: SinkhornMethod,
    reduction: Reduction,
    validate_args: bool | None,
) -> IntraVideoLossDetails:
    """L_intra (Holmes §3.3): the one body of :func:`intra_video_loss` and :func:`intra_video_loss_details`.

    Checks the hyperparameters and the tensors. The plan is always a stop-gradient label; ``"ot"`` and
    ``"softmax"`` ignore the dustbin.
    """
    check_intra_options(tau=tau, tanh_scaling=tanh_scaling, assignment=assignment)
    transport = TransportSettings(epsilon=epsilon, n_iters=n_iters, dustbin_quantile=dustbin_quantile,
                                  normalize=normalize, minmax_over=minmax_over, marginals=marginals, grad="detach",
                                  tol=tol, method=method)  # checks the transport's values
    check_choice(reduction, "reduction", REDUCTIONS)
    if assignment == "fot" and dustbin_quantile is None:
        raise ValueError("assignment='fot' needs a dustbin: dustbin_quantile must be a number in (0, 1), got None")
    if assignment != "fot":
        transport = dataclasses.replace(transport, dustbin_quantile=None)
    validate = should_validate(validate_args)
    qmask, cmask, valid, dense = prepare_fot_inputs(sim, query_mask, clip_mask, transport, validate)
    if assignment == "softmax":
        plan = None
        similarity = fot_similarity(sim.to(compute_dtype(sim)), valid, transport, dense, sim.dtype)
        logits = (similarity.detach() / transport.epsilon).masked_fill(~cmask.unsqueeze(1), float("-inf"))
        target = torch.where(valid, torch.softmax(logits, dim=2), torch.zeros_like(similarity))
    else:
        plan = _flexible_ot(sim, qmask, cmask, valid, dense, transport, validate, False)  # transport: detached
        similarity = plan.similarity  # keeps its gradient
        target = plan.assignment.detach()  # Eq. 20

    alpha = _evidence(similarity, tau, tanh_scaling) + 1.0  # Eq. 3-4
    alpha = torch.where(valid, alpha, torch.zeros_like(alpha))
    # a padded query row has alpha = 0 everywhere; give it a harmless dummy row and mask it out
    safe_alpha = torch.where(qmask.unsqueeze(2), alpha, torch.ones_like(alpha))
    per_query = torch.where(qmask, _dirichlet_mse(safe_alpha, target), torch.zeros_like(alpha[..., 0]))  # Eq. 17
    n_valid = qmask.sum(dim=1)
    per_video = per_query.sum(dim=1) / n_valid.clamp_min(1).to(per_query.dtype)
    has_query = n_valid > 0
    if reduction == "none":
        loss = per_video
    elif reduction == "sum":
        loss = (per_video * has_query).sum()
    else:
        loss = (per_video * has_query).sum() / has_query.sum().clamp_min(1).to(per_query.dtype)
    return IntraVideoLossDetails(loss, per_query, per_video, alpha, target, plan)
