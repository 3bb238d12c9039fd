"""Exact search over a gallery's clip and frame embeddings: :func:`gallery_search` (streamed top-k),
:func:`rerank_candidates` (exact scores of given candidates), :func:`token_norms` and the Eq. 1-2 settings
they share, :class:`SearchScoring`. Public as
:mod:`evidential_prvr.search`, whose description says how they fit together."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from evidential_prvr._checks import (
    as_mask,
    check_finite,
    check_index_vector,
    check_positive_int,
    check_same_device,
    check_tensor,
    compute_dtype,
    should_validate,
)
from evidential_prvr._numerics import HALF_DTYPES, normalize_rows
from evidential_prvr._recall import DEFAULT_KS, check_ks, recall_from_ranks
from evidential_prvr._rerank_kernels import pair_max
from evidential_prvr.functional._gallery import _QueryCandidates

__all__ = ["SearchScoring", "SearchResult", "gallery_search", "rerank_candidates", "token_norms"]


@dataclass(frozen=True, kw_only=True)
class SearchScoring:
    """How a search scores a (query, video) pair (Holmes Eq. 1-2): the settings shared by
    :func:`gallery_search`, :func:`rerank_candidates` and :meth:`ClipIndex.search`, checked once.

    .. math::

        s(q, v) = \\alpha_f s^f(q, v) + \\alpha_c s^c(q, v) \\quad \\text{(Eq. 2)},

    where :math:`s^c, s^f` are the max over a video's clips and (valid) frames of their similarity to the
    query (Eq. 1). Keyword-only; ``None`` where a search takes ``scoring=`` means these defaults.

    Attributes
    ----------
    clip_weight : float
        :math:`\\alpha_c` of Eq. 2 (used only with frames; without them the ranking score is the clip score).
    frame_weight : float
        :math:`\\alpha_f` of Eq. 2.
    padded_frame_score : float or None
        Score of a padded frame (``frame_mask`` ``False``); ``None``: the compute dtype's most negative
        value, so that it never wins.
    normalize : bool
        L2-normalise queries and tokens, so that the similarities are cosines (Eq. 1); ``False`` uses the
        dot products (not with :meth:`ClipIndex.search`, whose index holds normalised clips).

    Examples
    --------
    >>> from evidential_prvr.search import SearchScoring
    >>> SearchScoring()
    SearchScoring(clip_weight=0.5, frame_weight=0.5, padded_frame_score=None, normalize=True)
    >>> SearchScoring(clip_weight=0.6, frame_weight=0.4).frame_weight
    0.4
    >>> SearchScoring(clip_weight="0.6")
    Traceback (most recent call last):
        ...
    TypeError: clip_weight must be a float, got str

    References
    ----------
    Holmes (ICML 2026), Eq. 1-2.
    """

    clip_weight: float = 0.5
    frame_weight: float = 0.5
    padded_frame_score: float | None = None
    normalize: bool = True

    def __post_init__(self) -> None:
        for name, value in (("clip_weight", self.clip_weight), ("frame_weight", self.frame_weight)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name} must be a float, got {type(value).__name__}")
        padded = self.padded_frame_score
        if padded is not None and (isinstance(padded, bool) or not isinstance(padded, (int, float))):
            raise TypeError(f"padded_frame_score must be a float or None, got {type(padded).__name__}")
        if not isinstance(self.normalize, bool):
            raise TypeError(f"normalize must be a bool, got {type(self.normalize).__name__}")


def _scoring(scoring: object) -> SearchScoring:
    """``scoring`` checked: a :class:`SearchScoring`, or its defaults for ``None``."""
    if scoring is None:
        return SearchScoring()
    if not isinstance(scoring, SearchScoring):
        raise TypeError(f"scoring must be a SearchScoring or None, got {type(scoring).__name__}")
    return scoring


@dataclass(frozen=True)
class SearchResult(_QueryCandidates):
    """The ranked top-k videos of every query of a gallery search.

    Attributes
    ----------
    indices : torch.Tensor
        ``int64 [Q, k]`` gallery indices of the candidates, best first; ``-1`` where a query has fewer
        than ``k`` candidates (an approximate index that returned too few).
    scores : torch.Tensor
        ``[Q, k]`` ranking scores (Holmes Eq. 2), descending; ``-inf`` where ``indices`` is ``-1``.
    clip_scores : torch.Tensor
        ``[Q, k]`` clip-branch scores (Eq. 1) of the candidates.
    frame_scores : torch.Tensor or None
        ``[Q, k]`` frame-branch scores, when the gallery has frames.
    num_videos : int
        Videos in the gallery.
    target : torch.Tensor or None
        ``int64 [Q]`` annotated video of each query, when one was given.
    target_scores, target_clip_scores, target_frame_scores : torch.Tensor or None
        ``[Q]`` ranking, clip and frame scores of the target video (whether or not it was retrieved).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.search import gallery_search
    >>> clips = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[0.6, 0.8], [0.8, 0.6]], [[-1.0, 0.0], [0.0, -1.0]]])
    >>> res = gallery_search(torch.tensor([[1.0, 0.0]]), clips, k=3, target=torch.tensor([1]))
    >>> res.indices.tolist(), res.scores.tolist(), res.target_ranks().tolist()
    ([[0, 1, 2]], [[1.0, 0.800000011920929, 0.0]], [2])
    >>> gallery_search(torch.tensor([[1.0, 0.0]]), clips, k=1, target=torch.tensor([1])).target_ranks().tolist()
    [-1]

    References
    ----------
    Holmes (ICML 2026), Eq. 1-2 and §4.1 "Metrics".
    """

    indices: torch.Tensor
    scores: torch.Tensor
    clip_scores: torch.Tensor
    frame_scores: torch.Tensor | None
    num_videos: int
    target: torch.Tensor | None = None
    target_scores: torch.Tensor | None = None
    target_clip_scores: torch.Tensor | None = None
    target_frame_scores: torch.Tensor | None = None

    def _ranked(self) -> torch.Tensor:
        return self.indices

    def _require_target(self, what: str) -> torch.Tensor:
        if self.target is None or self.target_scores is None:
            raise ValueError(f"{what} needs a search run with target= (the annotated video of each query)")
        return self.target_scores

    def target_ranks(self) -> torch.Tensor:
        """``int64 [Q]`` rank of each query's target among the retrieved videos, ties counting against it.

        The rank is 1 + the number of other retrieved videos scoring >= the target (the convention of
        :func:`evidential_prvr.metrics.ranks_of_ground_truth`). It is exact when it is below ``k`` or when
        the search kept every video; otherwise (the target is not resolved within the list) it is ``-1``.
        """
        target_scores = self._require_target("target_ranks")
        at_least = (self.scores >= target_scores.unsqueeze(1)).sum(dim=1)
        resolved = (at_least < self.k) | (self.k >= self.num_videos)
        return torch.where(resolved, at_least, torch.full_like(at_least, -1))

    def recall_at_k(self, ks: Sequence[int] = DEFAULT_KS) -> dict[str, float]:
        """R@K in percent and ``SumR``, as :func:`evidential_prvr.metrics.recall_at_k` on the full score matrix.

        :func:`evidential_prvr.metrics.recall_from_ranks` of :meth:`target_ranks`, a target beyond the list
        counting as a miss. Needs a search with ``target=`` and ``k > max(ks)`` (or ``k`` covering the whole
        gallery).
        """
        cuts = check_ks(ks)
        if max(cuts) >= self.k and self.k < self.num_videos:
            raise ValueError(f"recall_at_k with ks up to {max(cuts)} needs a search with k > {max(cuts)} "
                             f"(or k >= the {self.num_videos} videos), got k = {self.k}")
        ranks = self.target_ranks()
        # a target the list does not hold (rank below 1) ranks after its k-th video, past every cut-off: a miss
        ranks = torch.where(ranks >= 1, ranks, torch.full_like(ranks, self.k + 1))
        return recall_from_ranks(ranks, cuts)


def _check_gallery(
    queries: object, clips: object, *, frames: object, frame_mask: object, target: object
) -> tuple[int, int, torch.Tensor | None]:
    """Shapes and devices of a search's inputs; returns ``(num_queries, num_videos, frame_mask)``."""
    check_tensor(queries, "queries", ndim=2, floating=True)
    check_tensor(clips, "clips", ndim=3, floating=True)
    assert isinstance(queries, torch.Tensor) and isinstance(clips, torch.Tensor)
    num_queries, dim = queries.shape
    num_videos, num_clips, _ = clips.shape
    if 0 in queries.shape or 0 in clips.shape or clips.shape[2] != dim:
        raise ValueError(f"queries [num_queries, d] and clips [num_videos, num_clips, d] must share d, every size "
                         f">= 1: clips must be [{num_videos}, {num_clips}, {dim}] for these queries, got queries "
                         f"{tuple(queries.shape)} and clips {tuple(clips.shape)}")
    mask = None
    if frames is not None:
        check_tensor(frames, "frames", ndim=3, floating=True)
        assert isinstance(frames, torch.Tensor)
        if frames.shape[0] != num_videos or frames.shape[2] != dim or frames.shape[1] == 0:
            raise ValueError(f"frames must be [num_videos, num_frames, d] = [{num_videos}, M_f >= 1, {dim}], got "
                             f"shape {tuple(frames.shape)}")
        check_same_device(clips=clips, frames=frames)
        if frame_mask is not None:
            mask = as_mask(frame_mask, "frame_mask", tuple(frames.shape[:2]), frames.device, validate=False)
    elif frame_mask is not None:
        raise ValueError("frame_mask was given without frames")
    if target is not None:
        check_index_vector(target, "target", length=num_queries, upper=num_videos)
        assert isinstance(target, torch.Tensor)
        check_same_device(queries=queries, target=target)
    return num_queries, num_videos, mask


