"""The module of the selective confidences (:func:`evidential_prvr.functional.selective_confidence`)."""

from __future__ import annotations

import torch
from torch import nn

from evidential_prvr._checks import check_choice, should_validate
from evidential_prvr.choices import (
    CONFIDENCES,
    Confidence,
)
from evidential_prvr.functional._gallery import GalleryOpinion
from evidential_prvr.functional._selective import selective_confidence

__all__ = ["SelectiveConfidence"]


class SelectiveConfidence(nn.Module):
    """A named per-query confidence for selective retrieval (higher = more trusted).

    ``forward`` is :func:`evidential_prvr.functional.selective_confidence` with ``kind`` fixed.

    Parameters
    ----------
    kind : {"neg_u", "top_belief", "margin", "neg_xi", "max_score", "kl_margin"}
        One of :data:`evidential_prvr.uncertainty.CONFIDENCES`: ``"neg_u"`` (fused :math:`-u`),
        ``"top_belief"`` (fused belief of the top-1 video), ``"neg_xi"`` (fused :math:`-\\xi`),
        ``"margin"`` (top-1 minus top-2 score), ``"max_score"`` or ``"kl_margin"`` (DAB, needs ``kl_cost``).
    validate_args : bool, optional
        Value checks (host synchronisations); ``None`` follows :func:`evidential_prvr.set_default_validate_args`.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.uncertainty import GalleryUncertainty, SelectiveConfidence
    >>> scores = torch.tensor([[0.9, 0.1, 0.0], [0.5, 0.5, 0.4]])
    >>> op = GalleryUncertainty(k=3)(scores, scores)
    >>> SelectiveConfidence("max_score")(op).tolist()
    [0.8999999761581421, 0.5]

    References
    ----------
    Holmes: Revisiting Uncertainty: On Evidential Learning for Partially Relevant Video Retrieval, ICML 2026,
    Eq. 5, 9, 16.
    """

    def __init__(self, kind: Confidence = "top_belief", validate_args: bool | None = None) -> None:
        super().__init__()
        check_choice(kind, "kind", CONFIDENCES)
        should_validate(validate_args)
        self.kind = kind
        self.validate_args = validate_args

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}"

    def forward(self, opinion: GalleryOpinion, kl_cost: torch.Tensor | None = None) -> torch.Tensor:
        """``[Q]`` confidences of ``opinion``."""
        return selective_confidence(opinion, self.kind, kl_cost=kl_cost, validate_args=self.validate_args)
