"""The shared training engine on a task of its own (a toy regression), independent of the Holmes model.

What every reference model relies on: exact resume, refusals naming what differs, the divergence guard
(including a task's ``NonFiniteOutputError``), the selection metric, the schedule's checks and the CLI helpers.
"""

from __future__ import annotations

import argparse
import json
import math

import pytest
import torch
from torch import nn

from reference_models.engine import (
    NonFiniteOutputError,
    ResumeMismatchError,
    TotalTerms,
    Trainer,
    TrainingDivergedError,
    TrainingSchedule,
    TrainingTask,
    UserError,
    format_table,
    run_main,
    write_json,
)


class Batches:
    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return 4

    def __iter__(self):
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed * 997 + self.epoch))
        return iter(order.chunk(4))


class ToyTask(TrainingTask):
    """Noisy linear regression; dropout makes the global generator matter for exact resume."""

    name = "toy"
    selection_metric = "neg_mse"

    def __init__(self, lr: float = 0.05, epochs: int = 4, points: int = 32, poison_step: int | None = None) -> None:
        self.lr, self.epochs, self.poison_step, self.calls = lr, epochs, poison_step, 0
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(points, 3, generator=generator)
        self.y = self.x @ torch.tensor([[1.0], [-2.0], [0.5]])

    @property
    def schedule(self) -> TrainingSchedule:
        return TrainingSchedule(epochs=self.epochs, early_stop_patience=10, lr=self.lr, grad_clip=1.0)

    def config_dict(self):
        return {"lr": self.lr, "epochs": self.epochs}

    def config_differences(self, saved):
        if set(saved) != {"lr", "epochs"}:
            raise ValueError(f"not a toy config: {sorted(saved)}")
        return [f"{k} {saved[k]} vs {v}" for k, v in self.config_dict().items() if saved[k] != v]

    def data_fingerprint(self):
        return {"points": len(self.x)}

    def build_model(self):
        return nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.2), nn.Linear(8, 1))

    def build_objective(self):
        return nn.MSELoss()

    def train_loader(self, seed, num_workers=0):
        return Batches(len(self.x), seed)

    def training_step(self, model, objective, batch, device):
        self.calls += 1
        if self.calls == self.poison_step:
            raise NonFiniteOutputError("scores are not finite")
        return TotalTerms(objective(model(self.x[batch].to(device)), self.y[batch].to(device)))

    def build_optimizer(self, modules):
        return torch.optim.AdamW([p for m in modules for p in m.parameters()], lr=self.lr)

    def validate(self, model, objective, device):
        model.eval()
        with torch.no_grad():
            return {"neg_mse": -float(objective(model(self.x.to(device)), self.y.to(device)))}


def test_an_interrupted_and_resumed_run_ends_bit_for_bit_as_the_uninterrupted_one(tmp_path):
    full = Trainer(ToyTask(), tmp_path / "full", seed=1, show_progress=False)
    full_result = full.fit()
    Trainer(ToyTask(), tmp_path / "cut", seed=1, show_progress=False).fit(stop_after_epoch=1)
    resumed = Trainer(ToyTask(), tmp_path / "cut", seed=1, show_progress=False)
    result = resumed.fit(resume=True)
    for (name, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    strip = [{k: v for k, v in h.items() if k != "train_seconds"} for h in result.history]
    assert strip == [{k: v for k, v in h.items() if k != "train_seconds"} for h in full_result.history]
    assert result.best_metric == full_result.best_metric and result.epochs_completed == 4
    state = torch.load(tmp_path / "cut" / "last.pt", weights_only=True)
    assert state["selection_metric"] == "neg_mse" and state["data"] == {"points": 32}
    assert not hasattr(result, "best_sumr") and not hasattr(resumed, "best_sumr")  # one name: best_metric


def test_resume_names_the_setting_the_seed_and_the_data_that_differ(tmp_path):
    Trainer(ToyTask(), tmp_path, seed=1, show_progress=False).fit(stop_after_epoch=0)
    other = Trainer(ToyTask(lr=0.1, points=24), tmp_path, seed=2, show_progress=False)
    with pytest.raises(ResumeMismatchError) as info:
        other.resume()
    message = str(info.value)
    assert "different config (lr 0.05 vs 0.1)" in message and "different seed (1 vs 2)" in message
    assert "different data (points 32 vs 24)" in message and "\n" not in message


def test_a_task_that_reports_non_finite_outputs_stops_as_diverged_before_any_checkpoint(tmp_path):
    trainer = Trainer(ToyTask(poison_step=3), tmp_path, seed=0, show_progress=False)
    with pytest.raises(TrainingDivergedError, match="epoch 1 step 3") as info:
        trainer.fit()
    assert isinstance(info.value, UserError) and info.value.lr == 0.05
    assert not (tmp_path / "last.pt").exists()


def test_a_validation_without_the_selection_metric_is_a_bug_named_at_once(tmp_path):
    class Unnamed(ToyTask):
        def validate(self, model, objective, device):
            return {"mse": 1.0}

    with pytest.raises(KeyError, match="'neg_mse'"):
        Trainer(Unnamed(), tmp_path, show_progress=False).fit()


@pytest.mark.parametrize(("field", "value", "match"), [
    ("epochs", 0, "epochs must be an integer >= 1"), ("lr", math.inf, "lr must be a finite number > 0"),
    ("grad_clip_mode", "norm", "grad_clip_mode must be one of"), ("grad_clip", math.nan, "grad_clip must be"),
])
def test_the_schedule_refuses_bad_values(field, value, match):
    values = {"epochs": 1, "early_stop_patience": 1, "lr": 0.1, "grad_clip": 1.0, field: value}
    with pytest.raises(ValueError, match=match):
        TrainingSchedule(**values)


def test_run_main_turns_a_user_error_into_one_line_and_status_2(capsys):
    def handler(args: argparse.Namespace) -> int:
        raise UserError("--data-root /x: no such folder\n(check the path)")

    assert run_main(handler, argparse.Namespace()) == 2
    err = capsys.readouterr().err
    assert err == "error: --data-root /x: no such folder (check the path)\n"


def test_results_are_strict_json_and_tables_align(tmp_path):
    write_json(tmp_path / "r.json", {"b": float("nan"), "a": [1.0, float("inf")]})
    assert json.loads((tmp_path / "r.json").read_text()) == {"a": [1.0, None], "b": None}
    assert format_table([["model", "SumR"], ["holmes", "297.6"], ["b", "1.0"]]).splitlines() == [
        "model    SumR", "------  -----", "holmes  297.6", "b         1.0"]
