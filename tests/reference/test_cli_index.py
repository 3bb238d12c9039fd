"""``evaluate --index``: streamed exact and FAISS evaluation from the command line, and its one-line errors."""

from __future__ import annotations

import json
import sys

import pytest

from tests.reference.data_helpers import make_micro_benchmark
from tests.reference.run_helpers import data_args, main, run_cli, train_args, write_config


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = make_micro_benchmark(tmp_path_factory.mktemp("micro"))
    out = tmp_path_factory.mktemp("run") / "run"
    assert main(train_args(root, out, write_config(tmp_path_factory.mktemp("cfg") / "micro.json"))) == 0
    return root, out / "best.pt"


def _evaluate(capsys, trained, tmp_path, name, *extra):
    root, checkpoint = trained
    report = tmp_path / f"{name}.json"
    run = run_cli(capsys, "evaluate", "--checkpoint", checkpoint, *data_args(root), "--device", "cpu",
                  "--output", report, *extra)
    assert run.rc == 0, run.err
    return json.loads(report.read_text())


def test_index_evaluations_equal_the_default(trained, tmp_path, capsys):
    pytest.importorskip("faiss")
    default = _evaluate(capsys, trained, tmp_path, "default")
    exact = _evaluate(capsys, trained, tmp_path, "exact", "--index", "exact")
    flat = _evaluate(capsys, trained, tmp_path, "flat", "--index", "faiss:flat", "--candidates", "1000")
    for key in ("recall", "per_type_r1", "selective"):
        assert exact[key] == default[key], key
    assert flat["recall"] == default["recall"]
    assert exact["search"]["index"] == "exact" and flat["search"]["index"] == "faiss:flat"
    hnsw = _evaluate(capsys, trained, tmp_path, "hnsw", "--index", "faiss:hnsw:m=8")
    assert set(hnsw["recall"]) == set(default["recall"])


@pytest.mark.parametrize(("flags", "needles"), [
    (("--index", "annoy"), ("--index", "'exact', 'faiss' or 'faiss:TYPE'")),
    (("--index", "faiss:ivf:probes=2"), ("--index", "key=value")),
    (("--index", "exact", "--candidates", "5"), ("--candidates", "--index faiss")),
])
def test_bad_index_flags_are_one_line(trained, capsys, flags, needles):
    root, checkpoint = trained
    run = run_cli(capsys, "evaluate", "--checkpoint", checkpoint, *data_args(root), "--device", "cpu", *flags)
    run.only_error_line(*needles)


def test_missing_faiss_is_one_line_naming_the_extra(trained, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)
    root, checkpoint = trained
    run = run_cli(capsys, "evaluate", "--checkpoint", checkpoint, *data_args(root), "--device", "cpu",
                  "--index", "faiss:ivf")
    run.only_error_line("--index faiss:ivf", "evidential-prvr[faiss]")
