"""The one-step bridge: a training stage after DAB's, distilling its ``T'``-step text bridge into one drift step.

DAB's summary names "one-step bridge distillation" as its future work ("Limitations & Future Work"): its 32
sequential bridge steps are its query-time overhead. With ``bridge.distill = "one-step"``
(:data:`~reference_models.dab.config.DISTILL_MODES`) a trained DAB model gets a second stage: its text-only
bridge (the teacher, Key Design 2) is frozen with the rest of the model, and a one-step student
(:meth:`~evidential_prvr.probabilistic.DistributionBridge.one_step_student`, starting as a copy of the teacher's
drift) is trained with :class:`~evidential_prvr.probabilistic.BridgeDistillationLoss` to land where the chain
lands, from the text Gaussians of every training caption. The model then answers every query with the student
(:meth:`~reference_models.dab.model.T2VModel.text_bridge`).

The stage is deterministic in its seed (the caption order of each epoch comes from its own generator) and its
result is written atomically to ``distilled.pt`` (a checkpoint of the whole model, the student included, that
``python -m reference_models.dab evaluate --checkpoint <run>/distilled.pt`` reads); a run that finds that file with the same teacher and
settings loads it instead of distilling again, so an interrupted run resumes to the same model.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import torch

from evidential_prvr.probabilistic import BridgeDistillationLoss, DistributionBridge
from reference_models.dab.model import T2VModel
from reference_models.engine import load_checkpoint, save_checkpoint

__all__ = ["DISTILLED_NAME", "DISTILL_BATCH", "DistillationResult", "distill_one_step", "distilled_model",
           "load_teacher"]

#: The distilled model of a run folder.
DISTILLED_NAME = "distilled.pt"
#: Captions per distillation update.
DISTILL_BATCH = 256


@dataclass(frozen=True)
class DistillationResult:
    """What the distillation stage did.

    Attributes
    ----------
    captions : int
        Training captions distilled on.
    epochs, updates : int
        Passes over them and optimiser steps.
    loss_start, loss_end : float
        :func:`~evidential_prvr.functional.bridge_distillation_loss` over all captions before the first update
        (the student as a copy of the teacher's drift, one step) and of the student kept (the lowest after any
        epoch).
    seconds : float
        Wall time of the stage.
    """

    captions: int
    epochs: int
    updates: int
    loss_start: float
    loss_end: float
    seconds: float


def _student(model: T2VModel) -> DistributionBridge:
    if model.student is None:
        raise ValueError('the model has no one-step student: its config needs bridge.distill = "one-step"')
    return model.student


def distill_one_step(model: T2VModel, texts: torch.Tensor, *, seed: int,
                     device: torch.device | str = "cpu") -> DistillationResult:
    """Train ``model``'s one-step student to land where its text bridge lands, on the caption features ``texts``.

    The model is frozen (evaluation mode, no gradients) except the student, which starts as a copy of the
    trained teacher's drift and is trained for ``bridge.distill_epochs`` epochs of :data:`DISTILL_BATCH` captions
    with AdamW at ``bridge.distill_lr`` (weight decay 0); the student of the epoch with the lowest loss over all
    captions is kept (the warm start counting as epoch 0, so the result never lands farther than the start).
    Afterwards the model answers with the student.

    Parameters
    ----------
    model : T2VModel
        A trained DAB model built with ``bridge.distill = "one-step"`` (on ``device``).
    texts : torch.Tensor
        ``[N, text_dim]`` caption features (the training split's ``text``).
    seed : int
        Seed of the caption order.
    device : torch.device or str
        Where the stage runs (the model's device).
    """
    student = _student(model)
    teacher = cast(DistributionBridge, model.bridge)
    settings = model.config.bridge
    start = time.perf_counter()
    model.eval()
    model.student_ready.fill_(False)
    with torch.no_grad():
        source = model.gaussian_head(model.encode_text(texts.to(device)))
        target = teacher(*source)
        student.drift.load_state_dict(teacher.drift.state_dict())  # warm start: the trained drift, one step
    loss_fn = BridgeDistillationLoss()

    def full_loss() -> float:
        with torch.no_grad():
            return float(loss_fn(student, *source, *target))

    loss_start = best_loss = full_loss()
    best_state = {k: v.clone() for k, v in student.state_dict().items()}
    optimizer = torch.optim.AdamW(student.parameters(), lr=settings.distill_lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(seed)
    count, updates = texts.shape[0], 0
    for _ in range(settings.distill_epochs):
        order = torch.randperm(count, generator=generator).to(device)
        for first in range(0, count, DISTILL_BATCH):
            rows = order[first : first + DISTILL_BATCH]
            loss = loss_fn(student, source.mu[rows], source.logvar[rows], target.mu[rows], target.logvar[rows])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            updates += 1
        epoch_loss = full_loss()
        if epoch_loss < best_loss:  # keep the epoch that lands closest (the warm start counts as epoch 0)
            best_loss, best_state = epoch_loss, {k: v.clone() for k, v in student.state_dict().items()}
    student.load_state_dict(best_state)
    model.student_ready.fill_(True)
    return DistillationResult(count, settings.distill_epochs, updates, loss_start, best_loss,
                              time.perf_counter() - start)


def load_teacher(model: T2VModel, state: dict[str, Any]) -> T2VModel:
    """Load a DAB checkpoint's ``model`` state (trained without a student) into ``model`` (built with one): every
    key but the student's must match; returns ``model``."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    foreign = [k for k in missing if not (k.startswith("student.") or k == "student_ready")] + list(unexpected)
    if foreign:
        raise ValueError(f"the checkpoint is not a DAB model of this config: {', '.join(sorted(foreign)[:5])}")
    return model


def distilled_model(model: T2VModel, texts: torch.Tensor, folder: Path, *, seed: int, teacher: Path,
                    device: torch.device | str = "cpu", extras: dict[str, Any] | None = None) -> T2VModel:
    """``model`` (its teacher trained, loaded from ``teacher``) with its student distilled, from
    ``folder/distilled.pt`` when that file holds the same teacher and settings, else by :func:`distill_one_step`,
    whose model is then written there atomically (with ``extras``, e.g. the feature sizes, and the result)."""
    path = Path(folder) / DISTILLED_NAME
    marker = {"teacher": str(Path(teacher).resolve()), "seed": seed, "config": model.config.to_dict()}
    if path.is_file():
        saved = load_checkpoint(path, map_location=device)
        if saved.get("distillation_of") == marker:
            model.load_state_dict(saved["model"])
            return model
    result = distill_one_step(model, texts, seed=seed, device=device)
    save_checkpoint({**(extras or {}), "config": model.config.to_dict(), "model": model.state_dict(),
                     "distillation": asdict(result), "distillation_of": marker}, path)
    return model
