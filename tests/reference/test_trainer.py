"""Training of the Holmes reference model: exact resume, atomic checkpoints, ablations, optimiser, CLI."""

from __future__ import annotations

import math
import os

import pytest
import torch

from reference_models.engine import Trainer, build_scheduler
from reference_models.engine import checkpoint as ckpt
from reference_models.holmes.cli import main
from reference_models.holmes.config import ABLATIONS, HolmesConfig, preset
from reference_models.holmes.dab_variant import one_query_per_video
from reference_models.holmes.data import load_split, make_train_loader
from reference_models.holmes.evaluate import identification_report, per_type_recall_at_1
from reference_models.holmes.factory import build_model
from reference_models.holmes.objective import HolmesObjective
from reference_models.holmes.optimization import build_optimizer
from reference_models.holmes.task import HolmesTask
from tests.reference.data_helpers import COLLECTION, make_tiny_benchmark

FEATURE = "synthetic"


def tiny_config(**ablation) -> HolmesConfig:
    cfg = preset("embedded").replace(
        model={"hidden_size": 32, "num_heads": 4, "widths": [None, 1.0], "ffn_multiplier": 1},
        optim={"videos_per_batch": 4, "lr": 1e-3, "eval_video_batch": 8, "eval_query_batch": 16, "score_chunk": 8},
        schedule={"epochs": 2, "warmup_stage_epochs": 1, "hard_negative_epoch": 1},
        dab={"embed_dim": 8, "n_steps": 2},
    )
    return cfg.replace(ablation=ablation) if ablation else cfg


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return make_tiny_benchmark(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def splits(data_root):
    # Few clip/frame positions keep every training step in milliseconds.
    return {s: load_split(data_root, COLLECTION, FEATURE, s, n_clips=8, n_frames=16) for s in ("train", "val")}


def _trainer(cfg, splits, out, seed=3):
    return Trainer(HolmesTask(cfg, splits["train"], splits["val"]), out, seed=seed, show_progress=False)


def test_interrupted_and_resumed_run_matches_uninterrupted(splits, tmp_path):
    cfg = tiny_config()
    full = _trainer(cfg, splits, tmp_path / "full")
    full_result = full.fit()

    first = _trainer(cfg, splits, tmp_path / "resumed")
    first.fit(stop_after_epoch=0)
    assert len(first.history) == 1
    del first
    torch.manual_seed(12345)  # a fresh process would not share the generator state: scramble it
    second = _trainer(cfg, splits, tmp_path / "resumed")
    resumed_result = second.fit(resume=True)

    assert resumed_result.epochs_completed == full_result.epochs_completed == 2
    for key, value in full.model.state_dict().items():
        assert torch.equal(value, second.model.state_dict()[key]), key
    strip = lambda h: [{k: v for k, v in e.items() if k != "train_seconds"} for e in h]  # noqa: E731
    assert strip(resumed_result.history) == strip(full_result.history)
    assert resumed_result.best_metric == full_result.best_metric
    assert second.scheduler.state_dict()["last_epoch"] == full.scheduler.state_dict()["last_epoch"]


def test_resume_refuses_a_different_config(splits, tmp_path):
    _trainer(tiny_config(), splits, tmp_path).fit(stop_after_epoch=0)
    other = _trainer(tiny_config().replace(optim={"lr": 5e-4}), splits, tmp_path)
    with pytest.raises(ValueError, match="different config"):
        other.fit(resume=True)


def test_checkpoints_are_written_and_loadable(splits, tmp_path):
    trainer = _trainer(tiny_config(), splits, tmp_path)
    trainer.fit(stop_after_epoch=0)
    assert (tmp_path / "last.pt").is_file() and (tmp_path / "best.pt").is_file() and (tmp_path / "train.log").is_file()
    state = ckpt.load_checkpoint(tmp_path / "last.pt")  # weights_only=True inside
    assert state["epoch"] == 0 and HolmesConfig.from_dict(state["config"]) == trainer.task.config
    assert {"model", "optimizer", "scheduler", "rng", "best_metric", "bad_epochs"} <= set(state)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    ckpt.save_checkpoint({"epoch": 1, "w": torch.ones(3)}, path)

    def broken_save(obj, handle):
        handle.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        ckpt.save_checkpoint({"epoch": 2, "w": torch.zeros(3)}, path)
    monkeypatch.undo()
    state = ckpt.load_checkpoint(path)
    assert state["epoch"] == 1 and torch.equal(state["w"], torch.ones(3))
    assert os.listdir(tmp_path) == ["last.pt"]


def test_rng_state_round_trip():
    ckpt.seed_everything(7)
    state = ckpt.capture_rng_state()
    import random

    import numpy as np

    expected = (random.random(), float(np.random.rand()), torch.rand(2))
    ckpt.seed_everything(99)
    ckpt.restore_rng_state(state)
    assert random.random() == expected[0] and float(np.random.rand()) == expected[1]
    assert torch.equal(torch.rand(2), expected[2])


@pytest.mark.parametrize("name", sorted(ABLATIONS))
def test_every_ablation_builds_and_takes_a_training_step(name, splits):
    cfg = tiny_config().with_ablation(name)
    split = splits["train"]
    torch.manual_seed(0)
    model = build_model(cfg, split.visual_dim, split.text_dim, split.n_clips, split.n_frames)
    objective = HolmesObjective(cfg, cfg.model.hidden_size)
    optimizer = build_optimizer([model, objective], 1e-3, 0.01)
    batch = next(iter(make_train_loader(split, 4, seed=0)))
    for epoch in (0, 1):  # warm-up stage, then stage 2
        objective.set_epoch(epoch)
        terms = objective(model(batch), batch)
        optimizer.zero_grad()
        terms.total.backward()
        assert torch.isfinite(terms.total)
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        assert grads and all(torch.isfinite(g).all() for g in grads)
        optimizer.step()
        method = cfg.ablation.method
        assert terms.stage == (1 if epoch == 0 else 2)
        assert (terms.inter != 0) == (method == "holmes")
        assert (terms.pac != 0) == (method == "dab")
        intra_on = method == "holmes" and cfg.ablation.intra and epoch == 1
        assert (terms.intra != 0) == intra_on


@pytest.mark.parametrize(
    "name, fusion, calibrate, calibration_set, terms",
    [
        ("full", "uncertainty_dominant", True, "refined", ("frame", "clip", "fused")),
        ("frame_only", "frame", True, "refined", ("frame",)),
        ("clip_only", "clip", True, "refined", ("clip",)),
        ("no_aggregation", "uncertainty_dominant", True, "refined", ("frame", "clip")),
        ("confidence_dominance", "confidence_dominant", True, "refined", ("frame", "clip", "fused")),
        ("no_calibration", "uncertainty_dominant", False, "refined", ("frame", "clip", "fused")),
        ("initial_polysemous_only", "uncertainty_dominant", True, "initial", ("frame", "clip", "fused")),
    ],
)
def test_objective_follows_the_ablation_terms(name, fusion, calibrate, calibration_set, terms):
    """L_inter of each ablation equals the matching sum of L_U terms of an independently built library loss."""
    from evidential_prvr import EvidentialRetrievalLoss

    generator = torch.Generator().manual_seed(0)
    frame_sim = torch.rand(10, 4, generator=generator) * 2 - 1
    clip_sim = torch.rand(10, 4, generator=generator) * 2 - 1
    query_video = torch.tensor([0, 0, 1, 1, 1, 2, 2, 3, 3, 3])
    output = type("Out", (), {"frame_sim": frame_sim, "clip_sim": clip_sim, "query": torch.randn(10, 32),
                              "clip_logits": None, "frame_logits": None})()
    batch = type("Batch", (), {"query_video": query_video})()
    reference = EvidentialRetrievalLoss.from_preset(
        "release", dataset="tvr", fusion=fusion, calibrate=calibrate, calibration_set=calibration_set
    )
    details = reference.details(frame_sim, clip_sim, query_video)
    expected = sum(getattr(details, f"{t}_loss") for t in terms)
    cfg = tiny_config().with_ablation(name).replace(ablation={"intra": False})
    objective = HolmesObjective(cfg, 32)
    objective.set_epoch(1)  # stage 2: calibration on
    torch.testing.assert_close(objective(output, batch).inter, expected)


def test_hard_negatives_and_stage_follow_the_schedule():
    cfg = tiny_config().replace(schedule={"warmup_stage_epochs": 2, "hard_negative_epoch": 3})
    objective = HolmesObjective(cfg, 32)
    seen = []
    for epoch in range(4):
        objective.set_epoch(epoch)
        seen.append((objective.stage, objective.hard_negatives))
    assert seen == [(1, False), (1, False), (2, False), (2, True)]


def test_optimizer_excludes_biases_and_layernorm_from_weight_decay():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 2, bias=False))
    opt = build_optimizer([model], 1e-3, 0.01)
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    assert decayed == {id(model[0].weight), id(model[2].weight)}


