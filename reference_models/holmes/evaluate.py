"""Evaluation of the reference model: R@K, per-planted-type R@1, query identification and efficiency.

:func:`evaluate_retrieval` encodes a split's videos and queries, scores every query against every video in
bounded blocks (:func:`reference_models.holmes.scoring.score_matrix`) and computes the library's
:func:`evidential_prvr.metrics.recall_at_k`. When the split comes with planted query types (the embedded
benchmark) it also reports

**Per-type R@1** -- R@1 over the queries of each planted type.

**Identification precision/recall.** The library's :class:`~evidential_prvr.UncertaintyGuidedIdentifier`
(the one L_inter uses, same τ, evidence form, median rule and fusion) is applied to the *evaluation*
similarities: every query of the split is a row, every video of the split a candidate, the annotated video
the target. Its adaptive thresholds (Eq. 11) are computed over blocks of ``identify_chunk`` queries (all
queries at once by default, i.e. one "batch" holding the whole split). The fused type of each query
(Eq. 14) is compared with the planted type: with :math:`I_t` / :math:`P_t` the queries identified as /
planted with type :math:`t`, precision :math:`= |I_t \\cap P_t| / |I_t|` and recall
:math:`= |I_t \\cap P_t| / |P_t|` (NaN when a denominator is 0); a confusion matrix
``[planted][identified]`` and the accuracy are reported too. Note that the identifier
works on K = number of split videos candidates here, not on a training batch of 128 videos, so the
epistemic uncertainty u = K / S is on a different scale than during training; the thresholds adapt to it.

**Efficiency** (Table 2): video-encoding time (all videos of the split), retrieval time (query encoding
+ scoring + ranking of all queries) and the number of parameters; training time per epoch comes from the
trainer.

**Large galleries** (``index=``). By default the ``[Q, V]`` score matrices are built (in blocks). With
``index="exact"`` only each query's top-k is kept, streamed over blocks of queries × videos
(:func:`reference_models.holmes.scoring.exact_top_k`): R@K, per-type R@1 and the retrieval-time
opinions are the default's, bit for bit. With ``index="faiss"`` or ``"faiss:TYPE"`` (``TYPE`` an
:class:`evidential_prvr.search.IndexSpec` string: ``flat``, ``ivf``, ``ivfpq``, ``hnsw``, with parameters) the
candidates come from a FAISS index over the clips and are re-ranked exactly
(:func:`reference_models.holmes.scoring.faiss_reranked_top_k`). The whole-gallery identification above needs every
video's score, so with an index it is computed only when ``identify_chunk`` is given, on
``identify_chunk × V`` blocks of rows (a second pass over the gallery).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import torch
from torch import nn

from evidential_prvr import QueryType, UncertaintyGuidedIdentifier
from evidential_prvr.functional import macro_f1
from evidential_prvr.metrics import DEFAULT_KS, ranks_of_ground_truth, recall_at_k, recall_from_ranks
from evidential_prvr.search import INDEX_TYPES, ClipIndex, IndexSpec, SearchResult
from reference_models.holmes.config import HolmesConfig
from reference_models.holmes.data import PRVRSplit, make_query_loader, make_video_loader
from reference_models.holmes.model import HolmesModel, Similarities, VideoEmbeddings
from reference_models.holmes.scoring import (
    encode_all_queries,
    encode_all_videos,
    exact_top_k,
    faiss_reranked_top_k,
    score_matrix,
)

__all__ = [
    "TYPE_CODES",
    "TYPE_NAMES",
    "EvaluationResult",
    "evaluate_retrieval",
    "per_type_recall_at_1",
    "identification_report",
    "identify_queries",
    "model_parameters",
    "parse_index",
]

#: Planted-type names in :class:`~evidential_prvr.QueryType` order.
TYPE_NAMES: dict[int, str] = {
    int(QueryType.PRECISE): "precise",
    int(QueryType.POLYSEMOUS): "polysemous",
    int(QueryType.UNDERDETERMINED): "underdetermined",
}
#: Planted-type name → :class:`~evidential_prvr.QueryType` code.
TYPE_CODES: dict[str, int] = {name: code for code, name in TYPE_NAMES.items()}


@dataclass
class EvaluationResult:
    """Metrics of one model on one split.

    Attributes
    ----------
    recall : dict
        ``R@1, R@5, R@10, R@100, SumR`` in percent.
    per_type_r1 : dict or None
        R@1 per planted type (only with planted types).
    identification : dict or None
        Identification precision/recall against the planted types (see the module docstring).
    efficiency : dict
        ``video_encoding_seconds``, ``retrieval_seconds``, ``parameters_millions``, ``num_queries``,
        ``num_videos``.
    selective, gallery_identification : dict or None
        Selective-retrieval metrics per confidence and the identification with thresholds fitted on the
        validation split (see :mod:`reference_models.holmes.selective`), when an ``uncertainty`` is given.
    search : dict or None
        With an ``index``: ``index``, ``k`` (videos kept per query), ``num_candidates`` and
        ``index_build_seconds``.
    """

    recall: dict[str, float]
    per_type_r1: dict[str, float] | None = None
    identification: dict[str, Any] | None = None
    efficiency: dict[str, float] = field(default_factory=dict)
    selective: dict[str, Any] | None = None
    gallery_identification: dict[str, Any] | None = None
    search: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary."""
        return asdict(self)


