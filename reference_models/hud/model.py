"""The CVR reference model: a small backbone on precomputed video features, CoVR's composition and HUD's.

* :class:`CVRBackbone`: frame tokens -> atomistic video tokens (HUD Eq. 1: :class:`QueryTokenAttention` with
  ``queries_per_frame`` learnable queries per frame), edit words -> text tokens (a one-layer transformer trained
  from scratch, or a projection of precomputed text-token features).
* :class:`CoVRComposer`: the base, CoVR-2's composition (learnable query tokens attend jointly with the text and
  cross-attend to the reference tokens; projected, normalised, averaged) and its target embedding (projected,
  normalised and averaged target tokens), trained with :class:`HardNegativeNCE`.
* HUD: the same backbone; composition, alignment and loss are :class:`~evidential_prvr.probabilistic.HUDObjective`.

:class:`BaseMethod` and :class:`HUDMethod` say, for each variant, how a batch becomes a loss and how queries and
a gallery become scores; the task and the evaluation use them only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from evidential_prvr.probabilistic import HUDObjective, QueryTokenAttention
from reference_models.engine import TotalTerms
from reference_models.hud.data import CVRBatch
from reference_models.hud.losses import HardNegativeNCE

__all__ = ["BackboneSettings", "CVRBackbone", "CoVRComposer", "CVRModel", "BaseMethod", "HUDMethod", "METHODS",
           "BaseTerms", "ModelHoldsLoss"]


@dataclass(frozen=True)
class BackboneSettings:
    """Sizes of the backbone and of the retrieval embedding."""

    video_dim: int
    frames: int
    tokens_per_frame: int
    vocabulary_size: int = 0  # 0 when text features are precomputed
    text_dim: int = 0  # > 0 when text features are precomputed
    max_words: int = 12
    dim: int = 64
    embed_dim: int = 64
    queries_per_frame: int = 4
    composer_queries: int = 8
    num_heads: int = 2

    @property
    def atomistic_tokens(self) -> int:
        """HUD's :math:`T = N_f \\times L`."""
        return self.frames * self.queries_per_frame


