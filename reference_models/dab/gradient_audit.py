"""Where DAB's training signal goes: the gradient reaching each log-variance against the means', and what AdamW
makes of it (``python -m reference_models.dab diagnose --gradients``).

:func:`gradient_audit` trains a Gaussian-head model exactly as the engine's trainer does (the task's model,
objective, AdamW groups, warm-up and decay, global gradient-norm bound, the same seed and batch order) and, at a few
updates (:func:`probe_steps`: the first, the end of the warm-up, a quarter, half and three quarters of the way and
the last), records

* ``activations``: the mean absolute gradient of the loss per element of each Gaussian parameter of the batch, the
  text mean and log-variance before the bridge (``text_mu``, ``text_logvar``), after it (``bridged_mu``,
  ``bridged_logvar``), the video mean (``video_mu``) and the video's two log-variances, the Gaussian head's
  (``video_base_logvar``) and the token uncertainty head's (``video_token_logvar``), with the batch's mean value;
* ``groups``: per parameter group (:data:`GROUPS`, e.g. the log-variance layer of the Gaussian head, the bridge's
  log-variance outputs) its learning rate at that update, the RMS of its gradient before and after the clipping,
  and the RMS of AdamW's actual change of it (``update_rms``), also as a fraction of the learning rate
  (``update_per_lr``: 1 when every coordinate moves by the full rate, as a gradient of constant sign makes it);
* ``clip_factor``: the global clipping's factor (1: not clipped).

Over the whole training it records the mean log-variance of the batch's texts, bridged texts and videos after every
update (``trajectory``), and the **budget**: the learning rate summed over the updates (warm-up and decay
included), the farthest an Adam update can carry one parameter, against the distance from the start to DAB's
reported variances (:data:`PAPER_AUDIT`), and DAB's own budget (its 1e-4 over 10 epochs of MSR-VTT's 180,000 pairs
at batch 32).

:func:`specificity_probe` asks the regime's features the other question: how well can a *linear* function of what
the log-variance layer reads (the text embedding, L2-normalised and layer-normalised as the Gaussian head does)
predict a caption's drawn specificity? A ridge regression fitted on the training captions, scored by Spearman on the
all-captions test, is the best a linear log-variance head could do.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
import torch.nn.functional as F

from evidential_prvr.presets import dab_settings
from reference_models.dab.config import T2VConfig
from reference_models.dab.data import T2VSplit
from reference_models.dab.diagnostics import spearman_interval
from reference_models.dab.model import T2VModel
from reference_models.dab.task import T2VTask
from reference_models.engine import seed_everything
from reference_models.engine.optimization import clip_gradients

__all__ = ["GROUPS", "PAPER_AUDIT", "PAPER_UPDATES", "format_gradient_audit", "gradient_audit", "probe_steps",
           "specificity_probe"]

#: DAB's reported audit, from the "Key Findings" of its summary. The converged mean variances, the AURC of the
#: top-1 error without and with the KL-margin ordering, and R@1 among the most confident queries.
PAPER_AUDIT = {"sigma2_video": 2.979, "sigma2_text": 0.507, "sigma2_bridged": 0.935, "ratio_video_text": 5.87,
               "aurc_before": 0.429, "aurc_kl_margin": 0.256, "R@1@25%": 85.6, "R@1@10%": 94.0}
#: DAB's number of updates, 10 epochs of MSR-VTT's 180,000 training pairs (9,000 videos x 20 captions) at batch 32.
PAPER_UPDATES = 10 * 180_000 // 32

#: The parameter groups of the audit, each name with the parameter-name prefixes of
#: :class:`~reference_models.dab.model.T2VModel` it holds (a parameter goes to the first group that has one of its
#: prefixes). The rows of the bridge's zero-initialised output layer ``bridge.drift.2`` are split in two groups,
#: ``bridge_mu_out`` (the drift of the mean) and ``bridge_logvar_out`` (the drift of the log-variance).
GROUPS: dict[str, tuple[str, ...]] = {
    "encoders": ("text_mlp.", "frame_proj."),
    "temporal": ("temporal.", "position"),
    "mean_layer": ("gaussian_head.mean.", "gaussian_head.mean_norm."),
    "text_video_logvar_layer": ("gaussian_head.logvar.", "gaussian_head.logvar_norm."),
    "token_logvar_layer": ("token_head.logvar.",),
    "token_head_other": ("token_head.",),
    "bridge_hidden": ("bridge.drift.0.",),
    "bridge_mu_out": (),
    "bridge_logvar_out": (),
    "log_tau": ("log_tau",),
}
_BRIDGE_OUTPUT = "bridge.drift.2."
_ACTIVATIONS = ("text_mu", "text_logvar", "bridged_mu", "bridged_logvar", "video_mu", "video_base_logvar",
                "video_token_logvar")


def probe_steps(total: int, warmup: int) -> list[int]:
    """The updates the audit looks at: the first, the end of the warm-up, 1/4, 1/2, 3/4 of the way and the last."""
    picks = {0, max(0, warmup - 1), total // 4, total // 2, (3 * total) // 4, total - 1}
    return sorted(p for p in picks if 0 <= p < total)


class _Recorder:
    """Forward hooks that keep the Gaussians of one training step (with their gradients) by name."""

    def __init__(self, model: T2VModel) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self.head_calls = 0
        self.active = False
        self.handles = [model.gaussian_head.register_forward_hook(self._head),
                        model.token_head.register_forward_hook(self._token),
                        cast(torch.nn.Module, model.bridge).register_forward_hook(self._bridge)]

    def _keep(self, name: str, tensor: torch.Tensor) -> None:
        if tensor.requires_grad:
            tensor.retain_grad()
        self.tensors[name] = tensor

    def _head(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        if not self.active:
            return
        # T2VModel.forward encodes the gallery first (the pooled videos), then the texts
        prefix = "video" if self.head_calls == 0 else "text"
        self.head_calls += 1
        self._keep(f"{prefix}_mu", output.mu)
        self._keep("video_base_logvar" if prefix == "video" else "text_logvar", output.logvar)

    def _token(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        if self.active:
            self._keep("video_token_logvar", output)

    def _bridge(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        if self.active:
            self._keep("bridged_mu", output.mu)
            self._keep("bridged_logvar", output.logvar)

    def start(self) -> None:
        self.tensors, self.head_calls, self.active = {}, 0, True

    def stop(self) -> None:
        self.active = False
        if self.head_calls != 2:
            raise RuntimeError(f"the Gaussian head ran {self.head_calls} times in one step, expected 2 (video, text)")

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _rms(tensors: Sequence[torch.Tensor]) -> float:
    if not tensors:
        return 0.0
    total = sum(float(t.double().square().sum()) for t in tensors)
    return math.sqrt(total / sum(t.numel() for t in tensors))


def _group_slices(model: T2VModel) -> dict[str, list[tuple[torch.nn.Parameter, slice | None]]]:
    """Each group's parameters, with the rows of the bridge's output layer split into its mean and log-variance."""
    groups: dict[str, list[tuple[torch.nn.Parameter, slice | None]]] = {name: [] for name in GROUPS}
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        if name.startswith(_BRIDGE_OUTPUT):
            half = parameter.shape[0] // 2
            groups["bridge_mu_out"].append((parameter, slice(0, half)))
            groups["bridge_logvar_out"].append((parameter, slice(half, None)))
            continue
        group = next((g for g, prefixes in GROUPS.items() if prefixes and name.startswith(prefixes)), None)
        if group is not None:
            groups[group].append((parameter, None))
    return {name: members for name, members in groups.items() if members}


def _part(tensor: torch.Tensor, rows: slice | None) -> torch.Tensor:
    return tensor if rows is None else tensor[rows]


def gradient_audit(config: T2VConfig, train: T2VSplit, *, seed: int = 0, device: str | torch.device = "cpu",
                   probes: Sequence[int] | None = None,
                   log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train ``config`` on ``train`` as the engine's trainer does and record the gradients (module documentation).

    Parameters
    ----------
    config : T2VConfig
        A DAB config (``head.variant = "dab"``, mean pooling, the text-only bridge).
    train : T2VSplit
        The training split.
    seed : int
        The training seed (the trainer's: initialisation and batch order).
    device : str or torch.device
        Where to train.
    probes : sequence of int, optional
        The updates to look at (default :func:`probe_steps`).
    log : collections.abc.Callable, optional
        Called with one line per probe.

    Returns
    -------
    dict
        ``{"updates", "warmup", "probes": [...], "trajectory": {...}, "budget": {...}, "seconds"}``.
    """
    if config.head.variant != "dab" or config.backbone.pooling != "mean" or config.bridge.condition != "text":
        raise ValueError('the gradient audit needs head.variant "dab" with mean pooling and the text-only bridge, '
                         f"got variant {config.head.variant!r}, pooling {config.backbone.pooling!r}, bridge "
                         f"{config.bridge.condition!r}")
    device = torch.device(device)
    task = T2VTask(config, train, train)
    seed_everything(seed)
    model = cast(T2VModel, task.build_model()).to(device)
    objective = task.build_objective().to(device)
    loader = task.train_loader(seed)
    total = config.optim.epochs * len(loader)
    optimizer = task.build_optimizer([model, objective])
    scheduler = task.build_scheduler(optimizer, total)
    params = [p for m in (model, objective) for p in m.parameters() if p.requires_grad]
    warmup = max(1, round(config.optim.warmup_ratio * total)) if config.optim.warmup_ratio > 0 else 0
    wanted = set(probe_steps(total, warmup) if probes is None else probes)
    groups = _group_slices(model)
    lr_of = {id(p): i for i, g in enumerate(optimizer.param_groups) for p in g["params"]}
    group_lr_sums = [0.0] * len(optimizer.param_groups)
    recorder = _Recorder(model)
    trajectory: dict[str, list[float]] = {"text": [], "bridged": [], "video": []}
    records: list[dict[str, Any]] = []
    losses: list[float] = []
    start = time.perf_counter()
    step = 0
    try:
        for epoch in range(config.optim.epochs):
            model.train()
            loader.set_epoch(epoch)
            for batch in loader:
                probe = step in wanted
                recorder.start()
                loss = task.training_step(model, objective, batch, device).total
                recorder.stop()
                losses.append(float(loss.detach()))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                before = {name: _rms([_part(p.grad, r) for p, r in members if p.grad is not None])
                          for name, members in groups.items()} if probe else {}
                norm = float(clip_gradients(params, config.optim.grad_clip, "global"))
                lrs = [float(g["lr"]) for g in optimizer.param_groups]
                for i, lr in enumerate(lrs):
                    group_lr_sums[i] += lr
                if probe:
                    old = {name: [_part(p.detach(), r).clone() for p, r in members] for name, members in groups.items()}
                    grads = {name: _rms([_part(p.grad, r) for p, r in members if p.grad is not None])
                             for name, members in groups.items()}
                optimizer.step()
                scheduler.step()
                t = recorder.tensors
                trajectory["text"].append(float(t["text_logvar"].detach().mean()))
                trajectory["bridged"].append(float(t["bridged_logvar"].detach().mean()))
                video = 0.5 * (t["video_base_logvar"].detach() + t["video_token_logvar"].detach())
                trajectory["video"].append(float(video.mean()))
                if probe:
                    record = _probe_record(step, float(loss.detach()), norm, config.optim.grad_clip, t, groups, old, before,
                                           grads, lrs, lr_of)
                    records.append(record)
                    if log is not None:
                        log(_probe_line(record))
                step += 1
    finally:
        recorder.remove()
    seconds = time.perf_counter() - start
    start_value = dab_settings("paper").logvar_init  # the heads' log-variance bias at the start (DAB: -2)
    distance = {"text": math.log(PAPER_AUDIT["sigma2_text"]) - start_value,
                "bridged": math.log(PAPER_AUDIT["sigma2_bridged"]) - start_value,
                "video": math.log(PAPER_AUDIT["sigma2_video"]) - start_value}
    head_group = next(i for i, g in enumerate(optimizer.param_groups)
                      if any(id(p) == id(model.gaussian_head.logvar.bias) for p in g["params"]))
    paper_budget = 1e-4 * (PAPER_UPDATES + 2) / 2  # warm-up then linear decay: the factors sum to (T + 2) / 2
    budget = {"lr_sum_heads": group_lr_sums[head_group], "lr_sum_by_group": group_lr_sums,
              "logvar_gain": config.head.logvar_gain,
              "logvar_reach": group_lr_sums[head_group] * config.head.logvar_gain,
              "paper_lr_sum": paper_budget, "paper_updates": PAPER_UPDATES,
              "distance_to_paper": distance,
              "moved": {k: v[-1] - v[0] for k, v in trajectory.items()}}
    return {"updates": total, "warmup": warmup, "probes": records, "trajectory": trajectory, "losses": losses,
            "budget": budget, "seconds": seconds, "logvar_start": start_value}


