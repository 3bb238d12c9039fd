"""The interface between the training engine and one reference model: :class:`TrainingTask`.

A reference model (``holmes`` for PRVR, ``hud`` for composed video retrieval, ``dab`` for text-to-video) is
one subclass of :class:`TrainingTask`. It supplies its data, model, objective, optimiser and metrics; the
:class:`~reference_models.engine.trainer.Trainer` does everything else (the loop, mixed precision, gradient
clipping, the divergence guard, checkpoints, exact resume, early stopping, the log and TensorBoard).

The engine calls the task in this order: :attr:`TrainingTask.schedule`, ``seed_everything(seed)``,
:meth:`~TrainingTask.build_model`, :meth:`~TrainingTask.build_objective`, :meth:`~TrainingTask.train_loader`,
:meth:`~TrainingTask.build_optimizer`, :meth:`~TrainingTask.build_scheduler`; then per epoch
``objective.set_epoch(epoch)`` (when defined), ``loader.set_epoch(epoch)``, :meth:`~TrainingTask.training_step`
for every batch and :meth:`~TrainingTask.validate` once.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch
from torch import nn

from reference_models.engine.distributed import DistributedRun
from reference_models.engine.errors import UserError, check_choice
from reference_models.engine.optimization import GRAD_CLIP_MODES, build_scheduler
from reference_models.engine.seed_grid import ComparisonSpec, QueryRanks

__all__ = ["TrainingSchedule", "TrainingTask", "StepTerms", "TotalTerms"]


@dataclass(frozen=True)
class TrainingSchedule:
    """How long and how the engine trains a task.

    Attributes
    ----------
    epochs : int
        Epochs to train (>= 1).
    early_stop_patience : int
        Stop after this many epochs without a better ``TrainingTask.selection_metric`` (>= 1).
    lr : float
        The peak learning rate (the divergence message names it).
    grad_clip : float
        Gradient-norm bound applied before every step; 0 or less clips nothing.
    grad_clip_mode : {"global", "per_parameter"}
        See :func:`~reference_models.engine.clip_gradients`.
    """

    epochs: int
    early_stop_patience: int
    lr: float
    grad_clip: float
    grad_clip_mode: str = "global"

    def __post_init__(self) -> None:
        for name in ("epochs", "early_stop_patience"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainingSchedule.{name} must be an integer >= 1, got {value!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"TrainingSchedule.lr must be a finite number > 0, got {self.lr!r}")
        if not (isinstance(self.grad_clip, (int, float)) and not math.isnan(self.grad_clip)):
            raise ValueError(f"TrainingSchedule.grad_clip must be a number, got {self.grad_clip!r}")
        check_choice(self.grad_clip_mode, "TrainingSchedule.grad_clip_mode", GRAD_CLIP_MODES)


class StepTerms(Protocol):
    """What :meth:`TrainingTask.training_step` returns: the loss to back-propagate and the values to log."""

    total: torch.Tensor

    def scalars(self) -> dict[str, torch.Tensor]:
        """Scalar tensors by name (detached), averaged over the epoch and logged as ``loss/<name>``."""


@dataclass
class TotalTerms:
    """The :class:`StepTerms` of a step whose loss is one term: ``total``, logged as ``loss/total``."""

    total: torch.Tensor

    def scalars(self) -> dict[str, torch.Tensor]:
        """``{"total": total}``, detached."""
        return {"total": self.total.detach()}


class TrainingTask(metaclass=abc.ABCMeta):
    """Everything one reference model gives the engine: its data, model, objective, optimiser and metrics.

    Class attributes
    ----------------
    name : str
        ``"holmes"``, ``"hud"``, ``"dab"``: the log's logger is ``reference_models.<name>``.
    selection_metric : str
        The key of :meth:`validate`'s result that ``best.pt`` and early stopping maximise.
    """

    name: ClassVar[str]
    selection_metric: ClassVar[str]

    @property
    @abc.abstractmethod
    def schedule(self) -> TrainingSchedule:
        """Epochs, patience, learning rate and gradient clipping of the run."""

    @abc.abstractmethod
    def config_dict(self) -> dict[str, Any]:
        """The run's settings as JSON-able values; saved in ``last.pt`` and ``best.pt``."""

    @abc.abstractmethod
    def config_differences(self, saved: dict[str, Any]) -> list[str]:
        """What differs between ``saved`` (a checkpoint's :meth:`config_dict`) and this run's settings.

        One entry per setting, as ``"<name> <saved> vs <now>"``; ``[]`` when they are the same. Raise
        ``ValueError`` (or ``TypeError``) when ``saved`` is not a valid config of this task.
        """

    @abc.abstractmethod
    def data_fingerprint(self) -> dict[str, Any]:
        """Sizes and hashes of the training and validation data; saved in ``last.pt`` and compared on resume."""

    @abc.abstractmethod
    def build_model(self) -> nn.Module:
        """A freshly initialised model (called once, right after ``seed_everything(seed)``)."""

    @abc.abstractmethod
    def build_objective(self) -> nn.Module:
        """The loss module; it may define ``set_epoch(epoch)`` and may hold parameters (they are optimised too)."""

    @abc.abstractmethod
    def train_loader(self, seed: int, num_workers: int = 0) -> Any:
        """An iterable of training batches with ``set_epoch(epoch)`` and ``__len__``.

        The order of the batches must depend only on ``(seed, epoch)``: that is what makes resume exact.
        """

    @abc.abstractmethod
    def training_step(self, model: nn.Module, objective: nn.Module, batch: Any, device: torch.device) -> StepTerms:
        """Move ``batch`` to ``device``, run the model and the objective, and return the step's terms.

        Runs inside the engine's autocast context. When the objective refuses non-finite model outputs, raise
        :class:`~reference_models.engine.errors.NonFiniteOutputError` so that the engine reports divergence.
        """

    @abc.abstractmethod
    def build_optimizer(self, modules: list[nn.Module]) -> torch.optim.Optimizer:
        """The optimiser of the trainable parameters of ``modules`` (the model and the objective)."""

    #: Warm-up proportion of the default :meth:`build_scheduler`.
    warmup_ratio: ClassVar[float] = 0.0
    #: Learning-rate schedule of the default :meth:`build_scheduler` (``"warmup_linear"`` or ``"bert_warmup_linear"``).
    lr_schedule: ClassVar[str] = "warmup_linear"

    def build_scheduler(self, optimizer: torch.optim.Optimizer, total_steps: int) -> Any:
        """The per-update learning-rate scheduler; by default the engine's, with :attr:`warmup_ratio` and
        :attr:`lr_schedule`."""
        return build_scheduler(optimizer, total_steps, self.warmup_ratio, schedule=self.lr_schedule)

    @abc.abstractmethod
    def validate(self, model: nn.Module, objective: nn.Module, device: torch.device) -> dict[str, float]:
        """Validation metrics after an epoch; must contain the task's ``selection_metric``."""

    def use_distributed(self, run: DistributedRun) -> None:
        """Called by the engine before anything is built when several processes train together.

        A task that supports it keeps ``run`` and then returns from :meth:`train_loader` this rank's shard
        of every global batch (the same number of batches on every rank), builds an objective that sees the
        global batch, and accepts the ``DistributedDataParallel`` wrapper as ``model`` in
        :meth:`training_step` (``model.module`` is the model). By default: refused.
        """
        raise UserError(f"the {self.name} task does not support multi-process training (torchrun); run it in "
                        f"one process")

    def checkpoint_extras(self) -> dict[str, Any]:
        """Extra top-level entries of ``last.pt`` and ``best.pt`` (feature sizes, a vocabulary, ...)."""
        return {}

    #: The comparison this task's model exists to make (its method vs its base, the headline metrics), run by
    #: :mod:`reference_models.engine.seed_grid`; ``None``: the task has none.
    comparison: ClassVar[ComparisonSpec | None] = None

    def query_ranks(self, model: nn.Module, split: Any, device: torch.device | str) -> QueryRanks:
        """The 1-based rank of the ground truth of every query of the evaluation ``split`` (with the query ids
        and, where the data say, their types), computed as the task's evaluation ranks them. By default:
        refused (a task without a :attr:`comparison`)."""
        raise UserError(f"the {self.name} task gives no per-query ranks; it cannot be compared")
