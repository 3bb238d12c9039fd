"""Flexible optimal transport: soft query-to-clip assignment with an adaptive dustbin (Holmes §3.3).

For each video of a batch, :func:`flexible_ot` solves the entropic transport between the video's valid
queries plus one *dustbin* row and its valid clips (Holmes Eq. 19-20). The dustbin carries a constant
similarity :math:`z` (a low quantile of the similarities), so clips that match no query better than
:math:`z` send their mass to it instead of being forced onto a query.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from evidential_prvr._checks import (
    as_mask,
    check_tensor,
    compute_dtype,
    should_validate,
)
from evidential_prvr._numerics import minmax_epsilon
from evidential_prvr._settings import TransportSettings
from evidential_prvr.choices import (
    FOT_MARGINALS,
    FOT_NORMALIZATIONS,
    MINMAX_SCOPES,
    FOTMarginals,
    FOTNormalization,
    MinmaxScope,
)
from evidential_prvr.functional._sinkhorn import (
    SinkhornGrad,
    SinkhornMethod,
    _sinkhorn,
)

__all__ = [
    "FOTMarginals",
    "FOTNormalization",
    "MinmaxScope",
    "FOT_MARGINALS",
    "FOT_NORMALIZATIONS",
    "MINMAX_SCOPES",
    "FlexibleOTResult",
    "POTProblem",
    "flexible_ot",
]


@dataclass
class FlexibleOTResult:
    """Output of :func:`~evidential_prvr.functional.flexible_ot` and :class:`~evidential_prvr.FlexibleOT`.

    Attributes
    ----------
    plan : torch.Tensor
        ``[B, Mq, Mc]`` transport plan between queries and clips (the dustbin row removed); rows of
        padded queries and columns of padded clips are exactly 0.
    dustbin : torch.Tensor
        ``[B, Mc]`` mass each clip sends to the dustbin (0 for padded clips, and everywhere when the
        dustbin is disabled).
    assignment : torch.Tensor
        ``[B, Mq, Mc]`` each valid query's plan row normalised to a distribution over the valid
        clips: the soft label of the intra-video loss. Rows of padded queries are 0.
    similarity : torch.Tensor
        ``[B, Mq, Mc]`` the similarities the transport used (min-max normalised when
        ``normalize="minmax"``), padded entries 0. It keeps its gradient even when
        ``grad="detach"``, so it can feed the evidence of the intra-video loss.
    dustbin_value : torch.Tensor or None
        ``[B]`` the dustbin similarity :math:`z` of each video, when asked for with
        ``return_dustbin_value=True`` (0 when the dustbin is disabled); otherwise ``None``.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import flexible_ot
    >>> result = flexible_ot(torch.rand(2, 3, 8), return_dustbin_value=True)
    >>> result.plan.shape, result.dustbin.shape, result.dustbin_value.shape
    (torch.Size([2, 3, 8]), torch.Size([2, 8]), torch.Size([2]))

    References
    ----------
    Holmes (ICML 2026), Eq. 19-20.
    """

    plan: torch.Tensor
    dustbin: torch.Tensor
    assignment: torch.Tensor
    similarity: torch.Tensor
    dustbin_value: torch.Tensor | None = None


@dataclass
class POTProblem:
    """One video's transport problem in POT's convention, for ``ot.sinkhorn(a, b, M, reg)``.

    Attributes
    ----------
    a : numpy.ndarray
        Row marginals: the valid queries in order, then the dustbin (when enabled).
    b : numpy.ndarray
        Column marginals of the valid clips.
    M : numpy.ndarray
        Cost matrix, minus the (normalised) similarities with the dustbin row appended.
    reg : float
        Entropic regularisation, :math:`\\varepsilon`.
    query_index : numpy.ndarray
        Positions in ``Mq`` of the valid queries (the first rows of ``M``).
    clip_index : numpy.ndarray
        Positions in ``Mc`` of the valid clips (the columns of ``M``).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr import FlexibleOT
    >>> problem, = FlexibleOT().pot_problem(torch.rand(1, 2, 4, dtype=torch.float64))
    >>> problem.M.shape, problem.reg  # two queries and the dustbin, four clips
    ((3, 4), 0.1)

    References
    ----------
    Holmes (ICML 2026), Eq. 20; Flamary et al., "POT: Python Optimal Transport", JMLR 2021.
    """

    a: np.ndarray
    b: np.ndarray
    M: np.ndarray
    reg: float
    query_index: np.ndarray
    clip_index: np.ndarray


def flexible_ot(
    sim: torch.Tensor,
    query_mask: torch.Tensor | None = None,
    clip_mask: torch.Tensor | None = None,
    *,
    epsilon: float = 0.1,
    n_iters: int = 50,
    dustbin_quantile: float | None = 0.3,
    normalize: FOTNormalization = "minmax",
    minmax_over: MinmaxScope = "block",
    marginals: FOTMarginals = "release",
    grad: SinkhornGrad = "detach",
    tol: float | None = None,
    method: SinkhornMethod = "auto",
    return_dustbin_value: bool = False,
    validate_args: bool | None = None,
) -> FlexibleOTResult:
    """Entropic optimal transport with an adaptive dustbin, batched over videos (Holmes Eq. 19-20).

    For video :math:`k` with valid queries :math:`1..M_q` and valid clips :math:`1..M_c`, let
    :math:`\\bar{\\mathbf S}` be the similarities (min-max normalised when ``normalize="minmax"``) and
    :math:`z` the ``dustbin_quantile`` order statistic of its valid entries
    (:math:`k = \\max(1, \\lfloor q\\,M_q M_c \\rfloor)`, smallest first, ``torch.kthvalue`` semantics).
    The transport runs between the rows :math:`[\\bar{\\mathbf S};\\ z\\mathbf 1^\\top]` (queries plus a
    dustbin row, Eq. 20 in the orientation of the release) and the clips:

    .. math::

        \\bar{\\mathbf Q}^\\star = \\arg\\max_{\\mathbf Q \\ge 0,\\ \\mathbf Q\\mathbf 1 = \\boldsymbol\\nu,\\
        \\mathbf Q^\\top \\mathbf 1 = \\boldsymbol\\mu}
        \\Big\\langle \\mathbf Q, \\begin{bmatrix}\\bar{\\mathbf S} \\\\ z\\mathbf 1^\\top\\end{bmatrix}
        \\Big\\rangle + \\varepsilon H(\\mathbf Q)

    (POT: ``ot.sinkhorn(nu, mu, -S_bar, reg=epsilon)``), solved by :func:`sinkhorn`. Clip marginals
    :math:`\\mu_j = 1/M_c`. Row marginals: ``marginals="release"`` gives each valid query
    :math:`1/(M_c + M_q)` and the dustbin :math:`M_c/(M_c + M_q)` (SuperGlue style, as in the
    official release); ``"uniform"`` gives the queries and the dustbin :math:`1/(M_q + 1)` each (the
    uniform marginals of App. B.5). ``dustbin_quantile=None`` disables the dustbin (plain OT of
    Eq. 19, queries :math:`1/M_q` each; the Table 3 "OT" ablation).

    **The plan does not depend on** :math:`z`. The problem is balanced, so the constant dustbin row
    only shifts the objective by :math:`z` times the dustbin's fixed mass: what matters is the row's
    flat profile and its marginal. :math:`z` is therefore computed only when asked for
    (``return_dustbin_value=True``); otherwise the row holds the video's smallest valid similarity,
    which leaves the plan unchanged (to rounding) and costs nothing.

    Parameters
    ----------
    sim : torch.Tensor
        ``[B, Mq, Mc]`` similarities between each video's queries and its clips (any floating
        dtype; float16/bfloat16 are computed in float32). Finite at valid entries, and everywhere
        when ``minmax_over="block"``.
    query_mask : torch.Tensor, optional
        ``[B, Mq]`` valid queries (bool, or 0/1 values); default all valid. A video may have none.
    clip_mask : torch.Tensor, optional
        ``[B, Mc]`` valid clips; default all valid. Every video needs one.
    epsilon : float
        Entropic regularisation :math:`\\varepsilon > 0` (the release's ``pot_scale``).
    n_iters : int
        Sinkhorn iterations (maximum when ``tol`` is set).
    dustbin_quantile : float or None
        Quantile :math:`q \\in (0, 1)` of the similarities that sets the dustbin value; None: no dustbin.
    normalize : {"minmax", None}
        ``"minmax"`` maps each video's similarities to [0, 1] by :math:`(x - \\min)/(\\max - \\min + 10^{-8})`.
    minmax_over : {"block", "valid"}
        Where min and max are read: over the whole ``[Mq, Mc]`` block of the video, padded caption
        slots included (the release: its padded caption embeddings are zero vectors, so their cosine
        is 0 and enters the range), or over the valid entries only. Identical without padding.
    marginals : {"release", "uniform"}
        Row-marginal scheme, see above.
    tol : float or None
        Early-stopping tolerance on the L1 row-marginal violation, checked every 10 iterations (one
        host synchronisation per check; keep ``None`` under :func:`torch.compile`).
    grad : {"detach", "autodiff"}
        ``"detach"``: plan, dustbin and assignment are stop-gradient targets (release);
        ``"autodiff"``: differentiate through normalisation and iterations.
    method : {"auto", "log", "scaling"}
        Sinkhorn iteration scheme (see :func:`sinkhorn`). With min-max normalisation the range of
        the scores is known (at most 1), so ``"auto"`` decides without looking at the data.
    return_dustbin_value : bool
        Compute the dustbin value :math:`z` and return it in ``dustbin_value``.
    validate_args : bool, optional
        Check values (finite similarities, masks of 0/1, a valid clip per video); host
        synchronisations. ``None`` follows :func:`evidential_prvr.set_default_validate_args`.

    Returns
    -------
    FlexibleOTResult
        Plan, dustbin mass, assignment, the similarities used (and the dustbin values), all in the
        compute dtype; padded entries exactly 0.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import flexible_ot
    >>> sim = torch.tensor([[[0.9, 0.8, 0.1, 0.0]]])  # one video, one query, four clips
    >>> result = flexible_ot(sim)
    >>> result.assignment.round(decimals=3)  # the query's soft label over the clips
    tensor([[[0.6620, 0.3380, 0.0000, 0.0000]]])
    >>> result.dustbin.round(decimals=3)  # the dustbin absorbs the unrelated clips (1/4 each)
    tensor([[0.1180, 0.1820, 0.2500, 0.2500]])

    References
    ----------
    Holmes (ICML 2026), §3.3, Eq. 19-20 and App. B.5; Sarlin et al., "SuperGlue: Learning Feature
    Matching with Graph Neural Networks", CVPR 2020 (the dustbin and its marginals).
    """
    settings = TransportSettings(epsilon=epsilon, n_iters=n_iters, dustbin_quantile=dustbin_quantile,
                                 normalize=normalize, minmax_over=minmax_over, marginals=marginals, grad=grad, tol=tol,
                                 method=method)
    validate = should_validate(validate_args)
    qmask, cmask, valid, dense = prepare_fot_inputs(sim, query_mask, clip_mask, settings, validate)
    return _flexible_ot(sim, qmask, cmask, valid, dense, settings, validate, return_dustbin_value)


def prepare_fot_inputs(
    sim: object, query_mask: object, clip_mask: object, settings: TransportSettings, validate: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    """Check ``sim`` and the masks; return boolean masks, the valid-entry mask and ``dense``
    (no mask given: nothing is padded)."""
    check_tensor(sim, "sim", ndim=3, floating=True)
    assert isinstance(sim, torch.Tensor)
    batch, mq, mc = sim.shape
    if batch < 1 or mq < 1 or mc < 1:
        raise ValueError(f"sim must be [B, Mq, Mc] with B, Mq, Mc >= 1, got shape {tuple(sim.shape)}")
    dense = query_mask is None and clip_mask is None
    device = sim.device
    if query_mask is None:
        qmask = torch.ones(batch, mq, dtype=torch.bool, device=device)
    else:
        qmask = as_mask(query_mask, "query_mask", (batch, mq), device, validate=validate)
    if clip_mask is None:
        cmask = torch.ones(batch, mc, dtype=torch.bool, device=device)
    else:
        cmask = as_mask(clip_mask, "clip_mask", (batch, mc), device, validate=validate)
    valid = qmask.unsqueeze(2) & cmask.unsqueeze(1)
    if validate:
        no_clip = ~cmask.any(dim=1)
        if bool(no_clip.any()):
            bad = torch.nonzero(no_clip).flatten()[:5].tolist()
            raise ValueError(f"clip_mask must mark at least one valid clip per video; videos {bad} have none")
        whole_block = dense or (settings.normalize == "minmax" and settings.minmax_over == "block")
        checked = sim if whole_block else torch.where(valid, sim, torch.zeros((), dtype=sim.dtype, device=device))
        if not bool(torch.isfinite(checked).all()):
            where = "" if whole_block else " at the valid (query, clip) entries"
            raise ValueError(f"sim must be finite{where}, got NaN or Inf")
    return qmask, cmask, valid, dense


def fot_similarity(
    sim: torch.Tensor, valid: torch.Tensor, settings: TransportSettings, dense: bool, input_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """The similarities the transport uses (normalised as ``settings`` says), padded entries set to 0.

    ``input_dtype`` is the dtype the caller passed (``sim`` may already be upcast): for half-precision
    inputs the min-max ``eps`` is that dtype's machine epsilon, so the gradient stays representable.
    """
    zero = torch.zeros((), dtype=sim.dtype, device=sim.device)
    if settings.normalize == "minmax":
        if dense or settings.minmax_over == "block":
            low = sim.amin(dim=(1, 2), keepdim=True)
            high = sim.amax(dim=(1, 2), keepdim=True)
        else:
            inf = torch.tensor(float("inf"), dtype=sim.dtype, device=sim.device)
            low = torch.where(valid, sim, inf).amin(dim=(1, 2), keepdim=True)
            high = torch.where(valid, sim, -inf).amax(dim=(1, 2), keepdim=True)
            empty = ~valid.any(dim=2).any(dim=1).view(-1, 1, 1)
            low = torch.where(empty, zero, low)
            high = torch.where(empty, zero, high)
        sim = (sim - low) / (high - low + minmax_epsilon(input_dtype or sim.dtype))
    return sim if dense else torch.where(valid, sim, zero)


def _fot_marginals(
    qmask: torch.Tensor, cmask: torch.Tensor, dtype: torch.dtype, settings: TransportSettings
) -> tuple[torch.Tensor, torch.Tensor]:
    """Row marginals ``[B, Mq (+1)]`` and clip marginals ``[B, Mc]``; 0 at padded entries."""
    nq = qmask.sum(dim=1, keepdim=True).to(dtype)
    nc = cmask.sum(dim=1, keepdim=True).to(dtype)
    b = cmask.to(dtype) / nc.clamp_min(1.0)
    if settings.dustbin_quantile is None:
        return qmask.to(dtype) / nq.clamp_min(1.0), b
    if settings.marginals == "release":
        query_mass, bin_mass = 1.0 / (nc + nq), nc / (nc + nq)
    else:
        query_mass = bin_mass = 1.0 / (nq + 1.0)
    return torch.cat([qmask.to(dtype) * query_mass, bin_mass], dim=1), b


def _dustbin_value(x: torch.Tensor, valid: torch.Tensor, quantile: float) -> torch.Tensor:
    """``[B]`` the k-th smallest valid entry, k = max(1, floor(q * n_valid)); 0 without valid entry.

    ``k`` never exceeds ``max(1, floor(q * Mq * Mc))``, so one ``topk`` of that static size serves
    every video without reading the counts on the host.
    """
    batch = x.shape[0]
    flat = torch.where(valid, x, torch.tensor(float("inf"), dtype=x.dtype, device=x.device)).reshape(batch, -1)
    count = valid.reshape(batch, -1).sum(dim=1)
    k = torch.floor(quantile * count.to(torch.float64 if x.device.type != "mps" else torch.float32))
    k = k.long().clamp_min(1)
    k_max = max(1, math.floor(quantile * flat.shape[1]))
    smallest = torch.topk(flat, k_max, dim=1, largest=False, sorted=True).values
    z = smallest.gather(1, (k - 1).clamp_max(k_max - 1).unsqueeze(1)).squeeze(1)
    return torch.where(count > 0, z, torch.zeros_like(z))


def _flexible_ot(
    sim: torch.Tensor,
    qmask: torch.Tensor,
    cmask: torch.Tensor,
    valid: torch.Tensor,
    dense: bool,
    settings: TransportSettings,
    validate: bool,
    return_dustbin_value: bool,
) -> FlexibleOTResult:
    """:func:`flexible_ot` on validated inputs and boolean masks (the masks of :func:`prepare_fot_inputs`): the
    problem, then the Sinkhorn loop through :func:`~evidential_prvr.functional._sinkhorn._sinkhorn`."""
    dtype = compute_dtype(sim)
    similarity = fot_similarity(sim.to(dtype), valid, settings, dense, sim.dtype)
    x = similarity if settings.grad == "autodiff" else similarity.detach()
    batch, mq, mc = x.shape
    a, b = _fot_marginals(qmask, cmask, dtype, settings)
    z = None
    if settings.dustbin_quantile is None:
        scores = x
    else:
        if return_dustbin_value:
            z = _dustbin_value(x, valid, settings.dustbin_quantile)
            row = z
        else:  # any constant row gives the same plan; the valid minimum keeps the score range unchanged
            inf = torch.tensor(float("inf"), dtype=dtype, device=x.device)
            row = torch.where(valid, x, inf).amin(dim=(1, 2))
            row = torch.where(torch.isfinite(row), row, torch.zeros_like(row))
        scores = torch.cat([x, row.view(batch, 1, 1).expand(batch, 1, mc)], dim=1)
    score_range = 1.0 if settings.normalize == "minmax" else None
    full = _sinkhorn(scores, a, b, settings, validate=validate, score_range=score_range)
    plan = full[:, :mq]
    dustbin = full[:, mq] if settings.dustbin_quantile is not None else torch.zeros_like(full[:, 0])
    row_mass = plan.sum(dim=2, keepdim=True)
    tiny = torch.finfo(dtype).tiny
    assignment = torch.where(row_mass > 0, plan / row_mass.clamp_min(tiny), torch.zeros_like(plan))
    if return_dustbin_value and z is None:
        z = torch.zeros(batch, dtype=dtype, device=x.device)
    return FlexibleOTResult(plan, dustbin, assignment, similarity, z)


@torch.no_grad()
def _pot_problems(
    sim: torch.Tensor, query_mask: torch.Tensor | None, clip_mask: torch.Tensor | None, settings: TransportSettings
) -> list[POTProblem]:
    """Per video, the problem POT solves to the plan of :func:`flexible_ot` with ``settings`` (the body of
    :meth:`FlexibleOT.pot_problem`; the solver's own ``grad``, ``tol`` and ``method`` do not enter it)."""
    qmask, cmask, valid, dense = prepare_fot_inputs(sim, query_mask, clip_mask, settings, True)
    x = fot_similarity(sim.detach().to(torch.float64), valid, settings, dense)
    a_all, b_all = _fot_marginals(qmask, cmask, torch.float64, settings)
    quantile = settings.dustbin_quantile
    z = _dustbin_value(x, valid, quantile) if quantile is not None else None
    problems = []
    for k in range(x.shape[0]):
        qi = torch.nonzero(qmask[k]).flatten()
        ci = torch.nonzero(cmask[k]).flatten()
        gains = x[k][qi][:, ci]
        a = a_all[k][qi]
        if z is not None:
            gains = torch.cat([gains, z[k].expand(1, ci.numel())], dim=0)
            a = torch.cat([a, a_all[k][-1:]])
        problems.append(POTProblem(a=a.cpu().numpy(), b=b_all[k][ci].cpu().numpy(), M=(-gains).cpu().numpy(),
                                   reg=float(settings.epsilon), query_index=qi.cpu().numpy(), clip_index=ci.cpu().numpy()))
    return problems
