"""Method-vs-base comparisons over several training runs: a metric's mean and s.d. per model, and the
difference with a hierarchical (multi-level) bootstrap interval over data instances, training seeds and
queries.

A comparison of two retrieval models is rarely decided by the test queries alone: two runs of the same
model that differ only in the training seed, or in the benchmark instance (the data seed of a generated
benchmark, or a resampled test set), differ by more than a per-query test of one run allows. The functions
here take the per-query ranks (or per-query values) of every run of both models, indexed by
``(data instance, training seed, query)``, and resample all three levels (Davison and Hinkley 1997, Sec. 3.8;
Field and Welsh 2007; Bouthillier et al. 2021).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from evidential_prvr._recall import DEFAULT_KS, check_ks, hits_within

#: Metrics where a smaller value is better (the verdict of a comparison flips its sign for them).
LOWER_IS_BETTER = frozenset({"MnR", "MdR"})

_RECALL = re.compile(r"^R@([1-9][0-9]*)$")
_NAMED = ("MnR", "MdR", "SumR", "MeanR", "mean", "median")
#: Elements of the largest block of gathered values one chunk of replicates may hold (32 MiB of float64).
_BLOCK_ELEMENTS = 1 << 22

#: What :func:`hierarchical_bootstrap` and :func:`compare_runs` take for one model's runs.
Runs = torch.Tensor | np.ndarray | Sequence[torch.Tensor | np.ndarray]


def _check_metric(metric: str) -> tuple[str, int]:
    """``(kind, k)`` of a metric name: ``("recall", K)`` for ``"R@K"``, else ``(name, 0)``."""
    if not isinstance(metric, str):
        raise TypeError(f"metric must be a string, got {type(metric).__name__}")
    match = _RECALL.match(metric)
    if match:
        return "recall", int(match.group(1))
    if metric not in _NAMED:
        raise ValueError(f"metric must be 'R@K' (K >= 1), one of {', '.join(_NAMED)}; got {metric!r}")
    return metric, 0


def _per_query(values: torch.Tensor, kind: str, k: int, ks: tuple[int, ...]) -> torch.Tensor:
    """The per-query contribution whose mean over queries is the metric (every kind but the medians)."""
    if kind == "recall":  # the per-query terms of recall_from_ranks, so the means are its figures
        return 100.0 * hits_within(values, (k,))[..., 0].double()
    if kind in ("SumR", "MeanR"):
        hits = hits_within(values, ks).sum(dim=-1).double()
        return hits.mul_(100.0 / (len(ks) if kind == "MeanR" else 1))
    return values.double()  # MnR, mean


def run_metric(ranks: torch.Tensor, metric: str, *, ks: Sequence[int] = DEFAULT_KS) -> torch.Tensor:
    r"""A retrieval metric of the per-query ranks along the last dimension (one value per run).

    With the 1-based ranks :math:`r_1, \dots, r_Q` of the ground truth of the :math:`Q` queries of a run:

    .. math::

       \mathrm{R@}K = \frac{100}{Q} \sum_q [r_q \le K], \qquad
       \mathrm{SumR} = \sum_{K \in \mathcal{K}} \mathrm{R@}K, \qquad
       \mathrm{MeanR} = \frac{1}{|\mathcal{K}|} \mathrm{SumR}, \qquad
       \mathrm{MnR} = \frac{1}{Q} \sum_q r_q,

    and :math:`\mathrm{MdR}` the lower median of the ranks (``torch.median``: the :math:`\lceil Q/2 \rceil`-th
    smallest). ``"mean"`` and ``"median"`` take any per-query values (an average precision, a per-query
    recall) instead of ranks.

    Parameters
    ----------
    ranks : torch.Tensor
        ``[..., Q]`` 1-based ranks (any integer or float dtype; ``Q >= 1``), or per-query values for
        ``"mean"`` / ``"median"``.
    metric : str
        ``"R@K"`` (any ``K >= 1``), ``"MnR"``, ``"MdR"``, ``"SumR"``, ``"MeanR"`` (HUD's mean recall), ``"mean"``
        or ``"median"``.
    ks : sequence of int
        The cut-offs :math:`\mathcal{K}` of ``SumR`` and ``MeanR``.

    Returns
    -------
    torch.Tensor
        ``[...]`` float64 values (recalls in percent).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.metrics import run_metric
    >>> ranks = torch.tensor([[1, 2, 7, 1], [3, 1, 1, 40]])
    >>> run_metric(ranks, "R@1")
    tensor([50., 50.], dtype=torch.float64)
    >>> run_metric(ranks, "SumR", ks=(1, 5, 10))
    tensor([225., 200.], dtype=torch.float64)
    >>> run_metric(ranks, "MdR")
    tensor([1., 1.], dtype=torch.float64)

    References
    ----------
    R@K and SumR: Holmes §4.1, "Metrics" (the MS-SL protocol); MnR and MdR: the text-to-video protocol of
    DAB §4 (CLIP4Clip); the mean of R@1, 5, 10, 50: HUD §4 (WebVid-CoVR).
    """
    kind, k = _check_metric(metric)
    ks = check_ks(ks)
    ranks = torch.as_tensor(ranks)
    if ranks.dim() < 1 or ranks.shape[-1] < 1:
        raise ValueError(f"ranks must be [..., Q] with Q >= 1, got shape {tuple(ranks.shape)}")
    values = ranks.double()
    if not bool(torch.isfinite(values).all()):
        raise ValueError("ranks must be finite")
    if kind not in ("mean", "median") and bool((values < 1).any()):
        raise ValueError(f"ranks must be 1-based (>= 1) for {metric}, got a minimum of {float(values.min()):g}")
    if kind in ("MdR", "median"):
        return values.median(dim=-1).values
    return _per_query(values, kind, k, ks).mean(dim=-1)


def _as_runs(x: object, name: str) -> list[torch.Tensor]:
    """The runs of one model as a list of ``[S_i, Q_i]`` float64 tensors, one per data instance."""
    if isinstance(x, (torch.Tensor, np.ndarray)):
        t = torch.as_tensor(x)
        if t.dim() != 3:
            raise ValueError(f"{name} must be [I, S, Q] (instances, seeds, queries) or a sequence of [S_i, Q_i] "
                             f"tensors, got shape {tuple(t.shape)}")
        items = list(t.unbind(0))
    elif isinstance(x, Sequence) and not isinstance(x, (str, bytes)):
        items = [torch.as_tensor(np.asarray(v)) if not isinstance(v, torch.Tensor) else v for v in x]
    else:
        raise TypeError(f"{name} must be a tensor, an array or a sequence of them, got {type(x).__name__}")
    if not items:
        raise ValueError(f"{name} must hold at least one data instance, got none")
    runs = []
    for i, item in enumerate(items):
        if item.dim() != 2 or item.shape[0] < 1 or item.shape[1] < 1:
            raise ValueError(f"{name}[{i}] must be [S, Q] with S >= 1 seeds and Q >= 1 queries, got shape "
                             f"{tuple(item.shape)}")
        item = item.detach().to("cpu", torch.float64)
        if not bool(torch.isfinite(item).all()):
            raise ValueError(f"{name}[{i}] must be finite")
        runs.append(item)
    return runs


def _check_pair(method: Runs, base: Runs, kind: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    m, b = _as_runs(method, "method"), _as_runs(base, "base")
    if len(m) != len(b):
        raise ValueError(f"method and base must have the same data instances, got {len(m)} and {len(b)}")
    for i, (x, y) in enumerate(zip(m, b)):
        if x.shape[1] != y.shape[1]:
            raise ValueError(f"instance {i}: method and base must rank the same queries (paired), got "
                             f"{x.shape[1]} and {y.shape[1]} queries (shapes {tuple(x.shape)}, {tuple(y.shape)})")
    if kind not in ("mean", "median"):
        for name, runs in (("method", m), ("base", b)):
            low = min(float(r.min()) for r in runs)
            if low < 1:
                raise ValueError(f"{name} ranks must be 1-based (>= 1), got a minimum of {low:g}")
    return m, b


def _padded(runs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``[I, S_max, Q_max]`` runs (padding is never read) and ``[I]`` seed counts."""
    s_max = max(r.shape[0] for r in runs)
    q_max = max(r.shape[1] for r in runs)
    out = torch.zeros(len(runs), s_max, q_max, dtype=torch.float64)
    for i, r in enumerate(runs):
        out[i, : r.shape[0], : r.shape[1]] = r
    return out, torch.tensor([r.shape[0] for r in runs])


def _point(runs: list[torch.Tensor], metric: str, ks: tuple[int, ...]) -> tuple[float, float, int]:
    """Mean over instances of the mean over seeds, the s.d. over all runs (ddof 1) and the number of runs."""
    per_run = [run_metric(r, metric, ks=ks) for r in runs]
    flat = torch.cat(per_run)
    mean = float(torch.stack([v.mean() for v in per_run]).mean())
    sd = float(flat.std(unbiased=True)) if flat.numel() > 1 else float("nan")
    return mean, sd, int(flat.numel())


def _replicate_model(values: torch.Tensor, seeds: torch.Tensor, inst: torch.Tensor, u_seed: torch.Tensor,
                     qidx: torch.Tensor, qvalid: torch.Tensor, nq: torch.Tensor, kind: str, k: int,
                     ks: tuple[int, ...]) -> torch.Tensor:
    """One model's metric in each replicate of a chunk: ``[b]``."""
    ns = seeds[inst]  # [b, I] seed counts of the drawn instances
    sidx = torch.minimum((u_seed * ns[..., None]).long(), ns[..., None] - 1)  # [b, I, S_max]
    svalid = torch.arange(u_seed.shape[-1])[None, None, :] < ns[..., None]
    gathered = values[inst[..., None, None], sidx[..., :, None], qidx[..., None, :]]  # [b, I, S, Q]
    if kind in ("MdR", "median"):
        filled = torch.where(qvalid[..., None, :], gathered, torch.full_like(gathered, math.inf))
        ordered = filled.sort(dim=-1).values
        position = ((nq - 1) // 2)[..., None, None].expand(*ordered.shape[:-1], 1)
        per_run = ordered.gather(-1, position).squeeze(-1)
    else:
        contrib = _per_query(gathered, kind, k, ks) * qvalid[..., None, :]
        per_run = contrib.sum(dim=-1) / nq[..., None]
    per_instance = (per_run * svalid).sum(dim=-1) / ns  # [b, I]
    return per_instance.mean(dim=-1)


def hierarchical_bootstrap(
    method: Runs,
    base: Runs,
    metric: str,
    *,
    n_boot: int = 2000,
    ks: Sequence[int] = DEFAULT_KS,
    generator: torch.Generator | int | None = None,
    chunk: int | None = None,
) -> torch.Tensor:
    r"""Bootstrap replicates of the difference ``metric(method) - metric(base)`` over instances, seeds and queries.

    The data are the per-query ranks of every run: run :math:`(i, s)` of a model is training seed :math:`s`
    on data instance :math:`i` (a benchmark generated with data seed :math:`i`, or one test set), and both
    models rank the same :math:`Q_i` queries of instance :math:`i`. One replicate resamples, with
    replacement,

    1. :math:`I` data instances :math:`i^*_1, \dots, i^*_I` among the :math:`I`;
    2. within each drawn instance, :math:`S` training seeds among that instance's :math:`S` runs, for each
       model separately (the runs of the two models are independent trainings);
    3. within each drawn instance, :math:`Q_i` queries among its :math:`Q_i`, **the same for both models**
       (paired: the query's difficulty cancels in the difference).

    Each resampled run's metric is computed on the resampled queries (:func:`run_metric`), averaged over the
    seeds of an instance, then over the instances:

    .. math::

       \hat\theta^*_b = \frac{1}{I} \sum_{j=1}^{I} \frac{1}{S_{i^*_j}} \sum_{t=1}^{S_{i^*_j}}
       m\bigl(r^{\text{method}}_{i^*_j, s^*_{jt}, q^*_{j}}\bigr) - (\text{the same for base}),

    the cluster ("two-stage", here three-stage) bootstrap of Davison and Hinkley (1997, Sec. 3.8) applied
    to the nested design instance > seed > query. Resampling at every level keeps each level's variance in
    the interval; Davison and Hinkley and Field and Welsh (2007) show it tends to over- rather than
    under-state the variance of the mean, i.e. the interval errs on the wide side.

    Parameters
    ----------
    method, base : torch.Tensor, numpy.ndarray or sequence
        ``[I, S, Q]`` ranks (instances, seeds, queries), or a sequence of ``I`` ``[S_i, Q_i]`` arrays when the
        instances have different numbers of queries or seeds. Instance ``i`` of ``method`` and ``base`` must
        have the same ``Q_i`` queries in the same order; the numbers of seeds may differ.
    metric : str
        See :func:`run_metric` (``"mean"`` / ``"median"`` for per-query values other than ranks).
    n_boot : int
        Replicates (>= 1).
    ks : sequence of int
        Cut-offs of ``SumR`` and ``MeanR``.
    generator : torch.Generator or int, optional
        The random stream (an int seeds a new CPU generator); default: a fresh generator seeded from the
        global one.
    chunk : int, optional
        Replicates drawn and evaluated together (bounds the memory to ``chunk * I * (S_m + S_b) * Q_max``
        values; default: as many as keep that block to 32 MiB). The stream is: per chunk of ``b`` replicates,
        ``randint(I, (b, I))`` instances, ``rand(b, I, S_max)`` for the method's seeds, the same for the base's
        and ``rand(b, I, Q_max)`` for the queries (an index is ``floor(u * n)``).

    Returns
    -------
    torch.Tensor
        ``[n_boot]`` float64 replicate differences.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.metrics import hierarchical_bootstrap
    >>> g = torch.Generator().manual_seed(0)
    >>> base = torch.randint(1, 20, (2, 3, 50), generator=g)          # 2 data seeds x 3 training seeds x 50 queries
    >>> method = torch.clamp(base - 3, min=1)                          # every query 3 places higher (or first)
    >>> replicates = hierarchical_bootstrap(method, base, "MnR", n_boot=500, generator=1)
    >>> replicates.shape, bool((replicates < 0).all())
    (torch.Size([500]), True)

    References
    ----------
    A. C. Davison and D. V. Hinkley, *Bootstrap Methods and their Application*, Cambridge University Press,
    1997, Sec. 3.8 ("Hierarchical data"). C. A. Field and A. H. Welsh, "Bootstrapping clustered data",
    *J. R. Stat. Soc. B* 69(3), 2007. X. Bouthillier et al., "Accounting for variance in machine learning
    benchmarks", MLSys 2021. The ranks are those of Holmes §4.1 (R@K, SumR), DAB §4 (MnR, MdR) and HUD §4.
    """
    kind, k = _check_metric(metric)
    ks = check_ks(ks)
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be an integer >= 1, got {n_boot!r}")
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1):
        raise ValueError(f"chunk must be an integer >= 1, got {chunk!r}")
    m_runs, b_runs = _check_pair(method, base, kind)
    if isinstance(generator, (int, np.integer)) and not isinstance(generator, bool):
        generator = torch.Generator().manual_seed(int(generator))
    elif generator is None:
        generator = torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,))))
    elif not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, an int or None, got {type(generator).__name__}")
    m_vals, m_seeds = _padded(m_runs)
    b_vals, b_seeds = _padded(b_runs)
    out = []
    for d in _resamples(int(n_boot), chunk, m_seeds, b_seeds, [r.shape[1] for r in m_runs], generator):
        stat_m = _replicate_model(m_vals, m_seeds, d.inst, d.u_method, d.qidx, d.qvalid, d.nq, kind, k, ks)
        stat_b = _replicate_model(b_vals, b_seeds, d.inst, d.u_base, d.qidx, d.qvalid, d.nq, kind, k, ks)
        out.append(stat_m - stat_b)
    return torch.cat(out)


