"""Iterables over a :class:`PRVRSplit`: shuffled training batches, and ordered video / query batches.

Each batch is built in one ``__getitem__`` of a small map-style dataset whose items are whole batches,
so ``num_workers > 0`` runs through a ``torch.utils.data.DataLoader`` (``batch_size=None``) and each
worker opens its own feature-file handles (see :mod:`~reference_models.holmes.data.features`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from reference_models.engine.distributed import shard_bounds
from reference_models.engine.errors import DataValidationError
from reference_models.holmes.data.batches import QueryBatch, TrainBatch, VideoBatch, collate_queries, collate_videos
from reference_models.holmes.data.split import PRVRSplit

__all__ = [
    "TrainLoader",
    "OrderedLoader",
    "make_train_loader",
    "make_video_loader",
    "make_query_loader",
    "build_train_batch",
    "build_video_batch",
    "build_query_batch",
]


def build_video_batch(split: PRVRSplit, video_indices: Sequence[int] | np.ndarray) -> VideoBatch:
    """The :class:`VideoBatch` of the given videos of ``split``."""
    clips, frames = zip(*(split.read_video(int(i)) for i in video_indices))
    clip_feats, frame_feats, frame_mask = collate_videos(clips, frames, split.n_frames)
    return VideoBatch(clip_feats, frame_feats, frame_mask, [split.video_ids[int(i)] for i in video_indices])


def build_query_batch(split: PRVRSplit, caption_indices: Sequence[int] | np.ndarray) -> QueryBatch:
    """The :class:`QueryBatch` of the given captions of ``split``."""
    idx = torch.as_tensor(np.asarray(caption_indices, dtype=np.int64))
    feats, mask = collate_queries([split.read_query(int(i)) for i in caption_indices])
    return QueryBatch(feats, mask, [split.caption_ids[int(i)] for i in caption_indices],
                      split.caption_video_index[idx])


def build_train_batch(split: PRVRSplit, video_indices: Sequence[int] | np.ndarray) -> TrainBatch:
    """The :class:`TrainBatch` of the given videos of ``split`` with all of their captions."""
    videos = build_video_batch(split, video_indices)
    caption_lists = [split.video_caption_indices[int(v)] for v in video_indices]
    caption_idx = np.concatenate(caption_lists)
    query_video = np.repeat(np.arange(len(caption_lists)), [len(c) for c in caption_lists])
    feats, mask = collate_queries([split.read_query(int(i)) for i in caption_idx])
    return TrainBatch(
        clip_feats=videos.clip_feats,
        frame_feats=videos.frame_feats,
        frame_mask=videos.frame_mask,
        query_feats=feats,
        query_mask=mask,
        query_video=torch.from_numpy(query_video.astype(np.int64)),
        video_ids=videos.video_ids,
        caption_ids=[split.caption_ids[int(i)] for i in caption_idx],
    )


_BUILDERS = {"train": build_train_batch, "video": build_video_batch, "query": build_query_batch}


class _DataProblem:
    """A :class:`DataValidationError` raised in a worker process, carried back as an item and raised again.

    (A ``DataLoader`` would otherwise turn it into a ``RuntimeError`` holding the worker's traceback.)
    """

    def __init__(self, error: DataValidationError) -> None:
        self.path = error.path
        self.problem = error.problem


class _BatchDataset(Dataset):
    """Map-style dataset whose item ``i`` is the whole batch built from ``chunks[i]``."""

    def __init__(self, split: PRVRSplit, chunks: list[np.ndarray], kind: str) -> None:
        self.split = split
        self.chunks = chunks
        self.kind = kind

    def __len__(self) -> int:
        return len(self.chunks)

    def __getitem__(self, i: int):
        try:
            return _BUILDERS[self.kind](self.split, self.chunks[i])
        except DataValidationError as exc:
            return _DataProblem(exc)


def _iterate(split: PRVRSplit, chunks: list[np.ndarray], kind: str, num_workers: int) -> Iterator:
    if num_workers == 0:
        build = _BUILDERS[kind]
        for chunk in chunks:
            yield build(split, chunk)
        return
    loader = DataLoader(_BatchDataset(split, chunks, kind), batch_size=None, shuffle=False, num_workers=num_workers)
    for item in loader:
        if isinstance(item, _DataProblem):
            raise DataValidationError(item.path, item.problem)
        yield item


def _check_count(value: object, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


class TrainLoader:
    """Shuffled training batches of ``videos_per_batch`` videos with all their captions.

    The order depends only on ``(seed, epoch)``: call :meth:`set_epoch` before iterating, so that
    a resumed run sees exactly the batches an uninterrupted run would have seen.

    With ``world_size > 1`` (multi-process training) the loader of rank ``rank`` yields its contiguous
    shard of every batch (:func:`~reference_models.engine.shard_bounds`): the ranks' shards,
    concatenated in rank order, are the single-process batch, so the global batch keeps
    ``videos_per_batch`` videos and a video's captions stay on one rank. Every rank needs a video of each
    batch: a trailing batch of fewer than ``world_size`` videos is dropped.
    """

    def __init__(
        self, split: PRVRSplit, videos_per_batch: int = 128, *, seed: int = 0, num_workers: int = 0,
        drop_last: bool = False, rank: int = 0, world_size: int = 1,
    ) -> None:
        self.split = split
        self.videos_per_batch = _check_count(videos_per_batch, "videos_per_batch", 1)
        self.seed = _check_count(seed, "seed", 0)
        self.num_workers = _check_count(num_workers, "num_workers", 0)
        self.world_size = _check_count(world_size, "world_size", 1)
        self.rank = _check_count(rank, "rank", 0)
        if self.rank >= self.world_size or self.videos_per_batch < self.world_size:
            raise ValueError(f"need rank < world_size <= videos_per_batch, got rank {rank}, world_size {world_size}, "
                             f"videos_per_batch {videos_per_batch}")
        self.drop_last = bool(drop_last) or 0 < split.num_videos % self.videos_per_batch < self.world_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the shuffle of ``epoch`` for the next iteration."""
        self.epoch = _check_count(epoch, "epoch", 0)

    def batch_video_indices(self, epoch: int | None = None) -> list[np.ndarray]:
        """The video indices of every batch of ``epoch`` (default: the current one), in order."""
        epoch = self.epoch if epoch is None else _check_count(epoch, "epoch", 0)
        order = np.random.default_rng([self.seed, epoch]).permutation(self.split.num_videos)
        n = self.videos_per_batch
        chunks = [order[i : i + n] for i in range(0, len(order), n)]
        if self.drop_last and chunks and len(chunks[-1]) < n:
            chunks.pop()
        if self.world_size > 1:
            chunks = [chunk[slice(*shard_bounds(len(chunk), self.rank, self.world_size))] for chunk in chunks]
        return chunks

    def __len__(self) -> int:
        full, rest = divmod(self.split.num_videos, self.videos_per_batch)
        return full + (1 if rest and not self.drop_last else 0)

    def __iter__(self) -> Iterator[TrainBatch]:
        return _iterate(self.split, self.batch_video_indices(), "train", self.num_workers)


class OrderedLoader:
    """Unshuffled batches over a split's videos (``kind="video"``) or captions (``kind="query"``)."""

    def __init__(self, split: PRVRSplit, kind: str, batch_size: int, num_workers: int = 0) -> None:
        if kind not in ("video", "query"):
            raise ValueError(f"kind must be 'video' or 'query', got {kind!r}")
        self.split = split
        self.kind = kind
        self.batch_size = _check_count(batch_size, "batch_size", 1)
        self.num_workers = _check_count(num_workers, "num_workers", 0)
        total = split.num_videos if kind == "video" else split.num_captions
        self._chunks = [np.arange(i, min(i + self.batch_size, total)) for i in range(0, total, self.batch_size)]

    def __len__(self) -> int:
        return len(self._chunks)

    def __iter__(self) -> Iterator[VideoBatch] | Iterator[QueryBatch]:
        return _iterate(self.split, self._chunks, self.kind, self.num_workers)


def make_train_loader(
    split: PRVRSplit, videos_per_batch: int = 128, *, seed: int = 0, num_workers: int = 0, drop_last: bool = False,
    rank: int = 0, world_size: int = 1,
) -> TrainLoader:
    """Training batches: ``videos_per_batch`` videos each with all their captions, shuffled per ``(seed, epoch)``
    (with ``world_size > 1``: rank ``rank``'s shard of each, see :class:`TrainLoader`)."""
    return TrainLoader(split, videos_per_batch, seed=seed, num_workers=num_workers, drop_last=drop_last, rank=rank,
                       world_size=world_size)


def make_video_loader(split: PRVRSplit, batch_size: int = 256, num_workers: int = 0) -> OrderedLoader:
    """:class:`VideoBatch` es over the split's videos in ``split.video_ids`` order."""
    return OrderedLoader(split, "video", batch_size, num_workers)


def make_query_loader(split: PRVRSplit, batch_size: int = 512, num_workers: int = 0) -> OrderedLoader:
    """:class:`QueryBatch` es over the split's captions in ``split.caption_ids`` order."""
    return OrderedLoader(split, "query", batch_size, num_workers)
