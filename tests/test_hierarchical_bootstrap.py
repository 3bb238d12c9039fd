"""The hierarchical bootstrap of method-vs-base comparisons (:mod:`evidential_prvr.metrics`): against a slow
loop over the same random stream, against scipy's paired bootstrap in the query-only case, coverage on
synthetic data with a known difference, properties, and the errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from evidential_prvr.metrics import compare_runs, hierarchical_bootstrap, run_metric

METRICS = ("R@1", "R@5", "MnR", "MdR", "SumR", "MeanR")


def _slow_metric(values: np.ndarray, metric: str, ks=(1, 5, 10, 100)) -> float:
    """One run's metric, one query at a time."""
    if metric.startswith("R@"):
        k = int(metric[2:])
        return 100.0 * sum(1 for v in values if v <= k) / len(values)
    if metric in ("SumR", "MeanR"):
        total = sum(100.0 * sum(1 for v in values if v <= k) / len(values) for k in ks)
        return total if metric == "SumR" else total / len(ks)
    if metric in ("MnR", "mean"):
        return sum(values) / len(values)
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]  # lower median, as torch.median


def _slow_bootstrap(method, base, metric, n_boot, seed, chunk):
    """The documented random stream, consumed chunk by chunk, then every replicate with plain loops."""
    g = torch.Generator().manual_seed(seed)
    n_inst = len(method)
    s_m, s_b = max(r.shape[0] for r in method), max(r.shape[0] for r in base)
    q_max = max(r.shape[1] for r in method)
    out = []
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        inst = torch.randint(n_inst, (b, n_inst), generator=g).numpy()
        u_m = torch.rand(b, n_inst, s_m, generator=g, dtype=torch.float64).numpy()
        u_b = torch.rand(b, n_inst, s_b, generator=g, dtype=torch.float64).numpy()
        u_q = torch.rand(b, n_inst, q_max, generator=g, dtype=torch.float64).numpy()
        for r in range(b):
            stats = []
            for runs, u in ((method, u_m), (base, u_b)):
                per_instance = []
                for j in range(n_inst):
                    i = inst[r, j]
                    n_s, n_q = runs[i].shape
                    queries = [min(int(u_q[r, j, t] * n_q), n_q - 1) for t in range(n_q)]
                    seeds = [min(int(u[r, j, t] * n_s), n_s - 1) for t in range(n_s)]
                    per_run = [_slow_metric([runs[i][s, q] for q in queries], metric) for s in seeds]
                    per_instance.append(sum(per_run) / len(per_run))
                stats.append(sum(per_instance) / n_inst)
            out.append(stats[0] - stats[1])
    return np.array(out)


def _ragged_runs(rng: np.random.Generator):
    """Three instances with 7, 4 and 9 queries; the method has 3, 2, 3 seeds, the base 2, 2, 1."""
    queries, seeds_m, seeds_b = (7, 4, 9), (3, 2, 3), (2, 2, 1)
    method = [rng.integers(1, 12, size=(s, q)).astype(float) for s, q in zip(seeds_m, queries)]
    base = [rng.integers(1, 12, size=(s, q)).astype(float) for s, q in zip(seeds_b, queries)]
    return method, base


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("chunk", [7, 40])
def test_matches_a_slow_loop_over_the_same_stream(metric, chunk):
    method, base = _ragged_runs(np.random.default_rng(3))
    fast = hierarchical_bootstrap(method, base, metric, n_boot=40, generator=torch.Generator().manual_seed(11),
                                  chunk=chunk)
    slow = _slow_bootstrap(method, base, metric, 40, 11, chunk)
    np.testing.assert_allclose(fast.numpy(), slow, rtol=0, atol=1e-9)


