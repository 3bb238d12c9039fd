"""Guarantees of the trainer that a one-line change could silently break.

Each test here was checked to fail under a deliberate breakage: the batch order no longer changing per
epoch (no ``loader.set_epoch``), ``best_metric`` or the early-stopping counter not restored on resume,
``weights_only=False`` in the checkpoint loader, a diverging loss going unnoticed, checkpoints written
with ``mkstemp``'s private mode.
"""

from __future__ import annotations

import os
import stat
from types import SimpleNamespace

import pytest
import torch

from reference_models.engine import ResumeMismatchError, Trainer, TrainingDivergedError
from reference_models.engine import trainer as engine_trainer
from reference_models.engine.checkpoint import (
    CheckpointError,
    load_checkpoint,
    remove_orphan_temporaries,
    save_checkpoint,
)
from reference_models.holmes import task as task_module
from reference_models.holmes.data import load_split
from reference_models.holmes.task import HolmesTask
from tests.reference.data_helpers import COLLECTION, make_micro_benchmark
from tests.reference.run_helpers import FEATURE, micro_config


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    root = make_micro_benchmark(tmp_path_factory.mktemp("micro"))
    return {s: load_split(root, COLLECTION, FEATURE, s, n_clips=4, n_frames=8) for s in ("train", "val")}


def make_trainer(splits, out, **optim) -> Trainer:
    return Trainer(HolmesTask(micro_config(**optim), splits["train"], splits["val"]), out, seed=5, show_progress=False)


class ScriptedValidation:
    """Stands in for ``evaluate_retrieval`` in the Holmes task: the n-th validation returns the n-th SumR."""

    def __init__(self, sumrs: list[float]) -> None:
        self.sumrs = list(sumrs)
        self.calls = 0

    def __call__(self, *args, **kwargs) -> SimpleNamespace:
        value = self.sumrs[self.calls]
        self.calls += 1
        return SimpleNamespace(recall={"R@1": value / 4, "R@5": value / 4, "R@10": value / 4, "R@100": value / 4,
                                       "SumR": value})


# --- batch order ------------------------------------------------------------------------------------
def test_every_epoch_trains_on_its_own_batch_order(splits, tmp_path):
    trainer = make_trainer(splits, tmp_path, epochs=2, videos_per_batch=3)
    seen: list[list[str]] = []
    trainer.model.register_forward_pre_hook(
        lambda module, args: seen.append(list(args[0].video_ids)) if module.training else None
    )
    trainer.fit()
    steps = trainer.steps_per_epoch
    assert len(seen) == 2 * steps
    epochs = [seen[:steps], seen[steps:]]
    assert epochs[0] != epochs[1], "both epochs saw the same batches in the same order"
    ids = splits["train"].video_ids
    for epoch, batches in enumerate(epochs):
        expected = [[ids[i] for i in chunk] for chunk in trainer.loader.batch_video_indices(epoch)]
        assert batches == expected, epoch


# --- resume restores the model-selection state ------------------------------------------------------
def test_resume_after_a_worse_epoch_does_not_overwrite_best_pt(splits, tmp_path, monkeypatch):
    monkeypatch.setattr(task_module, "evaluate_retrieval", ScriptedValidation([50.0, 10.0, 20.0]))
    make_trainer(splits, tmp_path, epochs=3).fit(stop_after_epoch=0)
    best = (tmp_path / "best.pt").read_bytes()
    result = make_trainer(splits, tmp_path, epochs=3).fit(resume=True)
    assert (result.best_epoch, result.best_metric, result.epochs_completed) == (0, 50.0, 3)
    assert (tmp_path / "best.pt").read_bytes() == best
    assert load_checkpoint(tmp_path / "best.pt")["epoch"] == 0


def test_resume_continues_the_early_stopping_count(splits, tmp_path, monkeypatch):
    scripted = [50.0, 10.0, 10.0, 10.0, 10.0, 10.0]
    monkeypatch.setattr(task_module, "evaluate_retrieval", ScriptedValidation(scripted))
    uninterrupted = make_trainer(splits, tmp_path / "full", epochs=6, early_stop_patience=2).fit()
    assert uninterrupted.stopped_early and uninterrupted.epochs_completed == 3

    monkeypatch.setattr(task_module, "evaluate_retrieval", ScriptedValidation(scripted))
    make_trainer(splits, tmp_path / "resumed", epochs=6, early_stop_patience=2).fit(stop_after_epoch=1)
    resumed = make_trainer(splits, tmp_path / "resumed", epochs=6, early_stop_patience=2).fit(resume=True)
    assert resumed.stopped_early and resumed.epochs_completed == 3