class CVRBackbone(nn.Module):
    """Video and text encoders shared by the base and HUD."""

    def __init__(self, settings: BackboneSettings) -> None:
        super().__init__()
        s = self.settings = settings
        self.video_in = nn.Sequential(nn.Linear(s.video_dim, s.dim), nn.LayerNorm(s.dim))
        self.patch_position = nn.Parameter(torch.zeros(s.tokens_per_frame, s.dim))
        self.frame_position = nn.Parameter(torch.zeros(s.frames, 1, s.dim))
        self.extractor = QueryTokenAttention(s.dim, num_queries=s.queries_per_frame, num_heads=s.num_heads)
        if s.text_dim > 0:
            self.text_in: nn.Module = nn.Sequential(nn.Linear(s.text_dim, s.dim), nn.LayerNorm(s.dim))
        else:
            self.text_in = nn.Embedding(s.vocabulary_size, s.dim, padding_idx=0)
        self.word_position = nn.Parameter(0.02 * torch.randn(s.max_words, s.dim))
        self.text_encoder = nn.TransformerEncoderLayer(s.dim, s.num_heads, 2 * s.dim, dropout=0.0, batch_first=True)

    def encode_video(self, frames: torch.Tensor) -> torch.Tensor:
        """``[B, frames, tokens, video_dim]`` -> ``[B, frames * queries_per_frame, dim]`` atomistic tokens (Eq. 1)."""
        b, n_frames, n_tokens, _ = frames.shape
        x = self.video_in(frames) + self.patch_position
        tokens = self.extractor(visual=x.reshape(b * n_frames, n_tokens, -1))
        return (tokens.view(b, n_frames, -1, tokens.shape[-1]) + self.frame_position).reshape(b, -1, tokens.shape[-1])

    def encode_text(self, batch: CVRBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Text tokens ``[B, words, dim]`` and their mask of a batch."""
        n = self.settings.max_words  # longer precomputed edits are truncated like tokenised ones
        mask = batch.text_mask[:, :n]
        # with text_dim > 0 the batches carry precomputed text features
        x = self.text_in(cast(torch.Tensor, batch.text_features)[:, :n] if self.settings.text_dim > 0
                         else batch.text_ids[:, :n])
        x = x + self.word_position[: x.shape[1]]
        return self.text_encoder(x, src_key_padding_mask=~mask), mask


class CoVRComposer(nn.Module):
    """CoVR-2's composition of reference tokens and text (BLIP-2 Q-Former style) and its target embedding."""

    def __init__(self, settings: BackboneSettings) -> None:
        super().__init__()
        self.qformer = QueryTokenAttention(settings.dim, num_queries=settings.composer_queries, num_heads=settings.num_heads)
        self.text_projection = nn.Linear(settings.dim, settings.embed_dim)
        self.video_projection = nn.Linear(settings.dim, settings.embed_dim)

    def compose(self, reference: torch.Tensor, text: torch.Tensor, text_mask: torch.Tensor) -> torch.Tensor:
        """``[B, embed_dim]``: the mean of the normalised, projected output query tokens."""
        tokens = self.qformer(text=text, text_mask=text_mask, visual=reference)
        return F.normalize(self.text_projection(tokens), dim=-1).mean(dim=1)

    def embed_targets(self, target: torch.Tensor) -> torch.Tensor:
        """``[B, embed_dim]``: the mean of the normalised, projected target tokens."""
        return F.normalize(self.video_projection(target), dim=-1).mean(dim=1)


class CVRModel(nn.Module):
    """The backbone plus the variant's composition: CoVR's composer (base) or a :class:`HUDObjective` (HUD).

    HUD's objective holds learnable composition weights, so it is part of the model (its weights are saved with
    the model's); the engine's objective is then parameterless (:class:`ModelHoldsLoss`). Its argument checks are
    off (``validate_args=False``: no host synchronisation per call; the engine's divergence guard watches the loss),
    as the base's loss has none either.
    """

    def __init__(self, settings: BackboneSettings, *, method: str, hud_options: dict | None = None) -> None:
        super().__init__()
        self.settings = settings
        self.method = method
        self.backbone = CVRBackbone(settings)
        self.composer = CoVRComposer(settings) if method == "base" else None
        self.hud = None
        if method == "hud":
            self.hud = HUDObjective.from_preset("paper", dim=settings.dim, holistic_dim=settings.embed_dim,
                                                num_reference_tokens=settings.atomistic_tokens,
                                                num_heads=settings.num_heads, validate_args=False,
                                                **(hud_options or {}))


class ModelHoldsLoss(nn.Module):
    """The engine's objective for HUD: parameterless, since :class:`HUDObjective` lives in the model."""


class BaseTerms(TotalTerms):
    """The base's step terms: its hard-negative NCE, the ``total``."""


class BaseMethod:
    """The base: CoVR-2 composition + hard-negative NCE (alpha = 1, beta = 0.5, temperature 0.07)."""

    name = "base"

    def build_objective(self) -> nn.Module:
        return HardNegativeNCE(alpha=1.0, beta=0.5, temperature=0.07)

    def loss(self, model: CVRModel, objective: nn.Module, batch: CVRBatch, generator=None) -> BaseTerms:
        return BaseTerms(objective(self.queries(model, batch), self.gallery(model, batch.target)))

    def queries(self, model: CVRModel, batch: CVRBatch, generator=None) -> torch.Tensor:
        text, mask = model.backbone.encode_text(batch)
        composer = cast(CoVRComposer, model.composer)  # a base model's
        return composer.compose(model.backbone.encode_video(batch.reference), text, mask)

    def gallery(self, model: CVRModel, videos: torch.Tensor) -> torch.Tensor:
        return cast(CoVRComposer, model.composer).embed_targets(model.backbone.encode_video(videos))

    def scores(self, model: CVRModel, queries: torch.Tensor, gallery: torch.Tensor) -> torch.Tensor:
        return queries @ gallery.T


class HUDMethod:
    """HUD: the same backbone, :class:`~evidential_prvr.probabilistic.HUDObjective` for composition and loss."""

    name = "hud"

    def build_objective(self) -> nn.Module:
        return ModelHoldsLoss()

    def loss(self, model: CVRModel, objective: nn.Module, batch: CVRBatch, generator=None):
        text, mask = model.backbone.encode_text(batch)
        hud = cast(HUDObjective, model.hud)  # a HUD model's
        return hud(model.backbone.encode_video(batch.reference), text, model.backbone.encode_video(batch.target),
                   text_mask=mask, generator=generator)

    def queries(self, model: CVRModel, batch: CVRBatch, generator=None):
        text, mask = model.backbone.encode_text(batch)
        hud = cast(HUDObjective, model.hud)
        return hud.compose(model.backbone.encode_video(batch.reference), text, text_mask=mask, generator=generator)

    def gallery(self, model: CVRModel, videos: torch.Tensor):
        return cast(HUDObjective, model.hud).embed_targets(model.backbone.encode_video(videos))

    def scores(self, model: CVRModel, queries, gallery) -> torch.Tensor:
        return cast(HUDObjective, model.hud).similarity(queries, gallery)


METHODS: dict[str, BaseMethod | HUDMethod] = {"base": BaseMethod(), "hud": HUDMethod()}