def _probe_record(step: int, loss: float, norm: float, bound: float, tensors: dict[str, torch.Tensor],
                  groups: dict[str, list[tuple[torch.nn.Parameter, slice | None]]],
                  old: dict[str, list[torch.Tensor]], before: dict[str, float], grads: dict[str, float],
                  lrs: list[float], lr_of: dict[int, int]) -> dict[str, Any]:
    activations = {}
    for name in _ACTIVATIONS:
        tensor = tensors[name]
        grad = tensor.grad
        activations[name] = {"grad_mean_abs": 0.0 if grad is None else float(grad.abs().mean()),
                             "value_mean": float(tensor.detach().mean())}
    group_figures = {}
    for name, members in groups.items():
        lr = lrs[lr_of[id(members[0][0])]]
        change = [_part(p.detach(), r) - o for (p, r), o in zip(members, old[name])]
        update = _rms(change)
        group_figures[name] = {"lr": lr, "grad_rms_before_clip": before[name], "grad_rms": grads[name],
                               "update_rms": update, "update_per_lr": update / lr if lr > 0 else 0.0}
    clip = min(1.0, bound / norm) if bound > 0 and norm > 0 else 1.0
    return {"step": step, "loss": loss, "grad_norm": norm, "clip_factor": clip, "activations": activations,
            "groups": group_figures}


