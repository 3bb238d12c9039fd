"""The oracle ceilings of the DAB benchmarks against independent references: the regenerated
hidden concepts against the written files, the likelihood against scipy's Gaussian densities summed caption by
caption in plain loops, the posterior's calibration by Monte Carlo (the Bayes scorer's accuracy equals its mean
top posterior only when the posterior is exact), and the comparison report printing the ceilings."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import multivariate_normal

from reference_models.dab.benchmark import (
    BENCHMARKS,
    T2VBenchmarkSpec,
    draw_world,
    format_oracle_ceilings,
    generate_t2v_benchmark,
    oracle_ceilings,
    oracle_log_likelihoods,
    oracle_ranks,
)
from reference_models.dab.data import LAYOUT

#: Few topics, events and videos, noisy captions (so that the oracle errs) and small features.
TINY = T2VBenchmarkSpec(n_train=6, n_val=4, n_test=10, topics=2, events_per_topic=3, frames=6, feature_dims=(8, 8),
                        caption_noise=1.0)


def _brute_log_likelihood(world, caption: np.ndarray, video: int, scorer: str) -> float:
    """log p(caption | video), summed caption slot by caption slot with scipy's densities (no shared code)."""
    spec = world.spec
    cov = np.concatenate([np.full(spec.event_dim, 1.0 / spec.event_dim),
                          np.full(spec.detail_dim, 1.0 / spec.detail_dim)])
    topic, detail = int(world.video_topic[video]), world.video_detail[video]
    logs, weights = [], []
    for event in world.video_events[video]:
        for _take in range(spec.captions_per_event if scorer == "bayes" else 1):
            mean = np.concatenate([world.events[topic, event], detail])
            logs.append(multivariate_normal(mean, np.diag(cov * spec.caption_noise**2)).logpdf(caption))
            weights.append(1.0)
    if scorer == "bayes":
        for _take in range(spec.generic_per_video):
            mean = np.concatenate([world.centroids[topic], np.zeros(spec.detail_dim)])
            logs.append(multivariate_normal(mean, np.diag(cov * spec.caption_noise**2)).logpdf(caption))
            weights.append(1.0)
    return float(logsumexp(logs, b=np.asarray(weights) / sum(weights)))


def test_the_regenerated_world_is_what_the_files_hold(tmp_path: Path) -> None:
    spec = dataclasses.replace(BENCHMARKS["msrvtt-regime"], n_train=5, n_val=3, n_test=6, feature_dims=(16, 16))
    root = generate_t2v_benchmark(tmp_path / "b", seed=7, spec=spec)
    world = draw_world(7, spec)
    meta = json.loads((root / "benchmark_meta.json").read_text())
    assert meta["videos"] == world.video_meta
    assert [meta["videos"][v["video_id"]]["topic"] for v in world.videos] == world.video_topic.tolist()
    with h5py.File(root / LAYOUT.text_features) as h5:
        for vid, array in world.texts_of.items():
            assert np.array_equal(np.asarray(h5[vid]), array.astype(np.float32))
    with (root / LAYOUT.test_csv).open(newline="") as handle:
        picked = [row["sentence"] for row in csv.DictReader(handle)]
    assert picked == [world.sentences[i]["caption"] for i in world.picks["test"]]


@pytest.mark.parametrize("scorer", ["bayes", "deterministic"])
def test_the_log_likelihood_equals_scipys_densities_summed_caption_by_caption(scorer: str) -> None:
    world = draw_world(3, TINY)
    queries, gallery = np.arange(0, len(world.sentences), 3), np.arange(len(world.videos))
    fast = oracle_log_likelihoods(world, queries, gallery, scorer)
    slow = np.asarray([[_brute_log_likelihood(world, world.caption_concepts[q], int(v), scorer) for v in gallery]
                       for q in queries])
    np.testing.assert_allclose(fast, slow, rtol=1e-10, atol=1e-8)


