"""The CVR reference model (HUD or its CoVR-style base) as one :class:`~reference_models.engine.TrainingTask`.

:class:`CVRTask` gives the engine's :class:`~reference_models.engine.Trainer` what is particular to composed video
retrieval: the :class:`~reference_models.hud.model.CVRModel` of a :class:`~reference_models.hud.config.HUDRunConfig`
and the data's sizes, the variant's loss (HUD's Eq. 15 or CoVR's hard-negative NCE), triplet batches grouped by
reference video, AdamW, and the validation recalls of the WebVid-CoVR protocol (``mean`` selects ``best.pt``).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, cast

import torch
from torch import nn

from reference_models.engine import ComparisonSpec, QueryRanks, TrainingSchedule, TrainingTask, fingerprint_differences
from reference_models.hud.config import HUDRunConfig
from reference_models.hud.data import CVRSplit, TripletLoader, Vocabulary
from reference_models.hud.metrics import RECALL_KS, evaluate_split, split_ranks
from reference_models.hud.model import METHODS, BackboneSettings, CVRModel

__all__ = ["CVRTask", "backbone_settings", "build_cvr_model"]


def backbone_settings(config: HUDRunConfig, split: CVRSplit, vocabulary: Vocabulary | None) -> BackboneSettings:
    """The backbone sizes of ``config`` for the data of ``split`` (and its vocabulary, or its text features)."""
    frames, tokens, dim = split.video_shape
    text_dim = 0 if split.text_features is None else int(split.text_features.shape[-1])
    return BackboneSettings(video_dim=dim, frames=frames, tokens_per_frame=tokens,
                            vocabulary_size=0 if vocabulary is None else len(vocabulary), text_dim=text_dim,
                            max_words=(config.max_words if text_dim == 0  # else the split has text features
                                       else int(cast(torch.Tensor, split.text_features).shape[1])),
                            **config.backbone_sizes())


def build_cvr_model(config: HUDRunConfig, settings: BackboneSettings) -> CVRModel:
    """The model of a run (HUD with Table 4's derivative ``config.derivative``, or the base)."""
    options = {"derivative": config.derivative} if config.method == "hud" and config.derivative else {}
    return CVRModel(settings, method=config.method, hud_options=options)


class CVRTask(TrainingTask):
    """Composed video retrieval with HUD or its base, trained on one data set.

    Parameters
    ----------
    config : HUDRunConfig
        The run's settings.
    train_split, val_split : CVRSplit
        Training and validation data (same video shape).
    vocabulary : Vocabulary or None
        The training edits' words (``None`` with precomputed text features); stored in the checkpoints.
    """

    name = "hud"
    selection_metric = "mean"

    def __init__(self, config: HUDRunConfig, train_split: CVRSplit, val_split: CVRSplit,
                 vocabulary: Vocabulary | None) -> None:
        if train_split.video_shape != val_split.video_shape:
            raise ValueError(f"train and val videos must have one shape, got {train_split.video_shape} and "
                             f"{val_split.video_shape}")
        self.config, self.train_split, self.val_split, self.vocabulary = config, train_split, val_split, vocabulary
        self.method = METHODS[config.method]
        self.settings = backbone_settings(config, train_split, vocabulary)

    @property
    def schedule(self) -> TrainingSchedule:
        c = self.config
        return TrainingSchedule(epochs=c.epochs, early_stop_patience=c.early_stop_patience, lr=c.lr, grad_clip=c.grad_clip)

    warmup_ratio = 0.05

    def config_dict(self) -> dict[str, Any]:
        return self.config.to_dict()

    def config_differences(self, saved: dict[str, Any]) -> list[str]:
        return fingerprint_differences(HUDRunConfig.from_dict(saved).to_dict(), self.config.to_dict(), sep=".")

    def data_fingerprint(self) -> dict[str, Any]:
        return {"train": self.train_split.fingerprint(), "val": self.val_split.fingerprint()}

    def checkpoint_extras(self) -> dict[str, Any]:
        """The vocabulary and the backbone sizes (``evaluate`` rebuilds the model from them)."""
        return {"vocabulary": None if self.vocabulary is None else list(self.vocabulary.words),
                "backbone": asdict(self.settings)}

    def build_model(self) -> nn.Module:
        return build_cvr_model(self.config, self.settings)

    def build_objective(self) -> nn.Module:
        return self.method.build_objective()

    def train_loader(self, seed: int, num_workers: int = 0) -> TripletLoader:
        return TripletLoader(self.train_split, self.config.batch_size, seed)

    def training_step(self, model: nn.Module, objective: nn.Module, batch, device: torch.device):
        return self.method.loss(cast(CVRModel, model), objective, batch.to(device))  # build_model's CVRModel

    def build_optimizer(self, modules: list[nn.Module]) -> torch.optim.Optimizer:
        params = [p for m in modules for p in m.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=self.config.lr, weight_decay=self.config.weight_decay)

    def validate(self, model: nn.Module, objective: nn.Module, device: torch.device) -> dict[str, float]:
        result = evaluate_split(self.method, model, self.val_split, device, seed=self.config.eval_seed)
        return {k: v for k, v in result.items() if k != "per_type"}  # type: ignore[misc]

    #: HUD vs its CoVR-style base; the verdict is read on the test mean recall (of R@1, 5, 10, 50).
    comparison = ComparisonSpec(method="hud", base="base", headline=("MeanR",),
                                metrics=("R@1", "R@5", "R@10", "R@50", "MeanR"), ks=RECALL_KS)

    def query_ranks(self, model: nn.Module, split: CVRSplit, device: torch.device | str) -> QueryRanks:
        """The 1-based rank of every triplet's target on ``split``, as ``evaluate_split`` ranks them (HUD's
        samples drawn with ``config.eval_seed``); the edit types are the query types."""
        ranks = split_ranks(self.method, model, split, torch.device(device), seed=self.config.eval_seed)
        ids = [f"{i}:{t.reference}>{t.target}" for i, t in enumerate(split.triplets)]
        return QueryRanks(ranks.tolist(), ids, list(split.edit_types))
