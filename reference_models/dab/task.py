"""The text-to-video reference model as one :class:`~reference_models.engine.TrainingTask` of the shared engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, cast

import torch
from torch import nn

from evidential_prvr.functional import info_nce_loss, pac_loss
from reference_models.dab.config import HeadSettings, T2VConfig, matched_tau
from reference_models.dab.data import T2VSplit, TrainBatches
from reference_models.dab.evaluate import RECALL_KS, evaluate_split, score_split
from reference_models.dab.model import T2VModel, T2VOutput
from reference_models.engine import (
    ComparisonSpec,
    QueryRanks,
    TrainingSchedule,
    TrainingTask,
    build_scheduler,
)

__all__ = ["T2VTask", "T2VObjective", "T2VLoss"]


@dataclass
class T2VLoss:
    """The loss of one step: ``total`` and, by name, the term it is (``nce`` or ``pac``)."""

    total: torch.Tensor
    name: str

    def scalars(self) -> dict[str, torch.Tensor]:
        return {self.name: self.total.detach()}


class T2VObjective(nn.Module):
    """Symmetric InfoNCE over the scaled cosine (CLIP4Clip) or DAB's PAC loss over the Gaussian cost.

    Both are the sum of the text-to-video and the video-to-text cross-entropy over the in-batch ``[B, B]``
    scores with positives on the diagonal (:func:`evidential_prvr.functional.info_nce_loss`,
    :func:`evidential_prvr.functional.pac_loss` with the temperature of ``head.tau_rule``: ``head.tau``,
    :func:`~reference_models.dab.config.matched_tau`, or the model's learned one, which the output carries).
    """

    def __init__(self, head: HeadSettings) -> None:
        super().__init__()
        self.gaussian = head.gaussian
        self.tau = head.tau if head.tau_rule == "fixed" else matched_tau(head)

    def forward(self, output: T2VOutput) -> T2VLoss:
        if self.gaussian and output.tau is not None:  # learned: -C / tau with tau's gradient (tau = 1 inside)
            return T2VLoss(pac_loss(cast(torch.Tensor, output.cost) / output.tau, 1.0), "pac")
        if self.gaussian:
            return T2VLoss(pac_loss(cast(torch.Tensor, output.cost), self.tau), "pac")  # Gaussian heads: a cost
        labels = torch.arange(output.logits.shape[0], device=output.logits.device)
        return T2VLoss(info_nce_loss(output.logits, labels), "nce")


class T2VTask(TrainingTask):
    """Train :class:`~reference_models.dab.model.T2VModel` on ``train``, select on ``val`` R@1.

    Optimiser: AdamW (weight decay ``optim.weight_decay``) with two parameter groups
    (:data:`~reference_models.dab.config.LR_GROUPS`): with ``optim.groups = "heads"``, ``optim.head_lr`` for the
    Gaussian heads and the bridge and ``optim.lr`` for the rest; with ``"encoders"``, ``optim.lr`` for the feature
    encoders (text MLP and frame projection) and ``optim.head_lr`` for the rest, the encoders left out when
    ``optim.encoders = "frozen"``. Linear warm-up over ``optim.warmup_ratio`` of the updates, then linear decay
    to 0.
    """

    name: ClassVar[str] = "dab"
    selection_metric: ClassVar[str] = "R@1"

    def __init__(self, config: T2VConfig, train: T2VSplit, val: T2VSplit, *, epochs: int | None = None) -> None:
        if epochs is not None:
            config = config.replace(optim={"epochs": epochs})
        self.config, self.train, self.val = config, train, val
        self.frame_dim, self.text_dim = int(train.frames.shape[2]), int(train.text.shape[1])

    @property
    def schedule(self) -> TrainingSchedule:
        o = self.config.optim
        return TrainingSchedule(o.epochs, o.early_stop_patience, o.lr, o.grad_clip)

    def config_dict(self) -> dict[str, Any]:
        return self.config.to_dict()

    def config_differences(self, saved: dict[str, Any]) -> list[str]:
        return self.config.differences(saved)

    def data_fingerprint(self) -> dict[str, Any]:
        return {"train": self.train.fingerprint(), "val": self.val.fingerprint()}

    def build_model(self) -> nn.Module:
        model = T2VModel(self.frame_dim, self.text_dim, self.config)
        if self.config.optim.encoders == "frozen":
            for part in (model.text_mlp, model.frame_proj):
                part.requires_grad_(False)
        return model

    def build_objective(self) -> nn.Module:
        return T2VObjective(self.config.head)

    def train_loader(self, seed: int, num_workers: int = 0) -> TrainBatches:
        return TrainBatches(self.train, self.config.optim.batch_size, seed)

    def training_step(self, model: nn.Module, objective: nn.Module, batch: Any, device: torch.device) -> T2VLoss:
        text, frames, mask = (t.to(device) for t in batch)
        return objective(model(text, frames, mask))

    def build_optimizer(self, modules: list[nn.Module]) -> torch.optim.Optimizer:
        model, o = cast(T2VModel, modules[0]), self.config.optim  # the model of build_model, then the objective
        params = [p for m in modules for p in m.parameters() if p.requires_grad]
        if o.groups == "encoders":  # the CLIP-encoder stand-in at optim.lr, everything else at optim.head_lr
            encoder_ids = {id(p) for part in (model.text_mlp, model.frame_proj) for p in part.parameters()}
            groups = [{"params": [p for p in params if id(p) in encoder_ids], "lr": o.lr},
                      {"params": [p for p in params if id(p) not in encoder_ids], "lr": o.head_lr}]
            return torch.optim.AdamW([g for g in groups if g["params"]], weight_decay=o.weight_decay)
        dab_parts = [getattr(model, n) for n in ("gaussian_head", "token_head", "bridge", "point_norm", "point_mean")
                     if getattr(model, n, None)]
        head_ids = {id(p) for part in dab_parts for p in part.parameters()}
        groups = [{"params": [p for p in params if id(p) not in head_ids], "lr": o.lr}]
        if head_ids:
            groups.append({"params": [p for p in params if id(p) in head_ids], "lr": o.head_lr})
        return torch.optim.AdamW(groups, weight_decay=o.weight_decay)

    def build_scheduler(self, optimizer: torch.optim.Optimizer, total_steps: int) -> Any:
        return build_scheduler(optimizer, total_steps, self.config.optim.warmup_ratio)

    def validate(self, model: nn.Module, objective: nn.Module, device: torch.device) -> dict[str, float]:
        metrics = evaluate_split(cast(T2VModel, model), self.val, device, selective=False)
        return {k: float(cast(float, v)) for k, v in metrics.items()}  # without selective: the float metrics

    def checkpoint_extras(self) -> dict[str, Any]:
        return {"frame_dim": self.frame_dim, "text_dim": self.text_dim}

    #: DAB vs its CLIP4Clip-style base on the 1k-A-style test (verdict on R@1 and MnR) and the all-captions test.
    comparison = ComparisonSpec(method="dab", base="base", headline=("R@1", "MnR"),
                                metrics=("R@1", "R@5", "R@10", "MdR", "MnR"), ks=RECALL_KS,
                                sets=("test", "test_all"), primary="test")

    def query_ranks(self, model: nn.Module, split: T2VSplit, device: torch.device | str, *,
                    logits: torch.Tensor | None = None) -> QueryRanks:
        """The rank of every caption's video on ``split``, as :func:`~reference_models.dab.evaluate.retrieval_metrics`
        ranks it (ties count against the model); the query ids are the captions' ``sen_id``. ``logits``: the
        ``[Q, V]`` scores of :func:`~reference_models.dab.evaluate.score_split` when already computed."""
        from evidential_prvr.metrics import ranks_of_ground_truth

        if logits is None:
            logits = score_split(cast(T2VModel, model), split, device).logits
        ranks = ranks_of_ground_truth(logits, split.query_video)
        return QueryRanks(ranks.tolist(), [str(i) for i in split.sen_ids])
