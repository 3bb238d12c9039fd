"""``diagnose``: the HTML report of a trained run, its figures and its one-line errors on bad paths."""

from __future__ import annotations

import json

import pytest

from reference_models.holmes.cli import main
from reference_models.holmes.diagnose import read_history
from tests.reference.data_helpers import COLLECTION, make_tiny_benchmark
from tests.reference.test_trainer import FEATURE, tiny_config

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = make_tiny_benchmark(tmp_path_factory.mktemp("tiny"))
    out = tmp_path_factory.mktemp("run")
    cfg_path = out / "cfg.json"
    tiny_config().replace(schedule={"epochs": 2}).to_json(cfg_path)
    assert main(["train", "--data-root", str(root), "--collection", COLLECTION, "--visual-feature", FEATURE,
                 "--config-file", str(cfg_path), "--device", "cpu", "--output-dir", str(out), "--no-progress"]) == 0
    return root, out


def _diagnose(root, checkpoint, output, *extra):
    return main(["diagnose", "--checkpoint", str(checkpoint), "--data-root", str(root), "--collection", COLLECTION,
                 "--visual-feature", FEATURE, "--device", "cpu", "--output-dir", str(output), *extra])


def test_report_has_every_figure_and_the_numbers(run, tmp_path):
    root, out = run
    report = tmp_path / "report"
    assert _diagnose(root, out / "best.pt", report, "--num-queries", "3") == 0
    html = (report / "index.html").read_text(encoding="utf-8")
    for png in ("uncertainty_space.png", "transport.png", "risk_coverage.png", "type_recall.png", "training.png"):
        assert (report / png).read_bytes()[:8] == PNG_MAGIC
        assert f"src='{png}'" in html
    assert "most sure" in html and "least sure" in html and "max_score" in html
    numbers = json.loads((report / "diagnose.json").read_text())
    assert {"max_score", "top_belief"} <= set(numbers["selective"])
    assert set(numbers["gallery_identification"]["fitted"]["per_type"]) == {"precise", "polysemous", "underdetermined"}
    assert numbers["recall"]["SumR"] == pytest.approx(json.loads((out / "results.json").read_text())["test"]["recall"]
                                                      ["SumR"])


def test_results_json_reports_selective_retrieval_per_confidence(run):
    _, out = run
    test = json.loads((out / "results.json").read_text())["test"]
    assert {"max_score", "top_belief", "neg_xi", "neg_u", "margin"} <= set(test["selective"])
    assert set(test["selective"]["max_score"]) == {"AURC", "E-AURC", "AUGRC", "R@1@50%", "R@1@80%"}
    assert "macro_f1" in test["gallery_identification"]["fitted"] and "macro_f1" in test["identification"]


@pytest.mark.parametrize("case", ["missing_checkpoint", "bad_checkpoint", "bad_data_root", "output_is_a_file"])
def test_bad_paths_fail_with_one_line(run, tmp_path, capsys, case):
    root, out = run
    checkpoint, data, output = out / "best.pt", root, tmp_path / "report"
    if case == "missing_checkpoint":
        checkpoint = tmp_path / "nope.pt"
    elif case == "bad_checkpoint":
        checkpoint = tmp_path / "garbage.pt"
        checkpoint.write_bytes(b"not a checkpoint")
    elif case == "bad_data_root":
        data = tmp_path / "empty"
        data.mkdir()
    else:
        output = tmp_path / "file"
        output.write_text("x")
    assert _diagnose(data, checkpoint, output) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and err.startswith("error")


def test_history_falls_back_to_the_log(run, tmp_path):
    _, out = run
    from_checkpoint = read_history(out / "best.pt")
    log_only = tmp_path / "copy"
    log_only.mkdir()
    (log_only / "train.log").write_text((out / "train.log").read_text())
    from_log = read_history(log_only / "best.pt")
    assert [h["epoch"] for h in from_log] == [h["epoch"] for h in from_checkpoint] == [0, 1]
    assert from_log[-1]["val/SumR"] == pytest.approx(from_checkpoint[-1]["val/SumR"], rel=1e-3)
    assert read_history(tmp_path / "nothing" / "best.pt") == []


def test_report_without_planted_types(run, tmp_path):
    """Any MS-SL-layout data set: without planted types the page colours by identified type and fits by top-1."""
    import shutil

    root, out = run
    data = tmp_path / "data"
    shutil.copytree(root, data)
    for name in ("planted_types.json", "planted_events.json"):
        (data / COLLECTION / name).unlink()
    report = tmp_path / "report"
    assert _diagnose(data, out / "best.pt", report) == 0
    numbers = json.loads((report / "diagnose.json").read_text())
    assert numbers["gallery_identification"]["fitted"]["macro_f1"] is None  # NaN -> null: no types to score
    assert "planted" not in numbers["type_recall"] and "identified" in numbers["type_recall"]
    assert "Youden" in (report / "index.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("case", ["invalid", "missing"])
def test_only_a_missing_test_file_falls_back_to_val(run, tmp_path, capsys, case):
    """The same policy as train and evaluate: a broken test caption file is an error, a missing one a warning."""
    import shutil

    root, out = run
    data = tmp_path / "data"
    shutil.copytree(root, data)
    captions = data / COLLECTION / "TextData" / f"{COLLECTION}test.caption.txt"
    if case == "invalid":
        captions.write_text(captions.read_text() + captions.read_text().splitlines()[0] + "\n")
        assert _diagnose(data, out / "best.pt", tmp_path / "report") == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "duplicate caption id" in err
    else:
        captions.unlink()
        assert _diagnose(data, out / "best.pt", tmp_path / "report") == 0
        assert "warning: no test caption file" in capsys.readouterr().err