def model_parameters(model: nn.Module) -> int:
    """Number of parameters of ``model``."""
    return sum(p.numel() for p in model.parameters())


def per_type_recall_at_1(scores: torch.Tensor, gt: torch.Tensor, types: list[str | None]) -> dict[str, float]:
    """R@1 (percent) over the queries of each type in ``types`` (``None`` entries are skipped)."""
    return _per_type_r1(ranks_of_ground_truth(scores, gt.to(scores.device)), types)


def _per_type_r1(ranks: torch.Tensor, types: list[str | None]) -> dict[str, float]:
    """R@1 per type from the ground truth's ranks (below 1: beyond a search's list, not first)."""
    ranks = torch.where(ranks >= 1, ranks, torch.full_like(ranks, 2))
    result: dict[str, float] = {}
    for name in TYPE_NAMES.values():
        rows = torch.tensor([t == name for t in types], dtype=torch.bool, device=ranks.device)
        if bool(rows.any()):
            result[name] = recall_from_ranks(ranks[rows], (1,))["R@1"]
    return result


def parse_index(text: str) -> tuple[str, IndexSpec | None]:
    """``"exact"`` → ``("exact", None)``; ``"faiss"`` / ``"faiss:TYPE"`` → ``("faiss", IndexSpec)``.

    ``TYPE`` is an :meth:`evidential_prvr.search.IndexSpec.parse` string (default ``flat``), e.g.
    ``faiss:ivf:nlist=1024,nprobe=32``. Raises ``ValueError`` naming the accepted forms.
    """
    if not isinstance(text, str):
        raise TypeError(f"index must be a str, got {type(text).__name__}")
    backend, _, spec = text.partition(":")
    if backend == "exact" and not spec:
        return "exact", None
    if backend != "faiss":
        raise ValueError(f"index must be 'exact', 'faiss' or 'faiss:TYPE' (TYPE one of {', '.join(INDEX_TYPES)}, "
                         f"optionally ':key=value,...'), got {text!r}")
    return "faiss", IndexSpec.parse(spec or "flat")


