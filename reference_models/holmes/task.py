"""The Holmes reference model as one :class:`~reference_models.engine.TrainingTask` of the shared engine.

:class:`HolmesTask` gives the engine's :class:`~reference_models.engine.Trainer` what is particular to PRVR
with Holmes: the :class:`~reference_models.holmes.model.HolmesModel` built from a
:class:`~reference_models.holmes.config.HolmesConfig` and the data's feature sizes, the
:class:`~reference_models.holmes.objective.HolmesObjective` (Holmes Eq. 21, or an ablation, the MIL baseline or
the DAB variant), the batches of whole videos with all their captions, the optimiser of the config and the
validation SumR (:func:`~reference_models.holmes.evaluate.evaluate_retrieval`), which selects ``best.pt``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from reference_models.engine import (
    NonFiniteOutputError,
    TrainingSchedule,
    TrainingTask,
    all_finite,
    build_scheduler,
    fingerprint_differences,
)
from reference_models.holmes.config import HolmesConfig
from reference_models.holmes.data import PRVRSplit, make_train_loader
from reference_models.holmes.evaluate import evaluate_retrieval
from reference_models.holmes.factory import build_model
from reference_models.holmes.objective import HolmesObjective, ObjectiveTerms
from reference_models.holmes.optimization import optimizer_from_settings

__all__ = ["HolmesTask"]


class HolmesTask(TrainingTask):
    """Partially relevant video retrieval with the Holmes objective, trained on one data set.

    Parameters
    ----------
    config : HolmesConfig
        The run's settings.
    train_split, val_split : PRVRSplit
        Training and validation data (they must share the feature sizes ``D_v`` and ``D_t``).
    """

    name = "holmes"
    selection_metric = "SumR"

    def __init__(self, config: HolmesConfig, train_split: PRVRSplit, val_split: PRVRSplit) -> None:
        if train_split.visual_dim != val_split.visual_dim or train_split.text_dim != val_split.text_dim:
            raise ValueError(
                f"train and val splits must share feature dims, got (D_v, D_t) = "
                f"({train_split.visual_dim}, {train_split.text_dim}) and ({val_split.visual_dim}, {val_split.text_dim})"
            )
        self.config = config
        self.train_split = train_split
        self.val_split = val_split

    @property
    def schedule(self) -> TrainingSchedule:
        optim, schedule = self.config.optim, self.config.schedule
        return TrainingSchedule(epochs=schedule.epochs, early_stop_patience=schedule.early_stop_patience,
                                lr=optim.lr, grad_clip=optim.max_grad_norm, grad_clip_mode=optim.grad_clip_mode)

    def config_dict(self) -> dict[str, Any]:
        return self.config.to_dict()

    def config_differences(self, saved: dict[str, Any]) -> list[str]:
        previous = HolmesConfig.from_dict(saved)
        if previous == self.config:
            return []
        return fingerprint_differences(previous.to_dict(), self.config.to_dict(), sep=".")

    def data_fingerprint(self) -> dict[str, Any]:
        return {"train": self.train_split.fingerprint(), "val": self.val_split.fingerprint()}

    def checkpoint_extras(self) -> dict[str, int]:
        """The feature sizes and counts the model is built for (``evaluate`` and ``diagnose`` rebuild it)."""
        split = self.train_split
        return {"visual_dim": split.visual_dim, "text_dim": split.text_dim, "n_clips": split.n_clips,
                "n_frames": split.n_frames}

    def build_model(self) -> nn.Module:
        split = self.train_split
        return build_model(self.config, split.visual_dim, split.text_dim, split.n_clips, split.n_frames)

    def build_objective(self) -> nn.Module:
        return HolmesObjective(self.config, self.config.model.hidden_size)

    def train_loader(self, seed: int, num_workers: int = 0):
        split, vpb = self.train_split, self.config.optim.videos_per_batch
        # A trailing batch with a single video has no in-batch negative: drop it (the shuffle changes per epoch).
        return make_train_loader(split, vpb, seed=seed, num_workers=num_workers,
                                 drop_last=split.num_videos % vpb == 1 and split.num_videos > 1)

    def training_step(self, model: nn.Module, objective: nn.Module, batch, device: torch.device) -> ObjectiveTerms:
        max_queries = int(torch.bincount(batch.query_video).max())  # on the host, before the copy
        batch = batch.to(device, non_blocking=True)
        output = model(batch)
        try:
            return objective(output, batch, max_queries)
        except ValueError as exc:  # the library refuses non-finite scores: say that training diverged
            if all_finite(output):
                raise
            raise NonFiniteOutputError(str(exc)) from exc

    def build_optimizer(self, modules: list[nn.Module]) -> torch.optim.Optimizer:
        return optimizer_from_settings(modules, self.config.optim)

    def build_scheduler(self, optimizer: torch.optim.Optimizer, total_steps: int):
        optim = self.config.optim
        return build_scheduler(optimizer, total_steps, optim.warmup_proportion, schedule=optim.lr_schedule)

    def validate(self, model: nn.Module, objective: nn.Module, device: torch.device) -> dict[str, float]:
        return evaluate_retrieval(model, self.val_split, self.config, device=device).recall
