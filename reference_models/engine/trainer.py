"""The training loop of every reference model: optimisation, validation, checkpoints, resume and early stopping.

:class:`Trainer` trains a :class:`~reference_models.engine.task.TrainingTask` for ``task.schedule.epochs``
epochs, validates after every epoch (:meth:`TrainingTask.validate`) and writes into ``output_dir``:

``last.pt``
    after every epoch, atomically: model, objective, optimiser, scheduler, AMP scaler, every
    random-number-generator state, the epoch, the best validation metric, the early-stopping counter, the
    history, the config, the seed, the data fingerprint and the task's extras;
``best.pt``
    the weights with the best validation metric so far (with the config, the extras and the metrics);
``train.log``
    the log; ``tensorboard/`` scalars when :mod:`torch.utils.tensorboard` can be imported.

**Exact resume.** All generators are seeded from ``seed``; the order of the training batches depends only
on ``(seed, epoch)`` (the loader's ``set_epoch``); anything else random draws from the global generators,
whose states are saved at the end of every epoch and restored on :meth:`Trainer.resume`. So a run
interrupted after any epoch and resumed with the same config and seed ends with the same weights and
metrics as an uninterrupted run (bit for bit on CPU; on GPU up to non-deterministic kernels).

**Refusals.** :meth:`Trainer.resume` raises :class:`ResumeMismatchError` saying what differs when the config,
the seed or the data (:meth:`TrainingTask.data_fingerprint`) are not those of the checkpoint, before anything
is loaded or written. A loss (or gradient norm, without AMP's gradient scaling) that stops being finite raises
:class:`TrainingDivergedError` with the epoch and step, before the step is applied (on CPU; on other
devices at the end of the epoch, to avoid a synchronisation per step) and before any checkpoint is written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from reference_models.engine.checkpoint import (
    capture_rng_state,
    load_checkpoint,
    require_keys,
    restore_rng_state,
    save_checkpoint,
    seed_everything,
)
from reference_models.engine.distributed import DistributedRun, quiet_logger
from reference_models.engine.errors import (
    NonFiniteOutputError,
    ResumeMismatchError,
    TrainingDivergedError,
    UserError,
)
from reference_models.engine.fingerprint import fingerprint_differences
from reference_models.engine.host_memory import DEFAULT_HOST_MEMORY, HostMemory, apply_host_memory_policy
from reference_models.engine.optimization import clip_gradients
from reference_models.engine.reporting import progress, run_logger, tensorboard_writer
from reference_models.engine.task import TrainingTask

__all__ = ["TrainResult", "Trainer", "autocast_context", "all_finite"]

#: Keys a ``last.pt`` must hold to be resumed from.
_RESUME_KEYS = ("config", "seed", "epoch", "model", "objective", "optimizer", "scheduler", "scaler", "rng",
                "best_metric", "best_epoch", "bad_epochs", "history")


@dataclass
class TrainResult:
    """Outcome of :meth:`Trainer.fit`.

    Attributes
    ----------
    best_metric : float
        Best value of the task's ``selection_metric`` on the validation data.
    best_epoch : int
        Epoch (0-based) that reached it (-1 if none ran).
    epochs_completed : int
        Epochs finished in total (including those before a resume).
    stopped_early : bool
        Whether early stopping ended the run.
    history : list of dict
        Per epoch: ``epoch``, ``train_seconds``, the mean ``loss/<name>`` terms, the ``val/<name>`` metrics and,
        on CUDA, ``peak_gpu_memory_gib`` (``torch.cuda.max_memory_allocated`` over the epoch's training and
        validation).
    """

    best_metric: float
    best_epoch: int
    epochs_completed: int
    stopped_early: bool
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def train_time_per_epoch(self) -> float:
        """Mean training time of an epoch in seconds (excluding validation)."""
        times = [h["train_seconds"] for h in self.history]
        return sum(times) / len(times) if times else float("nan")


def autocast_context(device: torch.device, enabled: bool):
    """``torch.autocast`` on ``device`` (float16 on CUDA, bfloat16 elsewhere), or a no-op when disabled."""
    if not enabled:
        return contextlib.nullcontext()
    dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    return torch.autocast(device_type=device.type, dtype=dtype)


def all_finite(value: Any) -> bool:
    """Whether every floating tensor in ``value`` (a tensor, a dataclass of tensors, or a list of them) is finite."""
    if isinstance(value, torch.Tensor):
        return not value.is_floating_point() or bool(torch.isfinite(value.detach()).all())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return all(all_finite(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, (list, tuple)):
        return all(all_finite(v) for v in value)
    return True


class Trainer:
    """Trains one :class:`~reference_models.engine.task.TrainingTask` and keeps its run folder.

    Parameters
    ----------
    task : TrainingTask
        The reference model's data, model, objective, optimiser and metrics.
    output_dir : str or Path
        Where checkpoints, the log and TensorBoard scalars go.
    device : str or torch.device
        Where to train (``"cpu"``, ``"cuda"``, ``"cuda:1"`` …).
    seed : int
        Seeds every generator and the batch order.
    amp : bool
        Mixed precision with ``torch.autocast`` (float16 + gradient scaling on CUDA, bfloat16 on CPU).
    show_progress : bool
        tqdm progress bars.
    num_workers : int
        Data-loader worker processes.
    verbose : bool
        Also write the log to standard error.
    distributed : DistributedRun, optional
        This process's place in a multi-process run (:mod:`reference_models.engine.distributed`); then
        ``device`` is the rank's, the task is told (:meth:`TrainingTask.use_distributed`), the model trains
        under ``DistributedDataParallel`` (:attr:`train_model`), rank 0 alone validates and writes
        ``output_dir``, and ``last.pt`` holds every rank's generator states. Default: one process.
    host_memory : str
        The allocator policy (:mod:`reference_models.engine.host_memory`): ``"tcmalloc"`` (the default) or
        ``"jemalloc"`` when that allocator was preloaded at the start of the process (else ``"trim"``),
        ``"trim"`` returns the heaps' free pages once after every optimiser step, ``"mapped"`` gives every block
        of at least 1 MiB a memory map of its own, or ``"off"``. It moves where memory
        comes from, never a computed value; what was applied is :attr:`host_memory`.
    """

    def __init__(
        self,
        task: TrainingTask,
        output_dir: str | Path,
        *,
        device: str | torch.device = "cpu",
        seed: int = 0,
        amp: bool = False,
        show_progress: bool = True,
        num_workers: int = 0,
        verbose: bool = False,
        distributed: DistributedRun | None = None,
        host_memory: str = DEFAULT_HOST_MEMORY,
    ) -> None:
        #: The allocator policy as applied (its :meth:`~HostMemory.after_step` runs after every optimiser step).
        self.host_memory: HostMemory = apply_host_memory_policy(host_memory)
        self.task = task
        self.run = distributed if distributed is not None else DistributedRun(device=torch.device(device))
        self.schedule = task.schedule
        self.output_dir = Path(output_dir)
        self.device = torch.device(device)
        self.seed = int(seed)
        self.amp = bool(amp)
        if self.run.is_writer:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            self.show_progress = show_progress
            self.logger = run_logger(self.output_dir / "train.log", task.name, console=verbose)
        else:
            self.show_progress = False
            self.logger = quiet_logger(task.name, self.run.rank)
        if self.run.is_distributed:
            task.use_distributed(self.run)

        seed_everything(self.seed)
        self.model = task.build_model().to(self.device)
        self.objective = task.build_objective().to(self.device)
        #: What the training steps run, ``model`` itself or its ``DistributedDataParallel`` wrapper.
        self.train_model: nn.Module = self.model
        if self.run.is_distributed:
            self.train_model = _wrap_for_ranks(self.model, self.objective, self.device)
            seed_everything(self.seed + self.run.rank)  # the same weights everywhere, each rank its own dropout
        self.loader = task.train_loader(self.seed, num_workers)
        self.steps_per_epoch = len(self.loader)
        self.optimizer = task.build_optimizer([self.model, self.objective])
        self.scheduler = task.build_scheduler(self.optimizer, self.schedule.epochs * self.steps_per_epoch)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.amp and self.device.type == "cuda")
        self.params = [p for m in (self.model, self.objective) for p in m.parameters() if p.requires_grad]
        self.start_epoch = 0
        self.best_metric = -math.inf
        self.best_epoch = -1
        self.bad_epochs = 0
        self.history: list[dict[str, Any]] = []
        self._writer: Any = None  # TensorBoard writer, created with the first epoch's scalars
        self._writer_tried = False
        self._fingerprint: dict[str, Any] | None = None

    # --- checkpoints ------------------------------------------------------------------------------
    @property
    def last_path(self) -> Path:
        """``output_dir/last.pt``."""
        return self.output_dir / "last.pt"

    @property
    def best_path(self) -> Path:
        """``output_dir/best.pt``."""
        return self.output_dir / "best.pt"

    def data_fingerprint(self) -> dict[str, Any]:
        """The task's data fingerprint (computed once; stored in ``last.pt``, checked on resume)."""
        if self._fingerprint is None:
            self._fingerprint = self.task.data_fingerprint()
        return self._fingerprint

    def _state(self, epoch: int) -> dict[str, Any]:
        return {
            "config": self.task.config_dict(),
            "seed": self.seed,
            "data": self.data_fingerprint(),
            **self.task.checkpoint_extras(),
            "epoch": epoch,
            "model": self.model.state_dict(),
            "objective": self.objective.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": capture_rng_state(),
            **self._rank_rng_states(),
            "selection_metric": self.task.selection_metric,
            "best_metric": self.best_metric,
            "best_epoch": self.best_epoch,
            "bad_epochs": self.bad_epochs,
            "history": self.history,
        }

    def check_resumable(self, state: dict[str, Any], path: str | Path) -> None:
        """Raise :class:`ResumeMismatchError` unless ``state`` (a ``last.pt``) has this run's config, seed and data.

        The message lists what differs, as ``<what> <checkpoint's> vs <this run's>``. A checkpoint of an
        older version without a data fingerprint is checked on the task's extras (feature sizes) only.
        """
        require_keys(state, path, _RESUME_KEYS)
        try:
            config_changes = self.task.config_differences(state["config"])
        except (TypeError, ValueError) as exc:
            raise ResumeMismatchError(f"cannot resume from {path}: its config is not valid here ({exc})") from None
        problems: list[str] = []
        if config_changes:
            problems.append(f"different config ({', '.join(config_changes)})")
        if state["seed"] != self.seed:
            problems.append(f"different seed ({state['seed']} vs {self.seed})")
        if "data" in state:
            changes = fingerprint_differences(state["data"], self.data_fingerprint())
        else:
            extras = self.task.checkpoint_extras()
            changes = [f"{k} {state[k]} vs {v}" for k, v in extras.items() if k in state and state[k] != v]
        if changes:
            problems.append(f"different data ({', '.join(changes[:6])}{', ...' if len(changes) > 6 else ''})")
        if problems:
            raise ResumeMismatchError(
                f"cannot resume from {path}: {'; '.join(problems)} (checkpoint vs now); resuming needs the "
                f"run's own config, seed and data"
            )

    def resume(self, path: str | Path | None = None) -> bool:
        """Restore the state of ``path`` (default ``output_dir/last.pt``); ``False`` when there is none.

        Raises
        ------
        CheckpointError
            When the file is unreadable or not a checkpoint of this trainer.
        ResumeMismatchError
            When it was written with another config, seed or data (:meth:`check_resumable`).
        """
        path = Path(path) if path is not None else self.last_path
        if not path.exists():
            self.logger.info("no checkpoint at %s: starting from scratch", path)
            return False
        state = load_checkpoint(path, map_location=self.device)
        self.check_resumable(state, path)
        if "data" not in state:
            self.logger.warning("checkpoint %s has no data fingerprint (older version): data not checked", path)
        self.model.load_state_dict(state["model"])
        self.objective.load_state_dict(state["objective"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        restore_rng_state(self._own_rng_state(state))
        self.start_epoch = int(state["epoch"]) + 1
        self.best_metric = float(state["best_metric"])
        self.best_epoch = int(state["best_epoch"])
        self.bad_epochs = int(state["bad_epochs"])
        self.history = list(state["history"])
        self.logger.info("resumed from %s at epoch %d", path, self.start_epoch)
        return True

    # --- training ---------------------------------------------------------------------------------
    def fit(self, *, resume: bool = False, stop_after_epoch: int | None = None) -> TrainResult:
        """Train until ``schedule.epochs`` or early stopping.

        Parameters
        ----------
        resume : bool
            Continue from ``output_dir/last.pt`` when it exists.
        stop_after_epoch : int, optional
            Return after finishing this epoch (0-based) as if interrupted; for tests and time-boxed runs.
        """
        if resume:
            self.resume()
        schedule, key = self.schedule, self.task.selection_metric
        stopped_early = self.bad_epochs >= schedule.early_stop_patience
        for epoch in range(self.start_epoch, schedule.epochs):
            if stopped_early:
                break
            losses, seconds = self._train_epoch(epoch)
            metrics = self._validate()
            if key not in metrics:
                raise KeyError(f"{type(self.task).__name__}.validate returned no {key!r} (the selection metric); "
                               f"got {sorted(metrics)}")
            improved = metrics[key] > self.best_metric
            if improved:
                self.best_metric, self.best_epoch, self.bad_epochs = metrics[key], epoch, 0
            else:
                self.bad_epochs += 1
            record = {"epoch": epoch, "train_seconds": seconds, **{f"loss/{k}": v for k, v in losses.items()},
                      **{f"val/{k}": v for k, v in metrics.items()}}
            if self.device.type == "cuda":  # peak of the epoch's training and validation
                record["peak_gpu_memory_gib"] = torch.cuda.max_memory_allocated(self.device) / 2**30
            self.history.append(record)
            if self.run.is_writer:
                self._log_epoch(record, improved)
                if improved:
                    save_checkpoint(
                        {"config": self.task.config_dict(), **self.task.checkpoint_extras(), "epoch": epoch,
                         "model": self.model.state_dict(), "val": metrics},
                        self.best_path,
                    )
            state = self._state(epoch)  # on every rank: it gathers the ranks' generator states
            if self.run.is_writer:
                save_checkpoint(state, self.last_path)
            stopped_early = self.bad_epochs >= schedule.early_stop_patience
            if stopped_early:
                self.logger.info("early stop: %d epochs without a better val %s", self.bad_epochs, key)
            if stop_after_epoch is not None and epoch >= stop_after_epoch:
                break
        if self._writer is not None:
            self._writer.flush()
        return TrainResult(self.best_metric, self.best_epoch, len(self.history), stopped_early, list(self.history))

    def _train_epoch(self, epoch: int) -> tuple[dict[str, float], float]:
        self.model.train()
        self.objective.train()
        set_epoch = getattr(self.objective, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)
        self.loader.set_epoch(epoch)
        sums: dict[str, torch.Tensor] = {}
        steps = 0
        schedule = self.schedule
        watch = _DivergenceWatch(self.device, epoch, schedule.lr)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        start = time.perf_counter()
        for batch in progress(self.loader, self.show_progress, f"epoch {epoch + 1}/{schedule.epochs}"):
            try:
                with autocast_context(self.device, self.amp):
                    terms = self.task.training_step(self.train_model, self.objective, batch, self.device)
            except NonFiniteOutputError:
                raise watch.error(steps) from None
            except ValueError:  # the library refuses non-finite inputs: diverged when the weights are
                if all_finite(self.params):
                    raise
                raise watch.error(steps) from None
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.scale(terms.total).backward()
            self.scaler.unscale_(self.optimizer)
            grad_norm = clip_gradients(self.params, schedule.grad_clip, schedule.grad_clip_mode)
            # With gradient scaling, an overflowing gradient is expected: the scaler skips that step.
            watch.observe(steps, terms.total, None if self.scaler.is_enabled() else grad_norm)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.scheduler.step()
            self.host_memory.after_step()  # e.g. malloc_trim: the step's freed pages go back (engine.host_memory)
            for name, value in terms.scalars().items():
                sums[name] = sums[name] + value if name in sums else value.clone()
            steps += 1
        watch.finish()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        seconds = time.perf_counter() - start
        means = {k: float(v) / max(steps, 1) for k, v in sums.items()}
        return means, seconds

    def _log_epoch(self, record: dict[str, Any], improved: bool) -> None:
        scalars = {k: v for k, v in record.items() if isinstance(v, float)}
        text = " ".join(f"{k}={v:.4g}" for k, v in scalars.items())
        self.logger.info("epoch %d %s%s", record["epoch"] + 1, text, " (best)" if improved else "")
        if not self._writer_tried:  # not in __init__: a refused resume must leave the folder as it was
            self._writer_tried = True
            self._writer = tensorboard_writer(self.output_dir / "tensorboard")
        if self._writer is not None:
            for key, value in scalars.items():
                self._writer.add_scalar(key, value, record["epoch"] + 1)

    # --- several processes ------------------------------------------------------------------------
    def _validate(self) -> dict[str, float]:
        """The task's validation metrics; with several ranks, rank 0 validates and every rank gets the
        selection metric (so that all take the same best-epoch and early-stopping decisions)."""
        if not self.run.is_distributed:
            return self.task.validate(self.model, self.objective, self.device)
        key = self.task.selection_metric
        metrics = self.task.validate(self.model, self.objective, self.device) if self.run.is_writer else {}
        value = self.run.broadcast_value(float(metrics.get(key, math.nan)) if self.run.is_writer else math.nan)
        return metrics if self.run.is_writer else {key: value}

    def _rank_rng_states(self) -> dict[str, Any]:
        """With several ranks, ``{"rank_rng": [every rank's generator states]}`` (on rank 0), else ``{}``."""
        if not self.run.is_distributed:
            return {}
        return {"rank_rng": self.run.gather_to_writer(capture_rng_state())}

    def _own_rng_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """This rank's generator states in a ``last.pt``: ``rank_rng[rank]`` when it was written by as many
        ranks as this run has, else (one process, or another number of processes, with a warning) ``rng``."""
        saved = state.get("rank_rng")
        count = len(saved) if isinstance(saved, list) else 1
        if count != self.run.world_size:
            self.logger.warning("last.pt was written by %d process(es), this run has %d: the random streams "
                                "(dropout) are not those of an uninterrupted run", count, self.run.world_size)
        if self.run.is_distributed and count == self.run.world_size:
            return cast("list[dict[str, Any]]", saved)[self.run.rank]  # one state per rank
        return state["rng"]

    def load_best(self) -> nn.Module:
        """Load ``best.pt`` into ``model`` (falls back to the current weights when absent) and return it."""
        if self.best_path.is_file():
            self.model.load_state_dict(load_checkpoint(self.best_path, map_location=self.device)["model"])
        return self.model


def _wrap_for_ranks(model: nn.Module, objective: nn.Module, device: torch.device) -> nn.Module:
    """``model`` under ``DistributedDataParallel`` (which averages its gradients over the ranks)."""
    if any(p.requires_grad for p in objective.parameters()):
        raise UserError(f"{type(objective).__name__} holds trainable parameters: multi-process training averages "
                        f"the model's gradients only; train this objective in one process")
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)


class _DivergenceWatch:
    """Notices the first training step of an epoch whose loss or gradient norm is not finite.

    On CPU every step is checked at once (reading a CPU tensor costs nothing), so the bad update is never
    applied. Elsewhere the first bad step is recorded on the device and checked once, at the end of the
    epoch, so that the watch adds no host-device synchronisation per step.
    """

    def __init__(self, device: torch.device, epoch: int, lr: float) -> None:
        self.epoch, self.lr = epoch, lr
        self.immediate = device.type == "cpu"
        self.first_bad = torch.full((), -1, dtype=torch.long, device=device)

    def error(self, step: int) -> TrainingDivergedError:
        """The error for the 0-based ``step`` of this epoch."""
        return TrainingDivergedError(self.epoch + 1, step + 1, self.lr)

    def observe(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor | None) -> None:
        """Record ``step``'s loss (and gradient norm); raise at once on CPU when one is not finite."""
        finite = torch.isfinite(loss.detach())
        if grad_norm is not None:
            finite = finite & torch.isfinite(grad_norm)
        if self.immediate:
            if not bool(finite):
                raise self.error(step)
            return
        self.first_bad = torch.where((self.first_bad < 0) & ~finite, step, self.first_bad)

    def finish(self) -> None:
        """Raise for the first bad step of the epoch, if any (one synchronisation)."""
        if not self.immediate and int(self.first_bad) >= 0:
            raise self.error(int(self.first_bad))
