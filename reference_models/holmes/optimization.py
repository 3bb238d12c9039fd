r"""Optimiser, weight-decay groups, gradient clipping and the warm-up/linear-decay learning-rate schedule.

Optimisers (``optimizer=``): ``"bert_adam"`` (:class:`~reference_models.holmes.bert_adam.BertStyleAdam`, the
release's BertAdam rule) or ``"adamw"`` (``torch.optim.AdamW``).

Weight decay (``no_decay=``) is left off

``"embedding_norms"`` (the release)
    biases and the LayerNorms of the input projections and positional embeddings (the release excludes
    parameters whose *name* contains ``"bias"``, ``"LayerNorm.bias"`` or ``"LayerNorm.weight"``, and only
    those LayerNorms are named so; the norms inside attention blocks are decayed);
``"all_norms"``
    biases and every normalisation layer.

Learning-rate factors (``lr_schedule=``) for update number ``t = 0, 1, ...`` of ``T`` with a warm-up
proportion ``w``:

``"bert_warmup_linear"`` (the release)
    with progress :math:`p = t / T`: :math:`p / w` while :math:`p < w`, then :math:`\max((p - 1) / (w - 1), 0)`.
    The factor is evaluated at the step count *before* the update, so the first update has learning rate 0.
``"warmup_linear"``
    :math:`(t + 1) / W` for the first :math:`W = \max(1, \mathrm{round}(w T))` updates, then
    :math:`(T - t) / (T - W)`: the first update already moves the weights.

Gradient clipping (``grad_clip_mode=``, :func:`clip_gradients`, called by the trainer before each step):
``"per_parameter"`` clips each parameter tensor's gradient to the norm separately (the release's BertAdam
does this inside its step; ``BertStyleAdam(max_grad_norm=...)`` can too), ``"global"`` clips the norm of all
gradients together.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from reference_models.holmes.bert_adam import BertStyleAdam
from reference_models.holmes.config import OptimSettings
from reference_models.holmes.errors import check_choice
from reference_models.holmes.model import InputProjection, LearnedPositionalEmbedding

__all__ = [
    "OPTIMIZERS",
    "NO_DECAY_RULES",
    "LR_SCHEDULES",
    "GRAD_CLIP_MODES",
    "decay_groups",
    "build_optimizer",
    "optimizer_from_settings",
    "warmup_linear_decay",
    "bert_warmup_linear",
    "build_scheduler",
    "clip_gradients",
]

OPTIMIZERS = ("bert_adam", "adamw")
NO_DECAY_RULES = ("embedding_norms", "all_norms")
LR_SCHEDULES = ("bert_warmup_linear", "warmup_linear")
GRAD_CLIP_MODES = ("per_parameter", "global")

_NORM_MODULES = (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d)
#: Modules whose LayerNorm the release leaves undecayed (its ``LinearLayer`` / ``TrainablePositionalEncoding``).
_EMBEDDING_NORM_OWNERS = (InputProjection, LearnedPositionalEmbedding)


def decay_groups(
    modules: Iterable[nn.Module], no_decay: str = "all_norms"
) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """The trainable parameters of ``modules`` split into ``(decayed, not decayed)`` by the ``no_decay`` rule."""
    check_choice(no_decay, "no_decay", NO_DECAY_RULES)
    decay: list[nn.Parameter] = []
    skip: list[nn.Parameter] = []
    seen: set[int] = set()
    for root in modules:
        embedding_norms = {
            id(norm)
            for owner in root.modules() if isinstance(owner, _EMBEDDING_NORM_OWNERS)
            for norm in owner.modules() if isinstance(norm, nn.LayerNorm)
        }
        for module in root.modules():
            if no_decay == "all_norms":
                undecayed_module = isinstance(module, _NORM_MODULES)
            else:
                undecayed_module = id(module) in embedding_norms
            for name, param in module.named_parameters(recurse=False):
                if not param.requires_grad or id(param) in seen:
                    continue
                seen.add(id(param))
                if undecayed_module or name.endswith("bias"):
                    skip.append(param)
                else:
                    decay.append(param)
    return decay, skip


def build_optimizer(
    modules: Iterable[nn.Module],
    lr: float,
    weight_decay: float,
    *,
    optimizer: str = "adamw",
    no_decay: str = "all_norms",
    eps: float = 1e-8,
    betas: tuple[float, float] = (0.9, 0.999),
    max_grad_norm: float = 1.0,
) -> torch.optim.Optimizer:
    """An optimiser over the trainable parameters of ``modules`` with two weight-decay groups.

    Parameters
    ----------
    modules : iterable of torch.nn.Module
        Model (and objective) whose parameters are trained; a parameter shared by several is taken once.
    lr, weight_decay : float
        Peak learning rate and decoupled weight decay of the decayed group.
    optimizer : {"bert_adam", "adamw"}
        See the module documentation.
    no_decay : {"embedding_norms", "all_norms"}
        Which parameters get no weight decay.
    eps, betas : float, tuple of float
        Adam's ε and (β1, β2).
    max_grad_norm : float
        Per-tensor clipping norm of ``"bert_adam"`` (0: none); ``"adamw"`` ignores it (use
        :func:`clip_gradients`).
    """
    check_choice(optimizer, "optimizer", OPTIMIZERS)
    decay, skip = decay_groups(modules, no_decay)
    groups = [g for g in ({"params": decay, "weight_decay": weight_decay}, {"params": skip, "weight_decay": 0.0})
              if g["params"]]
    if optimizer == "bert_adam":
        return BertStyleAdam(groups, lr=lr, betas=betas, eps=eps, max_grad_norm=max_grad_norm)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def optimizer_from_settings(modules: Iterable[nn.Module], settings: OptimSettings) -> torch.optim.Optimizer:
    """:func:`build_optimizer` with the choices of ``settings``. The optimiser does not clip: the trainer
    clips with :func:`clip_gradients` (``settings.grad_clip_mode``) before each step."""
    return build_optimizer(
        modules, settings.lr, settings.weight_decay, optimizer=settings.optimizer, no_decay=settings.no_decay,
        eps=settings.eps, betas=(settings.beta1, settings.beta2), max_grad_norm=0.0,
    )


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

        def factor(step: int) -> float:
            return bert_warmup_linear(step, max(total_steps, 1), warmup_ratio)

        return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    warmup_steps = max(1, round(warmup_ratio * total_steps)) if warmup_ratio > 0 else 0

    def factor(step: int) -> float:
        return warmup_linear_decay(step, total_steps, warmup_steps)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def clip_gradients(params: list[nn.Parameter], max_norm: float, mode: str) -> torch.Tensor:
    """Clip the gradients of ``params`` to ``max_norm``: all together (``"global"``) or each tensor separately
    (``"per_parameter"``, the release's BertAdam rule). Returns the norm of all the gradients together before
    clipping (0 when none has a gradient), which is not finite when a gradient is not."""
    check_choice(mode, "mode", GRAD_CLIP_MODES)
    if mode == "global":
        return nn.utils.clip_grad_norm_(params, max_norm)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    norms = [torch.linalg.vector_norm(g) for g in grads]
    for grad, norm in zip(grads, norms):
        grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))  # as clip_grad_norm_ on one tensor
    return torch.linalg.vector_norm(torch.stack([n.float() for n in norms]))
