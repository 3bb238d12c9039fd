"""The command line and the engine task: train / evaluate / validate / demo, exact resume, one-line errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import pytest
import torch

import reference_models.dab.cli as cli
from reference_models.dab.data import LAYOUT, load_t2v_split
from reference_models.dab.evaluate import retrieval_metrics, selective_metrics
from reference_models.dab.model import T2VOutput
from reference_models.dab.task import T2VTask
from reference_models.engine import Trainer
from tests.reference_dab.conftest import TINY_CONFIG, TINY_SPEC


@pytest.fixture()
def tiny_config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({k: TINY_CONFIG.to_dict()[k] for k in ("backbone", "bridge", "optim")} |
                               {"head": {k: v for k, v in TINY_CONFIG.to_dict()["head"].items() if k != "variant"}}))
    return path


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    return err


def test_train_evaluate_validate(tiny_root: Path, tiny_config_file: Path, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    argv = ["train", "--data-root", str(tiny_root), "--output-dir", str(out), "--config", str(tiny_config_file),
            "--device", "cpu", "--no-progress"]
    assert cli.main(argv) == 0
    result = json.loads((out / "results.json").read_text())
    for key in ("R@1", "R@5", "R@10", "MdR", "MnR"):
        assert key in result["test"] and key in result["test_all"]
    assert set(result["test"]["aurc"]) >= {"kl_margin", "max_score", "neg_u", "top_belief", "neg_xi"}
    assert result["efficiency"]["flops_per_query"] > 0
    assert "already holds a run" in _one_line_error(capsys, argv)
    metrics = tmp_path / "eval.json"
    assert cli.main(["evaluate", "--checkpoint", str(out / "best.pt"), "--data-root", str(tiny_root),
                     "--output", str(metrics)]) == 0
    assert json.loads(metrics.read_text())["R@1"] == result["test"]["R@1"]
    assert cli.main(["validate", "--data-root", str(tiny_root)]) == 0
    assert "OK" in capsys.readouterr().out
    (tmp_path / "broken.pt").write_bytes(b"not a checkpoint")
    assert "broken.pt" in _one_line_error(capsys, ["evaluate", "--checkpoint", str(tmp_path / "broken.pt"),
                                                   "--data-root", str(tiny_root)])


def test_bad_data_is_one_line_naming_file_and_id_and_writes_nothing(
        tiny_root: Path, tiny_config_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(shutil.copytree(tiny_root, tmp_path / "root"))
    vid = load_t2v_split(tiny_root, "val").video_ids[1]
    with h5py.File(root / LAYOUT.text_features, "a") as h5:
        del h5[vid]
    out = tmp_path / "never"
    err = _one_line_error(capsys, ["train", "--data-root", str(root), "--output-dir", str(out),
                                   "--config", str(tiny_config_file), "--no-progress"])
    assert LAYOUT.text_features in err and vid in err and not out.exists()
    err = _one_line_error(capsys, ["validate", "--data-root", str(root)])
    assert vid in err
    assert "no such folder" in _one_line_error(capsys, ["validate", "--data-root", str(tmp_path / "none")])
    bad_config = tmp_path / "bad.json"
    bad_config.write_text('{"head": {"tau": -1}}')
    err = _one_line_error(capsys, ["train", "--data-root", str(tiny_root), "--output-dir", str(out),
                                   "--config", str(bad_config)])
    assert "bad.json" in err and "tau" in err and not out.exists()


def test_interrupted_training_resumes_bit_for_bit(tiny_root: Path, tmp_path: Path) -> None:
    train, val = load_t2v_split(tiny_root, "train"), load_t2v_split(tiny_root, "val")
    config = TINY_CONFIG.replace(optim={"epochs": 3})
    whole = Trainer(T2VTask(config, train, val), tmp_path / "whole", seed=5, show_progress=False)
    whole.fit()
    part = Trainer(T2VTask(config, train, val), tmp_path / "part", seed=5, show_progress=False)
    part.fit(stop_after_epoch=0)
    resumed = Trainer(T2VTask(config, train, val), tmp_path / "part", seed=5, show_progress=False)
    resumed.fit(resume=True)
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_demo_writes_the_results_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "DEMO_CONFIG", TINY_CONFIG.replace(optim={"epochs": 1}))
    monkeypatch.setattr(cli, "DEMO_SPEC", TINY_SPEC)
    assert cli.main(["demo", "--seed", "1", "--output-dir", str(tmp_path / "d"), "--device", "cpu",
                     "--no-progress"]) == 0
    results = json.loads((tmp_path / "d" / "results.json").read_text())
    for model in ("dab", "base"):
        test = results[model]["test"]
        assert {"R@1", "R@5", "R@10", "MdR", "MnR", "aurc"} <= set(test)
    assert {"kl_margin", "max_score"} <= set(results["dab"]["test"]["aurc"])
    diagnostics = results["dab"]["diagnostics"]  # the uncertainty diagnostics of every Gaussian run
    assert diagnostics["set"] == "test_all" and set(diagnostics["sigma2"]) == {"text", "bridged", "video"}
    assert set(diagnostics["video_sigma2_by_events"]) <= {"1", "2", "3"} and "diagnostics" not in results["base"]


def test_metrics_against_brute_force() -> None:
    g = torch.Generator().manual_seed(0)
    logits, gt = torch.randn(50, 7, generator=g), torch.randint(0, 7, (50,), generator=g)
    ranks = torch.tensor([1 + int((row > row[t]).sum()) for row, t in zip(logits, gt)], dtype=torch.float64)
    metrics = retrieval_metrics(logits, gt)
    assert metrics["R@1"] == pytest.approx(100 * float((ranks == 1).double().mean()))
    assert metrics["R@5"] == pytest.approx(100 * float((ranks <= 5).double().mean()))
    assert metrics["MdR"] == float(ranks.median()) and metrics["MnR"] == pytest.approx(float(ranks.mean()))
    # a cost whose margin is large exactly on the correct queries ranks them first: AURC of an oracle
    cost = torch.rand(50, 7, generator=g) + 1.0
    correct = torch.rand(50, generator=g) < 0.5
    gt = cost.argmin(1)
    second = cost.topk(2, dim=1, largest=False).values[:, 1]
    cost[torch.arange(50), gt] = torch.where(correct, second - 0.9, second - 0.01)
    out = selective_metrics(T2VOutput(-cost, cost), torch.where(correct, gt, (gt + 1) % 7), temperature=1.0)
    error = 1 - correct.double().mean()
    oracle = sum(float(i - (50 - int(error * 50))) / (i + 1) for i in range(50) if i >= 50 - int(error * 50)) / 50
    assert out["aurc"]["kl_margin"] == pytest.approx(oracle, abs=0.02)
    assert out["R@1@25%"]["kl_margin"] == 100.0


def test_flags_override_the_config_file(tiny_root: Path, tiny_config_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "xpool"
    assert cli.main(["train", "--data-root", str(tiny_root), "--output-dir", str(out), "--config",
                     str(tiny_config_file), "--variant", "base", "--pooling", "xpool", "--epochs", "1",
                     "--no-progress"]) == 0
    config = json.loads((out / "results.json").read_text())["config"]
    assert (config["head"]["variant"], config["backbone"]["pooling"], config["optim"]["epochs"]) == ("base", "xpool", 1)
    assert config["backbone"]["hidden"] == 16  # from the file
