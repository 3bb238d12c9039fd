"""Training loop of the reference model: optimisation, validation, checkpoints, resume and early stopping.

:class:`Trainer` runs ``config.optim.epochs`` epochs of the :class:`~reference_models.holmes.objective.HolmesObjective`
on a training split, validates on a validation split after every epoch (SumR of
:func:`evidential_prvr.metrics.recall_at_k`), and writes into ``output_dir``:

``last.pt``
    after every epoch, atomically: model, objective (DAB heads), optimiser, scheduler, AMP scaler, every
    random-number-generator state, the epoch, the best validation SumR, the early-stopping counter, the
    history and the config;
``best.pt``
    the weights with the best validation SumR so far;
``train.log``
    the log; ``tensorboard/`` scalars when :mod:`torch.utils.tensorboard` can be imported.

**Exact resume.** All generators are seeded from ``seed``; the order of the training batches depends only
on ``(seed, epoch)`` (:meth:`TrainLoader.set_epoch`); the random triplet negatives and dropout draw from
the global torch generator, whose state is saved at the end of every epoch and restored on ``resume``. So
a run interrupted after any epoch and resumed with the same config and seed ends with the same weights
and metrics as an uninterrupted run (bit for bit on CPU; on GPU up to non-deterministic kernels).

**Refusals.** ``last.pt`` also records a fingerprint of the data (:meth:`PRVRSplit.fingerprint` of the
training and validation splits); :meth:`Trainer.resume` raises :class:`ResumeMismatchError` saying what
differs when the config, the seed or the data are not those of the checkpoint, before anything is loaded
or written. A loss (or gradient norm, without AMP's gradient scaling) that stops being finite raises
:class:`TrainingDivergedError` with the epoch and step, before the step is applied (on CPU; on other
devices at the end of the epoch, to avoid a synchronisation per step) and before any checkpoint is written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from reference_models.holmes.checkpoint import (
    capture_rng_state,
    load_checkpoint,
    require_keys,
    restore_rng_state,
    save_checkpoint,
    seed_everything,
)
from reference_models.holmes.config import HolmesConfig
from reference_models.holmes.data import PRVRSplit, fingerprint_differences, make_train_loader
from reference_models.holmes.errors import UserError
from reference_models.holmes.evaluate import evaluate_retrieval
from reference_models.holmes.factory import build_model
from reference_models.holmes.objective import HolmesObjective
from reference_models.holmes.optimization import (
    build_scheduler,
    clip_gradients,
    optimizer_from_settings,
)

__all__ = ["TrainResult", "Trainer", "autocast_context", "ResumeMismatchError", "TrainingDivergedError"]

LOGGER_NAME = "reference_models.holmes"

#: Keys a ``last.pt`` must hold to be resumed from.
_RESUME_KEYS = ("config", "seed", "epoch", "model", "objective", "optimizer", "scheduler", "scaler", "rng",
                "best_sumr", "best_epoch", "bad_epochs", "history")


class ResumeMismatchError(UserError, ValueError):
    """``last.pt`` was written with another config, seed or data set than the run that tries to resume it."""


class TrainingDivergedError(UserError, ArithmeticError):
    """The loss (or the gradient norm) stopped being finite.

    Attributes
    ----------
    epoch, step : int
        Where, counted from 1.
    lr : float
        The configured learning rate.
    """

    def __init__(self, epoch: int, step: int, lr: float) -> None:
        self.epoch, self.step, self.lr = epoch, step, lr
        super().__init__(
            f"loss became non-finite at epoch {epoch} step {step}; lower the learning rate (optim.lr = {lr:g})"
        )


@dataclass
class TrainResult:
    """Outcome of :meth:`Trainer.fit`.

    Attributes
    ----------
    best_sumr : float
        Best validation SumR.
    best_epoch : int
        Epoch (0-based) that reached it (-1 if none ran).
    epochs_completed : int
        Epochs finished in total (including those before a resume).
    stopped_early : bool
        Whether early stopping ended the run.
    history : list of dict
        Per epoch: mean losses, validation metrics, the epoch's training time in seconds and, on CUDA,
        ``peak_gpu_memory_gib`` (``torch.cuda.max_memory_allocated`` over the epoch's training and validation).
    """

    best_sumr: float
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


class Trainer:
    """Trains a Holmes reference model (or an ablation / baseline / DAB variant) on one data set.

    Parameters
    ----------
    config : HolmesConfig
        The run's settings.
    train_split, val_split : PRVRSplit
        Training and validation data (feature dimensions are read from them).
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
    """

    def __init__(
        self,
        config: HolmesConfig,
        train_split: PRVRSplit,
        val_split: PRVRSplit,
        output_dir: str | Path,
        *,
        device: str | torch.device = "cpu",
        seed: int = 0,
        amp: bool = False,
        show_progress: bool = True,
        num_workers: int = 0,
        verbose: bool = False,
    ) -> None:
        if train_split.visual_dim != val_split.visual_dim or train_split.text_dim != val_split.text_dim:
            raise ValueError(
                f"train and val splits must share feature dims, got (D_v, D_t) = "
                f"({train_split.visual_dim}, {train_split.text_dim}) and ({val_split.visual_dim}, {val_split.text_dim})"
            )
        self.config = config
        self.train_split = train_split
        self.val_split = val_split
        self.output_dir = Path(output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.device = torch.device(device)
        self.seed = int(seed)
        self.amp = bool(amp)
        self.show_progress = show_progress
        self.logger = _file_logger(self.output_dir / "train.log", console=verbose)

        seed_everything(self.seed)
        self.model = build_model(
            config, train_split.visual_dim, train_split.text_dim, train_split.n_clips, train_split.n_frames
        ).to(self.device)
        self.objective = HolmesObjective(config, config.model.hidden_size).to(self.device)
        vpb = config.optim.videos_per_batch
        # A trailing batch with a single video has no in-batch negative: drop it (the shuffle changes per epoch).
        self.loader = make_train_loader(
            train_split, vpb, seed=self.seed, num_workers=num_workers,
            drop_last=train_split.num_videos % vpb == 1 and train_split.num_videos > 1,
        )
        self.steps_per_epoch = len(self.loader)
        optim = config.optim
        self.optimizer = optimizer_from_settings([self.model, self.objective], optim)
        self.scheduler = build_scheduler(
            self.optimizer, optim.epochs * self.steps_per_epoch, optim.warmup_ratio, schedule=optim.lr_schedule
        )
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.amp and self.device.type == "cuda")
        self.params = [p for m in (self.model, self.objective) for p in m.parameters() if p.requires_grad]
        self.start_epoch = 0
        self.best_sumr = -math.inf
        self.best_epoch = -1
        self.bad_epochs = 0
        self.history: list[dict[str, Any]] = []
        self._writer: Any = None  # TensorBoard writer, created with the first epoch's scalars
        self._writer_tried = False
        self._fingerprint: dict[str, Any] | None = None

    # --- checkpoints ------------------------------------------------------------------------------
    @property
    def last_path(self) -> Path:
        return self.output_dir / "last.pt"

    @property
    def best_path(self) -> Path:
        return self.output_dir / "best.pt"

    def _dims(self) -> dict[str, int]:
        split = self.train_split
        return {"visual_dim": split.visual_dim, "text_dim": split.text_dim, "n_clips": split.n_clips,
                "n_frames": split.n_frames}

    def data_fingerprint(self) -> dict[str, Any]:
        """The fingerprints of the training and validation data (stored in ``last.pt``, checked on resume)."""
        if self._fingerprint is None:
            self._fingerprint = {"train": self.train_split.fingerprint(), "val": self.val_split.fingerprint()}
        return self._fingerprint

    def _state(self, epoch: int) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "seed": self.seed,
            "data": self.data_fingerprint(),
            **self._dims(),
            "epoch": epoch,
            "model": self.model.state_dict(),
            "objective": self.objective.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": capture_rng_state(),
            "best_sumr": self.best_sumr,
            "best_epoch": self.best_epoch,
            "bad_epochs": self.bad_epochs,
            "history": self.history,
        }

    def check_resumable(self, state: dict[str, Any], path: str | Path) -> None:
        """Raise :class:`ResumeMismatchError` unless ``state`` (a ``last.pt``) has this run's config, seed and data.

        The message lists what differs, as ``<what> <checkpoint's> vs <this run's>``. A checkpoint of an
        older version without a data fingerprint is checked on its feature sizes only.
        """
        require_keys(state, path, _RESUME_KEYS)
        try:
            saved = HolmesConfig.from_dict(state["config"])
        except (TypeError, ValueError) as exc:
            raise ResumeMismatchError(f"cannot resume from {path}: its config is not valid here ({exc})") from None
        problems: list[str] = []
        if saved != self.config:
            changes = fingerprint_differences(saved.to_dict(), self.config.to_dict(), sep=".")
            problems.append(f"different config ({', '.join(changes)})")
        if state["seed"] != self.seed:
            problems.append(f"different seed ({state['seed']} vs {self.seed})")
        if "data" in state:
            changes = fingerprint_differences(state["data"], self.data_fingerprint())
        else:
            changes = [f"{k} {state[k]} vs {v}" for k, v in self._dims().items() if k in state and state[k] != v]
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
        restore_rng_state(state["rng"])
        self.start_epoch = int(state["epoch"]) + 1
        self.best_sumr = float(state["best_sumr"])
        self.best_epoch = int(state["best_epoch"])
        self.bad_epochs = int(state["bad_epochs"])
        self.history = list(state["history"])
        self.logger.info("resumed from %s at epoch %d", path, self.start_epoch)
        return True

    # --- training ---------------------------------------------------------------------------------
    def fit(self, *, resume: bool = False, stop_after_epoch: int | None = None) -> TrainResult:
        """Train until ``config.optim.epochs`` or early stopping.

        Parameters
        ----------
        resume : bool
            Continue from ``output_dir/last.pt`` when it exists.
        stop_after_epoch : int, optional
            Return after finishing this epoch (0-based) as if interrupted; for tests and time-boxed runs.
        """
        if resume:
            self.resume()
        optim = self.config.optim
        stopped_early = self.bad_epochs >= optim.early_stop_patience
        epoch = self.start_epoch
        for epoch in range(self.start_epoch, optim.epochs):
            if stopped_early:
                break
            losses, seconds = self._train_epoch(epoch)
            metrics = evaluate_retrieval(self.model, self.val_split, self.config, device=self.device).recall
            improved = metrics["SumR"] > self.best_sumr
            if improved:
                self.best_sumr, self.best_epoch, self.bad_epochs = metrics["SumR"], epoch, 0
            else:
                self.bad_epochs += 1
            record = {"epoch": epoch, "train_seconds": seconds, **{f"loss/{k}": v for k, v in losses.items()},
                      **{f"val/{k}": v for k, v in metrics.items()}}
            if self.device.type == "cuda":  # peak of the epoch's training and validation
                record["peak_gpu_memory_gib"] = torch.cuda.max_memory_allocated(self.device) / 2**30
            self.history.append(record)
            self._log_epoch(record, improved)
            if improved:
                save_checkpoint(
                    {"config": self.config.to_dict(), **self._dims(), "epoch": epoch,
                     "model": self.model.state_dict(), "val": metrics},
                    self.best_path,
                )
            save_checkpoint(self._state(epoch), self.last_path)
            stopped_early = self.bad_epochs >= optim.early_stop_patience
            if stopped_early:
                self.logger.info("early stop: %d epochs without a better val SumR", self.bad_epochs)
            if stop_after_epoch is not None and epoch >= stop_after_epoch:
                break
        if self._writer is not None:
            self._writer.flush()
        return TrainResult(self.best_sumr, self.best_epoch, len(self.history), stopped_early, list(self.history))

    def _train_epoch(self, epoch: int) -> tuple[dict[str, float], float]:
        self.model.train()
        self.objective.train()
        self.objective.set_epoch(epoch)
        self.loader.set_epoch(epoch)
        sums: dict[str, torch.Tensor] = {}
        steps = 0
        watch = _DivergenceWatch(self.device, epoch, self.config.optim.lr)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        start = time.perf_counter()
        for batch in _progress(self.loader, self.show_progress, f"epoch {epoch + 1}/{self.config.optim.epochs}"):
            max_queries = int(torch.bincount(batch.query_video).max())  # on the host, before the copy
            batch = batch.to(self.device, non_blocking=True)
            with autocast_context(self.device, self.amp):
                output = self.model(batch)
                try:
                    terms = self.objective(output, batch, max_queries)
                except ValueError:  # the library refuses non-finite scores: say that training diverged
                    if _all_finite(output) and _all_finite(self.params):
                        raise
                    raise watch.error(steps) from None
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.scale(terms.total).backward()
            self.scaler.unscale_(self.optimizer)
            grad_norm = clip_gradients(self.params, self.config.optim.grad_clip, self.config.optim.grad_clip_mode)
            # With gradient scaling, an overflowing gradient is expected: the scaler skips that step.
            watch.observe(steps, terms.total, None if self.scaler.is_enabled() else grad_norm)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.scheduler.step()
            for name, value in terms.scalars().items():
                sums[name] = sums[name] + value if name in sums else value.clone()
            steps += 1
        watch.finish()
        _synchronize(self.device)
        seconds = time.perf_counter() - start
        means = {k: float(v) / max(steps, 1) for k, v in sums.items()}
        return means, seconds

    def _log_epoch(self, record: dict[str, Any], improved: bool) -> None:
        scalars = {k: v for k, v in record.items() if isinstance(v, float)}
        text = " ".join(f"{k}={v:.4g}" for k, v in scalars.items())
        self.logger.info("epoch %d %s%s", record["epoch"] + 1, text, " (best)" if improved else "")
        if not self._writer_tried:  # not in __init__: a refused resume must leave the folder as it was
            self._writer_tried = True
            self._writer = _tensorboard_writer(self.output_dir / "tensorboard")
        if self._writer is not None:
            for key, value in scalars.items():
                self._writer.add_scalar(key, value, record["epoch"] + 1)

    def load_best(self) -> nn.Module:
        """Load ``best.pt`` into :attr:`model` (falls back to the current weights when absent) and return it."""
        if self.best_path.is_file():
            self.model.load_state_dict(load_checkpoint(self.best_path, map_location=self.device)["model"])
        return self.model


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


def _all_finite(value: Any) -> bool:
    """Whether every tensor in ``value`` (a tensor, a dataclass of tensors, or a list of them) is finite."""
    if isinstance(value, torch.Tensor):
        return not value.is_floating_point() or bool(torch.isfinite(value.detach()).all())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return all(_all_finite(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, (list, tuple)):
        return all(_all_finite(v) for v in value)
    return True


def _progress(iterable, enabled: bool, desc: str):
    if not enabled:
        return iterable
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is in the "reference" extra; training works without it
        return iterable
    return tqdm(iterable, desc=desc, leave=False, dynamic_ncols=True)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _file_logger(path: Path, console: bool) -> logging.Logger:
    logger = logging.getLogger(f"{LOGGER_NAME}.{path.parent.resolve()}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for handler in list(logger.handlers):  # one logger per output folder: replace handlers of a previous run
        logger.removeHandler(handler)
        handler.close()
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)  # the file is created by the first record
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    if console:
        stream = logging.StreamHandler()
        stream.setFormatter(logging.Formatter(f"[{path.parent.name}] %(message)s"))
        logger.addHandler(stream)
    return logger


def _tensorboard_writer(path: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # optional: TensorBoard scalars only when tensorboard is installed
        return None
    return SummaryWriter(str(path))
