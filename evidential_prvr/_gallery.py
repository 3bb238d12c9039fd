"""The module of the gallery opinions (:func:`evidential_prvr.functional.gallery_opinion`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from evidential_prvr._checks import check_choice, check_positive, check_positive_int, should_validate
from evidential_prvr._module_bases import PresetModule
from evidential_prvr.choices import (
    TANH_SCALINGS,
    DatasetName,
    Preset,
    TanhScaling,
)
from evidential_prvr.functional._gallery import GalleryOpinion, gallery_opinion
from evidential_prvr.presets import module_settings

if TYPE_CHECKING:
    from evidential_prvr.search import SearchResult

__all__ = ["GalleryUncertainty"]


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