def test_point_estimates_are_the_mean_of_instance_means_and_the_sd_over_runs():
    method, base = _ragged_runs(np.random.default_rng(4))
    result = compare_runs(method, base, ("MnR", "R@5"), n_boot=50, generator=0)
    for metric in ("MnR", "R@5"):
        per_run = [[_slow_metric(run[s], metric) for s in range(run.shape[0])] for run in method]
        assert result[metric].method_mean == pytest.approx(np.mean([np.mean(r) for r in per_run]))
        assert result[metric].method_sd == pytest.approx(np.std([v for r in per_run for v in r], ddof=1))
        assert result[metric].method_runs == 8 and result[metric].base_runs == 5
        assert result[metric].difference == pytest.approx(result[metric].method_mean - result[metric].base_mean)
        assert result[metric].low <= result[metric].high
    assert result["MnR"].higher_is_better is False and result["R@5"].higher_is_better is True


def test_query_only_case_agrees_with_scipys_paired_percentile_bootstrap():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    base = rng.integers(1, 40, size=300).astype(float)
    method = np.maximum(base - rng.integers(-3, 6, size=300), 1)
    ours = compare_runs(method[None, None, :], base[None, None, :], ("MnR", "R@10"), n_boot=20000,
                        generator=5)
    for metric, statistic in (("MnR", lambda m, b, axis=-1: np.mean(m, axis=axis) - np.mean(b, axis=axis)),
                              ("R@10", lambda m, b, axis=-1: 100 * (np.mean(m <= 10, axis=axis)
                                                                    - np.mean(b <= 10, axis=axis)))):
        ref = scipy_stats.bootstrap((method, base), statistic, paired=True, vectorized=True, n_resamples=20000,
                                    method="percentile", confidence_level=0.95, random_state=1).confidence_interval
        width = ref.high - ref.low
        assert ours[metric].low == pytest.approx(ref.low, abs=0.06 * width), metric
        assert ours[metric].high == pytest.approx(ref.high, abs=0.06 * width), metric


def test_coverage_of_a_known_difference_on_synthetic_runs():
    """Nested synthetic data: instance effect, the method's instance-specific gain, seed noise per run and
    query difficulty; the true expected difference is ``delta``. About 95 % of the intervals must hold it
    (the three-level bootstrap errs on the wide side: Davison and Hinkley 1997, Sec. 3.8)."""
    rng = np.random.default_rng(2024)
    delta, experiments, hits = 0.3, 150, 0
    n_inst, n_seeds, n_queries = 8, 4, 40
    for e in range(experiments):
        instance = rng.normal(0, 1.0, size=(n_inst, 1, 1))
        gain = delta + rng.normal(0, 0.3, size=(n_inst, 1, 1))
        query = rng.normal(0, 1.0, size=(n_inst, 1, n_queries))
        base = instance + query + rng.normal(0, 0.3, size=(n_inst, n_seeds, 1)) + rng.normal(0, 0.5, size=(n_inst, n_seeds, n_queries))
        method = instance + query + gain + rng.normal(0, 0.3, size=(n_inst, n_seeds, 1)) + rng.normal(0, 0.5, size=(n_inst, n_seeds, n_queries))
        c = compare_runs(method, base, ("mean",), n_boot=300, generator=e)["mean"]
        hits += c.low <= delta <= c.high
    coverage = hits / experiments
    assert 0.88 <= coverage <= 1.0, coverage


def test_identical_models_give_zero_replicates_and_no_verdict():
    ranks = torch.randint(1, 50, (2, 3, 30), generator=torch.Generator().manual_seed(0))
    # the same seeds for both: only possible when each instance has one seed (seeds are drawn per model)
    one = ranks[:, :1]
    assert torch.equal(hierarchical_bootstrap(one, one.clone(), "MnR", n_boot=100, generator=0),
                       torch.zeros(100, dtype=torch.float64))
    c = compare_runs(one, one.clone(), ("R@1",), n_boot=100, generator=0)["R@1"]
    assert c.difference == 0 and not c.beats_base and not c.worse_than_base


@settings(max_examples=25, deadline=None)
@given(n_inst=st.integers(1, 3), n_seeds=st.integers(1, 3), n_queries=st.integers(1, 12), seed=st.integers(0, 10**6),
       n_boot=st.integers(1, 30), metric=st.sampled_from(METRICS))