_SUB_BLOCK_SCORES = 1 << 21
"""Scores of one matrix product in the exact search (8 MiB in float32): small enough that the max over the
tokens reads them from cache, which halved its cost at a million clips; large enough to keep the product
at full speed."""


def _max_over_tokens(
    queries: torch.Tensor, tokens: torch.Tensor, *, mask: torch.Tensor | None = None, fill: float | None = None,
    buffer: torch.Tensor, out: torch.Tensor,
) -> torch.Tensor:
    """Writes into ``out [v, q]`` the max over each video's tokens of ``tokens @ queries`` and returns it.

    The products are taken tokens-first, ``[videos * M, q]``, so that the max runs over rows of queries (a
    vectorised element-wise max of ``M`` rows) rather than along short rows of ``M`` scores; on a 2-core
    x86 host that layout made the product itself 15 % faster too. They are taken a few videos at a time
    (``_SUB_BLOCK_SCORES``) into the flat ``buffer``, reused from one call to the next: a fresh product of
    tens of MB per block costs page faults comparable to a tenth of the product itself.
    """
    videos, count, dim = tokens.shape
    step = max(1, _SUB_BLOCK_SCORES // (count * queries.shape[0]))
    for v0 in range(0, videos, step):
        part = tokens[v0 : v0 + step]
        n = part.shape[0]
        dots = buffer[: n * count * queries.shape[0]].view(n * count, queries.shape[0])
        torch.mm(part.reshape(n * count, dim), queries.t(), out=dots)
        dots = dots.view(n, count, queries.shape[0])
        if mask is not None:
            dots.masked_fill_(~mask[v0 : v0 + n].unsqueeze(2), torch.finfo(dots.dtype).min if fill is None else fill)
        torch.amax(dots, dim=1, out=out[v0 : v0 + n])
    return out


def _prepare(tokens: torch.Tensor, *, device: torch.device, dtype: torch.dtype, normalize: bool) -> torch.Tensor:
    tokens = tokens.to(device=device, dtype=dtype)
    return normalize_rows(tokens, dtype) if normalize else tokens


def _combine(clip: torch.Tensor, frame: torch.Tensor | None, scoring: SearchScoring) -> torch.Tensor:
    """The ranking score of Eq. 2 (the clip score without frames)."""
    return clip if frame is None else scoring.frame_weight * frame + scoring.clip_weight * clip


@torch.no_grad()
def gallery_search(
    queries: torch.Tensor,
    clips: torch.Tensor,
    frames: torch.Tensor | None = None,
    frame_mask: torch.Tensor | None = None,
    *,
    k: int = 100,
    scoring: SearchScoring | None = None,
    target: torch.Tensor | None = None,
    query_chunk: int = 2048,
    video_chunk: int = 256,
    validate_args: bool | None = None,
) -> SearchResult:
    """Exact top-k videos of every query by max-similarity (Holmes Eq. 1-2), streamed over the gallery.

    .. math::

        s^c(q, v) = \\max_{m} \\cos(\\mathbf q, \\mathbf c_{vm}), \\quad
        s^f(q, v) = \\max_{m \\in \\text{valid}(v)} \\cos(\\mathbf q, \\mathbf f_{vm}), \\quad
        s(q, v) = \\alpha_f s^f(q, v) + \\alpha_c s^c(q, v).

    Blocks of ``query_chunk`` queries × ``video_chunk`` videos are scored with one matrix product and a
    max over the tokens each, and merged into a running top-k; the ``query × video`` matrix is never
    held. The scores are those of a blockwise ``[Q, V]`` computation with the same block sizes (bit for
    bit); the order of exactly tied videos is unspecified.

    Parameters
    ----------
    queries : torch.Tensor
        ``[Q, d]`` query embeddings; the search runs on their device and in their compute dtype.
    clips : torch.Tensor
        ``[V, M_c, d]`` clip embeddings of the gallery (any device: blocks are moved to the queries').
    frames : torch.Tensor, optional
        ``[V, M_f, d]`` frame embeddings; without them the ranking score is the clip score.
    frame_mask : torch.Tensor, optional
        ``[V, M_f]`` bool, ``True`` for a real frame (default: all real).
    k : int
        Videos kept per query (capped at ``V``). For :meth:`SearchResult.recall_at_k` with cut-offs up to
        ``K``, search with ``k > K``.
    scoring : SearchScoring, optional
        The Eq. 1-2 settings: branch weights :math:`\\alpha_c, \\alpha_f` (used only with ``frames``), the
        score of a padded frame, and whether to L2-normalise (cosine) or use the dot products (default
        ``SearchScoring()``: weights 0.5 and 0.5, cosines).
    target : torch.Tensor, optional
        ``int64 [Q]`` annotated video per query: its scores are recorded for ranks, recall and Eq. 7.
    query_chunk, video_chunk : int
        Block sizes; peak temporary memory about ``query_chunk * video_chunk * max(M_c, M_f)`` scores.
    validate_args : bool, optional
        Check that the embeddings are finite (a host synchronisation); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`.

    Returns
    -------
    SearchResult

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.search import gallery_search
    >>> clips = torch.nn.functional.normalize(torch.randn(50, 4, 8, generator=torch.Generator().manual_seed(0)), dim=-1)
    >>> queries = clips[[3, 7], 1] + 0.01  # near clip 1 of videos 3 and 7
    >>> res = gallery_search(queries, clips, k=5, video_chunk=16, target=torch.tensor([3, 7]))
    >>> res.indices[:, 0].tolist(), res.recall_at_k(ks=(1, 4))
    ([3, 7], {'R@1': 100.0, 'R@4': 100.0, 'SumR': 200.0})
    >>> from evidential_prvr.search import SearchScoring
    >>> frames = torch.randn(50, 6, 8, generator=torch.Generator().manual_seed(1))
    >>> both = gallery_search(queries, clips, frames, k=5, scoring=SearchScoring(clip_weight=0.6, frame_weight=0.4))
    >>> torch.allclose(both.scores, 0.4 * both.frame_scores + 0.6 * both.clip_scores)
    True

    References
    ----------
    Holmes (ICML 2026), Eq. 1-2; Dong et al., "Partially Relevant Video Retrieval" (MS-SL), ACM MM 2022.
    """
    num_queries, num_videos, mask = _check_gallery(queries, clips, frames=frames, frame_mask=frame_mask,
                                                   target=target)
    check_positive_int(k, "k")
    check_positive_int(query_chunk, "query_chunk")
    check_positive_int(video_chunk, "video_chunk")
    scoring = _scoring(scoring)
    if should_validate(validate_args):
        check_finite(queries, "queries")
        check_finite(clips, "clips")
        if frames is not None:
            check_finite(frames, "frames")
    device = queries.device
    dtype = torch.promote_types(compute_dtype(queries), compute_dtype(clips))
    if frames is not None:
        dtype = torch.promote_types(dtype, compute_dtype(frames))
    q_all = _prepare(queries, device=device, dtype=dtype, normalize=scoring.normalize)
    kept = min(k, num_videos)
    has_frames = frames is not None
    starts = range(0, num_queries, query_chunk)
    chunks = [q_all[q0 : q0 + query_chunk] for q0 in starts]
    # running top-k per query chunk: indices, ranking, clip and frame scores
    top = [[torch.empty(q.shape[0], 0, dtype=torch.long, device=device)] + [q.new_empty(q.shape[0], 0)] * 3
           for q in chunks]
    found = [[q.new_full((q.shape[0],), float("nan")) for _ in range(3)] for q in chunks] if target is not None else []
    tokens_per_video = max(clips.shape[1], frames.shape[1] if frames is not None else 0)
    chunk_scores = min(query_chunk, num_queries) * min(video_chunk, num_videos) * tokens_per_video
    product = q_all.new_empty(min(chunk_scores, max(_SUB_BLOCK_SCORES, tokens_per_video * chunks[0].shape[0])))
    # Block scores are computed video-major ([videos, queries], in `scratch`), copied query-major into a
    # pending buffer and merged into the running top-k every `width` videos: a top-k over a few hundred
    # columns costs about a fifth of the block's matrix product, over thousands a fraction of that. The
    # pending buffers of all query chunks together, and the merge's concatenated copy of them, hold no more
    # scores than one block's product would.
    arrays = 3 if has_frames else 1  # ranking, clip, frame scores (without frames the ranking score is the clip's)
    width = max(video_chunk, min(num_videos, chunk_scores // (2 * num_queries * arrays)))
    width = -(-width // video_chunk) * video_chunk
    pending = [[q.new_empty(q.shape[0], width) for _ in range(arrays)] for q in chunks]
    scratch = [q_all.new_empty(min(video_chunk, num_videos) * chunks[0].shape[0]) for _ in range(arrays)]

    def merge(c: int, group_start: int, filled: int) -> None:
        top_i, top_s, top_c, top_f = top[c]
        scores = [p[:, :filled] for p in pending[c]]
        merged = torch.cat([top_s, scores[0]], dim=1)
        best = torch.topk(merged, min(kept, merged.shape[1]), dim=1, largest=True, sorted=True)
        new_ids = torch.arange(group_start, group_start + filled, device=device).expand(top_s.shape[0], filled)
        ids = torch.cat([top_i, new_ids], dim=1).gather(1, best.indices)
        if has_frames:
            clip = torch.cat([top_c, scores[1]], dim=1).gather(1, best.indices)
            frame = torch.cat([top_f, scores[2]], dim=1).gather(1, best.indices)
        else:
            clip, frame = best.values, top_f
        top[c] = [ids, best.values, clip, frame]

    # videos outside, queries inside: each block of the gallery is moved and normalised once
    group_start = filled = 0
    for v0 in range(0, num_videos, video_chunk):
        clip_block = _prepare(clips[v0 : v0 + video_chunk], device=device, dtype=dtype, normalize=scoring.normalize)
        block = clip_block.shape[0]
        frame_block = block_mask = None
        if frames is not None:
            frame_block = _prepare(frames[v0 : v0 + block], device=device, dtype=dtype, normalize=scoring.normalize)
            block_mask = None if mask is None else mask[v0 : v0 + block].to(device)
        for c, (q0, q) in enumerate(zip(starts, chunks)):
            outs = [buffer[: block * q.shape[0]].view(block, q.shape[0]) for buffer in scratch]
            if frame_block is not None:  # has_frames
                clip = _max_over_tokens(q, clip_block, buffer=product, out=outs[1])
                frame = _max_over_tokens(q, frame_block, mask=block_mask, fill=scoring.padded_frame_score,
                                         buffer=product, out=outs[2])
                # rounded as _combine rounds it, so that re-ranked and streamed scores agree bit for bit
                score = torch.mul(frame, scoring.frame_weight, out=outs[0]).add_(scoring.clip_weight * clip)
            else:
                score = clip = _max_over_tokens(q, clip_block, buffer=product, out=outs[0])
                frame = None
            if target is not None:
                local = target[q0 : q0 + query_chunk] - v0
                inside = (local >= 0) & (local < block)
                row = local.clamp(0, block - 1).unsqueeze(0)
                for acc, values in zip(found[c], (score, clip, clip if frame is None else frame)):
                    acc.copy_(torch.where(inside, values.gather(0, row).squeeze(0), acc))
            for waiting, values in zip(pending[c], outs):
                waiting[:, filled : filled + block].copy_(values.t())
        filled += block
        if filled + video_chunk > width or v0 + block >= num_videos:
            for c in range(len(chunks)):
                merge(c, group_start, filled)
            group_start, filled = v0 + block, 0
    parts = {name: [t[i] for t in top] for i, name in enumerate(("idx", "s", "c", "f"))}
    for i, name in enumerate(("ts", "tc", "tf")):
        parts[name] = [f[i] for f in found]
    # every query chunk has its running top-k; the target scores exist with a target
    cat = {name: torch.cat(values) for name, values in parts.items() if values}
    return SearchResult(
        indices=cat["idx"], scores=cat["s"], clip_scores=cat["c"], frame_scores=cat["f"] if has_frames else None,
        num_videos=num_videos, target=target, target_scores=cat.get("ts"), target_clip_scores=cat.get("tc"),
        target_frame_scores=cat.get("tf") if has_frames else None,
    )


def token_norms(tokens: torch.Tensor) -> torch.Tensor:
    """``[V, M]`` L2 norms of ``tokens [V, M, d]``, floored as ``torch.nn.functional.normalize`` floors them.

    Pass them to :func:`rerank_candidates` (``clip_norms`` / ``frame_norms``) when the same gallery is
    re-ranked many times; :class:`ClipIndex` keeps those of its clips.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.search import token_norms
    >>> token_norms(torch.tensor([[[3.0, 4.0], [0.0, 0.0]]]))
    tensor([[5.0000e+00, 1.0000e-12]])

    References
    ----------
    PyTorch, ``torch.nn.functional.normalize`` (the same floor); Holmes (ICML 2026), Eq. 1 (cosines).
    """
    eps = math.sqrt(torch.finfo(tokens.dtype).eps) if tokens.dtype in HALF_DTYPES else 1e-12
    norms: torch.Tensor = torch.linalg.vector_norm(tokens.to(compute_dtype(tokens)), dim=-1)
    return norms.clamp_min(eps)


@torch.no_grad()
def rerank_candidates(
    queries: torch.Tensor,
    candidates: torch.Tensor,
    clips: torch.Tensor,
    frames: torch.Tensor | None = None,
    frame_mask: torch.Tensor | None = None,
    *,
    k: int | None = None,
    scoring: SearchScoring | None = None,
    target: torch.Tensor | None = None,
    clip_norms: torch.Tensor | None = None,
    frame_norms: torch.Tensor | None = None,
    memory_budget: int = 64 * 2**20,
    validate_args: bool | None = None,
) -> SearchResult:
    """Exact Holmes Eq. 1-2 scores of each query's own candidate videos, ranked: the re-ranking step of a
    candidate search (:meth:`ClipIndex.search`).

    Parameters
    ----------
    queries : torch.Tensor
        ``[Q, d]`` query embeddings.
    candidates : torch.Tensor
        ``int64 [Q, C]`` gallery indices per query; ``-1`` marks an empty slot (scored ``-inf``).
    clips, frames, frame_mask
        The gallery, as in :func:`gallery_search`.
    k : int, optional
        Videos kept per query after re-ranking (default ``C``).
    scoring, target
        As in :func:`gallery_search` (the target's scores are computed exactly, retrieved or not).
    clip_norms, frame_norms : torch.Tensor, optional
        ``[V, M]`` :func:`token_norms` of ``clips`` / ``frames`` (with ``scoring.normalize``), to reuse across
        calls; default computed here.
    memory_budget : int
        Bytes per step, which sets how many queries are re-ranked at a time. Few pairs (fewer than half the
        gallery's videos, their tokens within the budget) gather their tokens, and the budget bounds the
        gathered copy; more are scored by one sweep over the gallery in blocks of videos, and the budget
        bounds the pairs' indices and scores.
    validate_args : bool, optional
        Check finiteness and the candidate range (host synchronisations).

    Returns
    -------
    SearchResult
        The re-ranked candidates, best first (``k`` of them).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.search import rerank_candidates
    >>> clips = torch.tensor([[[1.0, 0.0]], [[0.6, 0.8]], [[0.0, 1.0]]])
    >>> res = rerank_candidates(torch.tensor([[0.0, 1.0]]), torch.tensor([[0, 1, -1]]), clips)
    >>> res.indices.tolist(), res.scores.tolist()
    ([[1, 0, -1]], [[0.800000011920929, 0.0, -inf]])

    References
    ----------
    Holmes (ICML 2026), Eq. 1-2.
    """
    num_queries, num_videos, mask = _check_gallery(queries, clips, frames=frames, frame_mask=frame_mask,
                                                   target=target)
    check_tensor(candidates, "candidates", ndim=2)
    if candidates.is_floating_point() or candidates.dtype == torch.bool:
        raise TypeError(f"candidates must have an integer dtype, got {candidates.dtype}")
    if candidates.shape[0] != num_queries or candidates.shape[1] == 0:
        raise ValueError(f"candidates must be [num_queries, C] = [{num_queries}, C >= 1], got shape "
                         f"{tuple(candidates.shape)}")
    check_same_device(queries=queries, candidates=candidates)
    if k is not None:
        check_positive_int(k, "k")
    check_positive_int(memory_budget, "memory_budget")
    scoring = _scoring(scoring)
    if should_validate(validate_args):
        check_finite(queries, "queries")
        if bool((candidates < -1).any()) or bool((candidates >= num_videos).any()):
            raise ValueError(f"candidates must hold video indices in [0, {num_videos}) or -1, got values in "
                             f"[{int(candidates.min())}, {int(candidates.max())}]")
    device = queries.device
    dtype = torch.promote_types(compute_dtype(queries), compute_dtype(clips))
    if frames is not None:
        dtype = torch.promote_types(dtype, compute_dtype(frames))
    q_all = _prepare(queries, device=device, dtype=dtype, normalize=scoring.normalize)
    candidates = candidates.long()
    count = candidates.shape[1]
    tokens = clips.shape[1] + (0 if frames is None else frames.shape[1])
    step = max(1, memory_budget // (count * tokens * q_all.shape[1] * torch.finfo(dtype).bits // 8))
    if 2 * num_queries * count >= num_videos:
        # enough pairs for the sweep over the gallery (pair_max), which holds one block of videos at a time:
        # the budget then bounds the pairs' own indices and scores, about 64 bytes each
        step = max(step, memory_budget // (64 * count))

    if scoring.normalize:
        clip_norms = token_norms(clips) if clip_norms is None else clip_norms
        if frames is not None:
            frame_norms = token_norms(frames) if frame_norms is None else frame_norms
    else:
        clip_norms = frame_norms = None
    for name, norms, given in (("clip_norms", clip_norms, clips), ("frame_norms", frame_norms, frames)):
        if norms is not None and given is not None and tuple(norms.shape) != tuple(given.shape[:2]):
            raise ValueError(f"{name} must have shape {list(given.shape[:2])}, got {tuple(norms.shape)}")

    buffers: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])

    def score(cand: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        clip = pair_max(q, clips, cand, norms=clip_norms, dtype=dtype, buffer=buffers[0], memory_budget=memory_budget)
        frame = None
        if frames is not None:
            frame = pair_max(q, frames, cand, norms=frame_norms, mask=mask, fill=scoring.padded_frame_score,
                             dtype=dtype, buffer=buffers[1], memory_budget=memory_budget)
        return _combine(clip, frame, scoring), clip, frame

    kept = count if k is None else min(k, count)
    parts: dict[str, list[torch.Tensor]] = {name: [] for name in ("idx", "s", "c", "f", "ts", "tc", "tf")}
    for q0 in range(0, num_queries, step):
        q, cand = q_all[q0 : q0 + step], candidates[q0 : q0 + step]
        s, clip, frame = score(cand, q)
        empty = cand < 0
        s = s.masked_fill(empty, float("-inf"))
        best = torch.topk(s, kept, dim=1, largest=True, sorted=True)
        parts["idx"].append(cand.gather(1, best.indices).masked_fill(best.values == float("-inf"), -1))
        parts["s"].append(best.values)
        parts["c"].append(clip.gather(1, best.indices))
        if frame is not None:
            parts["f"].append(frame.gather(1, best.indices))
        if target is not None:
            # a retrieved target keeps the very score it was ranked with (ranks compare it with the others)
            rows_target = target[q0 : q0 + step].unsqueeze(1)
            hit = cand == rows_target
            retrieved = hit.any(dim=1)
            column = hit.long().argmax(dim=1, keepdim=True)
            for name, own, alone in zip(("ts", "tc", "tf"), (s, clip, frame), score(rows_target, q)):
                if own is not None and alone is not None:
                    parts[name].append(torch.where(retrieved, own.gather(1, column)[:, 0], alone[:, 0]))
    # one block of queries at least: the indices and the ranking and clip scores exist
    cat = {name: torch.cat(values) for name, values in parts.items() if values}
    return SearchResult(
        indices=cat["idx"], scores=cat["s"], clip_scores=cat["c"], frame_scores=cat.get("f"), num_videos=num_videos,
        target=target, target_scores=cat.get("ts"), target_clip_scores=cat.get("tc"), target_frame_scores=cat.get("tf"),
    )
