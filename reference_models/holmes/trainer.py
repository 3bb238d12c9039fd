"""The Holmes trainer: the shared engine's :class:`~reference_models.engine.Trainer` running a
:class:`~reference_models.holmes.task.HolmesTask`.

``Trainer(config, train_split, val_split, output_dir, ...)`` keeps the constructor of the Holmes trainer
before the shared engine; everything it does (the loop, ``last.pt`` / ``best.pt``, exact resume with the data
fingerprint, the divergence guard, ``train.log``, TensorBoard, early stopping on the validation SumR) is the
engine's (:mod:`reference_models.engine.trainer`). The other names are the engine's, kept at their old path.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from reference_models.engine import Trainer as EngineTrainer
from reference_models.engine.trainer import (
    ResumeMismatchError,
    TrainingDivergedError,
    TrainResult,
    autocast_context,
)
from reference_models.holmes.config import HolmesConfig
from reference_models.holmes.data import PRVRSplit
from reference_models.holmes.objective import HolmesObjective
from reference_models.holmes.task import HolmesTask

__all__ = ["TrainResult", "Trainer", "autocast_context", "ResumeMismatchError", "TrainingDivergedError"]

LOGGER_NAME = "reference_models.holmes"


class Trainer(EngineTrainer):
    """Trains a Holmes reference model (or an ablation / baseline / DAB variant) on one data set.

    Parameters
    ----------
    config : HolmesConfig
        The run's settings.
    train_split, val_split : PRVRSplit
        Training and validation data (feature dimensions are read from them).
    output_dir : str or Path
        Where checkpoints, the log and TensorBoard scalars go.
    **options
        ``device``, ``seed``, ``amp``, ``show_progress``, ``num_workers``, ``verbose``: as for
        :class:`reference_models.engine.Trainer`; ``stability=True`` records the identification's stability per
        epoch (``objective.stability``, :class:`~reference_models.holmes.stability.ThresholdStability`).

    Attributes
    ----------
    config, train_split, val_split
        The run's settings and data (those of the trainer's ``task``).
    """

    task: HolmesTask
    objective: HolmesObjective  # HolmesTask.build_objective's

    def __init__(self, config: HolmesConfig, train_split: PRVRSplit, val_split: PRVRSplit, output_dir: str | Path,
                 **options: Any) -> None:
        stability = bool(options.pop("stability", False))
        super().__init__(HolmesTask(config, train_split, val_split, stability=stability), output_dir, **options)
        self.config, self.train_split, self.val_split = config, train_split, val_split

    @property
    def best_sumr(self) -> float:
        """Deprecated alias of ``best_metric`` (the best validation SumR)."""
        warnings.warn("Trainer.best_sumr is deprecated; use Trainer.best_metric", DeprecationWarning, stacklevel=2)
        return self.best_metric
