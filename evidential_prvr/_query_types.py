"""The module of gallery query identification (:func:`evidential_prvr.functional.identify_query_types`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from evidential_prvr._checks import check_choice, check_in_range, check_positive_int, should_validate
from evidential_prvr.choices import (
    ENTROPY_MEDIANS,
    IDENTIFICATION_RULES,
    EntropyMedian,
    IdentificationRule,
)
from evidential_prvr.functional._gallery import GalleryOpinion
from evidential_prvr.functional._query_types import (
    QueryTypeThresholds,
    batch_rule_query_types,
    fit_query_thresholds,
    identify_query_types,
)

__all__ = ["GalleryIdentification", "GalleryQueryIdentifier"]


@dataclass(frozen=True)
class GalleryIdentification:
    """Query types of a set of gallery queries.

    Attributes
    ----------
    query_type : torch.Tensor
        ``int64 [Q]`` :class:`~evidential_prvr.QueryType` codes (0 precise, 1 polysemous, 2 under-determined).
    rule : str
        ``"thresholds"`` or ``"batch"``.
    thresholds : QueryTypeThresholds or None
        The thresholds used (``None`` for the batch rule, whose thresholds depend on the queries passed).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr import GalleryQueryIdentifier, GalleryUncertainty, QueryType
    >>> from evidential_prvr.uncertainty import QueryTypeThresholds
    >>> scores = torch.tensor([[0.9, 0.0, 0.0], [0.6, 0.6, 0.6], [0.05, 0.0, 0.02]])
    >>> op = GalleryUncertainty(k=3)(scores, scores)
    >>> ident = GalleryQueryIdentifier(QueryTypeThresholds(uncertainty=0.2, runner_up=0.5))(op)
    >>> ident.rule, [QueryType(int(t)).name for t in ident.query_type]
    ('thresholds', ['PRECISE', 'POLYSEMOUS', 'UNDERDETERMINED'])
    >>> ident.thresholds.uncertainty, ident.thresholds.runner_up
    (0.2, 0.5)

    References
    ----------
    Holmes: Revisiting Uncertainty: On Evidential Learning for Partially Relevant Video Retrieval, ICML 2026,
    §3.2, Eq. 10-14 (the query types).
    """

    query_type: torch.Tensor
    rule: IdentificationRule
    thresholds: QueryTypeThresholds | None


class GalleryQueryIdentifier(nn.Module):
    """Precise / polysemous / under-determined identification of gallery queries (Holmes Eq. 10-14).

    Two rules:

    ``"thresholds"``
        :func:`~evidential_prvr.functional.identify_query_types` on the **fused** opinion's u, ξ and
        label-free consistencies with the answer (c) and with the runner-up (r), with fixed
        :class:`~evidential_prvr.uncertainty.QueryTypeThresholds` given at construction or chosen on a
        validation split by :meth:`fit`. A query's type depends only on its own
        opinion, so the rule carries over from one split or gallery to another.
    ``"batch"``
        The paper's adaptive rule (:func:`~evidential_prvr.functional.batch_rule_query_types`): per branch
        thresholds from the correctly matched queries of the call (Eq. 11), the median refinement (Eq. 12)
        and the uncertainty-dominant fusion (Eq. 14). Needs an opinion computed with ``target``.

    The thresholds are saved in the ``state_dict`` (as extra state).

    Parameters
    ----------
    thresholds : QueryTypeThresholds, optional
        For the ``"thresholds"`` rule; default: all tests off (everything precise) until :meth:`fit`.
    rule : {"thresholds", "batch"}
        See above.
    beta : float
        :math:`\\beta` of Eq. 11 (batch rule).
    entropy_median : {"candidates", "batch"}
        Median rule of Eq. 12 (batch rule).
    grid : int
        Quantile levels per threshold searched by :meth:`fit`.
    validate_args : bool, optional
        Value checks (host synchronisations); ``None`` follows :func:`evidential_prvr.set_default_validate_args`.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.uncertainty import GalleryQueryIdentifier, GalleryUncertainty
    >>> scores = torch.tensor([[0.9, 0.0, 0.0], [0.6, 0.6, 0.6], [0.05, 0.0, 0.02]])
    >>> op = GalleryUncertainty(k=3)(scores, scores)
    >>> ident = GalleryQueryIdentifier()
    >>> _ = ident.fit(op, query_types=torch.tensor([0, 1, 2]), grid=5)
    >>> ident(op).query_type.tolist()
    [0, 1, 2]

    References
    ----------
    Holmes: Revisiting Uncertainty: On Evidential Learning for Partially Relevant Video Retrieval, ICML 2026,
    §3.2, Eq. 10-14.
    """

    def __init__(
        self,
        thresholds: QueryTypeThresholds | None = None,
        *,
        rule: IdentificationRule = "thresholds",
        beta: float = 0.3,
        entropy_median: EntropyMedian = "candidates",
        grid: int = 33,
        validate_args: bool | None = None,
    ) -> None:
        super().__init__()
        check_choice(rule, "rule", IDENTIFICATION_RULES)
        if thresholds is not None and not isinstance(thresholds, QueryTypeThresholds):
            raise TypeError(f"thresholds must be a QueryTypeThresholds, got {type(thresholds).__name__}")
        check_in_range(beta, "beta", 0.0, 1.0)
        check_choice(entropy_median, "entropy_median", ENTROPY_MEDIANS)
        check_positive_int(grid, "grid")
        should_validate(validate_args)
        self.rule = rule
        self.thresholds = thresholds if thresholds is not None else QueryTypeThresholds()
        self.beta = float(beta)
        self.entropy_median = entropy_median
        self.grid = grid
        self.validate_args = validate_args

    def extra_repr(self) -> str:
        if self.rule == "batch":
            return f"rule='batch', beta={self.beta}, entropy_median={self.entropy_median!r}"
        return f"rule='thresholds', thresholds={self.thresholds}"

    def get_extra_state(self) -> dict[str, Any]:
        return {"rule": self.rule, "thresholds": self.thresholds.to_dict()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        check_choice(state.get("rule"), "rule", IDENTIFICATION_RULES)
        self.rule = state["rule"]
        self.thresholds = QueryTypeThresholds(**state["thresholds"])

    @staticmethod
    def _opinion(opinion: object) -> GalleryOpinion:
        if not isinstance(opinion, GalleryOpinion):
            raise TypeError(f"opinion must be a GalleryOpinion, got {type(opinion).__name__}")
        return opinion

    def fit(
        self, opinion: GalleryOpinion, *, query_types: torch.Tensor | None = None, grid: int | None = None
    ) -> QueryTypeThresholds:
        """Choose the thresholds on a validation opinion and switch to the ``"thresholds"`` rule.

        With ``query_types`` the macro-F1 against them is maximised; otherwise the opinion's ``correct``
        flags (compute it with ``target=``) drive a sequential Youden fit. See
        :func:`evidential_prvr.functional.fit_query_thresholds`.

        Returns
        -------
        QueryTypeThresholds
            The fitted thresholds (also stored on the module).
        """
        op = self._opinion(opinion)
        if query_types is None and op.correct is None:
            raise ValueError("fit needs query_types, or an opinion computed with target= (its correct flags)")
        fused = op.fused
        self.thresholds = fit_query_thresholds(
            fused.uncertainty, fused.consistency, fused.aleatoric, runner_up=fused.runner_up_consistency,
            query_types=query_types,
            correct=None if query_types is not None else op.correct, grid=self.grid if grid is None else grid,
            validate_args=self.validate_args,
        )
        self.rule = "thresholds"
        return self.thresholds

    def forward(self, opinion: GalleryOpinion) -> GalleryIdentification:
        """Identify the queries of ``opinion`` with the current rule."""
        op = self._opinion(opinion)
        if self.rule == "batch":
            types = batch_rule_query_types(op, beta=self.beta, entropy_median=self.entropy_median)
            return GalleryIdentification(types, "batch", None)
        fused = op.fused
        types = identify_query_types(fused.uncertainty, fused.consistency, fused.aleatoric, self.thresholds,
                                     runner_up=fused.runner_up_consistency, validate_args=self.validate_args)
        return GalleryIdentification(types, "thresholds", self.thresholds)
