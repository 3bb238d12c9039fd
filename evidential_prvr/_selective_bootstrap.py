"""Selective-retrieval figures of a method-vs-base comparison over several runs, with the hierarchical interval.

:func:`~evidential_prvr.metrics.compare_runs` sets a method against its base on metrics that are means (or the
median) of per-query values. The selective-retrieval figures (the AURC of the top-1 error and the recall among
the most confident queries, :mod:`evidential_prvr._risk_coverage`) are not: they depend on how the queries of a
run are *ordered* by a confidence. :func:`compare_selective_runs` computes them for every run from its per-query
ranks and confidences, and their differences with the **same** hierarchical bootstrap as the recall metrics:
the same three levels (data instances, training seeds per model, queries shared by both models), the same
random stream for the same ``generator`` (so that ``"R@1@100%"``, the recall at full coverage, gets exactly the
replicates :func:`~evidential_prvr.metrics.hierarchical_bootstrap` gives ``"R@1"``), and the same percentile
interval; each resampled run's figure is recomputed on its resampled queries, ties included (a query drawn
twice is two queries of equal confidence, accepted or rejected together).

References
----------
A. C. Davison and D. V. Hinkley, *Bootstrap Methods and their Application*, 1997, Secs. 3.8 and 5.3 (the
hierarchical bootstrap and the percentile interval). Geifman and El-Yaniv, "Selective classification for deep
neural networks", NeurIPS 2017 (risk-coverage). DAB (ECCV 2026), "Key Findings": the KL margin as a selective
retrieval signal, AURC 0.429 -> 0.256 and R@1 at 25 % / 10 % coverage.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from evidential_prvr._hierarchical_bootstrap import RunComparison, Runs, _as_runs, _padded, _resamples

#: The selective figures DAB reports (its "Key Findings"): the AURC of the top-1 error and R@1 among the 10 %
#: and 25 % most confident queries.
SELECTIVE_METRICS = ("AURC", "R@1@10%", "R@1@25%")

_AT_COVERAGE = re.compile(r"^R@([1-9][0-9]*)@([0-9]+(?:\.[0-9]+)?)%$")


class _Metric(NamedTuple):
    kind: str  # "aurc" or "recall"
    k: int  # a hit is rank <= k
    coverage: float  # in (0, 1] for "recall"


def _check_metric(metric: object) -> _Metric:
    """The parsed name: ``"AURC"`` (top-1 error) or ``"R@K@C%"`` (R@K among the C % most confident queries)."""
    if not isinstance(metric, str):
        raise TypeError(f"metric must be a string such as 'AURC' or 'R@1@25%', got {type(metric).__name__}")
    if metric == "AURC":
        return _Metric("aurc", 1, 1.0)
    match = _AT_COVERAGE.match(metric)
    if match:
        coverage = float(match.group(2)) / 100.0
        if 0.0 < coverage <= 1.0:
            return _Metric("recall", int(match.group(1)), coverage)
    raise ValueError(f"metric must be 'AURC' or 'R@K@C%' (K >= 1, C in (0, 100]), got {metric!r}")


def _per_run(confidence: torch.Tensor, ranks: torch.Tensor, n: torch.Tensor,
             metrics: Sequence[_Metric]) -> torch.Tensor:
    """The figures of every run along the last dimension, ``[..., Q] -> [len(metrics), ...]`` (one sort for all).

    Only the first ``n[...]`` queries of a row count (the rest is padding). The operating points are one per
    distinct confidence, as in :func:`~evidential_prvr.metrics.risk_coverage`; AURC as
    :func:`~evidential_prvr.metrics.aurc` (flat start, trapezoids), the recall at a coverage as
    :func:`~evidential_prvr.metrics.selective_recall` (a group of ties cut by the coverage counts pro rata).
    """
    q = confidence.shape[-1]
    position = torch.arange(q, device=confidence.device)
    valid = position < n[..., None]
    values = confidence.masked_fill(~valid, -torch.inf)  # finite confidences: padding sorts last
    order = values.argsort(dim=-1, descending=True, stable=True)
    ordered = values.gather(-1, order)
    ordered_ranks = ranks.gather(-1, order)
    # the last query of each group of equal confidence ends an operating point
    ends = valid & torch.cat([ordered[..., :-1] != ordered[..., 1:],
                              torch.ones_like(ordered[..., :1], dtype=torch.bool)], dim=-1)
    # the previous operating point's last position (-1: none), for every position
    marked = torch.where(ends, position, torch.full_like(position, -1))
    before = torch.cat([torch.full_like(marked[..., :1], -1), marked.cummax(dim=-1).values[..., :-1]], dim=-1)
    accepted = (position + 1).to(torch.float64)
    nf = n.to(torch.float64)
    next_end: torch.Tensor | None = None
    out = []
    for metric in metrics:
        hits = ((ordered_ranks <= metric.k) & valid).to(torch.float64).cumsum(dim=-1)
        if metric.kind == "aurc":
            risk = 1.0 - hits / accepted
            coverage = accepted / nf[..., None]
            previous = before.clamp_min(0)
            prev_risk, prev_coverage = risk.gather(-1, previous), coverage.gather(-1, previous)
            area = torch.where(before < 0, coverage * risk, (coverage - prev_coverage) * 0.5 * (risk + prev_risk))
            out.append((area * ends).sum(dim=-1))
            continue
        if next_end is None:  # for every position, the last position of its group
            big = torch.full_like(position, q)
            next_end = torch.where(ends, position, big).flip(-1).cummin(dim=-1).values.flip(-1)
        # the operating point reached at the target count: the group holding position ceil(target) - 1
        target = metric.coverage * nf
        at = (torch.ceil(target - 1e-9 * nf) - 1).clamp_min(0).long()
        end = next_end.gather(-1, at[..., None])  # [..., 1]
        start = before.gather(-1, end)
        hits_end = hits.gather(-1, end)
        hits_start = torch.where(start >= 0, hits.gather(-1, start.clamp_min(0)), torch.zeros_like(hits_end))
        n_end, n_start = (end + 1).to(torch.float64), (start + 1).to(torch.float64)
        answered = hits_start + (target[..., None] - n_start) * (hits_end - hits_start) / (n_end - n_start)
        out.append((100.0 * answered / target[..., None]).squeeze(-1))
    return torch.stack(out)


def selective_run_metric(confidence: torch.Tensor, ranks: torch.Tensor, metric: str) -> torch.Tensor:
    """A selective-retrieval figure of the queries along the last dimension (one value per run).

    With the confidences :math:`\\kappa_q` (higher = more trusted) and the 1-based ranks :math:`r_q` of the
    :math:`Q` queries of a run, the queries are answered from the most confident down, and a group of equal
    confidences is answered together:

    * ``"AURC"``: :func:`~evidential_prvr.metrics.aurc` of the top-1 error :math:`[r_q > 1]` (lower is better);
    * ``"R@K@C%"``: :func:`~evidential_prvr.metrics.selective_recall` of the hits :math:`[r_q \\le K]` at coverage
      :math:`C/100`, in percent (``"R@1@100%"`` is R@1).

    Parameters
    ----------
    confidence : torch.Tensor
        ``[..., Q]`` finite float confidences.
    ranks : torch.Tensor
        ``[..., Q]`` 1-based ranks of the ground truth, the shape of ``confidence``.
    metric : str
        ``"AURC"`` or ``"R@K@C%"`` (e.g. ``"R@1@25%"``).

    Returns
    -------
    torch.Tensor
        ``[...]`` float64.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.metrics import selective_run_metric
    >>> confidence = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    >>> ranks = torch.tensor([[1, 4, 1, 2]])
    >>> selective_run_metric(confidence, ranks, "R@1@25%"), selective_run_metric(confidence, ranks, "R@1@100%")
    (tensor([100.], dtype=torch.float64), tensor([50.], dtype=torch.float64))

    References
    ----------
    Geifman and El-Yaniv, NeurIPS 2017 (risk-coverage); DAB (ECCV 2026), "Key Findings" (AURC, R@1 at 25 % and
    10 % coverage of the KL margin).
    """
    parsed = _check_metric(metric)
    for value, name in ((confidence, "confidence"), (ranks, "ranks")):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if not confidence.is_floating_point():
        raise TypeError(f"confidence must be a floating-point tensor, got {confidence.dtype}")
    if confidence.dim() < 1 or confidence.shape[-1] < 1:
        raise ValueError(f"confidence must be [..., Q] with Q >= 1, got shape {tuple(confidence.shape)}")
    if ranks.shape != confidence.shape:
        raise ValueError(f"ranks must have the shape of confidence {tuple(confidence.shape)}, got "
                         f"{tuple(ranks.shape)}")
    if not bool(torch.isfinite(confidence).all()):
        raise ValueError("confidence must be finite")
    if bool((ranks < 1).any()):
        raise ValueError(f"ranks must be 1-based (>= 1), got a minimum of {float(ranks.min()):g}")
    n = torch.full(confidence.shape[:-1], confidence.shape[-1], dtype=torch.long, device=confidence.device)
    return _per_run(confidence.double(), ranks.double(), n, [parsed])[0]


def _check_model(confidence: Runs, ranks: Runs, name: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    conf, rnk = _as_runs(confidence, f"{name}_confidence"), _as_runs(ranks, f"{name}_ranks")
    if len(conf) != len(rnk):
        raise ValueError(f"{name}_confidence and {name}_ranks must have the same data instances, got {len(conf)} "
                         f"and {len(rnk)}")
    for i, (c, r) in enumerate(zip(conf, rnk)):
        if c.shape != r.shape:
            raise ValueError(f"instance {i}: {name}_confidence and {name}_ranks must have one value per run and "
                             f"query, got shapes {tuple(c.shape)} and {tuple(r.shape)}")
        if float(r.min()) < 1:
            raise ValueError(f"{name}_ranks must be 1-based (>= 1), got a minimum of {float(r.min()):g}")
    return conf, rnk


def _replicate_model(confidence: torch.Tensor, ranks: torch.Tensor, seeds: torch.Tensor, inst: torch.Tensor,
                     u_seed: torch.Tensor, qidx: torch.Tensor, nq: torch.Tensor,
                     metrics: Sequence[_Metric]) -> torch.Tensor:
    """One model's figures in each replicate of a chunk, ``[M, b]``: the mean over the drawn instances of the mean
    over the drawn seeds of the figure of each drawn run on the drawn queries (the levels of
    :func:`~evidential_prvr.metrics.hierarchical_bootstrap`)."""
    ns = seeds[inst]  # [b, I]
    sidx = torch.minimum((u_seed * ns[..., None]).long(), ns[..., None] - 1)  # [b, I, S_max]
    svalid = torch.arange(u_seed.shape[-1])[None, None, :] < ns[..., None]
    where = (inst[..., None, None], sidx[..., :, None], qidx[..., None, :])
    per_run = _per_run(confidence[where], ranks[where], nq[..., None].expand(sidx.shape), metrics)  # [M, b, I, S]
    return ((per_run * svalid).sum(dim=-1) / ns).mean(dim=-1)


def _replicates(method: tuple[list[torch.Tensor], list[torch.Tensor]],
                base: tuple[list[torch.Tensor], list[torch.Tensor]], metrics: Sequence[_Metric], n_boot: int,
                generator: torch.Generator) -> torch.Tensor:
    """``[M, n_boot]`` replicate differences method - base of each metric, all from one set of resamples drawn as
    :func:`~evidential_prvr.metrics.hierarchical_bootstrap` draws them (the same chunks, the same calls to the
    generator in the same order)."""
    (m_conf, _), (m_rank, m_seeds) = _padded(method[0]), _padded(method[1])
    (b_conf, _), (b_rank, b_seeds) = _padded(base[0]), _padded(base[1])
    out = []
    for d in _resamples(n_boot, None, m_seeds, b_seeds, [r.shape[1] for r in method[1]], generator):
        stat_m = _replicate_model(m_conf, m_rank, m_seeds, d.inst, d.u_method, d.qidx, d.nq, metrics)
        stat_b = _replicate_model(b_conf, b_rank, b_seeds, d.inst, d.u_base, d.qidx, d.nq, metrics)
        out.append(stat_m - stat_b)
    return torch.cat(out, dim=1)


def _point(confidence: list[torch.Tensor], ranks: list[torch.Tensor],
           metric: _Metric) -> tuple[float, float, int]:
    """Mean over instances of the mean over seeds, the s.d. over all runs (ddof 1) and the number of runs."""
    per_run = [_per_run(c, r, torch.full(c.shape[:1], c.shape[1]), [metric])[0] for c, r in zip(confidence, ranks)]
    flat = torch.cat(per_run)
    mean = float(torch.stack([v.mean() for v in per_run]).mean())
    sd = float(flat.std(unbiased=True)) if flat.numel() > 1 else float("nan")
    return mean, sd, int(flat.numel())


def compare_selective_runs(
    method_confidence: Runs,
    method_ranks: Runs,
    base_confidence: Runs,
    base_ranks: Runs,
    metrics: Sequence[str] = SELECTIVE_METRICS,
    *,
    n_boot: int = 2000,
    level: float = 0.95,
    generator: torch.Generator | int | None = None,
) -> dict[str, RunComparison]:
    r"""Selective-retrieval figures per model over its runs, and their difference with the hierarchical interval.

    Each model answers with its own confidence (e.g. DAB's KL margin against the base's max-score margin). For
    every run the figure (:func:`selective_run_metric`) is computed on its queries; a model's estimate is the
    mean over instances of the mean over seeds, and the interval of the difference method - base is the
    percentile interval at ``level`` of replicates drawn by the three-level resampling of
    :func:`~evidential_prvr.metrics.hierarchical_bootstrap` (instances; each model's seeds within an instance;
    the same queries for both models), each resampled run's figure recomputed on the resampled queries:

    .. math::

       \hat\theta^*_b = \frac{1}{I} \sum_{j=1}^{I} \frac{1}{S_{i^*_j}} \sum_{t=1}^{S_{i^*_j}}
       f\bigl(\kappa^{\text{method}}_{i^*_j, s^*_{jt}, q^*_j},\, r^{\text{method}}_{i^*_j, s^*_{jt}, q^*_j}\bigr)
       - (\text{the same for base}).

    The random stream is that of :func:`~evidential_prvr.metrics.compare_runs`: with the same ``generator`` (an
    int) and data, ``"R@1@100%"`` here and ``"R@1"`` there have the same replicates and interval.

    Parameters
    ----------
    method_confidence, method_ranks : torch.Tensor, numpy.ndarray or sequence
        The method's per-query confidences (higher = more trusted; finite) and 1-based ranks, each ``[I, S, Q]``
        or a sequence of ``I`` ``[S_i, Q_i]`` arrays (the same shapes for both).
    base_confidence, base_ranks : torch.Tensor, numpy.ndarray or sequence
        The same for the base; instance ``i`` has the method's ``Q_i`` queries in the same order (the number of
        seeds may differ).
    metrics : sequence of str
        Names of :func:`selective_run_metric` (default :data:`SELECTIVE_METRICS`).
    n_boot : int
        Replicates per metric (>= 1).
    level : float
        Nominal coverage in (0, 1).
    generator : torch.Generator or int, optional
        The random stream. An int: every metric from the same resamples (those ``compare_runs`` draws with that
        int), all figures computed from one sort per resampled run; ``None``: the same with a fresh seed; a
        ``torch.Generator``: drawn from by each metric in turn, in the order of ``metrics``.

    Returns
    -------
    dict of str to RunComparison
        In the order of ``metrics``; ``higher_is_better`` is False for ``"AURC"``.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.metrics import compare_selective_runs
    >>> g = torch.Generator().manual_seed(0)
    >>> ranks = torch.randint(1, 4, (2, 3, 200), generator=g)       # 2 data seeds x 3 seeds x 200 queries
    >>> informed = -ranks.double() + 0.1 * torch.rand(ranks.shape, generator=g, dtype=torch.float64)
    >>> blind = torch.rand(ranks.shape, generator=g, dtype=torch.float64)
    >>> result = compare_selective_runs(informed, ranks, blind, ranks, ("AURC",), n_boot=300, generator=0)
    >>> result["AURC"].beats_base                                     # the confidence that knows the ranks
    True

    References
    ----------
    Davison and Hinkley (1997), Secs. 3.8 and 5.3; Geifman and El-Yaniv (NeurIPS 2017); DAB (ECCV 2026), "Key
    Findings" (the KL margin's AURC and R@1 at 25 % / 10 % coverage).
    """
    if isinstance(metrics, str) or not isinstance(metrics, Sequence) or len(metrics) == 0:
        raise TypeError(f"metrics must be a non-empty sequence of metric names, got {metrics!r}")
    parsed = {metric: _check_metric(metric) for metric in metrics}
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level must be a number in (0, 1), got {level!r}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be an integer >= 1, got {n_boot!r}")
    if not (generator is None or isinstance(generator, torch.Generator)
            or (isinstance(generator, (int, np.integer)) and not isinstance(generator, bool))):
        raise TypeError(f"generator must be a torch.Generator, an int or None, got {type(generator).__name__}")
    method = _check_model(method_confidence, method_ranks, "method")
    base = _check_model(base_confidence, base_ranks, "base")
    if len(method[0]) != len(base[0]):
        raise ValueError(f"method and base must have the same data instances, got {len(method[0])} and "
                         f"{len(base[0])}")
    for i, (x, y) in enumerate(zip(method[1], base[1])):
        if x.shape[1] != y.shape[1]:
            raise ValueError(f"instance {i}: method and base must rank the same queries (paired), got "
                             f"{x.shape[1]} and {y.shape[1]} queries")
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    if isinstance(generator, torch.Generator):  # drawn from by each metric in turn, as compare_runs does
        replicates = torch.cat([_replicates(method, base, [metric], int(n_boot), generator)
                                for metric in parsed.values()])
    else:  # an int (or a fresh seed): every metric from the same resamples, computed together
        seed = int(generator) if generator is not None else int(torch.randint(0, 2**62, (1,)))
        replicates = _replicates(method, base, list(parsed.values()), int(n_boot), torch.Generator().manual_seed(seed))
    results: dict[str, RunComparison] = {}
    for (name, metric), values in zip(parsed.items(), replicates):
        m_mean, m_sd, m_n = _point(*method, metric)
        b_mean, b_sd, b_n = _point(*base, metric)
        low, high = torch.quantile(values, q).tolist()
        results[name] = RunComparison(name, m_mean, m_sd, b_mean, b_sd, m_n, b_n, m_mean - b_mean, low, high,
                                      float(level), int(n_boot), metric.kind != "aurc")
    return results
