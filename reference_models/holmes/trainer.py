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
"""

from __future__ import annotations

import contextlib
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
    restore_rng_state,
    save_checkpoint,
    seed_everything,
)
from reference_models.holmes.config import HolmesConfig
from reference_models.holmes.data import PRVRSplit, make_train_loader
from reference_models.holmes.evaluate import evaluate_retrieval
from reference_models.holmes.factory import build_model
from reference_models.holmes.objective import HolmesObjective
from reference_models.holmes.optimization import build_scheduler, clip_gradients, optimizer_from_settings

__all__ = ["TrainResult", "Trainer", "autocast_context"]

LOGGER_NAME = "reference_models.holmes"


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
        # BertStyleAdam clips each tensor inside its step; every other combination clips here.
        self._clip_mode: str | None = None
        if not (optim.optimizer == "bert_adam" and optim.grad_clip_mode == "per_parameter"):
            self._clip_mode = optim.grad_clip_mode
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.amp and self.device.type == "cuda")
        self.params = [p for m in (self.model, self.objective) for p in m.parameters() if p.requires_grad]
        self.start_epoch = 0
        self.best_sumr = -math.inf
        self.best_epoch = -1
        self.bad_epochs = 0
        self.history: list[dict[str, Any]] = []
        self._writer = _tensorboard_writer(self.output_dir / "tensorboard")

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

    def _state(self, epoch: int) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "seed": self.seed,
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

    def resume(self, path: str | Path | None = None) -> bool:
        """Restore the state of ``path`` (default ``output_dir/last.pt``); ``False`` when there is none."""
        path = Path(path) if path is not None else self.last_path
        if not path.is_file():
            self.logger.info("no checkpoint at %s: starting from scratch", path)
            return False
        state = load_checkpoint(path, map_location=self.device)
        saved = HolmesConfig.from_dict(state["config"])
        if saved != self.config or state["seed"] != self.seed:
            raise ValueError(
                f"checkpoint {path} was written with a different config or seed (seed {state['seed']} vs "
                f"{self.seed}); resume needs the same settings to reproduce the run"
            )
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
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        start = time.perf_counter()
        for batch in _progress(self.loader, self.show_progress, f"epoch {epoch + 1}/{self.config.optim.epochs}"):
            max_queries = int(torch.bincount(batch.query_video).max())  # on the host, before the copy
            batch = batch.to(self.device, non_blocking=True)
            with autocast_context(self.device, self.amp):
                output = self.model(batch)
                terms = self.objective(output, batch, max_queries)
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.scale(terms.total).backward()
            self.scaler.unscale_(self.optimizer)
            if self._clip_mode is not None:
                clip_gradients(self.params, self.config.optim.grad_clip, self._clip_mode)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.scheduler.step()
            for name, value in terms.scalars().items():
                sums[name] = sums[name] + value if name in sums else value.clone()
            steps += 1
        _synchronize(self.device)
        seconds = time.perf_counter() - start
        means = {k: float(v) / max(steps, 1) for k, v in sums.items()}
        return means, seconds

    def _log_epoch(self, record: dict[str, Any], improved: bool) -> None:
        scalars = {k: v for k, v in record.items() if isinstance(v, float)}
        text = " ".join(f"{k}={v:.4g}" for k, v in scalars.items())
        self.logger.info("epoch %d %s%s", record["epoch"] + 1, text, " (best)" if improved else "")
        if self._writer is not None:
            for key, value in scalars.items():
                self._writer.add_scalar(key, value, record["epoch"] + 1)

    def load_best(self) -> nn.Module:
        """Load ``best.pt`` into :attr:`model` (falls back to the current weights when absent) and return it."""
        if self.best_path.is_file():
            self.model.load_state_dict(load_checkpoint(self.best_path, map_location=self.device)["model"])
        return self.model


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
    handler = logging.FileHandler(path, encoding="utf-8")
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
