"""Build the reference model from a :class:`~reference_models.holmes.config.HolmesConfig` and the data's dims."""

from __future__ import annotations

from reference_models.holmes.config import HolmesConfig
from reference_models.holmes.model import HolmesModel, ModelConfig

__all__ = ["model_config", "build_model"]


def model_config(config: HolmesConfig, visual_dim: int, text_dim: int, n_clips: int = 32,
                 n_frames: int = 128) -> ModelConfig:
    """The model's :class:`ModelConfig`: the config's ``model`` section (the registry's fields under their
    names, and the reference-only switches) with the data's feature sizes ``D_v = visual_dim``,
    ``D_t = text_dim`` and clip and frame counts."""
    return ModelConfig.from_settings(config.model, visual_dim=visual_dim, text_dim=text_dim, n_clips=n_clips,
                                     n_frames=n_frames)


def build_model(config: HolmesConfig, visual_dim: int, text_dim: int, n_clips: int = 32,
                n_frames: int = 128) -> HolmesModel:
    """A freshly initialised :class:`HolmesModel` (uses the global torch generator)."""
    return HolmesModel(model_config(config, visual_dim, text_dim, n_clips, n_frames))
