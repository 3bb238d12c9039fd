"""Uncertainty at retrieval time: gallery opinions, query identification and selective confidences.

Holmes learns evidential opinions (§3.2) but uses them only inside its training loss. These modules put
them to work when a trained model answers queries against a gallery:

* :class:`GalleryUncertainty` -- frame, clip and fused Dirichlet opinions of every query over its top-k
  candidates (Eq. 3-5, 7, 9, 16), independent of the gallery's size;
* :class:`GalleryQueryIdentifier` -- precise / polysemous / under-determined per query with fixed
  thresholds, thresholds fitted on a validation split (:meth:`GalleryQueryIdentifier.fit`), or the paper's
  in-batch rule (Eq. 10-14);
* :class:`SelectiveConfidence` -- one named confidence per query for selective retrieval, evaluated with
  :func:`evidential_prvr.metrics.aurc` and friends.

Each module holds its hyperparameters and its ``forward`` is one call of the pure function of
:mod:`evidential_prvr.functional` (:func:`~evidential_prvr.functional.gallery_opinion`,
:func:`~evidential_prvr.functional.identify_query_types`,
:func:`~evidential_prvr.functional.selective_confidence`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from evidential_prvr._checks import check_choice, check_in_range, check_positive, check_positive_int, should_validate
from evidential_prvr._module_bases import PresetModule
from evidential_prvr.choices import (
    CONFIDENCES,
    ENTROPY_MEDIANS,
    IDENTIFICATION_RULES,
    TANH_SCALINGS,
    Confidence,
    DatasetName,
    EntropyMedian,
    IdentificationRule,
    Preset,
    TanhScaling,
)
from evidential_prvr.functional._gallery import BranchOpinion, GalleryOpinion, gallery_opinion
from evidential_prvr.functional._query_types import (
    QueryTypeThresholds,
    batch_rule_query_types,
    fit_query_thresholds,
    identify_query_types,
)
from evidential_prvr.functional._selective import EVIDENTIAL_CONFIDENCES, selective_confidence
from evidential_prvr.presets import module_settings

if TYPE_CHECKING:
    from evidential_prvr.search import SearchResult

__all__ = [
    "GalleryUncertainty",
    "GalleryQueryIdentifier",
    "GalleryIdentification",
    "SelectiveConfidence",
    "GalleryOpinion",
    "BranchOpinion",
    "QueryTypeThresholds",
    "CONFIDENCES",
    "EVIDENTIAL_CONFIDENCES",
    "IDENTIFICATION_RULES",
]


class GalleryUncertainty(PresetModule):
    """Per-query Dirichlet opinions over the top-k gallery candidates (Holmes Eq. 3-5, 7, 9, 16).

    ``forward`` is :func:`evidential_prvr.functional.gallery_opinion` with this module's hyperparameters.
    :meth:`from_preset` takes τ and the tanh scaling of the preset's L_inter (the evidence the model was
    trained with).

    Parameters
    ----------
    k : int or None
        Candidates per query (``None``: the whole gallery; see the functional's notes on why a fixed ``k``
        makes the opinion independent of the gallery's size).
    tau : float
        Evidence temperature of Eq. 3.
    tanh_scaling : {"inside", "outside"}
        Evidence form of Eq. 3 (paper / release).
    query_chunk : int
        Queries processed at a time (bounds the temporary memory).
    validate_args : bool, optional
        Value checks (host synchronisations); ``None`` follows :func:`evidential_prvr.set_default_validate_args`.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.uncertainty import GalleryUncertainty
    >>> scores = torch.tensor([[0.9, 0.1, 0.0], [0.4, 0.4, 0.4]])
    >>> op = GalleryUncertainty(k=2)(scores, scores)
    >>> op.candidates.shape, op.fused.uncertainty.shape
    (torch.Size([2, 2]), torch.Size([2]))

    References
    ----------
    Holmes: Revisiting Uncertainty: On Evidential Learning for Partially Relevant Video Retrieval, ICML 2026,
    §3.2.
    """

    def __init__(
        self,
        k: int | None = 10,
        tau: float = 0.1,
        tanh_scaling: TanhScaling = "inside",
        query_chunk: int = 1024,
        validate_args: bool | None = None,
    ) -> None:
        super().__init__()
        if k is not None:
            check_positive_int(k, "k")
        check_positive(tau, "tau")
        check_choice(tanh_scaling, "tanh_scaling", TANH_SCALINGS)
        check_positive_int(query_chunk, "query_chunk")
        should_validate(validate_args)
        self.k = k
        self.tau = float(tau)
        self.tanh_scaling = tanh_scaling
        self.query_chunk = query_chunk
        self.validate_args = validate_args

    @classmethod
    def _preset_arguments(cls, preset: Preset, dataset: DatasetName | None) -> dict[str, Any]:
        inter = module_settings(preset, dataset).inter  # the evidence form of the training loss
        return {"tau": inter.tau, "tanh_scaling": inter.tanh_scaling}

    def extra_repr(self) -> str:
        return f"k={self.k}, tau={self.tau}, tanh_scaling={self.tanh_scaling!r}, query_chunk={self.query_chunk}"

    def forward(
        self,
        frame_scores: torch.Tensor,
        clip_scores: torch.Tensor,
        *,
        ranking: torch.Tensor | None = None,
        query_scale: torch.Tensor | None = None,
        target: torch.Tensor | None = None,
    ) -> GalleryOpinion:
        """Opinions of the ``[Q, V]`` scores; see :func:`evidential_prvr.functional.gallery_opinion`."""
        return gallery_opinion(
            frame_scores, clip_scores, k=self.k, ranking=ranking, query_scale=query_scale, target=target,
            tau=self.tau, tanh_scaling=self.tanh_scaling, query_chunk=self.query_chunk,
            validate_args=self.validate_args,
        )

    def search_opinion(self, result: SearchResult, *, query_scale: torch.Tensor | None = None) -> GalleryOpinion:
        """Opinions over the top-k of a gallery search (:mod:`evidential_prvr.search`), never a ``[Q, V]`` matrix.

        The same opinion as :meth:`forward` on the full score matrices, from the ranked candidates of
        :func:`~evidential_prvr.search.gallery_search` (exact, streamed) or of
        :meth:`~evidential_prvr.search.ClipIndex.search` (approximate candidates, exact scores): the top
        ``k`` of the search are the opinion's candidates, the target's scores of a search run with
        ``target=`` give Eq. 7 and the ``correct`` flags (the target ranks first, no other video as high).
        A gallery without frames uses the clip scores for both branches.

        Parameters
        ----------
        result : SearchResult
            A search with ``k >= self.k`` (``self.k=None``: one that kept every video), and ``k >= 2`` when
            it has targets (the runner-up decides ties for ``correct``).
        query_scale : torch.Tensor, optional
            ``[Q]`` per-query inverse temperature, as in :meth:`forward`.

        Examples
        --------
        >>> import torch
        >>> from evidential_prvr import GalleryUncertainty
        >>> from evidential_prvr.search import gallery_search
        >>> clips = torch.randn(30, 3, 8, generator=torch.Generator().manual_seed(0))
        >>> queries, target = clips[[4, 9], 0], torch.tensor([4, 9])
        >>> result = gallery_search(queries, clips, k=11, video_chunk=7, target=target)
        >>> op = GalleryUncertainty(k=10).search_opinion(result)
        >>> op.candidates[:, 0].tolist(), op.correct.tolist()
        ([4, 9], [True, True])
        """
        from evidential_prvr.search import SearchResult

        if not isinstance(result, SearchResult):
            raise TypeError(f"result must be a SearchResult, got {type(result).__name__}")
        if self.k is None and result.k < result.num_videos:
            raise ValueError(f"k=None takes every video as a candidate: search with k >= {result.num_videos} "
                             f"(the gallery), got k = {result.k}")
        k = result.k if self.k is None else min(self.k, result.num_videos)
        if result.k < k:
            raise ValueError(f"search_opinion with k = {k} needs a search with k >= {k}, got k = {result.k}")
        has_target = result.target is not None and result.target_scores is not None
        if has_target and result.k < 2 and result.num_videos > 1:
            raise ValueError("search_opinion with targets needs a search with k >= 2 (the runner-up decides "
                             f"whether the target ranks first alone), got k = {result.k}")
        indices = result.indices[:, :k]
        if bool((indices < 0).any()):
            short = torch.nonzero((indices < 0).any(dim=1)).flatten()[:5].tolist()
            raise ValueError(f"queries {short} have fewer than k = {k} retrieved videos; search with more "
                             "candidates (an IVF index: a larger nprobe)")
        clip = result.clip_scores[:, :k]
        frame = clip if result.frame_scores is None else result.frame_scores[:, :k]
        op = gallery_opinion(frame, clip, k=None, ranking=result.scores[:, :k], query_scale=query_scale,
                             tau=self.tau, tanh_scaling=self.tanh_scaling, query_chunk=self.query_chunk,
                             validate_args=self.validate_args)
        op = replace(op, candidates=indices.gather(1, op.candidates))
        if not has_target:
            return op
        assert result.target_clip_scores is not None and result.target_scores is not None
        frame_t = result.target_clip_scores if result.target_frame_scores is None else result.target_frame_scores
        dtype = op.candidate_scores.dtype
        labelled = [x.to(dtype).clamp_min(0.0) for x in (frame_t, result.target_clip_scores, result.target_scores)]
        return replace(
            op,
            frame=replace(op.frame, label_consistency=labelled[0]),
            clip=replace(op.clip, label_consistency=labelled[1]),
            fused=replace(op.fused, label_consistency=labelled[2]),
            correct=result.target_ranks() == 1,
        )


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