def test_scheduler_warms_up_then_decays_linearly():
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=1.0)
    sched = build_scheduler(opt, total_steps=200, warmup_ratio=0.01)  # 2 warm-up steps
    lrs = []
    for _ in range(200):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[:3] == pytest.approx([0.5, 1.0, 1.0])
    assert lrs[101] == pytest.approx(99 / 198)
    assert lrs[-1] == pytest.approx(1 / 198)


def test_one_query_per_video_picks_one_of_each_videos_queries():
    query_video = torch.tensor([0, 0, 1, 2, 2, 2, 3])
    for seed in range(5):
        torch.manual_seed(seed)
        chosen = one_query_per_video(query_video, 4)
        assert torch.equal(query_video[chosen], torch.arange(4))


def test_identification_report_and_per_type_r1_by_hand():
    identified = torch.tensor([0, 0, 1, 2, 1])
    planted = ["precise", "polysemous", "polysemous", "underdetermined", None]
    report = identification_report(identified, planted)
    assert report["per_type"]["precise"] == {"precision": 0.5, "recall": 1.0, "identified": 2, "planted": 1}
    assert report["per_type"]["polysemous"]["precision"] == 1.0 and report["per_type"]["polysemous"]["recall"] == 0.5
    assert report["accuracy"] == 0.75 and report["confusion"]["polysemous"]["precise"] == 1
    scores = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.3, 0.4]])
    r1 = per_type_recall_at_1(scores, torch.tensor([0, 0, 1]), ["precise", "precise", "polysemous"])
    assert r1 == {"precise": 50.0, "polysemous": 100.0}


