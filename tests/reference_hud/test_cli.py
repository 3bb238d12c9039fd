"""The command line on the shared engine: train / evaluate / demo on the tiny benchmark, checkpoints, resume."""

from __future__ import annotations

import json

import torch

from reference_models.engine import load_checkpoint
from reference_models.hud.cli import main

TRAIN = ["--epochs", "1", "--no-progress", "--device", "cpu"]


def test_train_writes_results_and_a_checkpoint_with_the_vocabulary(data_root, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--data-root", str(data_root), "--output-dir", str(out), *TRAIN]) == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results["test"]) >= {"R@1", "R@5", "R@10", "R@50", "mean", "per_type"}
    assert set(results["test"]["per_type"]) <= {"pronoun", "explicit", "key_detail"}
    best = load_checkpoint(out / "best.pt")
    assert best["vocabulary"][:2] == ["<pad>", "<unk>"] and "make" in best["vocabulary"]
    assert best["config"]["method"] == "hud"
    metrics = tmp_path / "metrics.json"
    assert main(["evaluate", "--checkpoint", str(out / "best.pt"), "--data-root", str(data_root), "--output",
                 str(metrics), "--device", "cpu"]) == 0
    assert json.loads(metrics.read_text())["test"]["mean"] == results["test"]["mean"]
    assert main(["train", "--data-root", str(data_root), "--output-dir", str(out), *TRAIN]) == 2
    assert "already holds a run" in capsys.readouterr().err


def test_interrupted_hud_run_resumes_bit_for_bit(data_root, tmp_path, capsys):
    from reference_models.engine import Trainer
    from reference_models.hud.cli import _load, _split_paths
    from reference_models.hud.config import HUDRunConfig
    from reference_models.hud.task import CVRTask

    config = HUDRunConfig(epochs=2)
    args = type("Args", (), {"data_root": data_root, **{f"{k}_{s}": None for k in ("annotation", "embeddings",
                                                                                      "text_features")
                                                         for s in ("train", "val", "test")}})()
    splits, vocab = _load(_split_paths(args), config)
    task = CVRTask(config, splits["train"], splits["val"], vocab)
    Trainer(task, tmp_path / "whole", show_progress=False).fit()
    Trainer(task, tmp_path / "split", show_progress=False).fit(stop_after_epoch=0)
    Trainer(task, tmp_path / "split", show_progress=False).fit(resume=True)
    a, b = load_checkpoint(tmp_path / "whole" / "last.pt"), load_checkpoint(tmp_path / "split" / "last.pt")
    assert a["epoch"] == b["epoch"] == 1
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    out = tmp_path / "split"
    assert main(["train", "--data-root", str(data_root), "--output-dir", str(out), "--epochs", "3", "--resume",
                 "--no-progress", "--device", "cpu"]) == 2
    assert "epochs" in capsys.readouterr().err  # another config is refused, naming the difference


def test_demo_writes_both_models_results(tmp_path):
    out = tmp_path / "demo"
    assert main(["demo", "--seed", "1", "--output-dir", str(out), "--epochs", "1", "--benchmark-scale", "0.02",
                 "--no-progress", "--device", "cpu"]) == 0
    results = json.loads((out / "results.json").read_text())
    for model in ("hud", "base"):
        test = results[model]["test"]
        assert {"R@1", "R@5", "R@10", "R@50", "mean", "per_type"} <= set(test)
        assert 0.0 <= test["mean"] <= 100.0
    assert results["benchmark"]["edit_types"]["test"]["pronoun"] >= 0.34 * 12


def test_train_on_precomputed_text_features(data_root, tmp_path):
    import h5py

    from reference_models.hud.data import read_annotations

    flags = []
    for split in ("train", "val", "test"):
        path = tmp_path / f"{split}_text.h5"
        with h5py.File(path, "w") as handle:
            for t in read_annotations(data_root / "annotation" / f"{split}.csv"):
                handle[str(t.row)] = torch.randn(2 + t.row % 3, 6).numpy()
        flags += [f"--text-features-{split}", str(path)]
    out = tmp_path / "run"
    assert main(["train", "--data-root", str(data_root), "--output-dir", str(out), *TRAIN, *flags]) == 0
    best = load_checkpoint(out / "best.pt")
    assert best["vocabulary"] is None and best["backbone"]["text_dim"] == 6
