"""Evaluation of the text-to-video model: R@1/5/10, MdR, MnR and selective retrieval (DAB's protocol).

Ranks come from :func:`evidential_prvr.metrics.ranks_of_ground_truth` (ties count against the model);
selective retrieval ranks queries by a confidence and reports R@1 among the 25 % and 10 % most confident
queries (:func:`~evidential_prvr.metrics.selective_recall`) and the AURC of the top-1 error
(:func:`~evidential_prvr.metrics.aurc`). Confidences: DAB's ``kl_margin`` (Gaussian heads), ``max_score``
and ``margin`` (top-1 and top-1 minus top-2 ranking score; for a Gaussian head ``margin`` equals
``kl_margin``, so it is left out), and the library's evidential ``neg_u``, ``top_belief``, ``neg_xi`` read
off :class:`~evidential_prvr.GalleryUncertainty` of the training logits (scaled cosine, or
:math:`-C/\\tau`) with evidence temperature 1 over the top 10 candidates.
"""

from __future__ import annotations

import time
from typing import cast

import torch
from torch.utils.flop_counter import FlopCounterMode

from evidential_prvr.functional import kl_margin
from evidential_prvr.metrics import aurc, ranks_of_ground_truth, recall_from_ranks, selective_recall
from evidential_prvr.uncertainty import EVIDENTIAL_CONFIDENCES, GalleryUncertainty, SelectiveConfidence
from reference_models.dab.data import T2VSplit
from reference_models.dab.model import T2VModel, T2VOutput

__all__ = ["score_split", "retrieval_metrics", "selective_metrics", "evaluate_split", "query_cost", "COVERAGES",
           "RECALL_KS", "multi_positive_ranks"]

COVERAGES = (0.25, 0.10)
#: The recall cut-offs of DAB's text-to-video protocol, R@1, R@5 and R@10 (DAB §4, CLIP4Clip's).
RECALL_KS = (1, 5, 10)


@torch.no_grad()
def score_split(model: T2VModel, split: T2VSplit, device: torch.device | str = "cpu",
                query_chunk: int = 128) -> T2VOutput:
    """``[Q, V]`` scores of every query of ``split`` against its videos (videos encoded once, queries in chunks)."""
    model.eval()
    gallery = model.encode_gallery(split.frames.to(device), split.frame_mask.to(device))
    outputs = [model.score(model.encode_text(split.text[i : i + query_chunk].to(device)), gallery)
               for i in range(0, split.num_queries, query_chunk)]
    logits = torch.cat([o.logits for o in outputs]).float().cpu()
    # one model: every chunk has a cost when the first has one
    cost = None if outputs[0].cost is None else torch.cat([cast(torch.Tensor, o.cost) for o in outputs]).float().cpu()
    return T2VOutput(logits, cost)


def retrieval_metrics(logits: torch.Tensor, query_video: torch.Tensor) -> dict[str, float]:
    """R@1, R@5, R@10 (%), MdR and MnR of ``[Q, V]`` scores (higher = better)."""
    ranks = ranks_of_ground_truth(logits, query_video)
    result = recall_from_ranks(ranks, RECALL_KS)
    del result["SumR"]  # DAB's protocol reports the recalls and the ranks, not their sum
    result["MdR"] = float(ranks.double().median())
    result["MnR"] = float(ranks.double().mean())
    return result


