"""Flexible optimal transport: soft query-to-clip assignment with an adaptive dustbin (Holmes §3.3).

:class:`FlexibleOT` solves, for each video of a batch, the entropic transport between the video's
valid queries plus one *dustbin* row and its valid clips (Holmes Eq. 19-20). The dustbin carries a
constant similarity :math:`z` (a low quantile of the similarities), so clips that match no query
better than :math:`z` send their mass to it instead of being forced onto a query.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from evidential_prvr._checks import (
    check_choice,
    check_in_range,
    check_positive,
    check_positive_int,
    check_tensor,
    compute_dtype,
)
from evidential_prvr.functional.sinkhorn import SINKHORN_GRADS, SINKHORN_METHODS, sinkhorn_unchecked

__all__ = ["FlexibleOT", "FlexibleOTResult", "POTProblem", "FOT_MARGINALS", "FOT_NORMALIZATIONS"]

FOT_MARGINALS = ("release", "uniform")
"""Marginal schemes of :class:`FlexibleOT`."""

FOT_NORMALIZATIONS = ("minmax", None)
"""Similarity normalisations of :class:`FlexibleOT`."""

_MINMAX_EPS = 1e-8


@dataclass
class FlexibleOTResult:
    """Output of :class:`FlexibleOT`.

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
    dustbin_value : torch.Tensor
        ``[B]`` the dustbin similarity :math:`z` of each video (0 when the dustbin is disabled).
    """

    plan: torch.Tensor
    dustbin: torch.Tensor
    assignment: torch.Tensor
    similarity: torch.Tensor
    dustbin_value: torch.Tensor


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
    """

    a: np.ndarray
    b: np.ndarray
    M: np.ndarray
    reg: float
    query_index: np.ndarray
    clip_index: np.ndarray


def _as_mask(mask: object, name: str, shape: tuple[int, int], device: torch.device) -> torch.Tensor:
    """A boolean mask of ``shape`` (all True when ``mask`` is None); accepts bool or 0/1 tensors."""
    if mask is None:
        return torch.ones(shape, dtype=torch.bool, device=device)
    check_tensor(mask, name, ndim=2)
    if tuple(mask.shape) != shape:
        raise ValueError(f"{name} must have shape {shape} to match sim, got {tuple(mask.shape)}")
    if mask.dtype != torch.bool:
        if mask.is_complex() or not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError(f"{name} must be boolean or hold only 0 and 1")
        mask = mask != 0
    return mask.to(device)


