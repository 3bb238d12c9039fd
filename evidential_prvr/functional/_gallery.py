"""Per-query evidential opinions over a retrieval gallery (Holmes Eq. 3-5, 7, 9, 16 at retrieval time).

During training Holmes forms a Dirichlet over the ``K`` videos of a batch. At retrieval time the
candidates of a query are the videos of a gallery of any size ``V``. :func:`gallery_opinion` forms the
opinion over the query's **top-k candidates** (by the ranking score) so that it does not depend on ``V``.

**Why not all V videos.** With :math:`K = V` every video adds at least :math:`1 + e_{\\min}` to the
Dirichlet strength :math:`S_i = \\sum_j (1 + e_{ij})`, so

.. math::

    u_i = \\frac{V}{S_i} = \\frac{1}{1 + \\bar e_i}, \\qquad
    \\bar e_i = \\frac{1}{V}\\sum_{j=1}^{V} e_{ij}
    \\;\\xrightarrow{V\\to\\infty}\\; \\frac{1}{1 + \\mathbb{E}[e_{\\text{background}}]},

the share of the few relevant videos in :math:`\\bar e_i` decays like :math:`1/V`, so u converges to a
constant set by the gallery's background and forgets the query (with ``tanh_scaling="inside"`` it is
pinned to :math:`[1/(1+e), 1/(1+e^{-1})]`), while the belief of the top candidate and the expected entropy
:math:`\\xi \\approx \\log V` are swamped by the irrelevant mass. A threshold on u, c or ξ fitted on a
128-video training batch therefore means something else on a 4,000-video gallery. With a fixed ``k`` the
opinion always has ``k`` candidates, the relevant videos keep their share of the evidence, and thresholds
carry over between galleries (a larger gallery only changes which videos reach the top-k).

**Query magnitude.** Eq. 1 scores are cosines, which discard the norm of the query embedding. A query the
encoder barely responds to (an under-determined one) then gets as much evidence as a clear one. An optional
per-query ``query_scale`` :math:`\\lambda_i > 0` (e.g. :math:`\\lVert q_i\\rVert / \\overline{\\lVert q\\rVert}`,
the embedding norm relative to a reference set) divides the temperature of Eq. 3 for that query,
:math:`\\tau_i = \\tau / \\lambda_i`: :math:`e_{ij} = \\exp(\\tanh(\\lambda_i s_{ij}/\\tau))` (``"inside"``) or
:math:`\\exp(\\lambda_i \\tanh(s_{ij})/\\tau)` (``"outside"``). The ranking is unchanged.

**Consistency without a label.** Eq. 7, :math:`c_i = \\max(0, \\mathbf{s}_i\\cdot\\mathbf{y}_i)`, needs the
annotated video. At retrieval time the label is replaced by a one-hot pseudo-label, giving two label-free
consistencies: with the top-1 candidate :math:`\\hat{\\jmath}_i` (the system's answer),
:math:`c_i = \\max(0, s_{i\\hat{\\jmath}_i})`, and with the best *alternative*, the runner-up
:math:`\\hat{\\jmath}^{(2)}_i`, :math:`r_i = \\max(0, s_{i\\hat{\\jmath}^{(2)}_i})` (0 when ``k = 1``). In Eq. 10 a low
consistency with the label marks a query whose evidence points elsewhere (polysemous); without a label
the same situation shows as a weak answer (low :math:`c`) or a strong alternative (high :math:`r`).
The labelled Eq. 7 is returned as well when a target is given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from evidential_prvr._checks import (
    check_choice,
    check_finite,
    check_index_vector,
    check_positive,
    check_positive_int,
    check_same_device,
    check_tensor,
    compute_dtype,
    should_validate,
)
from evidential_prvr.choices import TANH_SCALINGS
from evidential_prvr.functional._dempster_shafer import _ds_conflict
from evidential_prvr.functional._evidence import _expected_entropy, _opinion


@dataclass(frozen=True)
class BranchOpinion:
    """Per-query quantities of one Dirichlet opinion over the top-k candidates.

    Attributes
    ----------
    uncertainty : torch.Tensor
        Epistemic uncertainty :math:`u = K/S` ``[Q]`` (Holmes Eq. 5).
    aleatoric : torch.Tensor
        Expected entropy :math:`\\xi` ``[Q]`` in nats (Holmes Eq. 9).
    top_belief : torch.Tensor
        Belief mass of the top-1 candidate :math:`b_{i\\hat{\\jmath}}` ``[Q]`` (Eq. 5).
    consistency : torch.Tensor
        Label-free consistency :math:`\\max(0, s_{i\\hat{\\jmath}})` ``[Q]`` with the top-1 candidate.
    runner_up_consistency : torch.Tensor
        Label-free consistency :math:`\\max(0, s_{i\\hat{\\jmath}^{(2)}})` ``[Q]`` with the runner-up (0 if ``K = 1``).
    label_consistency : torch.Tensor or None
        Eq. 7 with the annotated video, :math:`\\max(0, s_{i y_i})` ``[Q]``, when a target was given.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import gallery_opinion
    >>> scores = torch.tensor([[0.9, 0.1, 0.0, -0.2], [0.5, 0.4, 0.0, 0.0]])
    >>> clip = gallery_opinion(scores, scores.clone(), k=2, target=torch.tensor([0, 0])).clip
    >>> clip.consistency.tolist(), clip.runner_up_consistency.tolist()  # with the top-1 and top-2 video
    ([0.8999999761581421, 0.5], [0.10000000149011612, 0.4000000059604645])
    >>> clip.label_consistency.tolist()  # Eq. 7 with the annotated video 0
    [0.8999999761581421, 0.5]

    References
    ----------
    Holmes: Revisiting Uncertainty: On Evidential Learning for Partially Relevant Video Retrieval, ICML 2026,
    §3.2, Eq. 5, 7 and 9.
    """

    uncertainty: torch.Tensor
    aleatoric: torch.Tensor
    top_belief: torch.Tensor
    consistency: torch.Tensor
    runner_up_consistency: torch.Tensor
    label_consistency: torch.Tensor | None = None


class _QueryCandidates:
    """Base of a result of ``Q`` queries with ``K`` ranked candidates each: its sizes, read from the ``[Q, K]``
    tensor of candidate indices that the subclass names in ``_ranked``."""

    def _ranked(self) -> torch.Tensor:
        raise NotImplementedError

    @property
    def num_queries(self) -> int:
        """Number of queries ``Q``."""
        return self._ranked().shape[0]

    @property
    def k(self) -> int:
        """Number of candidates per query ``K``."""
        return self._ranked().shape[1]


@dataclass(frozen=True)
class GalleryOpinion(_QueryCandidates):
    """Opinions of every query over its top-k gallery candidates, per branch and fused.

    Attributes
    ----------
    candidates : torch.Tensor
        ``int64 [Q, K]`` gallery indices of the candidates, best first (by the ranking score).
    candidate_scores : torch.Tensor
        ``[Q, K]`` ranking scores of the candidates, descending.
    frame : BranchOpinion
        The frame-scale opinion (consistency from the frame scores).
    clip : BranchOpinion
        The clip-scale opinion (consistency from the clip scores).
    fused : BranchOpinion
        The Dempster-Shafer fusion of the two (Eq. 16); its consistency uses the ranking score.
    fused_belief : torch.Tensor
        ``[Q, K]`` fused belief masses :math:`b^o` of the candidates.
    conflict : torch.Tensor
        ``[Q]`` conflict :math:`\\delta` between the branch opinions (Eq. 16).
    correct : torch.Tensor or None
        ``bool [Q]`` when a target was given: the annotated video ranks first with no other video
        scoring as high (the R@1 convention of :func:`evidential_prvr.metrics.recall_at_k`).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import gallery_opinion
    >>> scores = torch.tensor([[0.9, 0.1, 0.0, -0.2], [0.2, 0.5, 0.4, 0.0]])
    >>> op = gallery_opinion(scores, scores.clone(), k=2, target=torch.tensor([0, 0]))
    >>> op.num_queries, op.k, op.candidates.tolist(), op.correct.tolist()
    (2, 2, [[0, 1], [1, 2]], [True, False])
    >>> total = op.fused_belief.sum(dim=1) + op.fused.uncertainty  # belief masses and u add up to 1 (Eq. 5)
    >>> [round(v, 6) for v in total.tolist()]
    [1.0, 1.0]

    References
    ----------
    Holmes: Revisiting Uncertainty: On Evidential Learning for Partially Relevant Video Retrieval, ICML 2026,
    §3.2, Eq. 3-5, 7, 9 and 16.
    """

    candidates: torch.Tensor
    candidate_scores: torch.Tensor
    frame: BranchOpinion
    clip: BranchOpinion
    fused: BranchOpinion
    fused_belief: torch.Tensor
    conflict: torch.Tensor
    correct: torch.Tensor | None = None

    def _ranked(self) -> torch.Tensor:
        return self.candidates


def _check_inputs(
    frame_scores: object,
    clip_scores: object,
    ranking: object,
    query_scale: object,
    target: object,
    k: int | None,
    tau: float,
    tanh_scaling: str,
    query_chunk: int,
    validate: bool,
) -> int:
    check_tensor(frame_scores, "frame_scores", ndim=2, floating=True)
    check_tensor(clip_scores, "clip_scores", ndim=2, floating=True)
    assert isinstance(frame_scores, torch.Tensor) and isinstance(clip_scores, torch.Tensor)
    shape = tuple(frame_scores.shape)
    if shape[0] == 0 or shape[1] == 0:
        raise ValueError(f"frame_scores must hold at least one query and one video, got shape {shape}")
    if tuple(clip_scores.shape) != shape:
        raise ValueError(f"clip_scores must have the shape of frame_scores {shape}, got {tuple(clip_scores.shape)}")
    if ranking is not None:
        check_tensor(ranking, "ranking", ndim=2, floating=True)
        assert isinstance(ranking, torch.Tensor)
        if tuple(ranking.shape) != shape:
            raise ValueError(f"ranking must have the shape of frame_scores {shape}, got {tuple(ranking.shape)}")
    if query_scale is not None:
        check_tensor(query_scale, "query_scale", ndim=1, floating=True)
        assert isinstance(query_scale, torch.Tensor)
        if query_scale.shape[0] != shape[0]:
            raise ValueError(f"query_scale must have shape [{shape[0]}], got {tuple(query_scale.shape)}")
    if target is not None:
        check_tensor(target, "target", ndim=1)
        assert isinstance(target, torch.Tensor)
    check_same_device(frame_scores=frame_scores, clip_scores=clip_scores, ranking=ranking, query_scale=query_scale,
                      target=target)
    if k is not None:
        check_positive_int(k, "k")
    check_positive(tau, "tau")
    check_choice(tanh_scaling, "tanh_scaling", TANH_SCALINGS)
    check_positive_int(query_chunk, "query_chunk")
    if target is not None:
        assert isinstance(target, torch.Tensor)
        if target.is_floating_point() or target.is_complex() or target.dtype == torch.bool:
            raise TypeError(f"target must have an integer dtype (one video index per query), got {target.dtype}")
        if target.shape[0] != shape[0]:
            raise ValueError(f"target must have shape [{shape[0]}], got {tuple(target.shape)}")
    if validate:
        check_finite(frame_scores, "frame_scores")
        check_finite(clip_scores, "clip_scores")
        if ranking is not None:
            check_finite(ranking, "ranking")
        if query_scale is not None:
            check_finite(query_scale, "query_scale")
            if bool((query_scale <= 0).any()):
                raise ValueError(f"query_scale must be > 0 everywhere, got min {float(query_scale.min())}")
        if target is not None:
            check_index_vector(target, "target", length=shape[0], upper=shape[1])
    return shape[1] if k is None else min(k, shape[1])


def _evidence(sim: torch.Tensor, tau: float, tanh_scaling: str, scale: torch.Tensor | None) -> torch.Tensor:
    """Holmes Eq. 3 with an optional per-row inverse temperature ``scale``.

    The exponent is capped at :math:`\\tfrac12(\\log(\\text{float max}) - \\log K) - 1` so that the fused
    strength :math:`\\sum_j (1 + e^f_j + e^c_j + e^f_j e^c_j / K)` of ``K`` candidates stays finite; the cap
    only binds for ``"outside"`` with :math:`\\tau \\lesssim 0.025` in float32.
    """
    temperature: float | torch.Tensor = tau if scale is None else tau / scale.unsqueeze(-1)  # tau_i = tau / scale_i
    exponent = torch.tanh(sim / temperature) if tanh_scaling == "inside" else torch.tanh(sim) / temperature
    cap = 0.5 * (math.log(torch.finfo(sim.dtype).max) - math.log(sim.shape[-1])) - 1.0
    return torch.exp(exponent.clamp_max(cap))


def _branch(
    evidence: torch.Tensor, sim: torch.Tensor, label_sim: torch.Tensor | None
) -> tuple[BranchOpinion, torch.Tensor]:
    """Eq. 4-5, 9 of one ``[q, K]`` evidence block; returns the opinion and its belief masses."""
    alpha = evidence + 1.0
    opinion = _opinion(alpha)
    belief, uncertainty = opinion.belief, opinion.uncertainty
    aleatoric = _expected_entropy(alpha)
    labelled = None if label_sim is None else label_sim.clamp_min(0.0)
    runner_up = sim[:, 1].clamp_min(0.0) if sim.shape[1] > 1 else torch.zeros_like(sim[:, 0])
    return BranchOpinion(uncertainty, aleatoric, belief[:, 0], sim[:, 0].clamp_min(0.0), runner_up, labelled), belief


def _concat(parts: list[BranchOpinion]) -> BranchOpinion:
    labelled = [p.label_consistency for p in parts]
    return BranchOpinion(
        torch.cat([p.uncertainty for p in parts]),
        torch.cat([p.aleatoric for p in parts]),
        torch.cat([p.top_belief for p in parts]),
        torch.cat([p.consistency for p in parts]),
        torch.cat([p.runner_up_consistency for p in parts]),
        None if labelled[0] is None else torch.cat(labelled),  # type: ignore[arg-type]
    )


def gallery_opinion(
    frame_scores: torch.Tensor,
    clip_scores: torch.Tensor,
    *,
    k: int | None = 10,
    ranking: torch.Tensor | None = None,
    query_scale: torch.Tensor | None = None,
    target: torch.Tensor | None = None,
    tau: float = 0.1,
    tanh_scaling: str = "inside",
    query_chunk: int = 1024,
    validate_args: bool | None = None,
) -> GalleryOpinion:
    """Frame, clip and fused Dirichlet opinions of every query over its top-k gallery candidates.

    For query :math:`i` let :math:`\\mathcal{C}_i` be the ``k`` videos with the highest ranking score.
    Per branch :math:`b \\in \\{f, c\\}`, on those candidates only (Holmes Eq. 3-5, 9):

    .. math::

        e^b_{ij} = \\exp\\big(\\tanh(s^b_{ij}/\\tau_i)\\big), \\quad \\tau_i = \\tau/\\lambda_i, \\quad
        \\alpha^b_{ij} = e^b_{ij} + 1, \\quad S^b_i = \\sum_{j\\in\\mathcal{C}_i} \\alpha^b_{ij}, \\quad
        u^b_i = \\frac{K}{S^b_i}, \\quad b^b_{ij} = \\frac{e^b_{ij}}{S^b_i},

    .. math::

        \\xi^b_i = \\sum_{j\\in\\mathcal{C}_i} \\frac{\\alpha^b_{ij}}{S^b_i}
        \\big(\\psi(S^b_i + 1) - \\psi(\\alpha^b_{ij} + 1)\\big),

    (``"outside"``: :math:`e = \\exp(\\tanh(s)/\\tau_i)`), and the fused opinion by Dempster's rule
    (Eq. 16) in its closed form :math:`\\alpha^o = 1 + e^f + e^c + e^f e^c / K`. Consistency is label-free,
    :math:`c_i = \\max(0, s_{i\\hat{\\jmath}_i})` for the top-1 candidate and :math:`r_i` for the runner-up, and
    Eq. 7, :math:`\\max(0, s_{i y_i})`, when ``target`` is given. See the module docstring for why ``k`` is fixed
    rather than the gallery size, and for ``query_scale``.

    The queries are processed ``query_chunk`` at a time (peak temporary memory
    :math:`O(\\text{query\\_chunk}\\cdot V)` for the top-k, :math:`O(Q K)` for the outputs); there is no
    Python loop over queries. Differentiable with respect to the scores (the candidate set is a
    piecewise-constant choice). Half-precision inputs are computed in float32.

    Parameters
    ----------
    frame_scores, clip_scores : torch.Tensor
        ``[Q, V]`` frame- and clip-scale similarities (Holmes Eq. 1), finite.
    k : int or None
        Candidates per query (capped at ``V``); ``None`` uses all ``V`` videos (the batch form of the paper).
    ranking : torch.Tensor, optional
        ``[Q, V]`` scores that rank the gallery (Eq. 2); default the mean of the two branches.
    query_scale : torch.Tensor, optional
        ``[Q]`` positive per-query inverse temperature :math:`\\lambda_i`
        (:math:`\\tau_i = \\tau/\\lambda_i`, default 1).
    target : torch.Tensor, optional
        ``int64 [Q]`` annotated video of each query; adds Eq. 7 and the ``correct`` flags.
    tau : float
        Evidence temperature :math:`\\tau > 0` (paper 0.1).
    tanh_scaling : {"inside", "outside"}
        Evidence form (paper ``"inside"``, release ``"outside"``).
    query_chunk : int
        Queries processed at a time.
    validate_args : bool, optional
        Value checks (finite scores, positive scales, target range); ``None`` follows the global switch.

    Returns
    -------
    GalleryOpinion

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import gallery_opinion
    >>> frame = torch.tensor([[0.9, 0.1, 0.0, -0.2], [0.3, 0.3, 0.3, 0.3]])
    >>> op = gallery_opinion(frame, frame.clone(), k=3)
    >>> op.candidates[0].tolist()
    [0, 1, 2]
    >>> bool(op.fused.aleatoric[0] < op.fused.aleatoric[1])  # one clear match vs. four equal ones
    True

    References
    ----------
    Holmes: Revisiting Uncertainty: On Evidential Learning for Partially Relevant Video Retrieval, ICML 2026,
    §3.2, Eq. 3-5, 7, 9 and 16.
    """
    validate = should_validate(validate_args)
    k_eff = _check_inputs(frame_scores, clip_scores, ranking, query_scale, target, k, tau, tanh_scaling, query_chunk,
                          validate)
    dtype = torch.promote_types(compute_dtype(frame_scores), compute_dtype(clip_scores))
    if ranking is not None:
        dtype = torch.promote_types(dtype, compute_dtype(ranking))
    if query_scale is not None:
        dtype = torch.promote_types(dtype, compute_dtype(query_scale))
    parts: dict[str, list] = {name: [] for name in ("idx", "top", "f", "c", "o", "bo", "delta", "correct")}
    for start in range(0, frame_scores.shape[0], query_chunk):
        rows = slice(start, start + query_chunk)
        f = frame_scores[rows].to(dtype)
        c = clip_scores[rows].to(dtype)
        r = 0.5 * (f + c) if ranking is None else ranking[rows].to(dtype)
        top = torch.topk(r, k_eff, dim=1, largest=True, sorted=True)
        fk, ck = f.gather(1, top.indices), c.gather(1, top.indices)
        scale = None if query_scale is None else query_scale[rows].to(dtype)
        ef, ec = _evidence(fk, tau, tanh_scaling, scale), _evidence(ck, tau, tanh_scaling, scale)
        t = None if target is None else target[rows].unsqueeze(1)
        labelled = (None, None, None) if t is None else tuple(x.gather(1, t)[:, 0] for x in (f, c, r))
        frame_op, belief_f = _branch(ef, fk, labelled[0])
        clip_op, belief_c = _branch(ec, ck, labelled[1])
        fused_op, belief_o = _branch(ef + ec + ef * ec / k_eff, top.values, labelled[2])
        parts["idx"].append(top.indices)
        parts["top"].append(top.values)
        parts["f"].append(frame_op)
        parts["c"].append(clip_op)
        parts["o"].append(fused_op)
        parts["bo"].append(belief_o)
        parts["delta"].append(_ds_conflict(belief_f, belief_c))
        if t is not None:
            # R@1 convention of recall_at_k: ties with the annotated video count against the model
            parts["correct"].append((r >= r.gather(1, t)).sum(dim=1) == 1)
    return GalleryOpinion(
        candidates=torch.cat(parts["idx"]),
        candidate_scores=torch.cat(parts["top"]),
        frame=_concat(parts["f"]),
        clip=_concat(parts["c"]),
        fused=_concat(parts["o"]),
        fused_belief=torch.cat(parts["bo"]),
        conflict=torch.cat(parts["delta"]),
        correct=torch.cat(parts["correct"]) if target is not None else None,
    )