def selective_metrics(output: T2VOutput, query_video: torch.Tensor, temperature: float) -> dict[str, dict[str, float]]:
    """``{"aurc": {confidence: value}, "R@1@25%": {...}, "R@1@10%": {...}}`` for every available confidence.

    ``temperature`` divides the ranking scores into the training logits (1 for the cosine heads, whose logits
    are already scaled; the PAC :math:`\\tau` for the Gaussian heads).
    """
    correct = ranks_of_ground_truth(output.logits, query_video) == 1
    logits = output.logits / temperature
    opinion = GalleryUncertainty(k=min(10, logits.shape[1]), tau=1.0)(logits, logits)
    confidences: dict[str, torch.Tensor] = {}
    if output.cost is not None:
        confidences["kl_margin"] = kl_margin(output.cost)
    confidences["max_score"] = SelectiveConfidence("max_score")(opinion)
    if output.cost is None:
        confidences["margin"] = SelectiveConfidence("margin")(opinion)
    for kind in EVIDENTIAL_CONFIDENCES:
        confidences[kind] = SelectiveConfidence(kind)(opinion)
    result: dict[str, dict[str, float]] = {"aurc": {}, "R@1@25%": {}, "R@1@10%": {}}
    for name, confidence in confidences.items():
        result["aurc"][name] = float(aurc(confidence, correct))
        at25, at10 = selective_recall(confidence, correct, COVERAGES).tolist()
        result["R@1@25%"][name], result["R@1@10%"][name] = at25, at10
    return result


def evaluate_split(model: T2VModel, split: T2VSplit, device: torch.device | str = "cpu", *,
                   selective: bool = True) -> dict[str, object]:
    """:func:`retrieval_metrics` of ``split`` and, with ``selective``, :func:`selective_metrics` merged in."""
    output = score_split(model, split, device)
    result: dict[str, object] = dict(retrieval_metrics(output.logits, split.query_video))
    if selective:
        temperature = float(model.pac_tau().detach()) if model.config.head.gaussian else 1.0
        result.update(selective_metrics(output, split.query_video, temperature))
    return result


@torch.no_grad()
def query_cost(model: T2VModel, split: T2VSplit, device: torch.device | str = "cpu",
               queries: int = 32) -> dict[str, float]:
    """Per-query retrieval cost against the gallery of ``split`` with its frames already encoded.

    ``flops_per_query``: floating-point operations of encoding one query and scoring it against every video
    (``torch.utils.flop_counter``, matrix products and attention); ``latency_ms_per_query``: median wall time
    of that, one query at a time, over the first ``queries`` queries. The query-independent side
    (:meth:`~reference_models.dab.model.T2VModel.encode_gallery` as a server prepares it, ``prepare_kl=True``:
    frame tokens, mean pooling, the base's videos at unit norm, video Gaussians and their side of the KL) is
    computed once beforehand and not counted.
    """
    model.eval()
    gallery = model.encode_gallery(split.frames.to(device), split.frame_mask.to(device), prepare_kl=True)
    text = split.text[:queries].to(device)
    counter = FlopCounterMode(display=False)
    with counter:
        model.score(model.encode_text(text[:1]), gallery)
    times = []
    for i in range(text.shape[0]):
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        model.score(model.encode_text(text[i : i + 1]), gallery)
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - start) * 1e3)
    return {"flops_per_query": float(counter.get_total_flops()),
            "latency_ms_per_query": float(torch.tensor(times).median()), "gallery_videos": split.num_videos}


def multi_positive_ranks(scores: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
    """1-based rank of each query's best-ranked positive video, when several videos count as correct.

    ``scores`` ``[Q, V]`` (higher = better), ``positives`` ``[Q, V]`` bool with at least one True per row. The
    rank is 1 + the number of *non-positive* videos scoring at least the best positive's score (ties count
    against the model, as in :func:`~evidential_prvr.metrics.ranks_of_ground_truth`); with one positive per
    row it is that function's rank.
    """
    if scores.shape != positives.shape or scores.dim() != 2:
        raise ValueError(f"scores and positives must both be [Q, V], got {tuple(scores.shape)} and "
                         f"{tuple(positives.shape)}")
    if not bool(positives.any(dim=1).all()):
        raise ValueError("every query needs at least one positive video")
    best = scores.masked_fill(~positives, float("-inf")).max(dim=1, keepdim=True).values
    return 1 + ((scores >= best) & ~positives).sum(dim=1)
