"""The covr-regime CVR benchmark (the paper's regime, docs/guide/hud.rst): sizes, edit-type counts, determinism."""

from __future__ import annotations

import csv
import dataclasses
import filecmp

import pytest
import torch

from reference_models.compare import build_parser as compare_parser
from reference_models.compare import runner_for
from reference_models.hud.benchmark import (
    BENCHMARKS,
    CVRBenchmarkSpec,
    benchmark_spec,
    generate_cvr_benchmark,
)
from reference_models.hud.cli import build_parser as hud_parser

REGIME = BENCHMARKS["covr-regime"]


def read(root, split):
    with (root / "annotation" / f"{split}.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_embedded_benchmark_is_unchanged_and_names_resolve():
    assert BENCHMARKS["embedded"] == CVRBenchmarkSpec()  # the demo's design and numbers stay as they are
    assert benchmark_spec("covr-regime") is REGIME
    with pytest.raises(ValueError, match="unknown CVR benchmark"):
        benchmark_spec("webvid")


def test_full_size_test_split_sizes_and_edit_types(tmp_path):
    # the real val and test sizes; a tiny training split keeps the test in seconds (sizes do not depend on it)
    spec = dataclasses.replace(REGIME, train_videos=4)
    summary = generate_cvr_benchmark(tmp_path / "b", seed=0, spec=spec)
    test = read(tmp_path / "b", "test")
    assert len(test) == REGIME.test_videos * REGIME.eval_edits >= 2000
    counts = summary["test"]
    assert sum(counts.values()) == len(test)
    assert counts["pronoun"] == round(REGIME.eval_pronoun_ratio * len(test))
    assert counts["explicit"] >= 300 and counts["key_detail"] >= 300  # each type carries its own interval
    assert len({r["pth2"] for r in test}) == len(test)
    assert len({r["pth1"] for r in test}) == REGIME.test_videos
    assert all(sum(r["pth1"] == ref for r in test[i:i + REGIME.eval_edits]) == REGIME.eval_edits
               for i, ref in enumerate(r["pth1"] for r in test) if i % REGIME.eval_edits == 0)
    shape = torch.load(tmp_path / "b" / "embeddings" / f"{test[0]['pth2']}.pth", weights_only=True).shape
    assert tuple(shape) == (REGIME.frames, REGIME.tokens, REGIME.dim)


def test_same_seed_same_files_other_seed_other_files(tmp_path):
    spec = REGIME.scaled(0.02)
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        generate_cvr_benchmark(tmp_path / name, seed=seed, spec=spec)
    for split in ("train", "val", "test"):
        assert filecmp.cmp(tmp_path / "a" / "annotation" / f"{split}.csv", tmp_path / "b" / "annotation" / f"{split}.csv",
                           shallow=False)
    vid = read(tmp_path / "a", "test")[0]["pth2"]

    def load(root):
        return torch.load(root / "embeddings" / f"{vid}.pth", weights_only=True)

    assert torch.equal(load(tmp_path / "a"), load(tmp_path / "b"))
    assert not torch.equal(load(tmp_path / "a"), load(tmp_path / "c"))


def test_flags_select_the_named_benchmark():
    args = compare_parser().parse_args(["run", "--task", "hud", "--out", "x", "--benchmark", "covr-regime"])
    assert runner_for("hud", benchmark=args.benchmark).benchmark == REGIME
    assert runner_for("hud").benchmark == CVRBenchmarkSpec()
    assert runner_for("hud", benchmark="covr-regime", scale=0.5).benchmark == REGIME.scaled(0.5)
    assert hud_parser().parse_args(["demo", "--benchmark", "covr-regime"]).benchmark == "covr-regime"
    assert hud_parser().parse_args(["demo"]).benchmark == "embedded"


def test_a_task_without_that_benchmark_is_a_one_line_error(tmp_path, capsys):
    from reference_models.compare import main

    assert main(["run", "--task", "holmes", "--benchmark", "covr-regime", "--out", str(tmp_path / "c")]) == 2
    assert "task holmes has the benchmarks embedded" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
