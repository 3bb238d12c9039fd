"""Batch dataclasses (training, video-side and query-side) and the collation that builds them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

import numpy as np
import torch

__all__ = ["TrainBatch", "VideoBatch", "QueryBatch", "collate_videos", "collate_queries"]

_B = TypeVar("_B", bound="_Batch")


class _Batch:
    """What every batch dataclass here has: :meth:`to`."""

    def to(self: _B, device: torch.device | str, non_blocking: bool = False) -> _B:
        """A copy with every tensor on ``device``."""
        batch: Any = self
        changes = {
            f.name: getattr(batch, f.name).to(device, non_blocking=non_blocking)
            for f in fields(batch)
            if isinstance(getattr(batch, f.name), torch.Tensor)
        }
        return replace(batch, **changes)


class _VideoSide(_Batch):
    """A batch that holds videos, one ``clip_feats [V, M_c, D_v]`` row each."""

    clip_feats: torch.Tensor

    @property
    def clip_mask(self) -> torch.Tensor:
        """All-True ``bool [V, M_c]``: every clip segment is real (an empty segment takes one frame)."""
        return torch.ones(self.clip_feats.shape[:2], dtype=torch.bool, device=self.clip_feats.device)


@dataclass(frozen=True)
class VideoBatch(_VideoSide):
    """Videos for encoding at evaluation time.

    Attributes
    ----------
    clip_feats : torch.Tensor
        ``float32 [V, M_c, D_v]``, L2-normalised clip features.
    frame_feats : torch.Tensor
        ``float32 [V, M_f, D_v]``, L2-normalised frame features, zero-padded.
    frame_mask : torch.Tensor
        ``bool [V, M_f]``, True on real frames.
    video_ids : list of str
    """

    clip_feats: torch.Tensor
    frame_feats: torch.Tensor
    frame_mask: torch.Tensor
    video_ids: list[str]


@dataclass(frozen=True)
class QueryBatch(_Batch):
    """Queries for encoding at evaluation time.

    Attributes
    ----------
    query_feats : torch.Tensor
        ``float32 [Q, L, D_t]`` token features (L2-normalised), zero-padded to the longest query in the batch.
    query_mask : torch.Tensor
        ``bool [Q, L]``, True on real tokens.
    caption_ids : list of str
    video_index : torch.Tensor
        ``long [Q]``, the ground-truth video of each query as an index into the split's ``video_ids``.
    """

    query_feats: torch.Tensor
    query_mask: torch.Tensor
    caption_ids: list[str]
    video_index: torch.Tensor


@dataclass(frozen=True)
class TrainBatch(_VideoSide):
    """A training batch: ``V`` videos with all of their ``Q`` captions.

    Attributes
    ----------
    clip_feats : torch.Tensor
        ``float32 [V, M_c, D_v]``.
    frame_feats : torch.Tensor
        ``float32 [V, M_f, D_v]``, zero-padded.
    frame_mask : torch.Tensor
        ``bool [V, M_f]``.
    query_feats : torch.Tensor
        ``float32 [Q, L, D_t]``, zero-padded to the longest caption in the batch.
    query_mask : torch.Tensor
        ``bool [Q, L]``.
    query_video : torch.Tensor
        ``long [Q]``, index into this batch's ``V`` videos of each caption's video.
    video_ids, caption_ids : list of str
    """

    clip_feats: torch.Tensor
    frame_feats: torch.Tensor
    frame_mask: torch.Tensor
    query_feats: torch.Tensor
    query_mask: torch.Tensor
    query_video: torch.Tensor
    video_ids: list[str]
    caption_ids: list[str]


def collate_videos(
    clips: Sequence[np.ndarray], frames: Sequence[np.ndarray], n_frames: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stack clip features and pad frame features to ``n_frames``; returns ``(clip, frame, frame_mask)``."""
    v = len(clips)
    dim = clips[0].shape[-1]
    clip_feats = torch.from_numpy(np.stack(clips).astype(np.float32, copy=False))
    frame_buf = np.zeros((v, n_frames, dim), dtype=np.float32)
    lengths = np.fromiter((f.shape[0] for f in frames), dtype=np.int64, count=v)
    for i, f in enumerate(frames):
        frame_buf[i, : f.shape[0]] = f
    mask = np.arange(n_frames)[None, :] < lengths[:, None]
    return clip_feats, torch.from_numpy(frame_buf), torch.from_numpy(mask)


def collate_queries(tokens: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad token features to the longest caption; returns ``(query_feats [Q, L, D_t], query_mask [Q, L])``."""
    q = len(tokens)
    lengths = np.fromiter((t.shape[0] for t in tokens), dtype=np.int64, count=q)
    max_len = int(lengths.max())
    buf = np.zeros((q, max_len, tokens[0].shape[-1]), dtype=np.float32)
    for i, t in enumerate(tokens):
        buf[i, : t.shape[0]] = t
    mask = np.arange(max_len)[None, :] < lengths[:, None]
    return torch.from_numpy(buf), torch.from_numpy(mask)