def _search(model: nn.Module, videos: VideoEmbeddings, queries: torch.Tensor, gt: torch.Tensor, index: str,
            k: int, num_candidates: int | None, config: HolmesConfig) -> tuple[SearchResult, dict[str, Any]]:
    """The top-``k`` of every query with the ``index`` backend, and its description for the result."""
    backend, spec = parse_index(index)
    info: dict[str, Any] = {"index": index, "k": k, "num_candidates": None, "index_build_seconds": 0.0}
    if backend == "exact":
        optim = config.optim
        return exact_top_k(model, videos, queries, k=k, target=gt, query_chunk=optim.score_chunk,  # type: ignore[arg-type]
                              video_chunk=optim.eval_video_batch), info
    start = time.perf_counter()
    built = ClipIndex(videos.clip, spec)  # type: ignore[arg-type]
    info["index_build_seconds"] = time.perf_counter() - start
    info["num_candidates"] = max(k, num_candidates or k)
    return faiss_reranked_top_k(model, videos, queries, built, k=k, num_candidates=info["num_candidates"], target=gt), info  # type: ignore[arg-type]


def _identify_blocks(model: nn.Module, identifier: UncertaintyGuidedIdentifier, videos: VideoEmbeddings,
                     queries: torch.Tensor, gt: torch.Tensor, chunk: int, config: HolmesConfig) -> torch.Tensor:
    """:func:`identify_queries` on ``chunk × V`` blocks of rows scored one block at a time."""
    parts = []
    for start in range(0, queries.shape[0], chunk):
        sims = score_matrix(model, videos, queries[start : start + chunk], query_chunk=config.optim.score_chunk,  # type: ignore[arg-type]
                            video_chunk=config.optim.eval_video_batch)
        parts.append(identify_queries(identifier, sims.frame, sims.clip, gt[start : start + chunk]))
    return torch.cat(parts)


@torch.no_grad()
def identify_queries(
    identifier: UncertaintyGuidedIdentifier,
    frame_sim: torch.Tensor,
    clip_sim: torch.Tensor,
    gt: torch.Tensor,
    chunk: int | None = None,
) -> torch.Tensor:
    """Fused query types ``[Nq]`` of the evaluation similarities (thresholds adapt per block of ``chunk`` rows)."""
    chunk = frame_sim.shape[0] if chunk is None else chunk
    parts = [
        identifier(frame_sim[i : i + chunk], clip_sim[i : i + chunk], gt[i : i + chunk]).query_type
        for i in range(0, frame_sim.shape[0], chunk)
    ]
    return torch.cat(parts)


def identification_report(identified: torch.Tensor, planted: list[str | None]) -> dict[str, Any]:
    """Precision, recall and support per type, accuracy and confusion matrix ``[planted][identified]``."""
    known = [i for i, t in enumerate(planted) if t is not None]
    pred = identified.detach().cpu()[known].tolist()
    true = [TYPE_CODES[t] for t in planted if t is not None]  # the planted types of ``known``
    confusion = [[0] * 3 for _ in range(3)]
    for t, p in zip(true, pred):
        confusion[t][p] += 1
    per_type: dict[str, dict[str, float]] = {}
    for code, name in TYPE_NAMES.items():
        hit = confusion[code][code]
        n_pred = sum(confusion[r][code] for r in range(3))
        n_true = sum(confusion[code])
        per_type[name] = {
            "precision": hit / n_pred if n_pred else math.nan,
            "recall": hit / n_true if n_true else math.nan,
            "identified": n_pred,
            "planted": n_true,
        }
    total = len(true)
    return {
        "per_type": per_type,
        "macro_f1": macro_f1(torch.tensor(pred), torch.tensor(true)) if total else math.nan,
        "accuracy": sum(confusion[i][i] for i in range(3)) / total if total else math.nan,
        "confusion": {TYPE_NAMES[r]: {TYPE_NAMES[c]: confusion[r][c] for c in range(3)} for r in range(3)},
    }