class FlexibleOT(nn.Module):
    """Entropic optimal transport with an adaptive dustbin, batched over videos (Holmes Eq. 19-20).

    For video :math:`k` with valid queries :math:`1..M_q` and valid clips :math:`1..M_c`, let
    :math:`\\bar{\\mathbf S}` be the similarities (min-max normalised over the valid entries when
    ``normalize="minmax"``) and :math:`z` the ``dustbin_quantile`` order statistic of its entries
    (:math:`k = \\max(1, \\lfloor q\\,M_q M_c \\rfloor)`, smallest first, ``torch.kthvalue`` semantics).
    The transport runs between the rows :math:`[\\bar{\\mathbf S};\\ z\\mathbf 1^\\top]` (queries plus
    a dustbin row, Eq. 20 in the orientation of the release) and the clips:

    .. math::

        \\bar{\\mathbf Q}^\\star = \\arg\\max_{\\mathbf Q \\ge 0,\\ \\mathbf Q\\mathbf 1 = \\boldsymbol\\nu,\\
        \\mathbf Q^\\top \\mathbf 1 = \\boldsymbol\\mu}
        \\Big\\langle \\mathbf Q, \\begin{bmatrix}\\bar{\\mathbf S} \\\\ z\\mathbf 1^\\top\\end{bmatrix}
        \\Big\\rangle + \\varepsilon H(\\mathbf Q)

    (POT: ``ot.sinkhorn(nu, mu, -S_bar, reg=epsilon)``), solved by :func:`~evidential_prvr.functional.sinkhorn`.
    Clip marginals :math:`\\mu_j = 1/M_c`. Row marginals: ``marginals="release"`` gives each valid
    query :math:`1/(M_c + M_q)` and the dustbin :math:`M_c/(M_c + M_q)` (SuperGlue style, as in the
    official release); ``"uniform"`` gives the queries and the dustbin :math:`1/(M_q + 1)` each (the
    uniform marginals of App. B.5). ``dustbin_quantile=None`` disables the dustbin (plain OT of Eq. 19,
    queries :math:`1/M_q` each; the Table 3 "OT" ablation).

    Because the problem is balanced, the constant dustbin row only shifts the objective by
    :math:`z` times the dustbin's mass: the plan does not depend on :math:`z` (nor on
    ``dustbin_quantile``), only on the dustbin's flat profile and its marginal.

    Parameters
    ----------
    epsilon : float
        Entropic regularisation :math:`\\varepsilon > 0` (the release's ``pot_scale``).
    n_iters : int
        Sinkhorn iterations (maximum when ``tol`` is set).
    dustbin_quantile : float or None
        Quantile :math:`q \\in (0, 1)` of the similarities that sets the dustbin value; None: no dustbin.
    normalize : {"minmax", None}
        ``"minmax"`` maps each video's valid entries to [0, 1] by
        :math:`(x - \\min)/(\\max - \\min + 10^{-8})`; the release takes min and max over padded query
        slots too, this class over valid entries only (identical on unpadded batches).
    marginals : {"release", "uniform"}
        Row-marginal scheme, see above.
    tol : float or None
        Early-stopping tolerance on the L1 row-marginal violation, checked every 10 iterations.
    grad : {"detach", "autodiff"}
        ``"detach"``: plan, dustbin and assignment are stop-gradient targets (release);
        ``"autodiff"``: differentiate through normalisation, quantile and iterations.
    method : {"auto", "log", "kernel"}
        Sinkhorn iteration scheme (see :func:`~evidential_prvr.functional.sinkhorn`); ``"auto"``
        picks the batched-product kernel scheme whenever it is provably safe.
    """

    def __init__(
        self,
        epsilon: float = 0.1,
        n_iters: int = 50,
        dustbin_quantile: float | None = 0.3,
        normalize: str | None = "minmax",
        marginals: str = "release",
        tol: float | None = None,
        grad: str = "detach",
        method: str = "auto",
    ) -> None:
        super().__init__()
        check_positive(epsilon, "epsilon")
        check_positive_int(n_iters, "n_iters")
        if dustbin_quantile is not None:
            check_in_range(dustbin_quantile, "dustbin_quantile", 0.0, 1.0, low_inclusive=False, high_inclusive=False)
        check_choice(normalize, "normalize", FOT_NORMALIZATIONS)
        check_choice(marginals, "marginals", FOT_MARGINALS)
        if tol is not None:
            check_positive(tol, "tol")
        check_choice(grad, "grad", SINKHORN_GRADS)
        check_choice(method, "method", SINKHORN_METHODS)
        self.epsilon = float(epsilon)
        self.n_iters = n_iters
        self.dustbin_quantile = None if dustbin_quantile is None else float(dustbin_quantile)
        self.normalize = normalize
        self.marginals = marginals
        self.tol = None if tol is None else float(tol)
        self.grad = grad
        self.method = method

    @classmethod
    def from_preset(cls, preset: str) -> FlexibleOT:
        """Settings of the official release (``"release"``) or of the paper (``"paper"``).

        ``"release"``: :math:`\\varepsilon = 0.1`, 50 iterations, dustbin at the 0.3 quantile, min-max
        normalisation, SuperGlue-style marginals, stop-gradient plan (the same for TVR, ActivityNet
        and Charades). ``"paper"`` (our reading of §3.3 and App. B.5): the raw similarities (the
        paper mentions no normalisation), the dustbin at the bottom 30% of :math:`\\mathbf S`, uniform
        marginals (App. B.5), 50 iterations ("e.g. 50 steps"), :math:`\\varepsilon = 0.1` (not given in
        the paper; the release value) and a stop-gradient plan (a label, Eq. 17).
        """
        check_choice(preset, "preset", ("release", "paper"))
        if preset == "release":
            return cls(0.1, 50, 0.3, "minmax", "release", None, "detach")
        return cls(0.1, 50, 0.3, None, "uniform", None, "detach")

    def extra_repr(self) -> str:
        return (
            f"epsilon={self.epsilon}, n_iters={self.n_iters}, dustbin_quantile={self.dustbin_quantile}, "
            f"normalize={self.normalize!r}, marginals={self.marginals!r}, tol={self.tol}, grad={self.grad!r}, "
            f"method={self.method!r}"
        )

    def without_dustbin(self) -> FlexibleOT:
        """The same transport with the dustbin disabled (plain OT, Holmes Eq. 19)."""
        return FlexibleOT(
            self.epsilon, self.n_iters, None, self.normalize, self.marginals, self.tol, self.grad, self.method
        )

    def _validate(
        self, sim: object, query_mask: object, clip_mask: object
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        check_tensor(sim, "sim", ndim=3, floating=True)
        batch, mq, mc = sim.shape
        if batch < 1 or mq < 1 or mc < 1:
            raise ValueError(f"sim must be [B, Mq, Mc] with B, Mq, Mc >= 1, got shape {tuple(sim.shape)}")
        qmask = _as_mask(query_mask, "query_mask", (batch, mq), sim.device)
        cmask = _as_mask(clip_mask, "clip_mask", (batch, mc), sim.device)
        no_clip = ~cmask.any(dim=1)
        if bool(no_clip.any()):
            bad = torch.nonzero(no_clip).flatten()[:5].tolist()
            raise ValueError(f"clip_mask must mark at least one valid clip per video; videos {bad} have none")
        valid = qmask.unsqueeze(2) & cmask.unsqueeze(1)
        dense = query_mask is None and clip_mask is None
        checked = sim if dense else torch.where(valid, sim, torch.zeros((), dtype=sim.dtype, device=sim.device))
        if not bool(torch.isfinite(checked).all()):
            raise ValueError("sim must be finite at the valid (query, clip) entries, got NaN or Inf")
        return qmask, cmask, valid

    def _similarity(self, sim: torch.Tensor, valid: torch.Tensor, dense: bool = False) -> torch.Tensor:
        """The (normalised) similarities, padded entries set to 0 (``dense``: no entry is padded)."""
        if dense:
            if self.normalize != "minmax":
                return sim
            low = sim.amin(dim=(1, 2), keepdim=True)
            return (sim - low) / (sim.amax(dim=(1, 2), keepdim=True) - low + _MINMAX_EPS)
        zero = torch.zeros((), dtype=sim.dtype, device=sim.device)
        x = torch.where(valid, sim, zero)
        if self.normalize == "minmax":
            inf = torch.tensor(float("inf"), dtype=sim.dtype, device=sim.device)
            low = torch.where(valid, sim, inf).amin(dim=(1, 2), keepdim=True)
            high = torch.where(valid, sim, -inf).amax(dim=(1, 2), keepdim=True)
            empty = ~valid.any(dim=2).any(dim=1).view(-1, 1, 1)
            low = torch.where(empty, zero, low)
            high = torch.where(empty, zero, high)
            x = torch.where(valid, (x - low) / (high - low + _MINMAX_EPS), zero)
        return x

    def _dustbin_value(self, x: torch.Tensor, valid: torch.Tensor, dense: bool = False) -> torch.Tensor:
        """``[B]`` the k-th smallest valid entry, k = max(1, floor(q * n_valid)); 0 without valid entry."""
        batch = x.shape[0]
        if dense:
            flat = x.reshape(batch, -1)
        else:
            flat = torch.where(valid, x, torch.tensor(float("inf"), dtype=x.dtype, device=x.device))
            flat = flat.reshape(batch, -1)
        count = valid.reshape(batch, -1).sum(dim=1)
        wide = torch.float64 if x.device.type != "mps" else torch.float32
        k = torch.floor(self.dustbin_quantile * count.to(wide)).long().clamp_min(1)
        if flat.device.type == "cpu" and not flat.requires_grad:
            # NumPy's introselect is several times faster than torch.kthvalue/topk on CPU
            k_np = k.numpy()
            part = np.partition(flat.numpy(), np.unique(k_np) - 1, axis=1)
            z = torch.from_numpy(part[np.arange(batch), k_np - 1])
        else:
            z = self._kth_smallest_torch(flat, k)
        return torch.where(count > 0, z, torch.zeros_like(z))

    @staticmethod
    def _kth_smallest_torch(flat: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Row-wise k-th smallest with torch ops (differentiable, any device)."""
        k_min, k_max = (int(v) for v in torch.stack([k.min(), k.max()]).tolist())  # one host sync
        if k_min == k_max:  # every video has the same number of valid entries: one k for all rows
            z = torch.kthvalue(flat, k_max, dim=1).values
        else:  # the k_max smallest in order (padding is +inf, so it never comes before a valid entry)
            smallest = torch.topk(flat, k_max, dim=1, largest=False, sorted=True).values
            z = smallest.gather(1, (k - 1).unsqueeze(1)).squeeze(1)
        return z

    def _marginals(
        self, qmask: torch.Tensor, cmask: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Row marginals ``[B, Mq (+1)]`` and clip marginals ``[B, Mc]``; 0 at padded entries."""
        nq = qmask.sum(dim=1, keepdim=True).to(dtype)
        nc = cmask.sum(dim=1, keepdim=True).to(dtype)
        b = cmask.to(dtype) / nc
        if self.dustbin_quantile is None:
            return qmask.to(dtype) / nq.clamp_min(1.0), b
        if self.marginals == "release":
            query_mass, bin_mass = 1.0 / (nc + nq), nc / (nc + nq)
        else:
            query_mass = bin_mass = 1.0 / (nq + 1.0)
        a = torch.cat([qmask.to(dtype) * query_mass, bin_mass], dim=1)
        return a, b

    def forward(
        self, sim: torch.Tensor, query_mask: torch.Tensor | None = None, clip_mask: torch.Tensor | None = None
    ) -> FlexibleOTResult:
        """Solve the flexible transport of every video.

        Parameters
        ----------
        sim : torch.Tensor
            ``[B, Mq, Mc]`` similarities between each video's queries and its clips (any floating
            dtype; float16/bfloat16 are computed in float32). Must be finite at valid entries.
        query_mask : torch.Tensor, optional
            ``[B, Mq]`` True (or 1) for valid queries; default all valid. A video may have none.
        clip_mask : torch.Tensor, optional
            ``[B, Mc]`` True (or 1) for valid clips; default all valid. Every video needs one.

        Returns
        -------
        FlexibleOTResult
            Plan, dustbin mass, assignment, the similarities used and the dustbin values, all in
            the compute dtype; padded entries exactly 0.
        """
        qmask, cmask, valid = self._validate(sim, query_mask, clip_mask)
        return self._solve(sim, qmask, cmask, valid, dense=query_mask is None and clip_mask is None)

    def _solve(
        self, sim: torch.Tensor, qmask: torch.Tensor, cmask: torch.Tensor, valid: torch.Tensor, dense: bool = False
    ) -> FlexibleOTResult:
        """:meth:`forward` on validated inputs and boolean masks (``dense``: no padding at all)."""
        dtype = compute_dtype(sim)
        similarity = self._similarity(sim.to(dtype), valid, dense)
        x = similarity if self.grad == "autodiff" else similarity.detach()
        batch, mq, mc = x.shape
        a, b = self._marginals(qmask, cmask, dtype)
        if self.dustbin_quantile is None:
            scores = x
            z = torch.zeros(batch, dtype=dtype, device=x.device)
        else:
            z = self._dustbin_value(x, valid, dense)
            scores = torch.cat([x, z.view(batch, 1, 1).expand(batch, 1, mc)], dim=1)
        full = sinkhorn_unchecked(scores, a, b, self.epsilon, self.n_iters, self.tol, self.method, self.grad)
        plan = full[:, :mq]
        dustbin = full[:, mq] if self.dustbin_quantile is not None else torch.zeros_like(full[:, 0])
        row_mass = plan.sum(dim=2, keepdim=True)
        tiny = torch.finfo(dtype).tiny
        assignment = torch.where(row_mass > 0, plan / row_mass.clamp_min(tiny), torch.zeros_like(plan))
        return FlexibleOTResult(plan, dustbin, assignment, similarity, z)

    @torch.no_grad()
    def pot_problem(
        self, sim: torch.Tensor, query_mask: torch.Tensor | None = None, clip_mask: torch.Tensor | None = None
    ) -> list[POTProblem]:
        """Per video, the ``(a, b, M, reg)`` that ``ot.sinkhorn(a, b, M, reg, method="sinkhorn_log")``
        solves to the same plan as :meth:`forward` (at convergence; with the same number of
        iterations up to the update order), in float64 NumPy arrays over the valid entries only.

        This loops over videos in Python: it is a verification aid, not a training path.
        """
        qmask, cmask, valid = self._validate(sim, query_mask, clip_mask)
        x = self._similarity(sim.detach().to(torch.float64), valid)
        a_all, b_all = self._marginals(qmask, cmask, torch.float64)
        z = self._dustbin_value(x, valid) if self.dustbin_quantile is not None else None
        problems = []
        for k in range(x.shape[0]):
            qi = torch.nonzero(qmask[k]).flatten()
            ci = torch.nonzero(cmask[k]).flatten()
            gains = x[k][qi][:, ci]
            a = a_all[k][qi]
            if z is not None:
                gains = torch.cat([gains, z[k].expand(1, ci.numel())], dim=0)
                a = torch.cat([a, a_all[k][-1:]])
            problems.append(
                POTProblem(
                    a=a.cpu().numpy(),
                    b=b_all[k][ci].cpu().numpy(),
                    M=(-gains).cpu().numpy(),
                    reg=self.epsilon,
                    query_index=qi.cpu().numpy(),
                    clip_index=ci.cpu().numpy(),
                )
            )
        return problems