# --- checkpoints are read without running code -----------------------------------------------------
class _CreatesAFileWhenUnpickled:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_checkpoint_whose_unpickling_would_run_code_is_refused(splits, tmp_path):
    marker = tmp_path / "created-by-unpickling"
    torch.save({"config": {}, "model": _CreatesAFileWhenUnpickled(str(marker))}, tmp_path / "last.pt")
    with pytest.raises(CheckpointError, match="refused: it holds objects other than tensors") as info:
        load_checkpoint(tmp_path / "last.pt")
    assert "\n" not in str(info.value)
    with pytest.raises(CheckpointError, match="refused"):
        make_trainer(splits, tmp_path).resume()
    assert not marker.exists()


# --- divergence -------------------------------------------------------------------------------------
def test_a_non_finite_loss_stops_training_before_the_step_is_applied(splits, tmp_path):
    trainer = make_trainer(splits, tmp_path, epochs=2, videos_per_batch=3)
    original = trainer.objective.forward
    calls = []

    def poisoned(*args, **kwargs):
        terms = original(*args, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            terms.total = terms.total * float("nan")
        return terms

    trainer.objective.forward = poisoned
    with pytest.raises(TrainingDivergedError, match=r"loss became non-finite at epoch 1 step 2") as info:
        trainer.fit()
    assert (info.value.epoch, info.value.step) == (1, 2)
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    assert not (tmp_path / "last.pt").exists() and not (tmp_path / "best.pt").exists()


def test_non_finite_scores_refused_by_the_library_are_reported_as_divergence(splits, tmp_path):
    trainer = make_trainer(splits, tmp_path, epochs=1, videos_per_batch=3)
    original = trainer.model.forward

    def poisoned(batch):
        output = original(batch)
        output.clip_sim = output.clip_sim * float("nan")
        return output

    trainer.model.forward = poisoned
    with pytest.raises(TrainingDivergedError, match="epoch 1 step 1"):
        trainer.fit()


def test_off_cpu_the_first_bad_step_is_reported_at_the_end_of_the_epoch():
    watch = engine_trainer._DivergenceWatch(torch.device("cpu"), epoch=2, lr=1e-3)
    watch.immediate = False  # the path taken on CUDA and other devices, without a sync per step
    finite, nan = torch.tensor(1.0), torch.tensor(float("nan"))
    watch.observe(0, finite, torch.tensor(0.5))
    watch.observe(1, finite, torch.tensor(float("inf")))  # gradient norm
    watch.observe(2, nan, None)
    with pytest.raises(TrainingDivergedError) as info:
        watch.finish()
    assert (info.value.epoch, info.value.step) == (3, 2)
    clean = engine_trainer._DivergenceWatch(torch.device("cpu"), epoch=0, lr=1e-3)
    clean.immediate = False
    clean.observe(0, finite, None)
    clean.finish()


# --- resume refuses other settings, naming what differs ---------------------------------------------
def test_resume_names_the_config_field_and_the_seed_that_differ(splits, tmp_path):
    make_trainer(splits, tmp_path).fit()
    other = Trainer(HolmesTask(micro_config(lr=2e-3), splits["train"], splits["val"]), tmp_path, seed=6, show_progress=False)
    with pytest.raises(ResumeMismatchError) as info:
        other.resume()
    message = str(info.value)
    assert "different config (optim.lr 0.001 vs 0.002)" in message and "different seed (5 vs 6)" in message
    assert "different data" not in message


def test_resume_refuses_the_validation_split_of_another_data_set(splits, tmp_path):
    make_trainer(splits, tmp_path).fit()
    root = make_micro_benchmark(tmp_path / "other", n_val_videos=3)
    val = load_split(root, COLLECTION, FEATURE, "val", n_clips=4, n_frames=8)
    other = Trainer(HolmesTask(micro_config(), splits["train"], val), tmp_path, seed=5, show_progress=False)
    with pytest.raises(ResumeMismatchError, match="different data .*val videos 4 vs 3"):
        other.resume()


# --- files ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_checkpoints_get_the_mode_of_a_plainly_written_file(tmp_path, umask):
    old = os.umask(umask)
    try:
        save_checkpoint({"w": torch.ones(2)}, tmp_path / "last.pt")
        (tmp_path / "plain.json").write_text("{}")
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / "last.pt").stat().st_mode)
    assert mode == stat.S_IMODE((tmp_path / "plain.json").stat().st_mode) == 0o666 & ~umask


def test_only_temporaries_of_run_outputs_are_removed(tmp_path):
    ours = [".last.pt.abc.tmp", ".best.pt.q1w2e3.tmp", ".config.json.zz.tmp", "results.json.tmp"]
    theirs = [".other.pt.abc.tmp", "last.pt", "notes.tmp", ".last.pt.abc.tmp.keep"]
    for name in ours + theirs:
        (tmp_path / name).write_text("x")
    removed = remove_orphan_temporaries(tmp_path)
    assert sorted(p.name for p in removed) == sorted(ours)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(theirs)

