"""Uncertainty diagnostics of a Gaussian head, so that "the variances mean something" is read, not guessed.

For the queries of a split (normally the all-captions test) and its videos, :func:`gaussian_diagnostics` reports

* ``sigma2``: the mean variance :math:`\\sigma^2 = e^{\\log\\sigma^2}` (over queries or videos and dimensions) of
  the text Gaussians before the bridge (``text``), after it (``bridged``) and of the video Gaussians
  (``video``), and ``ordering``, those three sorted from the largest (DAB's paper: video 2.979 > bridged 0.935 >
  text 0.507);
* ``video_sigma2_by_events``: the video mean variance per number of distinct events of the video, and
  ``text_sigma2_by_kind`` / ``bridged_sigma2_by_kind``: the text mean variance per caption kind (``specific`` /
  ``generic``), when the labels are known (``benchmark_meta.json`` of the embedded benchmarks);
* ``bridge``: the bridge's displacement of the text mean toward its own video's mean: ``shift`` (mean
  :math:`\\lVert\\hat\\mu_t - \\mu_t\\rVert`), ``distance_before`` / ``distance_after`` (mean
  :math:`\\lVert\\mu_t - \\mu_v\\rVert` and :math:`\\lVert\\hat\\mu_t - \\mu_v\\rVert` to the own video),
  ``closed_fraction`` (mean over queries of :math:`1 - \\lVert\\hat\\mu_t - \\mu_v\\rVert / \\lVert\\mu_t -
  \\mu_v\\rVert`: 1 = the bridge lands on the own video's mean, 0 = no closer, < 0 = farther),
  ``cosine_to_own`` (mean cosine between the shift and the direction to the own video, over queries the bridge
  moves) and ``own_cost_before`` / ``own_cost_after`` (mean cost of the own pair with the text before and after
  the bridge);
* ``variance_share``: the share of the cost that comes from the variances, over every query-video pair
  (``all_pairs``) and over the own pairs (``own_pairs``). For the KL cost
  :math:`D_{\\mathrm{KL}}(Q_v \\| \\hat P_t)` it is the part :math:`\\tfrac12\\sum_d [r_d - \\log r_d - 1]`,
  :math:`r_d = \\sigma^2_{v,d} / \\hat\\sigma^2_{t,d}`, of the total (the rest is the mean part
  :math:`\\tfrac12\\sum_d (\\mu_{v,d} - \\hat\\mu_{t,d})^2 / \\hat\\sigma^2_{t,d}`); for :math:`W_2^2` it is
  :math:`\\lVert\\sigma_v - \\hat\\sigma_t\\rVert^2` of :math:`\\lVert\\mu_v - \\hat\\mu_t\\rVert^2 +
  \\lVert\\sigma_v - \\hat\\sigma_t\\rVert^2`. Both parts are non-negative, so the share is in [0, 1];
* ``variance_moves``: how much of each query's ranking the variance part moves: the own video's rank by the whole
  cost against its rank by the mean part alone, as the share of queries whose rank ``changed``, the
  ``mean_abs_change`` of the rank, the shares it ``helped`` (moved up) and ``hurt``, and R@1 both ways
  (``top1_full``, ``top1_mean_part``, as fractions), also ``by_kind.<kind>`` of caption;
* ``variance_free``: the cost split instead into a **variance-free mean term**, the cost of the means alone with
  unit variances on both sides (:func:`variance_free_split`: KL :math:`\\tfrac12\\lVert\\mu_v - \\hat\\mu_t\\rVert^2`,
  :math:`W_2^2` :math:`\\lVert\\mu_v - \\hat\\mu_t\\rVert^2`), and the rest (everything the variances do, the
  division of the mean distance by :math:`\\hat\\sigma^2_t` included; either sign): ``mean_term_share`` (the mean
  term's share of the summed cost over every pair) and ``moves``, the own video's rank by the whole cost against
  its rank by the mean term alone, as in ``variance_moves`` (also ``by_kind.<kind>``). Unlike the mean part above,
  which divides by the text variance, this term leaves the variances out entirely, so "decided by the means" read
  off it does rule the variances out;
* ``text_sigma2_vs_own_rank``: Spearman (:func:`spearman_interval`) of each query's mean text variance and its own
  video's rank by the whole cost (a text variance that says how hard a query is correlates positively), and
  ``video_sigma2_vs_events``: of each video's mean variance and its number of events (when known);
* ``scale``: the mean norm of the (bridged) text means and of the video means (unnormalised, against the unit
  vectors of the cosine) and ``cost_sd_per_query``, the mean over queries of the s.d. of the cost over the videos
  (divided by the PAC temperature it is the spread of the PAC logits, to set against the base's scaled cosine).

:func:`model_diagnostics` computes them for a trained :class:`~reference_models.dab.model.T2VModel` (``None`` for
the cosine heads, which have no variances); :func:`benchmark_labels` reads the labels of a data root.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import torch

from evidential_prvr.functional import (
    paired_gaussian_kl,
    paired_wasserstein2,
    pairwise_gaussian_kl,
    pairwise_wasserstein2,
)
from evidential_prvr.metrics import ranks_of_ground_truth
from evidential_prvr.probabilistic import ConditionedDistributionBridge, DiagonalGaussian
from reference_models.dab.data import T2VSplit
from reference_models.dab.model import T2VModel

__all__ = ["benchmark_labels", "benchmark_specificity", "cost_parts", "format_diagnostics", "gaussian_diagnostics",
           "model_diagnostics", "spearman_interval", "variance_free_split"]


def cost_parts(video_mu: torch.Tensor, video_logvar: torch.Tensor, text_mu: torch.Tensor, text_logvar: torch.Tensor,
               cost: str = "kl") -> tuple[torch.Tensor, torch.Tensor]:
    """The mean part and the variance part of the cost of every text ``[q, D]`` against every video (``[V, D]``,
    or ``[q, V, D]`` when each text has its own video Gaussians); each ``[q, V]``, their sum is the cost.

    The variance part is the cost with the means set equal (zero on both sides), the mean part the rest. Against
    one gallery ``[V, D]`` both come from the library's pairwise costs (matrix products, no ``[q, V, D]`` tensor);
    with per-text videos from its paired ones.
    """
    if video_mu.dim() == 2:
        pairwise = _pairwise(cost)
        full = pairwise(video_mu, video_logvar, text_mu, text_logvar).T
        variance = pairwise(torch.zeros_like(video_mu), video_logvar, torch.zeros_like(text_mu), text_logvar).T
        return full - variance, variance
    mean, variance = _parts(video_mu, video_logvar, text_mu[:, None, :], text_logvar[:, None, :], cost)
    return mean, variance


def variance_free_split(video_mu: torch.Tensor, video_logvar: torch.Tensor, text_mu: torch.Tensor,
                        text_logvar: torch.Tensor, cost: str = "kl") -> tuple[torch.Tensor, torch.Tensor]:
    """The cost of every text against every video split into its variance-free mean term and the rest.

    The mean term is the library's paired cost of the two means with unit variances on both sides (KL:
    :math:`\\tfrac12\\lVert\\mu_v - \\hat\\mu_t\\rVert^2`, :math:`W_2^2`: :math:`\\lVert\\mu_v - \\hat\\mu_t\\rVert^2`; DAB,
    Key Design 3's cost :math:`D_{\\mathrm{KL}}(Q_v \\| \\hat P_t)` with the variances set to one), so it depends on
    the distances of the means alone; the rest is the cost minus it (the variance part and the variance-weighting of
    the mean distance), of either sign.

    Parameters
    ----------
    video_mu, video_logvar : torch.Tensor
        ``[V, D]`` video Gaussians, or ``[q, V, D]`` when each text has its own.
    text_mu, text_logvar : torch.Tensor
        ``[q, D]`` (bridged) text Gaussians.
    cost : {"kl", "w2"}
        The cost.

    Returns
    -------
    mean_term, rest : torch.Tensor
        Each ``[q, V]``; their sum is the cost.
    """
    mean, variance = cost_parts(video_mu, video_logvar, text_mu, text_logvar, cost)
    term = _mean_term(video_mu, text_mu, cost)
    return term, mean + variance - term


def _pairwise(cost: str) -> Callable[..., torch.Tensor]:
    pairwise = {"kl": pairwise_gaussian_kl, "w2": pairwise_wasserstein2}.get(cost)
    if pairwise is None:
        raise ValueError(f"cost must be 'kl' or 'w2', got {cost!r}")
    return pairwise


def _mean_term(video_mu: torch.Tensor, text_mu: torch.Tensor, cost: str) -> torch.Tensor:
    """The variance-free mean term ``[q, V]``: the cost of the means with unit variances on both sides."""
    if video_mu.dim() == 2:
        return _pairwise(cost)(video_mu, torch.zeros_like(video_mu), text_mu, torch.zeros_like(text_mu)).T
    t_mu = text_mu[:, None, :].expand_as(video_mu)
    unit = torch.zeros_like(video_mu)
    paired = paired_gaussian_kl if cost == "kl" else paired_wasserstein2
    return paired(video_mu, unit, t_mu, unit)


def _parts(v_mu: torch.Tensor, v_lv: torch.Tensor, t_mu: torch.Tensor, t_lv: torch.Tensor,
           cost: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and variance parts of the cost of broadcastable Gaussians, summed over the last dimension.

    Both costs split into the cost with the text's variances on both sides (only the means differ) and the cost
    with the text's mean on both sides (only the variances differ), each the library's paired cost.
    """
    paired = {"kl": paired_gaussian_kl, "w2": paired_wasserstein2}.get(cost)
    if paired is None:
        raise ValueError(f"cost must be 'kl' or 'w2', got {cost!r}")
    shape = torch.broadcast_shapes(v_mu.shape, t_mu.shape)
    mean = paired(v_mu.expand(shape), t_lv.expand(shape), t_mu, t_lv)
    variance = paired(t_mu.expand(shape), v_lv.expand(shape), t_mu, t_lv)
    return mean, variance


