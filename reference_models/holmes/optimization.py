r"""The Holmes reference model's optimiser and weight-decay groups (and the engine's schedules and clipping).

Optimisers (``optimizer=``): ``"bert_adam"`` (:class:`~reference_models.holmes.bert_adam.BertStyleAdam`, the
release's BertAdam rule) or ``"adamw"`` (``torch.optim.AdamW``).

Weight decay (``no_decay=``) is left off

``"embedding_norms"`` (the release)
    biases and the LayerNorms of the input projections and positional embeddings (the release excludes
    parameters whose *name* contains ``"bias"``, ``"LayerNorm.bias"`` or ``"LayerNorm.weight"``, and only
    those LayerNorms are named so; the norms inside attention blocks are decayed);
``"all_norms"``
    biases and every normalisation layer.

The learning-rate schedules (``lr_schedule=``: ``"bert_warmup_linear"``, the release's, or ``"warmup_linear"``)
and gradient clipping (``grad_clip_mode=``: ``"per_parameter"``, the release's, or ``"global"``) are the shared
engine's (:mod:`reference_models.engine.optimization`).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from reference_models.engine import check_choice
from reference_models.holmes.bert_adam import BertStyleAdam
from reference_models.holmes.model import InputProjection, LearnedPositionalEmbedding

__all__ = [
    "OPTIMIZERS",
    "NO_DECAY_RULES",
    "decay_groups",
    "build_optimizer",
]

OPTIMIZERS = ("bert_adam", "adamw")
NO_DECAY_RULES = ("embedding_norms", "all_norms")

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
        :func:`~reference_models.engine.clip_gradients`).
    """
    check_choice(optimizer, "optimizer", OPTIMIZERS)
    decay, skip = decay_groups(modules, no_decay)
    groups = [g for g in ({"params": decay, "weight_decay": weight_decay}, {"params": skip, "weight_decay": 0.0})
              if g["params"]]
    if optimizer == "bert_adam":
        return BertStyleAdam(groups, lr=lr, betas=betas, eps=eps, max_grad_norm=max_grad_norm)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)
