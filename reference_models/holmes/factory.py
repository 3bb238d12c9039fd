"""Build the reference model from a :class:`~reference_models.holmes.config.HolmesConfig` and the data's dims."""

from __future__ import annotations

import math

from reference_models.holmes.config import HolmesConfig
from reference_models.holmes.model import HolmesModel, ModelConfig

__all__ = ["model_config", "build_model"]


def model_config(config: HolmesConfig, visual_dim: int, text_dim: int, n_clips: int = 32,
                 n_frames: int = 128) -> ModelConfig:
    """The model's :class:`ModelConfig` for feature sizes ``D_v = visual_dim`` and ``D_t = text_dim``."""
    m = config.model
    kwargs = dict(
        visual_dim=visual_dim,
        text_dim=text_dim,
        hidden_size=m.hidden_size,
        n_heads=m.num_heads,
        n_clips=n_clips,
        n_frames=n_frames,
        max_query_len=config.optim.max_query_len,
        dropout=m.dropout,
        n_layers=m.num_blocks,
        ffn_multiplier=m.ffn_multiplier,
        query_ffn_multiplier=m.query_ffn_multiplier,
        kernel=m.kernel,
        width_weighting=m.width_weighting,
        width_temperature=m.width_temperature,
        attention_output_projection=m.attention_output_projection,
        attention_mask=m.attention_mask,
        padded_frames=m.padded_frames,
        second_query_encoding=m.second_query_encoding,
        position_table=m.position_table,
        frame_weight=m.frame_weight,
        clip_weight=m.clip_weight,
        initializer_range=m.initializer_range,
    )
    if m.widths is not None:
        kwargs["widths"] = tuple(math.inf if w is None else float(w) for w in m.widths)
    return ModelConfig(**kwargs)


def build_model(config: HolmesConfig, visual_dim: int, text_dim: int, n_clips: int = 32,
                n_frames: int = 128) -> HolmesModel:
    """A freshly initialised :class:`HolmesModel` (uses the global torch generator)."""
    return HolmesModel(model_config(config, visual_dim, text_dim, n_clips, n_frames))
