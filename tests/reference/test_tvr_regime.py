"""The tvr-regime PRVR benchmark (docs/guide/embedded_benchmark.rst): one change from the embedded design."""

from __future__ import annotations

import collections
import dataclasses
import filecmp

import pytest

from reference_models.compare import build_parser as compare_parser
from reference_models.compare import runner_for
from reference_models.holmes.data import (
    BENCHMARKS,
    EmbeddedBenchmarkSpec,
    benchmark_spec,
    generate_embedded_benchmark,
    read_planted_types,
)

REGIME = BENCHMARKS["tvr-regime"]


def test_the_only_change_is_a_tvr_sized_test_split():
    assert BENCHMARKS["embedded"] == EmbeddedBenchmarkSpec()  # the demo's design and numbers stay
    assert REGIME == dataclasses.replace(EmbeddedBenchmarkSpec(), n_test_videos=1090)
    assert benchmark_spec("tvr-regime") is REGIME
    with pytest.raises(ValueError, match="unknown PRVR benchmark 'tvr'; choose one of embedded, tvr-regime, tvr-regime-sparse"):
        benchmark_spec("tvr")


def test_scaled_keeps_the_design_and_checks_its_factor():
    half = REGIME.scaled(0.5)
    assert (half.n_train_videos, half.n_val_videos, half.n_test_videos) == (200, 60, 545)
    assert dataclasses.replace(half, n_train_videos=400, n_val_videos=120, n_test_videos=1090) == REGIME
    assert REGIME.scaled(0.001).n_val_videos == 4
    with pytest.raises(ValueError, match="factor must be > 0, got 0"):
        REGIME.scaled(0)


def test_training_and_validation_splits_are_the_embedded_ones(tmp_path):
    # every split draws from its own seed sequence, so a larger test split leaves the others as they are
    small = dataclasses.replace(EmbeddedBenchmarkSpec(), n_train_videos=6, n_val_videos=5, n_test_videos=5)
    generate_embedded_benchmark(tmp_path / "a", "embedded", seed=3, spec=small)
    generate_embedded_benchmark(tmp_path / "b", "embedded", seed=3, spec=dataclasses.replace(small, n_test_videos=1090))
    text = "embedded/TextData/embedded{}.caption.txt"
    for split in ("train", "val"):
        assert filecmp.cmp(tmp_path / "a" / text.format(split), tmp_path / "b" / text.format(split), shallow=False)
    test_lines = (tmp_path / "b" / text.format("test")).read_text(encoding="utf-8").splitlines()
    videos = {line.split("#", 1)[0] for line in test_lines}
    assert len(videos) == 1090 and len(test_lines) >= 2 * 1090
    planted = read_planted_types(tmp_path / "b", "embedded")
    counts = collections.Counter(planted[line.split(" ", 1)[0]] for line in test_lines)
    share = {kind: n / len(test_lines) for kind, n in counts.items()}
    # the embedded fractions (20 % polysemous, 20 % underdetermined), each type large enough for an interval
    assert 0.15 < share["polysemous"] < 0.25 and 0.15 < share["underdetermined"] < 0.25
    assert min(counts.values()) >= 500


def test_the_flag_selects_it():
    args = compare_parser().parse_args(["run", "--task", "holmes", "--out", "x", "--benchmark", "tvr-regime"])
    assert runner_for("holmes", benchmark=args.benchmark).benchmark == REGIME
    assert runner_for("holmes").benchmark == EmbeddedBenchmarkSpec()
    assert runner_for("holmes", benchmark="tvr-regime", scale=0.5).benchmark == REGIME.scaled(0.5)
