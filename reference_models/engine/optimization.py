r"""Learning-rate schedules and gradient clipping shared by every reference model (the optimiser is the task's).

Learning-rate factors (``schedule=``) for update number ``t = 0, 1, ...`` of ``T`` with a warm-up
proportion ``w``:

``"bert_warmup_linear"`` (the Holmes release)
    with progress :math:`p = t / T`: :math:`p / w` while :math:`p < w`, then :math:`\max((p - 1) / (w - 1), 0)`.
    The factor is evaluated at the step count *before* the update, so the first update has learning rate 0.
``"warmup_linear"``
    :math:`(t + 1) / W` for the first :math:`W = \max(1, \mathrm{round}(w T))` updates, then
    :math:`(T - t) / (T - W)`: the first update already moves the weights.

Gradient clipping (``mode=``, ``clip_gradients``, called by the trainer before each step):
``"per_parameter"`` clips each parameter tensor's gradient to the norm separately (the Holmes release's
BertAdam does this inside its step), ``"global"`` clips the norm of all gradients together.
"""

from __future__ import annotations

import torch
from torch import nn

from reference_models.engine.errors import check_choice

__all__ = [
    "LR_SCHEDULES",
    "GRAD_CLIP_MODES",
    "warmup_linear_decay",
    "bert_warmup_linear",
    "build_scheduler",
    "clip_gradients",
]

LR_SCHEDULES = ("bert_warmup_linear", "warmup_linear")
GRAD_CLIP_MODES = ("per_parameter", "global")


def warmup_linear_decay(step: int, total_steps: int, warmup_steps: int) -> float:
    """``"warmup_linear"`` factor: ``(step + 1) / warmup_steps`` while warming up, then linear down to 0 at
    ``total_steps``."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    remaining = total_steps - step
    return max(0.0, remaining / max(1, total_steps - warmup_steps))


def bert_warmup_linear(step: int, total_steps: int, warmup_proportion: float) -> float:
    """``"bert_warmup_linear"`` factor of update ``step`` (0-based, the count *before* the update).

    ``p = step / total_steps``; ``p / warmup_proportion`` while ``p < warmup_proportion``, else
    ``max((p - 1) / (warmup_proportion - 1), 0)``. A ``warmup_proportion`` of 0 gives pure linear decay.
    """
    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    if not 0 <= warmup_proportion < 1:
        raise ValueError(f"warmup_proportion must lie in [0, 1), got {warmup_proportion}")
    progress = step / total_steps
    if progress < warmup_proportion:
        return progress / warmup_proportion
    return max((progress - 1.0) / (warmup_proportion - 1.0), 0.0)


def build_scheduler(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_ratio: float, *, schedule: str = "warmup_linear"
) -> torch.optim.lr_scheduler.LambdaLR:
    """Per-update scheduler (call ``step()`` after every optimiser step) with the ``schedule`` factor.

    ``"warmup_linear"``: ``warmup_ratio`` of the steps (at least one) warm up, then linear decay;
    ``"bert_warmup_linear"``: the release's factor (:func:`bert_warmup_linear`).
    """
    check_choice(schedule, "schedule", LR_SCHEDULES)
    if schedule == "bert_warmup_linear":
        bert_warmup_linear(0, max(total_steps, 1), warmup_ratio)  # validates the arguments now

        def bert_factor(step: int) -> float:
            return bert_warmup_linear(step, max(total_steps, 1), warmup_ratio)

        return torch.optim.lr_scheduler.LambdaLR(optimizer, bert_factor)
    warmup_steps = max(1, round(warmup_ratio * total_steps)) if warmup_ratio > 0 else 0

    def factor(step: int) -> float:
        return warmup_linear_decay(step, total_steps, warmup_steps)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def clip_gradients(params: list[nn.Parameter], max_norm: float, mode: str) -> torch.Tensor:
    """Clip the gradients of ``params`` to ``max_norm``: all together (``"global"``) or each tensor separately
    (``"per_parameter"``, the release's BertAdam rule). Returns the norm of all the gradients together before
    clipping (0 when none has a gradient), which is not finite when a gradient is not.

    A ``max_norm`` of 0 or less clips nothing and only measures the norm.
    """
    check_choice(mode, "mode", GRAD_CLIP_MODES)
    if max_norm <= 0:
        grads = [p.grad.detach() for p in params if p.grad is not None]
        if not grads:
            return torch.zeros(())
        return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g).float() for g in grads]))
    if mode == "global":
        return nn.utils.clip_grad_norm_(params, max_norm)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    norms = [torch.linalg.vector_norm(g) for g in grads]
    for grad, norm in zip(grads, norms):
        grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))  # as clip_grad_norm_ on one tensor
    return torch.linalg.vector_norm(torch.stack([n.float() for n in norms]))