def _mean_by(values: torch.Tensor, labels: Sequence[Any]) -> dict[str, float]:
    groups: dict[str, list[float]] = {}
    for value, label in zip(values.tolist(), labels):
        groups.setdefault(str(label), []).append(value)
    return {k: sum(v) / len(v) for k, v in sorted(groups.items())}


def gaussian_diagnostics(text: DiagonalGaussian, bridged: DiagonalGaussian, video: DiagonalGaussian,
                         query_video: torch.Tensor, *, cost: str = "kl", video_events: Sequence[int] | None = None,
                         query_kinds: Sequence[str] | None = None, chunk: int = 64) -> dict[str, Any]:
    """The diagnostics of the module documentation from the Gaussians themselves.

    Parameters
    ----------
    text, bridged : DiagonalGaussian
        ``[Q, D]`` text Gaussians before and after the bridge (the same twice when there is none).
    video : DiagonalGaussian
        ``[V, D]`` video Gaussians.
    query_video : torch.Tensor
        ``[Q]`` index of each query's own video.
    cost : {"kl", "w2"}
        The cost whose variance share is reported.
    video_events : sequence of int, optional
        ``V`` numbers of distinct events per video (``video_sigma2_by_events``).
    query_kinds : sequence of str, optional
        ``Q`` caption kinds (``text_sigma2_by_kind``, ``bridged_sigma2_by_kind``).
    chunk : int
        Queries per block of the all-pairs costs (memory ``chunk x V x D``).
    """
    text_s2, bridged_s2 = text.logvar.double().exp().mean(-1), bridged.logvar.double().exp().mean(-1)
    video_s2 = video.logvar.double().exp().mean(-1)
    sigma2 = {"text": float(text_s2.mean()), "bridged": float(bridged_s2.mean()), "video": float(video_s2.mean())}
    result: dict[str, Any] = {"queries": int(query_video.numel()), "videos": int(video.mu.shape[0]), "cost": cost,
                              "sigma2": sigma2,
                              "ordering": " > ".join(sorted(sigma2, key=lambda k: -sigma2[k]))}
    if video_events is not None:
        result["video_sigma2_by_events"] = _mean_by(video_s2, video_events)
    if query_kinds is not None:
        result["text_sigma2_by_kind"] = _mean_by(text_s2, query_kinds)
        result["bridged_sigma2_by_kind"] = _mean_by(bridged_s2, query_kinds)
    own_mu, own_lv = video.mu.double()[query_video], video.logvar.double()[query_video]
    t_mu, b_mu = text.mu.double(), bridged.mu.double()
    shift = b_mu - t_mu
    before, after = (own_mu - t_mu).norm(dim=-1), (own_mu - b_mu).norm(dim=-1)
    moved = shift.norm(dim=-1) > 0
    cosine = torch.nn.functional.cosine_similarity(shift[moved], (own_mu - t_mu)[moved], dim=-1)
    before_parts = _parts(own_mu, own_lv, t_mu, text.logvar.double(), cost)
    own_before = before_parts[0] + before_parts[1]
    own_parts = _parts(own_mu, own_lv, b_mu, bridged.logvar.double(), cost)
    own_after = own_parts[0] + own_parts[1]
    positive = before > 0
    result["bridge"] = {
        "shift": float(shift.norm(dim=-1).mean()), "distance_before": float(before.mean()),
        "distance_after": float(after.mean()),
        "closed_fraction": float((1.0 - after[positive] / before[positive]).mean()) if positive.any() else 0.0,
        "cosine_to_own": float(cosine.mean()) if moved.any() else 0.0,
        "own_cost_before": float(own_before.mean()), "own_cost_after": float(own_after.mean()),
    }
    mean_total = variance_total = free_total = 0.0
    v_mu, v_lv, bl = video.mu.double(), video.logvar.double(), bridged.logvar.double()
    full_ranks, mean_ranks, free_ranks, spread = [], [], [], []
    for start in range(0, t_mu.shape[0], chunk):
        mean, variance = cost_parts(v_mu, v_lv, b_mu[start:start + chunk], bl[start:start + chunk], cost)
        free = _mean_term(v_mu, b_mu[start:start + chunk], cost)
        mean_total += float(mean.sum())
        variance_total += float(variance.sum())
        free_total += float(free.sum())
        own_rows = query_video[start:start + chunk]
        full_ranks.append(ranks_of_ground_truth(-(mean + variance), own_rows))
        mean_ranks.append(ranks_of_ground_truth(-mean, own_rows))
        free_ranks.append(ranks_of_ground_truth(-free, own_rows))
        spread.append((mean + variance).std(dim=-1))
    own_mean, own_variance = float(own_parts[0].sum()), float(own_parts[1].sum())
    result["variance_share"] = {
        "all_pairs": variance_total / (mean_total + variance_total) if mean_total + variance_total > 0 else 0.0,
        "own_pairs": own_variance / (own_mean + own_variance) if own_mean + own_variance > 0 else 0.0,
    }
    full, by_mean, by_free = torch.cat(full_ranks), torch.cat(mean_ranks), torch.cat(free_ranks)
    if full.numel() >= 3:  # does the text variance say how hard the query is (its own video's rank)?
        result["text_sigma2_vs_own_rank"] = spearman_interval(text_s2, full.double())
    if video_events is not None and len(video_events) >= 3 and len(set(video_events)) > 1:
        result["video_sigma2_vs_events"] = spearman_interval(video_s2, [float(e) for e in video_events])
    total = mean_total + variance_total
    result["variance_moves"] = _moves(full, by_mean)
    result["variance_free"] = {"mean_term_share": free_total / total if total > 0 else 0.0,
                               "moves": _moves(full, by_free)}
    if query_kinds is not None:
        for kind in sorted(set(query_kinds)):
            rows = torch.tensor([k == kind for k in query_kinds])
            result["variance_moves"][f"by_kind.{kind}"] = _moves(full[rows], by_mean[rows])
            result["variance_free"]["moves"][f"by_kind.{kind}"] = _moves(full[rows], by_free[rows])
    result["scale"] = {"text_mean_norm": float(b_mu.norm(dim=-1).mean()),
                       "video_mean_norm": float(v_mu.norm(dim=-1).mean()),
                       "cost_sd_per_query": float(torch.cat(spread).mean())}
    return result