def evaluate_retrieval(
    model: nn.Module,
    split: PRVRSplit,
    config: HolmesConfig,
    *,
    device: str | torch.device = "cpu",
    planted_types: dict[str, str] | None = None,
    identifier: UncertaintyGuidedIdentifier | None = None,
    identify_chunk: int | None = None,
    ks: tuple[int, ...] = DEFAULT_KS,
    uncertainty: Any = None,
    index: str | None = None,
    num_candidates: int | None = None,
) -> EvaluationResult:
    """Encode ``split``, score it in blocks and compute the metrics described in the module docstring.

    Parameters
    ----------
    model : HolmesModel
        The model (its train/eval mode is restored afterwards).
    split : PRVRSplit
        The split to evaluate (one ground-truth video per caption).
    config : HolmesConfig
        Supplies the encoding batch sizes and the scoring block size.
    device : str or torch.device
        Where to run.
    planted_types : dict, optional
        Caption id → planted type; enables per-type R@1 and, with ``identifier``, identification.
    identifier : UncertaintyGuidedIdentifier, optional
        The identifier to evaluate.
    identify_chunk : int, optional
        Queries per identification block (default: all).
    ks : tuple of int
        Recall cut-offs (those above the number of videos still count; R@K is then 100).
    uncertainty : RetrievalUncertainty, optional
        Fitted on the validation split (:func:`reference_models.holmes.selective.fit_retrieval_uncertainty`);
        adds ``selective`` and ``gallery_identification``.
    index : str, optional
        ``"exact"`` (streamed top-k) or ``"faiss[:TYPE]"`` (candidates from a FAISS index over the clips,
        re-ranked exactly); default: the full score matrices. See the module docstring.
    num_candidates : int, optional
        With a FAISS index: candidate videos re-ranked per query (default: the videos kept, ``max(ks) + 1``).
    """
    if index is not None:
        parse_index(index)  # a bad spelling fails before any encoding
    device = torch.device(device)
    optim = config.optim
    start = time.perf_counter()
    videos = encode_all_videos(cast(HolmesModel, model), make_video_loader(split, optim.eval_video_batch), device)
    _synchronize(device)
    video_seconds = time.perf_counter() - start

    start = time.perf_counter()
    queries = encode_all_queries(cast(HolmesModel, model), make_query_loader(split, optim.eval_query_batch), device)
    gt = split.caption_video_index.to(device)
    ranked: Similarities | SearchResult
    search_info = None
    if index is None:
        ranked = score_matrix(model, videos, queries, query_chunk=optim.score_chunk,  # type: ignore[arg-type]
                              video_chunk=optim.eval_video_batch)
        recall = recall_at_k(ranked.score, gt, ks=ks)
    else:
        opinion_k = getattr(getattr(uncertainty, "gallery", None), "k", 0)
        k = split.num_videos if uncertainty is not None and opinion_k is None else max(max(ks) + 1, 2, opinion_k or 0)
        ranked, search_info = _search(model, videos, queries, gt, index, k, num_candidates, config)
        recall = ranked.recall_at_k(ks)
    _synchronize(device)
    retrieval_seconds = time.perf_counter() - start

    per_type = ident = None
    if planted_types is not None:
        types = [planted_types.get(cid) for cid in split.caption_ids]
        if isinstance(ranked, Similarities):
            per_type = per_type_recall_at_1(ranked.score, gt, types)
            if identifier is not None:
                identified = identify_queries(identifier.to(device), ranked.frame, ranked.clip, gt, identify_chunk)
                ident = identification_report(identified, types)
        else:
            per_type = _per_type_r1(ranked.target_ranks(), types)
            if identifier is not None and identify_chunk is not None:
                identified = _identify_blocks(model, identifier.to(device), videos, queries, gt, identify_chunk,
                                              config)
                ident = identification_report(identified, types)
    extra: dict[str, Any] = {}
    if uncertainty is not None:
        types = [planted_types.get(c) for c in split.caption_ids] if planted_types else [None] * split.num_captions
        extra = uncertainty.evaluate(ranked, queries, gt, types, videos)
    efficiency = {
        "video_encoding_seconds": video_seconds,
        "retrieval_seconds": retrieval_seconds,
        "parameters_millions": model_parameters(model) / 1e6,
        "num_queries": float(split.num_captions),
        "num_videos": float(split.num_videos),
    }
    return EvaluationResult(recall=recall, per_type_r1=per_type, identification=ident, efficiency=efficiency,
                            search=search_info, **extra)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