def test_cli_validate_exit_codes(data_root, tmp_path, capsys):
    assert main(["validate", "--data-root", str(data_root), "--collection", COLLECTION,
                 "--visual-feature", FEATURE]) == 0
    assert main(["validate", "--data-root", str(tmp_path), "--collection", COLLECTION,
                 "--visual-feature", FEATURE]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "missing" in err


def test_cli_train_writes_results(data_root, tmp_path):
    cfg_path = tmp_path / "cfg.json"
    tiny_config().replace(schedule={"epochs": 1}).to_json(cfg_path)
    out = tmp_path / "run"
    assert main(["train", "--data-root", str(data_root), "--collection", COLLECTION, "--visual-feature", FEATURE,
                 "--config-file", str(cfg_path), "--device", "cpu", "--output-dir", str(out), "--no-progress"]) == 0
    import json

    text = (out / "results.json").read_text()
    assert "NaN" not in text and "Infinity" not in text  # strict JSON
    results = json.loads(text)
    assert set(results["test"]["recall"]) == {"R@1", "R@5", "R@10", "R@100", "SumR"}
    assert results["test"]["per_type_r1"] and results["test"]["identification"]["per_type"]
    assert main(["evaluate", "--checkpoint", str(out / "best.pt"), "--data-root", str(data_root), "--collection",
                 COLLECTION, "--visual-feature", FEATURE, "--device", "cpu"]) == 0


def test_comparison_writes_holmes_and_baseline(data_root, tmp_path):
    from reference_models.holmes.cli import run_comparison

    results = run_comparison(data_root, COLLECTION, FEATURE, tiny_config().replace(schedule={"epochs": 1}), tmp_path)
    for name in ("holmes", "baseline"):
        assert set(results[name]["recall"]) == {"R@1", "R@5", "R@10", "R@100", "SumR"}
        assert set(results[name]["per_type_r1"]) <= {"precise", "polysemous", "underdetermined"}
        assert set(results[name]["identification"]["per_type"]) == {"precise", "polysemous", "underdetermined"}
    assert results["config"]["ablation"]["method"] == "holmes"


def test_amp_training_stays_finite(splits, tmp_path):
    trainer = Trainer(HolmesTask(tiny_config().replace(schedule={"epochs": 1}), splits["train"], splits["val"]), tmp_path,
                      amp=True, show_progress=False)
    result = trainer.fit()
    assert math.isfinite(result.history[-1]["loss/total"]) and math.isfinite(result.best_metric)
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