def _probe_line(record: dict[str, Any]) -> str:
    a, g = record["activations"], record["groups"]
    return (f"update {record['step']}: loss {record['loss']:.4f}, |dL/d text_mu| {a['text_mu']['grad_mean_abs']:.2e}, "
            f"|dL/d text_logvar| {a['text_logvar']['grad_mean_abs']:.2e}, |dL/d video_base_logvar| "
            f"{a['video_base_logvar']['grad_mean_abs']:.2e}, logvar layer update/lr "
            f"{g['text_video_logvar_layer']['update_per_lr']:.3f}")


def specificity_probe(train_embeddings: torch.Tensor, train_specificity: Sequence[float],
                      test_embeddings: torch.Tensor, test_specificity: Sequence[float], *,
                      ridge: float = 1.0, seed: int = 0) -> dict[str, float]:
    """How well a linear function of the log-variance layer's input predicts a caption's specificity.

    The embeddings are L2-normalised and layer-normalised as :class:`~evidential_prvr.probabilistic.GaussianEmbeddingHead`
    does before its log-variance layer (its LayerNorm's affine part is linear and starts as the identity); a ridge
    regression onto :math:`\\log(\\text{specificity} + 10^{-3})` is fitted on the training captions and scored by
    Spearman on the test captions (:func:`~reference_models.dab.diagnostics.spearman_interval`).

    Parameters
    ----------
    train_embeddings, test_embeddings : torch.Tensor
        ``[N, d]`` text embeddings (what the Gaussian head receives).
    train_specificity, test_specificity : sequence of float
        Each caption's drawn specificity.
    ridge : float
        The ridge penalty.
    seed : int
        Seed of the bootstrap interval.

    Returns
    -------
    dict
        ``{"spearman", "low", "high", "n"}`` of the prediction against the test captions' specificity.
    """
    def features(x: torch.Tensor) -> torch.Tensor:
        x = F.normalize(x.double(), dim=-1)
        return F.layer_norm(x, (x.shape[-1],))

    x_train, x_test = features(train_embeddings), features(test_embeddings)
    y = torch.tensor(train_specificity, dtype=torch.float64).add(1e-3).log()
    y = y - y.mean()
    mean = x_train.mean(0)
    x_train, x_test = x_train - mean, x_test - mean
    gram = x_train.T @ x_train + ridge * torch.eye(x_train.shape[1], dtype=torch.float64)
    weights = torch.linalg.solve(gram, x_train.T @ y)
    return spearman_interval(x_test @ weights, list(test_specificity), seed=seed)


