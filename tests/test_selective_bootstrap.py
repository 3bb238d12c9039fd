"""Selective-retrieval figures over runs with the hierarchical interval (``evidential_prvr._selective_bootstrap``)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from evidential_prvr.metrics import (
    SELECTIVE_METRICS,
    aurc,
    compare_runs,
    compare_selective_runs,
    hierarchical_bootstrap,
    selective_recall,
    selective_run_metric,
)


def _runs(generator: torch.Generator, shapes: list[tuple[int, int]], levels: int = 4) -> tuple[list, list]:
    ranks = [torch.randint(1, 6, shape, generator=generator) for shape in shapes]
    confidence = [torch.randint(0, levels, shape, generator=generator).double() for shape in shapes]  # many ties
    return confidence, ranks


# --- one run ----------------------------------------------------------------------------------------------
def test_hand_computed_figures() -> None:
    # points (1/3, 0), (2/3, 1/2), (1, 2/3): AURC 0 + (1/3)(1/4) + (1/3)(7/12) = 5/18
    confidence, ranks = torch.tensor([[3.0, 2.0, 1.0]]), torch.tensor([[1, 2, 5]])
    assert float(selective_run_metric(confidence, ranks, "AURC")[0]) == pytest.approx(5 / 18, abs=1e-15)
    # 4 queries, the two most confident tie, one of them a hit: at 25 % coverage half of the group is answered
    confidence, ranks = torch.tensor([[2.0, 2.0, 1.0, 0.0]]), torch.tensor([[1, 3, 1, 1]])
    assert selective_run_metric(confidence, ranks, "R@1@25%").tolist() == [50.0]
    assert selective_run_metric(confidence, ranks, "R@1@75%").tolist() == pytest.approx([200 / 3])
    assert selective_run_metric(confidence, ranks, "R@3@50%").tolist() == [100.0]
    assert selective_run_metric(confidence, ranks, "R@1@100%").tolist() == [75.0]


@given(st.data())
def test_one_run_is_the_library_risk_coverage(data: st.DataObject) -> None:
    q = data.draw(st.integers(1, 12))
    confidence = torch.tensor(data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.5]), min_size=q, max_size=q)),
                              dtype=torch.float64)
    ranks = torch.tensor(data.draw(st.lists(st.integers(1, 4), min_size=q, max_size=q)))
    k = data.draw(st.integers(1, 3))
    coverage = data.draw(st.sampled_from([0.1, 0.25, 0.3, 0.5, 0.9, 1.0]))
    got_aurc = float(selective_run_metric(confidence[None], ranks[None], "AURC")[0])
    assert got_aurc == pytest.approx(float(aurc(confidence, ranks == 1)), abs=1e-12)
    name = f"R@{k}@{100 * coverage:.10g}%"
    got = float(selective_run_metric(confidence[None], ranks[None], name)[0])
    assert got == pytest.approx(float(selective_recall(confidence, ranks <= k, (coverage,))[0]), abs=1e-9)


def test_batched_rows_are_independent() -> None:
    g = torch.Generator().manual_seed(1)
    confidence, ranks = torch.rand(3, 2, 9, generator=g, dtype=torch.float64), torch.randint(1, 3, (3, 2, 9), generator=g)
    together = selective_run_metric(confidence, ranks, "AURC")
    apart = torch.tensor([[float(aurc(confidence[i, j], ranks[i, j] == 1)) for j in range(2)] for i in range(3)])
    torch.testing.assert_close(together, apart.double())


# --- the bootstrap ---------------------------------------------------------------------------------------
def test_full_coverage_recall_has_the_recall_bootstrap() -> None:
    """The same stream, the same levels: R@1 at 100 % coverage is R@1, replicate for replicate."""
    g = torch.Generator().manual_seed(0)
    confidence, ranks = _runs(g, [(3, 40), (2, 30)])
    base_conf, base_ranks = _runs(g, [(2, 40), (3, 30)])
    ours = compare_selective_runs(confidence, ranks, base_conf, base_ranks, ("R@1@100%",), n_boot=700, generator=5)
    theirs = compare_runs(ranks, base_ranks, ("R@1",), n_boot=700, generator=5)
    a, b = ours["R@1@100%"], theirs["R@1"]
    assert (a.method_mean, a.base_mean, a.difference, a.low, a.high) == pytest.approx(
        (b.method_mean, b.base_mean, b.difference, b.low, b.high), abs=1e-9)


def _brute_force(method: tuple[list, list], base: tuple[list, list], name: str, n_boot: int,
                 seed: int) -> torch.Tensor:
    """Each replicate drawn one number at a time as ``hierarchical_bootstrap`` documents its stream (one chunk
    here), and each resampled run's figure computed by the library's ``aurc`` / ``selective_recall``."""
    g = torch.Generator().manual_seed(seed)
    n_inst = len(method[1])
    s_m, s_b = max(r.shape[0] for r in method[1]), max(r.shape[0] for r in base[1])
    q_max = max(r.shape[1] for r in method[1])
    inst = torch.randint(n_inst, (n_boot, n_inst), generator=g)
    u_m = torch.rand(n_boot, n_inst, s_m, generator=g, dtype=torch.float64)
    u_b = torch.rand(n_boot, n_inst, s_b, generator=g, dtype=torch.float64)
    u_q = torch.rand(n_boot, n_inst, q_max, generator=g, dtype=torch.float64)

    def figure(confidence: torch.Tensor, ranks: torch.Tensor) -> float:
        if name == "AURC":
            return float(aurc(confidence, ranks == 1))
        k, coverage = name[2:].rstrip("%").split("@")
        return float(selective_recall(confidence, ranks <= int(k), (float(coverage) / 100,))[0])

    out = []
    for b in range(n_boot):
        value = 0.0
        for sign, (conf, ranks), u in ((1.0, method, u_m), (-1.0, base, u_b)):
            total = 0.0
            for j in range(n_inst):
                i = int(inst[b, j])
                n_seeds, n_q = ranks[i].shape
                queries = [min(int(u_q[b, j, t] * n_q), n_q - 1) for t in range(n_q)]
                seeds = [min(int(u[b, j, t] * n_seeds), n_seeds - 1) for t in range(n_seeds)]
                total += sum(figure(conf[i][s, queries], ranks[i][s, queries]) for s in seeds) / n_seeds
            value += sign * total / n_inst
        out.append(value)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("name", ["AURC", "R@1@25%", "R@2@50%"])
def test_interval_is_the_brute_force_bootstrap(name: str) -> None:
    # hand-made: two instances (3 and 4 queries), the method with 2 and 1 seeds, the base with 1 and 2
    method = ([torch.tensor([[0.9, 0.5, 0.5], [0.1, 0.7, 0.3]]), torch.tensor([[1.0, 2.0, 2.0, 0.0]])],
              [torch.tensor([[1, 3, 1], [2, 1, 1]]), torch.tensor([[1, 1, 4, 2]])])
    base = ([torch.tensor([[0.2, 0.2, 0.2]]), torch.tensor([[0.3, 0.1, 0.2, 0.4], [0.5, 0.5, 0.5, 0.6]])],
            [torch.tensor([[2, 1, 1]]), torch.tensor([[1, 2, 1, 3], [1, 1, 2, 1]])])
    n_boot = 60
    result = compare_selective_runs(*method, *base, (name,), n_boot=n_boot, generator=11)[name]
    replicates = _brute_force(method, base, name, n_boot, seed=11)
    low, high = torch.quantile(replicates, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    assert (result.low, result.high) == pytest.approx((low, high), abs=1e-9)
    # the point estimates: mean over instances of the mean over seeds of each run's figure
    def estimate(model: tuple[list, list]) -> float:
        per_instance = [selective_run_metric(c, r, name).mean() for c, r in zip(*model)]
        return float(torch.stack(per_instance).mean())
    assert result.method_mean == pytest.approx(estimate(method))
    assert result.base_mean == pytest.approx(estimate(base))
    assert result.difference == pytest.approx(estimate(method) - estimate(base))
    assert result.method_runs == 3 and result.base_runs == 3


def test_a_confidence_that_knows_the_errors_beats_a_blind_one() -> None:
    g = torch.Generator().manual_seed(2)
    ranks = torch.randint(1, 4, (2, 3, 300), generator=g)
    informed = -ranks.double() + 0.1 * torch.rand(ranks.shape, generator=g, dtype=torch.float64)
    blind = torch.rand(ranks.shape, generator=g, dtype=torch.float64)
    result = compare_selective_runs(informed, ranks, blind, ranks, n_boot=300, generator=0)
    assert list(result) == list(SELECTIVE_METRICS)
    assert result["AURC"].beats_base and not result["AURC"].higher_is_better
    assert result["R@1@10%"].beats_base and result["R@1@25%"].beats_base
    assert result["R@1@10%"].method_mean == 100.0
    # swapped roles: the blind one is worse than its base
    swapped = compare_selective_runs(blind, ranks, informed, ranks, ("AURC",), n_boot=300, generator=0)["AURC"]
    assert swapped.worse_than_base
    assert math.isclose(swapped.difference, -result["AURC"].difference)


def test_metrics_computed_together_are_those_computed_alone() -> None:
    g = torch.Generator().manual_seed(6)
    confidence, ranks = _runs(g, [(2, 25), (3, 18)])
    base_conf, base_ranks = _runs(g, [(3, 25), (1, 18)])
    together = compare_selective_runs(confidence, ranks, base_conf, base_ranks, n_boot=120, generator=2)
    for name in SELECTIVE_METRICS:
        alone = compare_selective_runs(confidence, ranks, base_conf, base_ranks, (name,), n_boot=120, generator=2)
        assert alone[name] == together[name]


def test_a_generator_object_is_drawn_from_in_turn() -> None:
    g = torch.Generator().manual_seed(3)
    confidence, ranks = _runs(g, [(2, 20)])
    first = compare_selective_runs(confidence, ranks, confidence, ranks, ("AURC", "R@1@25%"), n_boot=50,
                                   generator=torch.Generator().manual_seed(1))
    again = compare_selective_runs(confidence, ranks, confidence, ranks, ("AURC", "R@1@25%"), n_boot=50,
                                   generator=torch.Generator().manual_seed(1))
    assert first == again
    assert first["AURC"].difference == 0.0


# --- bad input -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("metric, kind, text", [
    ("R@1", ValueError, "'AURC' or 'R@K@C%'"), ("R@1@0%", ValueError, "C in \\(0, 100\\]"),
    ("R@1@101%", ValueError, "got 'R@1@101%'"), ("AURC@5", ValueError, "got 'AURC@5'"),
    (3, TypeError, "got int"),
])
def test_bad_metric_names(metric: object, kind: type, text: str) -> None:
    with pytest.raises(kind, match=text):
        selective_run_metric(torch.zeros(1, 3), torch.ones(1, 3), metric)  # type: ignore[arg-type]


def test_bad_single_run_inputs() -> None:
    with pytest.raises(TypeError, match="confidence must be a floating-point tensor, got torch.int64"):
        selective_run_metric(torch.zeros(3, dtype=torch.long), torch.ones(3), "AURC")
    with pytest.raises(TypeError, match="ranks must be a torch.Tensor, got list"):
        selective_run_metric(torch.zeros(3), [1, 1, 1], "AURC")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"ranks must have the shape of confidence \(3,\), got \(4,\)"):
        selective_run_metric(torch.zeros(3), torch.ones(4), "AURC")
    with pytest.raises(ValueError, match="confidence must be finite"):
        selective_run_metric(torch.tensor([0.0, float("nan")]), torch.ones(2), "AURC")
    with pytest.raises(ValueError, match="1-based"):
        selective_run_metric(torch.zeros(2), torch.tensor([0, 1]), "AURC")
    with pytest.raises(ValueError, match="Q >= 1"):
        selective_run_metric(torch.zeros(2, 0), torch.ones(2, 0), "AURC")


def test_bad_comparison_inputs() -> None:
    conf, ranks = torch.zeros(1, 2, 5, dtype=torch.float64), torch.ones(1, 2, 5)
    with pytest.raises(ValueError, match=r"instance 0: method_confidence and method_ranks .* \(2, 5\) and \(2, 4\)"):
        compare_selective_runs(conf, ranks[..., :4], conf, ranks)
    with pytest.raises(ValueError, match="same queries \\(paired\\), got 5 and 4"):
        compare_selective_runs(conf, ranks, conf[..., :4], ranks[..., :4])
    with pytest.raises(ValueError, match="same data instances, got 1 and 2"):
        compare_selective_runs(conf, ranks, torch.cat([conf, conf]), torch.cat([ranks, ranks]))
    with pytest.raises(ValueError, match="base_ranks must be 1-based"):
        compare_selective_runs(conf, ranks, conf, ranks * 0)
    with pytest.raises(ValueError, match=r"level must be a number in \(0, 1\), got 1.5"):
        compare_selective_runs(conf, ranks, conf, ranks, level=1.5)
    with pytest.raises(ValueError, match="n_boot must be an integer >= 1, got 0"):
        compare_selective_runs(conf, ranks, conf, ranks, n_boot=0)
    with pytest.raises(TypeError, match="metrics must be a non-empty sequence"):
        compare_selective_runs(conf, ranks, conf, ranks, "AURC")
    with pytest.raises(TypeError, match="generator must be a torch.Generator, an int or None, got str"):
        compare_selective_runs(conf, ranks, conf, ranks, generator="0")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="method_confidence\\[0\\] must be finite"):
        compare_selective_runs(conf * float("nan"), ranks, conf, ranks)


def test_hierarchical_bootstrap_is_unchanged_by_this_module() -> None:
    """Guard of the shared stream: the recall bootstrap's first replicates for a fixed input and seed."""
    ranks = torch.tensor([[[1, 2, 3, 1]], [[2, 1, 1, 5]]])
    base = torch.tensor([[[2, 2, 1, 1]], [[1, 1, 3, 5]]])
    ours = compare_selective_runs(ranks.double(), ranks, base.double(), base, ("R@1@100%",), n_boot=40,
                                  generator=9)["R@1@100%"]
    replicates = hierarchical_bootstrap(ranks, base, "R@1", n_boot=40, generator=9)
    q = torch.quantile(replicates, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    assert (ours.low, ours.high) == pytest.approx(tuple(q), abs=1e-12)
