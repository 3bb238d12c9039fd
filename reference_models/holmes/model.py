r"""The GMMFormer-style PRVR model that the Holmes reference trains (Holmes §3.1, App. B.6).

Architecture (typed, device-agnostic; every output is a dataclass):

* **Video**, two branches of the same form: input projection (LayerNorm → Dropout → Linear → ReLU),
  learned positional embeddings (added, then LayerNorm and Dropout), then ``num_blocks`` multi-width
  Gaussian-attention blocks (Holmes Eq. 35: one block per width, global attention included, mixed per
  position by a width weighting, :mod:`reference_models.holmes.multi_width`). The **clip branch** encodes
  ``M_c = 32`` mean-pooled clips, the **frame branch** ``M_f = 128`` frames; frames are always padded to
  ``M_f`` (zero features, mask 0) as the release does, so every Gaussian kernel lives on the same grid.
* **Text**: input projection, positional embeddings, one global attention block (with a feed-forward layer
  in the release) and attention pooling to a single vector :math:`q` (as in MS-SL / GMMFormer).
* **Scores** (Holmes Eq. 1-2): :math:`s^c = \max_i \cos(q, c_i)`, :math:`s^f = \max_i \cos(q, f_i)` and
  :math:`s = \alpha_f s^f + \alpha_c s^c` (release :math:`\alpha_f = 0.4, \alpha_c = 0.6`). The
  unnormalised logits :math:`\max_i q^\top c_i` that the release feeds to InfoNCE are returned as well.

**Padded frames** (``padded_frames=``): ``"zero"`` (the release) zeroes the encoded padded frames, which
then take part in the max with cosine 0 (and dot product 0), so :math:`s^f = \max(\max_{i\,valid}
\cos(q, f_i), 0)` for a video shorter than ``M_f``; ``"mask"`` leaves them out of the max.

**Second query encoding** (``second_query_encoding=True``, the release): in training, the queries are
encoded twice with independent dropout; the first encoding gives the scores (triplet, InfoNCE, L_inter), the
second (:attr:`ModelOutput.query_aux`) feeds L_div and L_intra.

``forward`` reads a batch by attribute (``clip_feats, frame_feats, frame_mask, query_feats, query_mask,
query_video``) so that this module does not depend on the data package.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import torch
import torch.nn.functional as F
from torch import nn

from evidential_prvr.presets import ModelSettings as RegistryModelSettings
from evidential_prvr.presets import holmes_settings
from reference_models.engine.errors import check_choice
from reference_models.holmes.gaussian_attention import (
    ATTENTION_MASKS,
    KERNELS,
    AttentionMask,
    GaussianAttentionBlock,
    GaussianKernel,
)
from reference_models.holmes.multi_width import WIDTH_WEIGHTINGS, MultiWidthGaussianBlock, WidthWeighting, run_part

__all__ = [
    "ModelSettings",
    "ModelConfig",
    "VideoEmbeddings",
    "Similarities",
    "ModelOutput",
    "HolmesModel",
    "InputProjection",
    "LearnedPositionalEmbedding",
    "max_over_positions",
    "RELEASE_WIDTHS",
    "NARROW_WIDTHS",
    "PADDED_COSINE",
    "PADDED_FRAMES",
]

#: Gaussian widths of the release's eight parallel blocks (global + 0.5, 1, 2, 4, 8, 16, 32; the same for
#: every data set), read from the registry :func:`evidential_prvr.presets.holmes_settings`.
RELEASE_WIDTHS: tuple[float, ...] = cast(RegistryModelSettings, holmes_settings("release", "tvr").model).widths

#: A second set of eight widths, denser at the small end (global + 0.1, 0.5, 1, 3, 5, 8, 10).
NARROW_WIDTHS: tuple[float, ...] = (math.inf, 0.1, 0.5, 1.0, 3.0, 5.0, 8.0, 10.0)

#: Fill value of padded frames in cosine scores with ``padded_frames="mask"``: below every cosine.
PADDED_COSINE = -2.0

PaddedFrames = Literal["zero", "mask"]
PADDED_FRAMES: tuple[str, ...] = ("zero", "mask")


@dataclass(frozen=True)
class ModelSettings(RegistryModelSettings):
    """Architecture of :class:`HolmesModel`: the registry's :class:`evidential_prvr.presets.ModelSettings`
    (its fields, under its names) and the reference-only switches beside them.

    The config's ``model`` section (:class:`~reference_models.holmes.config.HolmesConfig`) is one of these;
    :class:`ModelConfig` adds the data's feature sizes. The defaults are the release's architecture (dropout,
    width temperature and position table aside, which the presets set per data set).

    Attributes
    ----------
    dropout, width_temperature, max_query_len, hidden_size, num_heads, n_clips, n_frames, widths,
    frame_weight, clip_weight, initializer_range, ffn_multiplier, query_ffn_multiplier
        The registry's fields (see :class:`evidential_prvr.presets.ModelSettings`); ``widths`` holds
        ``math.inf`` for global attention.
    position_table : int, optional
        Rows of both video branches' position tables (the release's ``max_ctx_l`` = 128); ``None``: as many
        rows as the branch has positions.
    num_blocks : int
        Multi-width blocks stacked per video branch.
    kernel : {"release", "symmetric", "paper"}
        Gaussian kernel form (see :mod:`reference_models.holmes.gaussian_attention`).
    width_weighting : {"cross_attention", "linear", "mean"}
        How the parallel widths are mixed (see :mod:`reference_models.holmes.multi_width`).
    attention_output_projection : bool
        A ``Linear(d, d)`` after every attention (the release has none).
    second_query_encoding : bool
        Encode the queries a second time in training for L_div and L_intra (:attr:`ModelOutput.query_aux`).
    attention_mask : {"additive", "exclude"}
        How padded keys are removed from attention.
    padded_frames : {"zero", "mask"}
        Padded frames score cosine 0 (release) or are left out of the max (see the module doc).
    activation_checkpointing : bool
        In training, recompute the width blocks, the width weighting and the query attention block in the
        backward pass instead of keeping their activations
        (:class:`~reference_models.holmes.multi_width.MultiWidthGaussianBlock`): the same losses and
        gradients bit for bit, for less than half of a step's memory, at the cost of running those parts
        forward twice (the reference-model guide, "Training memory").
    """

    dropout: float = 0.1
    width_temperature: float = 1.0
    position_table: int | None = None  # type: ignore[assignment]
    num_blocks: int = 1
    kernel: GaussianKernel = "release"
    width_weighting: WidthWeighting = "cross_attention"
    attention_output_projection: bool = False
    second_query_encoding: bool = True
    attention_mask: AttentionMask = "additive"
    padded_frames: PaddedFrames = "zero"
    activation_checkpointing: bool = False


@dataclass(frozen=True)
class ModelConfig(ModelSettings):
    """:class:`ModelSettings` and the input feature sizes: everything :class:`HolmesModel` is built from.

    ``n_clips`` and ``n_frames`` are those of the data (``M_c = 32``, ``M_f = 128``; frames are padded to
    ``n_frames``).

    Attributes
    ----------
    visual_dim, text_dim : int
        Input feature sizes ``D_v`` and ``D_t`` (read from the data).
    """

    visual_dim: int = field(kw_only=True)
    text_dim: int = field(kw_only=True)

    @classmethod
    def from_settings(cls, settings: ModelSettings, *, visual_dim: int, text_dim: int, n_clips: int,
                      n_frames: int) -> ModelConfig:
        """``settings`` with the data's feature sizes and its clip and frame counts."""
        values = {f.name: getattr(settings, f.name) for f in dataclasses.fields(ModelSettings)}
        return cls(**{**values, "n_clips": n_clips, "n_frames": n_frames}, visual_dim=visual_dim,
                   text_dim=text_dim)

    def __post_init__(self) -> None:
        sizes = ("visual_dim", "text_dim", "hidden_size", "num_heads", "n_clips", "n_frames", "max_query_len",
                 "num_blocks")
        for name in sizes:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ModelConfig.{name} must be an int >= 1, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"ModelConfig.hidden_size must be divisible by num_heads, got {self.hidden_size} and {self.num_heads}"
            )
        for name in ("ffn_multiplier", "query_ffn_multiplier"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"ModelConfig.{name} must be an int >= 0, got {value!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"ModelConfig.dropout must lie in [0, 1), got {self.dropout}")
        object.__setattr__(self, "widths", tuple(float(w) for w in self.widths))
        if not self.widths or any(not w > 0 for w in self.widths):
            raise ValueError(f"ModelConfig.widths must be a non-empty tuple of widths > 0, got {self.widths}")
        for name, choices in (("kernel", KERNELS), ("width_weighting", WIDTH_WEIGHTINGS),
                              ("attention_mask", ATTENTION_MASKS), ("padded_frames", PADDED_FRAMES)):
            check_choice(getattr(self, name), f"ModelConfig.{name}", choices)
        if not self.width_temperature > 0:
            raise ValueError(f"ModelConfig.width_temperature must be > 0, got {self.width_temperature}")
        if self.position_table is not None:
            need = max(self.n_clips, self.n_frames)
            if isinstance(self.position_table, bool) or not isinstance(self.position_table, int) or \
                    self.position_table < need:
                raise ValueError(
                    f"ModelConfig.position_table must be None or an int >= max(n_clips, n_frames) = {need}, "
                    f"got {self.position_table!r}"
                )
        for name in ("frame_weight", "clip_weight"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"ModelConfig.{name} must lie in [0, 1], got {getattr(self, name)}")
        if abs(self.frame_weight + self.clip_weight - 1.0) > 1e-6:
            raise ValueError(
                f"ModelConfig.frame_weight + clip_weight must be 1 (Holmes Eq. 2), got "
                f"{self.frame_weight} + {self.clip_weight}"
            )
        if not self.initializer_range > 0:
            raise ValueError(f"ModelConfig.initializer_range must be > 0, got {self.initializer_range}")


@dataclass
class VideoEmbeddings:
    """Encoded videos.

    Attributes
    ----------
    clip : Tensor, shape [V, M_c, d]
        Clip embeddings (not L2-normalised).
    frame : Tensor, shape [V, M_f, d]
        Frame embeddings (not L2-normalised).
    frame_mask : Tensor, shape [V, M_f], bool
        True for real frames, False for padding.
    """

    clip: torch.Tensor
    frame: torch.Tensor
    frame_mask: torch.Tensor

    def __len__(self) -> int:
        return self.clip.shape[0]

    def to(self, device: torch.device | str) -> VideoEmbeddings:
        """The same embeddings on ``device``."""
        return VideoEmbeddings(self.clip.to(device), self.frame.to(device), self.frame_mask.to(device))

    def slice(self, start: int, stop: int) -> VideoEmbeddings:
        """Videos ``start:stop``."""
        return VideoEmbeddings(self.clip[start:stop], self.frame[start:stop], self.frame_mask[start:stop])


@dataclass
class Similarities:
    """Query × video scores (Holmes Eq. 1-2).

    Attributes
    ----------
    clip, frame : Tensor, shape [Q, V]
        Clip-scale and frame-scale max-cosine scores.
    score : Tensor, shape [Q, V]
        :math:`\\alpha_f s^f + \\alpha_c s^c`, the ranking score.
    """

    clip: torch.Tensor
    frame: torch.Tensor
    score: torch.Tensor


@dataclass
class ModelOutput:
    """What :meth:`HolmesModel.forward` returns for a training batch of ``V`` videos and ``Q`` queries.

    Attributes
    ----------
    query : Tensor, shape [Q, d]
        Query embeddings (not L2-normalised).
    videos : VideoEmbeddings
        The batch's encoded videos.
    clip_sim, frame_sim, score : Tensor, shape [Q, V]
        Clip-scale, frame-scale and combined cosine scores (Holmes Eq. 1-2). ``None`` after
        ``forward(batch, score_batch=False)``: the caller scores the queries itself (against the global batch
        under ``torchrun``).
    query_clip_sim : Tensor, shape [Q, M_c]
        Cosine between each query and every clip of its own video (for the intra-video loss).
    clip_logits, frame_logits : Tensor, shape [Q, V]
        Unnormalised scores: max over positions of the raw dot product (what the release's InfoNCE uses);
        ``None`` with ``score_batch=False``, as the scores.
    query_aux : Tensor, shape [Q, d], or None
        A second encoding of the queries with independent dropout (training with
        ``second_query_encoding=True``): the objective feeds it to L_div and L_intra, as the release does.
    """

    query: torch.Tensor
    videos: VideoEmbeddings
    clip_sim: torch.Tensor | None
    frame_sim: torch.Tensor | None
    score: torch.Tensor | None
    query_clip_sim: torch.Tensor
    clip_logits: torch.Tensor | None
    frame_logits: torch.Tensor | None
    query_aux: torch.Tensor | None = None


def max_over_positions(
    queries: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None = None, *, fill: float | None = None
) -> torch.Tensor:
    """``out[q, v] = max_{i: mask[v, i]} queries[q] · positions[v, i]`` (Holmes Eq. 1 on normalised inputs).

    Parameters
    ----------
    queries : Tensor, shape [Q, d]
    positions : Tensor, shape [V, M, d]
    mask : Tensor, shape [V, M], bool, optional
        Valid positions; padded ones are replaced by ``fill`` before the max.
    fill : float, optional
        Value of padded positions (default: the most negative finite value of the dtype).
    """
    num_videos, num_positions, dim = positions.shape
    dots = (queries @ positions.reshape(num_videos * num_positions, dim).t()).view(-1, num_videos, num_positions)
    if mask is not None:
        value = torch.finfo(dots.dtype).min if fill is None else fill
        dots = dots.masked_fill(~mask.unsqueeze(0), value)
    return dots.amax(dim=-1)


class InputProjection(nn.Module):
    """LayerNorm → Dropout → Linear → ReLU: maps input features to the latent size."""

    def __init__(self, in_dim: int, out_dim: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(in_dim), nn.Dropout(dropout), nn.Linear(in_dim, out_dim), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class LearnedPositionalEmbedding(nn.Module):
    """Adds a learned embedding per position (a table of ``max_len`` rows), then LayerNorm and Dropout."""

    def __init__(self, max_len: int, hidden_size: int, dropout: float) -> None:
        super().__init__()
        self.embedding = nn.Embedding(max_len, hidden_size)
        self.norm = nn.LayerNorm(hidden_size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[1], device=x.device)
        return self.dropout(self.norm(x + self.embedding(positions)))


class VideoBranch(nn.Module):
    """Projection, positional embeddings and multi-width Gaussian blocks for one scale (clip or frame)."""

    def __init__(self, config: ModelConfig, n_positions: int) -> None:
        super().__init__()
        widths = tuple(None if math.isinf(w) else w for w in config.widths)
        table = config.position_table if config.position_table is not None else n_positions
        self.projection = InputProjection(config.visual_dim, config.hidden_size, config.dropout)
        self.position = LearnedPositionalEmbedding(table, config.hidden_size, config.dropout)
        self.layers = nn.ModuleList(
            MultiWidthGaussianBlock(
                config.hidden_size,
                config.num_heads,
                widths,
                config.dropout,
                config.ffn_multiplier,
                config.kernel,
                config.width_weighting,
                n_positions=n_positions,
                temperature=config.width_temperature,
                attention_mask=config.attention_mask,
                output_projection=config.attention_output_projection,
                activation_checkpointing=config.activation_checkpointing,
            )
            for _ in range(config.num_blocks)
        )

    def forward(self, feats: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.position(self.projection(feats))
        for layer in self.layers:
            x = layer(x, mask)
        return x


class TextEncoder(nn.Module):
    """Projection, positional embeddings, one global attention block and attention pooling to one vector."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.projection = InputProjection(config.text_dim, config.hidden_size, config.dropout)
        self.position = LearnedPositionalEmbedding(config.max_query_len, config.hidden_size, config.dropout)
        self.attention = GaussianAttentionBlock(
            config.hidden_size, config.num_heads, None, config.dropout, config.query_ffn_multiplier,
            attention_mask=config.attention_mask, output_projection=config.attention_output_projection,
        )
        self.pool_score = nn.Linear(config.hidden_size, 1, bias=False)
        self.activation_checkpointing = config.activation_checkpointing

    def forward(self, feats: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        tokens = run_part(self.attention, self.position(self.projection(feats)), mask,
                          self.activation_checkpointing)  # [Q, L, d]
        logits = self.pool_score(tokens).squeeze(-1)
        logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
        weights = torch.softmax(logits, dim=-1)
        return torch.einsum("ql,qld->qd", weights, tokens)


def _check_features(x: object, name: str, feat_dim: int, max_len: int, num: int | None = None,
                    exact_len: bool = False) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    lengths = f"{max_len}" if exact_len else f"1..{max_len}"
    if x.dim() != 3 or x.shape[2] != feat_dim or not 1 <= x.shape[1] <= max_len or \
            (exact_len and x.shape[1] != max_len):
        raise ValueError(f"{name} must have shape [N, {lengths}, {feat_dim}], got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must have a floating-point dtype, got {x.dtype}")
    if num is not None and x.shape[0] != num:
        raise ValueError(f"{name} must hold {num} rows, got shape {tuple(x.shape)}")


def _as_mask(mask: object, name: str, shape: tuple[int, ...]) -> torch.Tensor:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    if tuple(mask.shape) != shape:
        raise ValueError(f"{name} must have shape {list(shape)}, got {tuple(mask.shape)}")
    return mask if mask.dtype == torch.bool else mask > 0


def _pad_frames(feats: torch.Tensor, mask: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad ``feats [V, M, D]`` and ``mask [V, M]`` to ``length`` positions and zero the padded features."""
    missing = length - feats.shape[1]
    if missing:
        feats = torch.cat([feats, feats.new_zeros(feats.shape[0], missing, feats.shape[2])], dim=1)
        mask = torch.cat([mask, mask.new_zeros(mask.shape[0], missing)], dim=1)
    return feats.masked_fill(~mask.unsqueeze(-1), 0.0), mask


class HolmesModel(nn.Module):
    """GMMFormer-style dual-branch PRVR model (Holmes §3.1 Eq. 1-2, App. B.6 Eq. 35).

    Parameters
    ----------
    config : ModelConfig
        The architecture.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if not isinstance(config, ModelConfig):
            raise TypeError(f"config must be a ModelConfig, got {type(config).__name__}")
        self.config = config
        self.clip_branch = VideoBranch(config, config.n_clips)
        self.frame_branch = VideoBranch(config, config.n_frames)
        self.text_encoder = TextEncoder(config)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """BERT initialisation: Normal(0, ``initializer_range``) linear/embedding weights, zero biases, unit
        LayerNorms (as the release)."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=self.config.initializer_range)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    @property
    def padded_frame_score(self) -> float:
        """Cosine a padded frame scores (0 with ``padded_frames="zero"``, below every cosine with ``"mask"``)."""
        return 0.0 if self.config.padded_frames == "zero" else PADDED_COSINE

    @property
    def padded_frame_logit(self) -> float | None:
        """Dot product a padded frame scores (0 with ``"zero"``; ``None``: the dtype's minimum, with ``"mask"``)."""
        return 0.0 if self.config.padded_frames == "zero" else None

    def encode_videos(
        self, clip_feats: torch.Tensor, frame_feats: torch.Tensor, frame_mask: torch.Tensor
    ) -> VideoEmbeddings:
        """Encode ``clip_feats [V, M_c, D_v]`` and ``frame_feats [V, M, D_v]`` (``frame_mask [V, M]``, ``M <= M_f``).

        Frames are padded to ``M_f`` (zero features, mask False); the returned frame embeddings and mask have
        ``M_f`` positions. With ``width_weighting="cross_attention"`` there must be exactly ``M_c`` clips. A
        video without any valid frame scores 0 (``"zero"``) or :data:`PADDED_COSINE` (``"mask"``) on the frame
        scale.
        """
        cfg = self.config
        _check_features(clip_feats, "clip_feats", cfg.visual_dim, cfg.n_clips,
                        exact_len=cfg.width_weighting == "cross_attention")
        _check_features(frame_feats, "frame_feats", cfg.visual_dim, cfg.n_frames, clip_feats.shape[0])
        mask = _as_mask(frame_mask, "frame_mask", tuple(frame_feats.shape[:2]))
        frame_feats, mask = _pad_frames(frame_feats, mask, cfg.n_frames)
        clip = self.clip_branch(clip_feats)
        frame = self.frame_branch(frame_feats, mask)
        if cfg.padded_frames == "zero":
            frame = frame.masked_fill(~mask.unsqueeze(-1), 0.0)
        return VideoEmbeddings(clip=clip, frame=frame, frame_mask=mask)

    def encode_queries(self, query_feats: torch.Tensor, query_mask: torch.Tensor) -> torch.Tensor:
        """Encode ``query_feats [Q, L, D_t]`` with ``query_mask [Q, L]`` into ``[Q, d]``."""
        _check_features(query_feats, "query_feats", self.config.text_dim, self.config.max_query_len)
        mask = _as_mask(query_mask, "query_mask", tuple(query_feats.shape[:2]))
        return self.text_encoder(query_feats, mask)

    def combine_scores(self, frame: torch.Tensor, clip: torch.Tensor) -> torch.Tensor:
        """Holmes Eq. 2: :math:`\alpha_f s^f + \alpha_c s^c`."""
        return self.config.frame_weight * frame + self.config.clip_weight * clip

    def similarity(self, queries: torch.Tensor, videos: VideoEmbeddings) -> Similarities:
        """Max-cosine clip and frame scores and their combination (Holmes Eq. 1-2) for all pairs.

        This materialises a ``[Q, V, M]`` block; for large sets use
        :func:`reference_models.holmes.scoring.score_matrix`.
        """
        q = F.normalize(queries, dim=-1)
        clip = max_over_positions(q, F.normalize(videos.clip, dim=-1))
        frame = max_over_positions(q, F.normalize(videos.frame, dim=-1), videos.frame_mask,
                                   fill=self.padded_frame_score)
        return Similarities(clip=clip, frame=frame, score=self.combine_scores(frame, clip))

    def forward(self, batch: Any, *, score_batch: bool = True) -> ModelOutput:
        """Encode a training batch (read by attribute) and score its queries against its videos.

        ``score_batch=False`` skips the ``[Q, V]`` scores and logits (they are ``None``): for a caller that
        scores the queries against other videos anyway (the global batch under ``torchrun``,
        ``HolmesTask.training_step``), so that no scoring is done twice.
        """
        videos = self.encode_videos(batch.clip_feats, batch.frame_feats, batch.frame_mask)
        query = self.encode_queries(batch.query_feats, batch.query_mask)
        query_video = batch.query_video
        if not isinstance(query_video, torch.Tensor) or tuple(query_video.shape) != (query.shape[0],):
            raise ValueError(
                f"batch.query_video must be a tensor of shape [{query.shape[0]}], got "
                f"{getattr(query_video, 'shape', type(query_video).__name__)}"
            )
        query_aux = None
        if self.config.second_query_encoding and self.training:
            query_aux = self.encode_queries(batch.query_feats, batch.query_mask)
        clip_sim = frame_sim = score = clip_logits = frame_logits = None
        if score_batch:
            sims = self.similarity(query, videos)
            clip_sim, frame_sim, score = sims.clip, sims.frame, sims.score
            clip_logits = max_over_positions(query, videos.clip)
            frame_logits = max_over_positions(query, videos.frame, videos.frame_mask, fill=self.padded_frame_logit)
        own_clips = F.normalize(videos.clip, dim=-1)[query_video]  # [Q, M_c, d]
        query_clip_sim = torch.einsum("qd,qmd->qm", F.normalize(query, dim=-1), own_clips)
        return ModelOutput(
            query=query,
            videos=videos,
            clip_sim=clip_sim,
            frame_sim=frame_sim,
            score=score,
            query_clip_sim=query_clip_sim,
            clip_logits=clip_logits,
            frame_logits=frame_logits,
            query_aux=query_aux,
        )