def _moves(full: torch.Tensor, by_mean: torch.Tensor) -> dict[str, float]:
    """How the variance part of the cost moves the own video's rank: ranked by the whole cost (``full``) against
    the mean part alone (``by_mean``), per query."""
    change = full.double() - by_mean.double()
    return {"changed": float((change != 0).double().mean()), "mean_abs_change": float(change.abs().mean()),
            "helped": float((change < 0).double().mean()), "hurt": float((change > 0).double().mean()),
            "top1_full": float((full == 1).double().mean()), "top1_mean_part": float((by_mean == 1).double().mean())}


@torch.no_grad()
def model_diagnostics(model: T2VModel, split: T2VSplit, device: torch.device | str = "cpu", *,
                      video_events: Sequence[int] | None = None, query_kinds: Sequence[str] | None = None,
                      query_chunk: int = 128, query_specificity: Sequence[float] | None = None) -> dict[str, Any] | None:
    """:func:`gaussian_diagnostics` of ``model`` on ``split`` (``None`` for the cosine heads ``base`` and ``bridge``).

    With X-Pool pooling a video's Gaussian depends on the text; each query's own video Gaussian (pooled for that
    query) stands for the video, and the video statistics are averaged over queries instead of videos. With the
    video-conditioned bridge (``bridge.condition = "video"``) a text is bridged once per video; ``bridged`` is
    each text bridged toward its own video, and ``variance_share.all_pairs`` is left out (only the own pairs
    are computed). With ``query_specificity`` (:func:`benchmark_specificity`) the result also holds
    ``text_sigma2_vs_specificity``: :func:`spearman_interval` of each query's mean text variance (before the bridge)
    and its drawn specificity (a variance that tracks how much a caption says correlates negatively).
    """
    if not model.plan.gaussian:
        return None
    model.eval()
    gallery = model.encode_gallery(split.frames.to(device), split.frame_mask.to(device))
    texts, bridged, own = [], [], []
    for i in range(0, split.num_queries, query_chunk):
        emb = model.encode_text(split.text[i:i + query_chunk].to(device))
        gaussian = model.gaussian_head(emb)
        texts.append(gaussian)
        rows = split.query_video[i:i + query_chunk].to(device)
        if gallery.video is None:  # X-Pool: the own video pooled for each query
            pooled = model.pool(emb, gallery)[torch.arange(rows.numel(), device=device), rows]
            token_logvar = cast(torch.Tensor, gallery.token_logvar)  # a Gaussian head's gallery has it
            own.append(model.video_gaussian(pooled, token_logvar[rows]))
        if model.plan.bridge == "video":  # toward the own video
            target = own[-1] if gallery.video is None else DiagonalGaussian(gallery.video.mu[rows],
                                                                             gallery.video.logvar[rows])
            bridged.append(cast(ConditionedDistributionBridge, model.bridge)(*gaussian, *target))
        elif model.plan.bridge == "text":  # the bridge that answers (a distilled one-step student when there is one)
            bridged.append(model.text_bridge()(*gaussian))
        else:
            bridged.append(gaussian)

    def cat(parts: list[DiagonalGaussian]) -> DiagonalGaussian:
        return DiagonalGaussian(torch.cat([p.mu for p in parts]).float().cpu(),
                                torch.cat([p.logvar for p in parts]).float().cpu())

    text, bridge = cat(texts), cat(bridged)
    query_video = split.query_video
    if gallery.video is not None:
        video = DiagonalGaussian(gallery.video.mu.float().cpu(), gallery.video.logvar.float().cpu())
    else:
        video, query_video = cat(own), torch.arange(split.num_queries)
        video_events = None if video_events is None else [video_events[int(v)] for v in split.query_video]
    result = gaussian_diagnostics(text, bridge, video, query_video, cost=model.config.head.cost,
                                  video_events=video_events, query_kinds=query_kinds)
    if query_specificity is not None:
        result["text_sigma2_vs_specificity"] = spearman_interval(text.logvar.double().exp().mean(-1),
                                                                 list(query_specificity))
    if gallery.video is None:
        result["videos"] = split.num_videos
    if gallery.video is None or model.plan.bridge == "video":
        result["variance_share"].pop("all_pairs")  # per-pair Gaussians: only the own pairs are computed
        del result["variance_moves"], result["variance_free"], result["scale"]["cost_sd_per_query"]  # every pair too
    return result