def _sample_captions(world, videos: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Captions drawn as the generator's documentation says: a caption slot of the video uniformly, the slot's
    concept plus Gaussian noise of expected norm ``caption_noise`` per part."""
    spec = world.spec
    out = []
    for v in videos:
        topic, detail, events = int(world.video_topic[v]), world.video_detail[v], world.video_events[v]
        slots = [e for e in events for _ in range(spec.captions_per_event)] + [None] * spec.generic_per_video
        slot = slots[rng.integers(len(slots))]
        event = world.centroids[topic] if slot is None else world.events[topic, slot]
        who = np.zeros(spec.detail_dim) if slot is None else detail
        out.append(np.concatenate([event + rng.standard_normal(spec.event_dim) * spec.caption_noise / np.sqrt(spec.event_dim),
                                   who + rng.standard_normal(spec.detail_dim) * spec.caption_noise / np.sqrt(spec.detail_dim)]))
    return np.stack(out)


def test_the_bayes_posterior_is_calibrated_by_monte_carlo() -> None:
    """E[max posterior] equals the Bayes scorer's accuracy when the posterior is exact; a wrong one (here: sharpened
    threefold) is detectably miscalibrated, so the check has power."""
    world = draw_world(5, TINY)
    gallery = np.asarray([i for i, v in enumerate(world.videos) if v["split"] == "test"])
    rng = np.random.default_rng(0)
    n = 6000
    truth = rng.integers(len(gallery), size=n)
    concepts = _sample_captions(world, gallery[truth], rng)
    sampled = dataclasses.replace(world, caption_concepts=concepts, caption_observed=np.ones((n, 2), dtype=bool))
    log_lik = oracle_log_likelihoods(sampled, np.arange(n), gallery, "bayes")
    accuracy = float((log_lik.argmax(axis=1) == truth).mean())
    tolerance = 4.0 * np.sqrt(accuracy * (1.0 - accuracy) / n)
    assert 0.2 < accuracy < 0.95  # a regime where the oracle errs, so calibration means something

    def top_posterior(scores: np.ndarray) -> float:
        return float(np.exp(scores.max(axis=1) - logsumexp(scores, axis=1)).mean())

    assert abs(top_posterior(log_lik) - accuracy) < tolerance
    assert abs(top_posterior(3.0 * log_lik) - accuracy) > tolerance


def test_oracle_ranks_break_ties_at_random_in_expectation() -> None:
    world = draw_world(3, TINY)
    gallery = np.asarray([i for i, v in enumerate(world.videos) if v["split"] == "test"])
    ranks, top1, kinds = oracle_ranks(world, "test_all", "bayes")
    queries = [i for i in range(len(world.sentences)) if world.caption_video[i] in set(gallery.tolist())]
    scores = oracle_log_likelihoods(world, np.asarray(queries), gallery, "bayes")
    own = [int(np.flatnonzero(gallery == world.caption_video[q])[0]) for q in queries]
    for row, j in enumerate(own):  # brute force: count the videos above and tied, one query at a time
        above = sum(1 for s in scores[row] if s > scores[row, j])
        tied = sum(1 for s in scores[row] if s == scores[row, j]) - 1
        assert ranks[row] == 1 + above + tied / 2 and top1[row] == (above == 0) / (1 + tied)
    assert kinds == [world.kinds[q]["kind"] for q in queries]


def test_oracle_ceilings_structure_and_the_no_headroom_statements() -> None:
    ceilings = oracle_ceilings(3, TINY, n_boot=200)
    assert ceilings["scorers"] == ["bayes", "deterministic"]
    for set_name in ("test", "test_all"):
        kinds = ceilings["sets"][set_name]["bayes"]
        assert set(kinds) == {"all", "specific", "generic"}
        assert sum(kinds[k]["queries"] for k in ("specific", "generic")) == kinds["all"]["queries"]
        for kind, metrics in ceilings["headroom"][set_name].items():
            for metric, h in metrics.items():
                assert h["interval"][0] <= h["difference"] <= h["interval"][1]
                said = any(line.startswith(f"{set_name}, {kind} captions, {metric}:") for line in ceilings["statements"])
                assert said == (not h["headroom"])
    assert "oracle ceilings of data seed 3" in format_oracle_ceilings(ceilings)
    with pytest.raises(ValueError, match="n_boot must be an integer >= 100, got 5"):
        oracle_ceilings(3, TINY, n_boot=5)
    with pytest.raises(ValueError, match="scorer must be one of"):
        oracle_log_likelihoods(draw_world(3, TINY), np.arange(2), np.arange(2), "cosine")


def test_the_msrvtt_regime_ceilings_recorded_in_the_guide() -> None:
    """docs/guide/dab.rst quotes these (``python -m reference_models.dab oracle --benchmark msrvtt-regime``)."""
    ceilings = oracle_ceilings(0, BENCHMARKS["msrvtt-regime"], sets=("test",))  # the set the asserts read
    test = ceilings["sets"]["test"]
    assert round(test["bayes"]["specific"]["R@1"], 1) == 82.6 and round(test["bayes"]["generic"]["R@1"], 1) == 1.3
    assert round(test["bayes"]["generic"]["MnR"], 1) == 36.3 and round(test["deterministic"]["generic"]["MnR"], 1) == 80.9
    assert not ceilings["headroom"]["test"]["specific"]["R@1"]["headroom"]
    assert ceilings["headroom"]["test"]["generic"]["MnR"]["headroom"]


VARIED = dataclasses.replace(TINY, attribute_probs=(0.25, 0.25, 0.25, 0.25), caption_noise_levels=(0.4, 0.8, 1.6),
                             event_dim=6, detail_dim=4)


def _brute_varied(world, q: int, video: int, scorer: str) -> float:
    """log p(caption | video) of the varied design up to a per-caption constant, slot by slot with scipy: the
    named blocks' density, mixed over the noise levels (bayes, no_generic) or at caption_noise on every block
    (deterministic), plus the generic slots (bayes, when every block is named)."""
    spec, c = world.spec, world.caption_concepts[q]
    per_dim = np.concatenate([np.full(spec.event_dim, 1.0 / spec.event_dim), np.full(spec.detail_dim, 1.0 / spec.detail_dim)])
    width = spec.event_dim // 3
    block_of = np.concatenate([np.arange(spec.event_dim) // width, np.full(spec.detail_dim, 3)])
    named = world.caption_observed[q][block_of] if scorer != "deterministic" else np.ones(len(block_of), dtype=bool)
    levels = spec.caption_noise_levels if scorer != "deterministic" else (spec.caption_noise,)
    topic, detail = int(world.video_topic[video]), world.video_detail[video]
    logs = []
    for event in world.video_events[video]:
        for _take in range(spec.captions_per_event if scorer == "bayes" else 1):
            mean = np.concatenate([world.events[topic, event], detail])[named]
            for level in levels:
                density = multivariate_normal(mean, np.diag(per_dim[named] * level**2)).logpdf(c[named])
                logs.append(density + np.log(1.0 / len(levels)) + np.log(spec.attribute_probs[-1]))
    if scorer == "bayes" and named.all():
        for _take in range(spec.generic_per_video):
            mean = np.concatenate([world.centroids[topic], np.zeros(spec.detail_dim)])
            logs.append(multivariate_normal(mean, np.diag(per_dim * spec.caption_noise**2)).logpdf(c))
    slots = len(world.video_events[video]) * (spec.captions_per_event if scorer == "bayes" else 1)
    return float(logsumexp(logs) - np.log(slots + (spec.generic_per_video if scorer == "bayes" else 0)))


@pytest.mark.parametrize("scorer", ["bayes", "no_generic", "deterministic"])
def test_the_varied_likelihood_equals_scipys_densities_up_to_a_constant_per_caption(scorer: str) -> None:
    world = draw_world(4, VARIED)
    queries, gallery = np.arange(0, len(world.sentences), 2), np.arange(len(world.videos))
    fast = oracle_log_likelihoods(world, queries, gallery, scorer)
    slow = np.asarray([[_brute_varied(world, int(q), int(v), scorer) for v in gallery] for q in queries])
    np.testing.assert_allclose(fast - fast.mean(1, keepdims=True), slow - slow.mean(1, keepdims=True), atol=1e-8)


def test_the_varied_design_draws_specificity_per_caption_and_records_it(tmp_path: Path) -> None:
    spec = dataclasses.replace(BENCHMARKS["msrvtt-regime-varied"], n_train=30, n_val=4, n_test=6, feature_dims=(16, 16))
    world, fixed = draw_world(2, spec), draw_world(2, dataclasses.replace(spec, attribute_probs=(),
                                                                           caption_noise_levels=()))
    specific = np.asarray([world.kinds[i]["kind"] == "specific" for i in range(len(world.sentences))])
    assert set(world.caption_named[specific].tolist()) == {1, 2, 3, 4} and set(world.caption_named[~specific]) == {0}
    assert set(world.caption_noise[specific].tolist()) == {0.4, 0.8, 1.6} and set(world.caption_noise[~specific]) == {0.8}
    blocks = [slice(0, 8), slice(8, 16), slice(16, 24), slice(24, 32)]
    for row in np.flatnonzero(specific):  # an attribute a caption does not name is exactly zero, a named one is not
        for block, named in zip(blocks, world.caption_observed[row]):
            assert (np.count_nonzero(world.caption_concepts[row, block]) > 0) == named
    # the same instance otherwise: the frames are the fixed design's, draw for draw
    assert all(np.array_equal(world.frames_of[v], fixed.frames_of[v]) for v in world.frames_of)
    assert world.video_meta == fixed.video_meta and world.picks == fixed.picks
    root = generate_t2v_benchmark(tmp_path / "v", seed=2, spec=spec)
    sentences = json.loads((root / "benchmark_meta.json").read_text())["sentences"]
    first = sentences[str(int(np.flatnonzero(specific)[0]))]
    assert set(first) == {"kind", "events", "named", "noise", "specificity"}
    assert first["specificity"] == pytest.approx(first["named"] / 4 * (0.8 / first["noise"]) ** 2)
    with pytest.raises(ValueError, match="attribute_probs must be empty or at least 2"):
        T2VBenchmarkSpec(attribute_probs=(0.5, 0.2, 0.3), event_dim=25)
    with pytest.raises(ValueError, match="caption_noise_levels must be numbers > 0"):
        T2VBenchmarkSpec(caption_noise_levels=(0.4, 0.0))


def test_the_varied_regime_ceilings_recorded_in_the_guide() -> None:
    """docs/guide/dab.rst quotes these (``python -m reference_models.dab oracle --benchmark msrvtt-regime-varied``)."""
    ceilings = oracle_ceilings(0, BENCHMARKS["msrvtt-regime-varied"], sets=("test",))  # the set the asserts read
    assert ceilings["scorers"] == ["bayes", "no_generic", "deterministic"]
    specific = ceilings["sets"]["test"]
    assert round(specific["bayes"]["specific"]["R@1"], 1) == 41.6 and round(specific["deterministic"]["specific"]["R@1"], 1) == 39.7
    assert ceilings["headroom"]["test"]["specific"]["R@1"]["headroom"]
    assert not ceilings["headroom"]["test"]["generic"]["R@1"]["headroom"]


def test_the_recorded_specificity_is_read_back_and_correlated_with_an_interval(tmp_path: Path) -> None:
    from scipy.stats import spearmanr

    from reference_models.dab.data import load_t2v_split
    from reference_models.dab.diagnostics import benchmark_specificity, spearman_interval

    spec = dataclasses.replace(BENCHMARKS["msrvtt-regime-varied"], n_train=4, n_val=4, n_test=8, feature_dims=(16, 16))
    root = generate_t2v_benchmark(tmp_path / "v", seed=1, spec=spec)
    split = load_t2v_split(root, "test_all", max_frames=12)
    read = benchmark_specificity(root, split)
    world = draw_world(1, spec)
    assert read == [world.kinds[int(i)]["specificity"] for i in split.sen_ids]
    fixed_root = generate_t2v_benchmark(tmp_path / "f", seed=1, spec=dataclasses.replace(spec, attribute_probs=(),
                                                                                          caption_noise_levels=()))
    assert benchmark_specificity(fixed_root, load_t2v_split(fixed_root, "test_all", max_frames=12)) is None
    rng = np.random.default_rng(0)
    x = rng.standard_normal(200)
    y = -x + rng.standard_normal(200)
    result = spearman_interval(x, y, n_boot=500)
    assert result["spearman"] == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)
    assert result["low"] < result["spearman"] < result["high"] < 0
    with pytest.raises(ValueError, match="at least 3 values, got sizes 2 and 2"):
        spearman_interval([1.0, 2.0], [2.0, 1.0])


def test_the_ceilings_of_one_set_are_those_of_the_full_call() -> None:
    full = oracle_ceilings(2, TINY, n_boot=200)
    alone = oracle_ceilings(2, TINY, n_boot=200, sets=("test_all",))
    assert alone["sets"]["test_all"] == full["sets"]["test_all"]  # R@1 and MnR: the set's own
    first = oracle_ceilings(2, TINY, n_boot=200, sets=("test",))
    assert first["sets"]["test"] == full["sets"]["test"] and first["headroom"]["test"] == full["headroom"]["test"]
    with pytest.raises(ValueError, match="sets must be a non-empty part of"):
        oracle_ceilings(2, TINY, sets=("val",))
