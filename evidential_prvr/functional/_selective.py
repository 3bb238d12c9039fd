"""Confidence scores for selective retrieval: which queries to answer and which to hold back.

Every score is oriented so that **higher = more trusted**; rank queries by it and evaluate with
:func:`evidential_prvr.metrics.aurc` and friends.
"""

from __future__ import annotations

import torch

from evidential_prvr._checks import check_choice, check_finite, check_tensor, should_validate
from evidential_prvr.choices import CONFIDENCES, Confidence
from evidential_prvr.functional._gallery import GalleryOpinion
from evidential_prvr.functional._gaussian import kl_margin

__all__ = [ "CONFIDENCES", "EVIDENTIAL_CONFIDENCES", "selective_confidence"]


EVIDENTIAL_CONFIDENCES: tuple[Confidence, ...] = ("neg_u", "top_belief", "neg_xi")
"""The confidences read off the fused Dirichlet opinion (the others use the raw scores or DAB costs)."""


def selective_confidence(
    opinion: GalleryOpinion,
    kind: Confidence,
    *,
    kl_cost: torch.Tensor | None = None,
    validate_args: bool | None = None,
) -> torch.Tensor:
    """One confidence per query from a gallery opinion (higher = more trusted).

    With the fused opinion of :func:`gallery_opinion` (Holmes Eq. 5, 9, 16) and the candidates' ranking
    scores :math:`r_{i(1)} \\ge r_{i(2)} \\ge \\dots`:

    .. math::

        \\kappa^{\\text{neg\\_u}}_i = -u^o_i, \\quad
        \\kappa^{\\text{top\\_belief}}_i = b^o_{i(1)}, \\quad
        \\kappa^{\\text{neg\\_xi}}_i = -\\xi^o_i, \\quad
        \\kappa^{\\text{margin}}_i = r_{i(1)} - r_{i(2)}, \\quad
        \\kappa^{\\text{max\\_score}}_i = r_{i(1)},

    and DAB's ``"kl_margin"`` :math:`C_{i,(2)} - C_{i,(1)}` (second-lowest minus lowest KL cost, see
    :func:`evidential_prvr.functional.kl_margin`) when Gaussian embeddings give a cost
    ``kl_cost = pairwise_gaussian_kl(video_mu, video_logvar, text_mu, text_logvar).T``.

    ``neg_u`` ranks by the total amount of evidence, ``top_belief`` by the share of it (and of the
    uncertainty mass) that goes to the answer, ``neg_xi`` by how concentrated the Dirichlet is.

    Parameters
    ----------
    opinion : GalleryOpinion
        Output of :func:`evidential_prvr.functional.gallery_opinion`.
    kind : str
        One of :data:`~evidential_prvr.uncertainty.CONFIDENCES`.
    kl_cost : torch.Tensor, optional
        ``[Q, V]`` DAB costs (lower = better), required for ``"kl_margin"`` only.
    validate_args : bool, optional
        Finite-cost check for ``"kl_margin"``; ``None`` follows the global switch.

    Returns
    -------
    torch.Tensor
        ``[Q]`` confidences.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import gallery_opinion, selective_confidence
    >>> scores = torch.tensor([[0.9, 0.1, 0.0], [0.5, 0.5, 0.4]])
    >>> op = gallery_opinion(scores, scores, k=3)
    >>> [round(v, 4) for v in selective_confidence(op, "margin").tolist()]
    [0.8, 0.0]
    >>> bool(selective_confidence(op, "top_belief")[0] > selective_confidence(op, "top_belief")[1])
    True

    References
    ----------
    Holmes: Revisiting Uncertainty: On Evidential Learning for Partially Relevant Video Retrieval, ICML 2026,
    Eq. 5, 9, 16; DAB's KL margin for selective retrieval.
    """
    if not isinstance(opinion, GalleryOpinion):
        raise TypeError(f"opinion must be a GalleryOpinion, got {type(opinion).__name__}")
    check_choice(kind, "kind", CONFIDENCES)
    if kind != "kl_margin" and kl_cost is not None:
        raise ValueError(f"kl_cost is only used by kind='kl_margin', got kind={kind!r}")
    if kind == "neg_u":
        return -opinion.fused.uncertainty
    if kind == "top_belief":
        return opinion.fused.top_belief
    if kind == "neg_xi":
        return -opinion.fused.aleatoric
    if kind == "max_score":
        return opinion.candidate_scores[:, 0]
    if kind == "margin":
        if opinion.k < 2:
            raise ValueError(f"kind='margin' needs at least 2 candidates per query, got k={opinion.k}")
        return opinion.candidate_scores[:, 0] - opinion.candidate_scores[:, 1]
    if kl_cost is None:
        raise ValueError("kind='kl_margin' needs kl_cost, the [Q, V] DAB cost of the Gaussian embeddings")
    check_tensor(kl_cost, "kl_cost", ndim=2, floating=True)
    if kl_cost.shape[0] != opinion.num_queries:
        raise ValueError(f"kl_cost must have {opinion.num_queries} rows (one per query), got {tuple(kl_cost.shape)}")
    if kl_cost.device != opinion.candidates.device:
        raise ValueError(
            f"kl_cost and opinion must be on the same device, got {kl_cost.device} and {opinion.candidates.device}"
        )
    if should_validate(validate_args):
        check_finite(kl_cost, "kl_cost")
    return kl_margin(kl_cost, validate_args=False)  # checked above