def benchmark_labels(root: str | Path, split: T2VSplit) -> tuple[list[int] | None, list[str] | None]:
    """``(video_events, query_kinds)`` of ``split`` from ``root/benchmark_meta.json`` (``(None, None)`` without it):
    each video's number of events and each query's caption kind."""
    path = Path(root) / "benchmark_meta.json"
    if not path.is_file():
        return None, None
    sentences = json.loads(path.read_text(encoding="utf-8"))["sentences"]
    labels = [sentences.get(str(i)) for i in split.sen_ids]
    if any(label is None for label in labels):
        return None, None
    events: dict[int, int] = {}
    for label, video in zip(labels, split.query_video.tolist()):
        events.setdefault(video, int(label["events"]))
    video_events = [events[v] for v in range(split.num_videos)] if len(events) == split.num_videos else None
    return video_events, [str(label["kind"]) for label in labels]


def benchmark_specificity(root: str | Path, split: T2VSplit) -> list[float] | None:
    """Each query's drawn specificity from ``root/benchmark_meta.json`` (``msrvtt-regime-varied``: ``named`` / 4 x
    (``caption_noise`` / ``noise``) squared), or ``None`` when the instance does not record it.

    Parameters
    ----------
    root : str or pathlib.Path
        The data root.
    split : T2VSplit
        The split whose queries are read.

    Returns
    -------
    list of float or None
        One specificity per query of ``split``.
    """
    path = Path(root) / "benchmark_meta.json"
    if not path.is_file():
        return None
    sentences = json.loads(path.read_text(encoding="utf-8"))["sentences"]
    labels = [sentences.get(str(i)) or {} for i in split.sen_ids]
    if not labels or any("specificity" not in label for label in labels):
        return None
    return [float(label["specificity"]) for label in labels]


