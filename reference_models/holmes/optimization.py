"""AdamW with decoupled weight decay except on biases and LayerNorm, and the warm-up/linear-decay schedule."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

__all__ = ["build_optimizer", "warmup_linear_decay", "build_scheduler"]

_NO_DECAY_MODULES = (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d)


def build_optimizer(modules: Iterable[nn.Module], lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW over the trainable parameters of ``modules``; biases and normalisation weights get no decay."""
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    seen: set[int] = set()
    for root in modules:
        for module in root.modules():
            for name, param in module.named_parameters(recurse=False):
                if not param.requires_grad or id(param) in seen:
                    continue
                seen.add(id(param))
                if isinstance(module, _NO_DECAY_MODULES) or name.endswith("bias"):
                    no_decay.append(param)
                else:
                    decay.append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=lr)


def warmup_linear_decay(step: int, total_steps: int, warmup_steps: int) -> float:
    """Learning-rate factor: linear from 0 to 1 over ``warmup_steps``, then linear down to 0 at ``total_steps``."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    remaining = total_steps - step
    return max(0.0, remaining / max(1, total_steps - warmup_steps))


def build_scheduler(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_ratio: float
) -> torch.optim.lr_scheduler.LambdaLR:
    """Per-step scheduler: ``warmup_ratio`` of the steps warm up linearly (at least one), then linear decay."""
    warmup_steps = max(1, round(warmup_ratio * total_steps)) if warmup_ratio > 0 else 0

    def factor(step: int) -> float:
        return warmup_linear_decay(step, total_steps, warmup_steps)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