def format_gradient_audit(audit: dict[str, Any]) -> str:
    """The audit as text: per probed update the activation gradients and the groups, then the budget."""
    lines = []
    for record in audit["probes"]:
        lines.append(f"update {record['step']} of {audit['updates']} (loss {record['loss']:.4f}, gradient norm "
                     f"{record['grad_norm']:.3g}, clip factor {record['clip_factor']:.3f})")
        lines.append("  mean |dL/dx| per element: " + ", ".join(
            f"{name} {v['grad_mean_abs']:.2e}" for name, v in record["activations"].items()))
        lines.append("  mean value: " + ", ".join(
            f"{name} {v['value_mean']:+.4f}" for name, v in record["activations"].items() if "logvar" in name))
        lines.append(f"  {'group':<24s} {'lr':>9s} {'grad rms':>10s} {'clipped':>10s} {'update rms':>11s} "
                     f"{'update/lr':>9s}")
        for name, g in record["groups"].items():
            lines.append(f"  {name:<24s} {g['lr']:9.2e} {g['grad_rms_before_clip']:10.2e} {g['grad_rms']:10.2e} "
                         f"{g['update_rms']:11.2e} {g['update_per_lr']:9.3f}")
    b = audit["budget"]
    d = b["distance_to_paper"]
    lines.append(f"budget: the heads' learning rate summed over the {audit['updates']} updates is "
                 f"{b['lr_sum_heads']:.4f} (x logvar gain {b['logvar_gain']:g}: {b['logvar_reach']:.4f}); DAB's over "
                 f"{b['paper_updates']} updates {b['paper_lr_sum']:.4f}")
    lines.append(f"distance from the start to DAB's variances (log-variance): text {d['text']:.3f}, bridged "
                 f"{d['bridged']:.3f}, video {d['video']:.3f}; moved (batch mean, first to last update): "
                 + ", ".join(f"{k} {v:+.4f}" for k, v in b["moved"].items()))
    return "\n".join(lines)