def test_shapes_and_invariance_to_query_and_seed_order(n_inst, n_seeds, n_queries, seed, n_boot, metric):
    g = torch.Generator().manual_seed(seed)
    method = torch.randint(1, 20, (n_inst, n_seeds, n_queries), generator=g)
    base = torch.randint(1, 20, (n_inst, n_seeds, n_queries), generator=g)
    replicates = hierarchical_bootstrap(method, base, metric, n_boot=n_boot, generator=seed)
    assert replicates.shape == (n_boot,) and replicates.dtype == torch.float64
    assert bool(torch.isfinite(replicates).all())
    # point estimates do not depend on the order of the queries (the same permutation for both models: they
    # stay paired), of the seeds or of the instances
    q_perm, s_perm, i_perm = (torch.randperm(n, generator=g) for n in (n_queries, n_seeds, n_inst))
    shuffled = lambda x: x[i_perm][:, s_perm][:, :, q_perm]
    a = compare_runs(method, base, (metric,), n_boot=5, generator=0)[metric]
    b = compare_runs(shuffled(method), shuffled(base), (metric,), n_boot=5, generator=0)[metric]
    for field in ("method_mean", "base_mean", "difference"):
        assert getattr(a, field) == pytest.approx(getattr(b, field), abs=1e-9)
    assert (math.isnan(a.method_sd) and math.isnan(b.method_sd)) or a.method_sd == pytest.approx(b.method_sd)
    # with one instance and one seed, the replicates depend on the queries only through their multiset: the
    # bootstrap distribution of the mean is the same after a permutation (compared by its first two moments)
    if n_inst == 1 and n_seeds == 1 and metric == "MnR" and n_queries > 1:
        r1 = hierarchical_bootstrap(method, base, metric, n_boot=4000, generator=1)
        r2 = hierarchical_bootstrap(shuffled(method), shuffled(base), metric, n_boot=4000, generator=2)
        spread = float(r1.std()) + 1e-9
        assert abs(float(r1.mean() - r2.mean())) < 0.15 * spread + 1e-9
        assert float(r2.std()) == pytest.approx(float(r1.std()), rel=0.15, abs=1e-9)


def test_run_metric_matches_the_loop():
    ranks = torch.randint(1, 30, (4, 17), generator=torch.Generator().manual_seed(1))
    for metric in METRICS:
        expected = [_slow_metric(ranks[i].tolist(), metric) for i in range(4)]
        np.testing.assert_allclose(run_metric(ranks, metric).numpy(), expected)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: hierarchical_bootstrap(torch.ones(2, 3), torch.ones(2, 3), "R@1"), "[I, S, Q]"),
    (lambda: hierarchical_bootstrap(torch.ones(2, 3, 4), torch.ones(3, 3, 4), "R@1"), "same data instances"),
    (lambda: hierarchical_bootstrap(torch.ones(1, 3, 4), torch.ones(1, 3, 5), "R@1"), "same queries"),
    (lambda: hierarchical_bootstrap([torch.ones(4)], [torch.ones(4)], "R@1"), "[S, Q]"),
    (lambda: hierarchical_bootstrap([], [], "R@1"), "at least one"),
    (lambda: hierarchical_bootstrap(torch.zeros(1, 1, 4), torch.ones(1, 1, 4), "MnR"), "1-based"),
    (lambda: hierarchical_bootstrap(torch.ones(1, 1, 4), torch.ones(1, 1, 4), "R@0"), "metric must be"),
    (lambda: hierarchical_bootstrap(torch.ones(1, 1, 4), torch.ones(1, 1, 4), "MnR", n_boot=0), "n_boot"),
    (lambda: hierarchical_bootstrap(torch.full((1, 1, 4), math.nan), torch.ones(1, 1, 4), "mean"), "finite"),
    (lambda: compare_runs(torch.ones(1, 1, 4), torch.ones(1, 1, 4), ("MnR",), level=1.5), "level"),
    (lambda: run_metric(torch.ones(2, 0), "MnR"), "Q >= 1"),
    (lambda: run_metric(torch.ones(3), "SumR", ks=()), "ks"),
])
def test_bad_input_is_a_value_error_naming_the_problem(call, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        call()