def spearman_interval(x: Sequence[float] | torch.Tensor, y: Sequence[float] | torch.Tensor, *, n_boot: int = 1000,
                      seed: int = 0) -> dict[str, float]:
    """Spearman's rank correlation of ``x`` and ``y`` with a 95 % percentile bootstrap interval over the pairs.

    Parameters
    ----------
    x, y : sequence of float or torch.Tensor
        Paired values (e.g. each caption's mean text variance and its drawn specificity), at least 3.
    n_boot : int
        Bootstrap replicates (at least 100).
    seed : int
        Seed of the replicates.

    Returns
    -------
    dict
        ``{"spearman", "low", "high", "n"}``.
    """
    import numpy as np
    from scipy.stats import rankdata

    a, b = np.asarray(x, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()
    if a.shape != b.shape or a.size < 3:
        raise ValueError(f"x and y must be paired sequences of at least 3 values, got sizes {a.size} and {b.size}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 100:
        raise ValueError(f"n_boot must be an integer >= 100, got {n_boot!r}")

    def rho(rx: np.ndarray, ry: np.ndarray) -> np.ndarray:  # Pearson of the ranks, row by row
        rx, ry = rx - rx.mean(-1, keepdims=True), ry - ry.mean(-1, keepdims=True)
        den = np.sqrt((rx**2).sum(-1) * (ry**2).sum(-1))
        return np.where(den > 0, (rx * ry).sum(-1) / np.where(den > 0, den, 1.0), 0.0)

    idx = np.random.default_rng(seed).integers(a.size, size=(n_boot, a.size))
    boot = rho(rankdata(a[idx], axis=1), rankdata(b[idx], axis=1))
    low, high = np.percentile(boot, [2.5, 97.5])
    return {"spearman": float(rho(rankdata(a), rankdata(b))), "low": float(low), "high": float(high),
            "n": float(a.size)}


def format_diagnostics(diagnostics: dict[str, Any]) -> str:
    """The diagnostics of one run as a few lines of text (the printed report)."""
    s2, bridge = diagnostics["sigma2"], diagnostics["bridge"]
    lines = [f"mean sigma^2: text {s2['text']:.4g}, bridged text {s2['bridged']:.4g}, video {s2['video']:.4g} "
             f"({diagnostics['ordering']})"]
    if "video_sigma2_by_events" in diagnostics:
        lines.append("video sigma^2 by events: " + ", ".join(
            f"{k}: {v:.4g}" for k, v in diagnostics["video_sigma2_by_events"].items()))
    if "text_sigma2_by_kind" in diagnostics:
        lines.append("text / bridged sigma^2 by caption kind: " + ", ".join(
            f"{k}: {v:.4g} / {diagnostics['bridged_sigma2_by_kind'][k]:.4g}"
            for k, v in diagnostics["text_sigma2_by_kind"].items()))
    lines.append(f"bridge: shift {bridge['shift']:.4g}, distance to own video {bridge['distance_before']:.4g} -> "
                 f"{bridge['distance_after']:.4g} (closed {100 * bridge['closed_fraction']:.1f} %, cosine to own "
                 f"{bridge['cosine_to_own']:.3f}), own cost {bridge['own_cost_before']:.4g} -> "
                 f"{bridge['own_cost_after']:.4g}")
    share = diagnostics["variance_share"]
    lines.append("variance share of the cost: " + ", ".join(f"{k.replace('_', ' ')} {100 * v:.1f} %"
                                                             for k, v in share.items()))
    free = diagnostics.get("variance_free")
    if free is not None:
        moves = free["moves"]
        lines.append(f"variance-free mean term: {100 * free['mean_term_share']:.1f} % of the cost; ranking by it alone "
                     f"changes {100 * moves['changed']:.1f} % of the own ranks (R@1 {100 * moves['top1_full']:.1f} "
                     f"with the whole cost, {100 * moves['top1_mean_part']:.1f} by the mean term)")
    return "\n".join(lines)