class _Resample(NamedTuple):
    """One chunk of ``b`` replicates of :func:`hierarchical_bootstrap`'s three levels."""

    inst: torch.Tensor  # [b, I] drawn instances
    u_method: torch.Tensor  # [b, I, S_max of the method] uniforms of the method's seeds (index floor(u * S_i))
    u_base: torch.Tensor  # [b, I, S_max of the base] the same for the base
    qidx: torch.Tensor  # [b, I, Q_max] drawn queries (0 in the padding)
    qvalid: torch.Tensor  # [b, I, Q_max] True for the drawn instance's real queries
    nq: torch.Tensor  # [b, I] queries of each drawn instance


def _resamples(n_boot: int, chunk: int | None, method_seeds: torch.Tensor, base_seeds: torch.Tensor,
               n_queries: Sequence[int], generator: torch.Generator) -> Iterator[_Resample]:
    """The random stream of :func:`hierarchical_bootstrap`, chunk by chunk (shared with the selective figures of
    :func:`evidential_prvr.metrics.compare_selective_runs`, so both draw the same resamples): per chunk of ``b``
    replicates, ``randint(I, (b, I))`` instances, ``rand(b, I, S_max)`` for the method's seeds, the same for the
    base's and ``rand(b, I, Q_max)`` for the queries. ``method_seeds`` / ``base_seeds``: ``[I]`` seed counts;
    ``chunk=None``: as many replicates as keep a block of gathered values to :data:`_BLOCK_ELEMENTS`."""
    n_inst, q_max = len(n_queries), max(n_queries)
    s_method, s_base = int(method_seeds.max()), int(base_seeds.max())
    if chunk is None:
        chunk = max(1, min(n_boot, _BLOCK_ELEMENTS // (n_inst * (s_method + s_base) * q_max)))
    counts = torch.tensor(list(n_queries))
    for start in range(0, n_boot, int(chunk)):
        b = min(int(chunk), n_boot - start)
        inst = torch.randint(n_inst, (b, n_inst), generator=generator)
        u_method = torch.rand(b, n_inst, s_method, generator=generator, dtype=torch.float64)
        u_base = torch.rand(b, n_inst, s_base, generator=generator, dtype=torch.float64)
        u_q = torch.rand(b, n_inst, q_max, generator=generator, dtype=torch.float64)
        nq = counts[inst]
        qvalid = torch.arange(q_max)[None, None, :] < nq[..., None]
        qidx = torch.where(qvalid, torch.minimum((u_q * nq[..., None]).long(), nq[..., None] - 1), 0)
        yield _Resample(inst, u_method, u_base, qidx, qvalid, nq)


@dataclass(frozen=True)
class RunComparison:
    """One metric of a method-vs-base comparison over several runs (:func:`compare_runs`).

    Attributes
    ----------
    metric : str
        The metric's name.
    method_mean, method_sd, base_mean, base_sd : float
        Mean over instances of the mean over seeds of the per-run metric, and its s.d. over all runs (ddof 1;
        NaN with one run).
    method_runs, base_runs : int
        Runs of each model.
    difference : float
        ``method_mean - base_mean``.
    low, high : float
        The percentile interval of the :func:`hierarchical_bootstrap` replicates at ``level``.
    level : float
        The interval's nominal coverage (0.95).
    n_boot : int
        Replicates.
    higher_is_better : bool
        False for ``MnR`` / ``MdR``.

    Examples
    --------
    >>> from evidential_prvr.metrics import RunComparison
    >>> c = RunComparison("R@1", 50.0, 1.0, 45.0, 1.5, 6, 6, 5.0, 2.0, 8.0, 0.95, 1000, True)
    >>> c.beats_base
    True

    References
    ----------
    Davison and Hinkley (1997), Sec. 3.8; Bouthillier et al. (2021); R@K as in Holmes §4.1.
    """

    metric: str
    method_mean: float
    method_sd: float
    base_mean: float
    base_sd: float
    method_runs: int
    base_runs: int
    difference: float
    low: float
    high: float
    level: float
    n_boot: int
    higher_is_better: bool

    @property
    def beats_base(self) -> bool:
        """Whether the interval lies entirely on the better side of zero (above it, or below for MnR/MdR)."""
        return self.low > 0 if self.higher_is_better else self.high < 0

    @property
    def worse_than_base(self) -> bool:
        """Whether the interval lies entirely on the worse side of zero."""
        return self.high < 0 if self.higher_is_better else self.low > 0

    def to_dict(self) -> dict[str, object]:
        """JSON-ready values (NaN stays NaN; write it with ``allow_nan`` or as null)."""
        return {"metric": self.metric, "method": {"mean": self.method_mean, "sd": self.method_sd,
                                                   "runs": self.method_runs},
                "base": {"mean": self.base_mean, "sd": self.base_sd, "runs": self.base_runs},
                "difference": self.difference, "low": self.low, "high": self.high, "level": self.level,
                "n_boot": self.n_boot, "higher_is_better": self.higher_is_better, "beats_base": self.beats_base,
                "worse_than_base": self.worse_than_base}


def compare_runs(
    method: Runs,
    base: Runs,
    metrics: Sequence[str] = ("R@1", "R@5", "R@10", "MnR", "MdR"),
    *,
    n_boot: int = 2000,
    level: float = 0.95,
    ks: Sequence[int] = DEFAULT_KS,
    generator: torch.Generator | int | None = None,
) -> dict[str, RunComparison]:
    r"""Per-model mean ± s.d. and the difference with a hierarchical-bootstrap interval, for each metric.

    The interval is the percentile interval (Davison and Hinkley 1997, Sec. 5.3) of the
    :func:`hierarchical_bootstrap` replicates :math:`\hat\theta^*_1, \dots, \hat\theta^*_B`:

    .. math::

       \Bigl[\hat\theta^*_{((1-\alpha)/2)},\; \hat\theta^*_{((1+\alpha)/2)}\Bigr], \qquad \alpha = \text{level},

    with linearly interpolated quantiles (``torch.quantile``). With an int ``generator`` every metric uses the
    same resamples (a generator seeded with it per metric), so the intervals of the metrics agree with one
    another; a ``torch.Generator`` is drawn from by each metric in turn, in the order of ``metrics``.

    Parameters
    ----------
    method, base : torch.Tensor, numpy.ndarray or sequence
        The per-query ranks of every run, as in :func:`hierarchical_bootstrap`.
    metrics : sequence of str
        Metric names (:func:`run_metric`).
    n_boot : int
        Replicates per metric.
    level : float
        Nominal coverage in (0, 1).
    ks : sequence of int
        Cut-offs of ``SumR`` and ``MeanR``.
    generator : torch.Generator or int, optional
        The random stream (an int: the same resamples for every metric, see above).

    Returns
    -------
    dict of str to RunComparison
        In the order of ``metrics``.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.metrics import compare_runs
    >>> g = torch.Generator().manual_seed(0)
    >>> base = torch.randint(1, 30, (2, 3, 200), generator=g)
    >>> method = torch.clamp(base - 5, min=1)                          # every query ranks 5 places higher
    >>> result = compare_runs(method, base, ("R@1", "MnR"), n_boot=400, generator=0)
    >>> result["MnR"].difference < 0, result["MnR"].beats_base
    (True, True)

    References
    ----------
    Davison and Hinkley (1997), *Bootstrap Methods and their Application*, Secs. 3.8 and 5.3; Field and Welsh
    (2007), "Bootstrapping clustered data"; Bouthillier et al. (2021), "Accounting for variance in machine
    learning benchmarks". Metrics of Holmes §4.1, DAB §4 and HUD §4.
    """
    if not (isinstance(level, (int, float)) and 0 < level < 1):
        raise ValueError(f"level must be a number in (0, 1), got {level!r}")
    if isinstance(metrics, str):
        raise TypeError("metrics must be a sequence of metric names, not one string")
    ks = check_ks(ks)
    for metric in metrics:
        _check_metric(metric)
    seed = int(generator) if isinstance(generator, (int, np.integer)) and not isinstance(generator, bool) else None
    results: dict[str, RunComparison] = {}
    for metric in metrics:
        if seed is not None:  # the same resamples for every metric
            generator = torch.Generator().manual_seed(seed)
        kind, _ = _check_metric(metric)
        m_runs, b_runs = _check_pair(method, base, kind)
        m_mean, m_sd, m_n = _point(m_runs, metric, ks)
        b_mean, b_sd, b_n = _point(b_runs, metric, ks)
        replicates = hierarchical_bootstrap(m_runs, b_runs, metric, n_boot=n_boot, ks=ks, generator=generator)
        q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
        low, high = torch.quantile(replicates, q).tolist()
        results[metric] = RunComparison(metric, m_mean, m_sd, b_mean, b_sd, m_n, b_n, m_mean - b_mean, low, high,
                                        float(level), int(n_boot), metric not in LOWER_IS_BETTER)
    return results
