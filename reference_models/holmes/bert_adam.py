r"""BERT-style Adam, the optimiser of the official Holmes release (and of MS-SL, GMMFormer and HLFormer).

For every parameter tensor :math:`p` with gradient :math:`g`, one step does

.. math::

    g &\leftarrow g \cdot \min\big(1, c / (\lVert g \rVert_2 + 10^{-6})\big)
        \qquad \text{(per-tensor clipping to norm } c\text{)} \\
    m &\leftarrow \beta_1 m + (1 - \beta_1)\, g, \qquad v \leftarrow \beta_2 v + (1 - \beta_2)\, g^2 \\
    p &\leftarrow p - \eta \Big(\frac{m}{\sqrt{v} + \epsilon} + \lambda\, p\Big)

with :math:`m = v = 0` at the start and **no bias correction**: :math:`m / \sqrt{v}` starts at
:math:`(1 - \beta_1) / \sqrt{1 - \beta_2} \approx 3.2` times the normalised gradient and approaches 1 only
after a few thousand steps, so early updates are several times larger than Adam's or AdamW's. The weight
decay :math:`\lambda` is decoupled (added to the update, not to the gradient) and multiplied by the same
learning rate :math:`\eta`. The learning-rate schedule is applied from outside, through each group's
``lr`` (see :mod:`reference_models.holmes.optimization`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, overload

import torch

__all__ = ["BertStyleAdam"]

#: Added to the gradient norm before dividing, as ``torch.nn.utils.clip_grad_norm_`` does.
_CLIP_EPS = 1e-6


class BertStyleAdam(torch.optim.Optimizer):
    """Adam without bias correction, with per-tensor gradient clipping and decoupled weight decay.

    Parameters
    ----------
    params : iterable
        Parameters or parameter groups (a group may set its own ``weight_decay``).
    lr : float
        Learning rate :math:`\\eta` (> 0); a scheduler may change each group's ``lr``.
    betas : tuple of float
        :math:`(\\beta_1, \\beta_2)`, each in [0, 1).
    eps : float
        :math:`\\epsilon` (> 0), added to :math:`\\sqrt{v}`.
    weight_decay : float
        Decoupled weight decay :math:`\\lambda` (>= 0).
    max_grad_norm : float
        Clip each parameter tensor's gradient to this norm; 0 disables clipping.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
        max_grad_norm: float = 1.0,
    ) -> None:
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
            raise ValueError(f"lr must be a number > 0, got {lr!r}")
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
        if not eps > 0:
            raise ValueError(f"eps must be > 0, got {eps!r}")
        if not weight_decay >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
        if not max_grad_norm >= 0:
            raise ValueError(f"max_grad_norm must be >= 0 (0 disables clipping), got {max_grad_norm!r}")
        defaults = dict(lr=float(lr), betas=tuple(float(b) for b in betas), eps=float(eps),
                        weight_decay=float(weight_decay), max_grad_norm=float(max_grad_norm))
        super().__init__(params, defaults)

    # The overloads of torch.optim.Optimizer.step (a closure returns the loss).
    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """One update of every parameter that has a gradient (others keep their state untouched)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("BertStyleAdam does not support sparse gradients")
                grad = p.grad
                if group["max_grad_norm"] > 0:
                    norm = torch.linalg.vector_norm(grad)
                    grad.mul_(torch.clamp(group["max_grad_norm"] / (norm + _CLIP_EPS), max=1.0))
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                update = exp_avg / (exp_avg_sq.sqrt() + group["eps"])
                if group["weight_decay"] > 0:
                    update.add_(p, alpha=group["weight_decay"])
                p.add_(update, alpha=-group["lr"])
                state["step"] += 1
        return loss
