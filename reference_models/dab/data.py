"""Text-to-video data in the MSR-VTT layout of the CLIP4Clip lineage, on precomputed features.

The files of a data root (names in :class:`DataLayout`; CLIP4Clip and X-Pool read the first three):

``MSRVTT_data.json``
    ``{"videos": [{"video_id": ...}, ...], "sentences": [{"video_id", "caption", "sen_id"}, ...]}``.
``MSRVTT_train.9k.csv``
    Column ``video_id``: the training videos (every caption of theirs is a training caption).
``MSRVTT_val.csv`` and ``MSRVTT_JSFUSION_test.csv``
    Columns ``key, vid_key, video_id, sentence``: one query per row (1k-A: one caption per test video). The
    sentence must be one of that video's captions in the JSON.
``frame_features.h5`` (or a folder ``frame_features/`` of ``<video_id>.npy``)
    One float array ``[frames, frame_dim]`` per video id (CLIP image features of the sampled frames).
``text_features.h5`` (or a folder ``text_features/`` of ``<video_id>.npy``)
    One float array ``[captions, text_dim]`` per video id, rows in the order of that video's sentences in the
    JSON (CLIP text features).

Split ``"test_all"`` queries every JSON caption of the test csv's videos (the all-captions protocol).
Every problem is a :class:`DataError`: one line naming the file and the video or row at fault.
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import torch

from reference_models.engine import UserError

__all__ = ["DataLayout", "LAYOUT", "DataError", "T2VSplit", "load_t2v_split", "validate_data_root", "SPLITS",
           "TrainBatches"]

SPLITS = ("train", "val", "test", "test_all")


class DataError(UserError, ValueError):
    """A data file is missing or malformed; the message names the file and the id."""


@dataclass(frozen=True)
class DataLayout:
    """File names inside a data root (defaults: the MSR-VTT names of CLIP4Clip / X-Pool)."""

    captions: str = "MSRVTT_data.json"
    train_csv: str = "MSRVTT_train.9k.csv"
    val_csv: str = "MSRVTT_val.csv"
    test_csv: str = "MSRVTT_JSFUSION_test.csv"
    frame_features: str = "frame_features.h5"
    text_features: str = "text_features.h5"


LAYOUT = DataLayout()


@dataclass
class T2VSplit:
    """One split in memory: padded frame features, text features and the ground truth.

    Attributes
    ----------
    video_ids : list of str
        ``V`` video ids (gallery order).
    frames : torch.Tensor
        ``[V, T, frame_dim]`` float32, zero-padded to the longest video (at most ``max_frames``).
    frame_mask : torch.Tensor
        ``[V, T]`` bool, True = real frame.
    text : torch.Tensor
        ``[Q, text_dim]`` float32 query features.
    query_video : torch.Tensor
        ``[Q]`` int64 index into ``video_ids`` of each query's ground-truth video.
    sen_ids : list of int
        JSON ``sen_id`` of each query.
    """

    video_ids: list[str]
    frames: torch.Tensor
    frame_mask: torch.Tensor
    text: torch.Tensor
    query_video: torch.Tensor
    sen_ids: list[int]

    @property
    def num_videos(self) -> int:
        return len(self.video_ids)

    @property
    def num_queries(self) -> int:
        return int(self.text.shape[0])

    def fingerprint(self) -> dict[str, object]:
        """Sizes and a hash of ids and features (compared when a run is resumed)."""
        digest = hashlib.sha256()
        digest.update("\n".join(self.video_ids).encode())
        digest.update(np.asarray(self.sen_ids, dtype=np.int64).tobytes())
        for tensor in (self.frames, self.text):
            digest.update(tensor.numpy().tobytes())
        return {"videos": self.num_videos, "queries": self.num_queries, "content_sha256": digest.hexdigest()}


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("sentences"), list):
        raise DataError(f"{path}: expected an object with a 'sentences' list")
    return data


def _captions_by_video(path: Path) -> dict[str, list[tuple[int, str]]]:
    by_video: dict[str, list[tuple[int, str]]] = {}
    for number, item in enumerate(_read_json(path)["sentences"]):
        if not isinstance(item, dict) or not isinstance(item.get("video_id"), str) \
                or not isinstance(item.get("caption"), str):
            raise DataError(f"{path}: sentence #{number} needs a string 'video_id' and 'caption'")
        sen_id = item.get("sen_id", number)
        if isinstance(sen_id, bool) or not isinstance(sen_id, int):
            raise DataError(f"{path}: sentence #{number} (video {item['video_id']}): 'sen_id' must be an integer")
        by_video.setdefault(item["video_id"], []).append((sen_id, item["caption"]))
    return by_video


def _read_csv(path: Path, columns: tuple[str, ...]) -> list[dict[str, str]]:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise DataError(f"{path}: missing column(s) {', '.join(missing)} (header {reader.fieldnames})")
            return list(reader)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{path}: not a readable csv ({exc})") from None


class _FeatureStore:
    """Read ``[n, dim]`` arrays by video id from an HDF5 file or a folder of ``.npy`` files."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._h5 = None
        if path.is_dir():
            return
        folder = path.with_suffix("")
        if not path.exists() and folder.is_dir():
            self.path = folder
            return
        try:
            self._h5 = h5py.File(path, "r")
        except FileNotFoundError:
            raise DataError(f"{path}: file not found (nor a folder {folder} of <video_id>.npy)") from None
        except OSError as exc:
            raise DataError(f"{path}: not a readable HDF5 file ({exc})") from None

    def read(self, vid: str, dim: int | None) -> np.ndarray:
        if self._h5 is not None:
            if vid not in self._h5:
                raise DataError(f"{self.path}: no features for video {vid}")
            array = np.asarray(self._h5[vid])
        else:
            file = self.path / f"{vid}.npy"
            try:
                array = np.load(file, allow_pickle=False)
            except FileNotFoundError:
                raise DataError(f"{file}: no features for video {vid}") from None
            except (OSError, ValueError) as exc:
                raise DataError(f"{file}: video {vid}: not a readable .npy array ({exc})") from None
        if array.ndim != 2 or array.shape[0] == 0 or not np.issubdtype(array.dtype, np.floating):
            raise DataError(f"{self.path}: video {vid}: expected a non-empty float array [n, dim], got "
                            f"{array.dtype} {tuple(array.shape)}")
        if dim is not None and array.shape[1] != dim:
            raise DataError(f"{self.path}: video {vid}: feature dimension {array.shape[1]}, expected {dim} "
                            "(as the first video)")
        if not np.isfinite(array).all():
            raise DataError(f"{self.path}: video {vid}: features hold NaN or inf")
        return array.astype(np.float32)

    def close(self) -> None:
        if self._h5 is not None:
            self._h5.close()


def _sample_frames(array: np.ndarray, max_frames: int) -> np.ndarray:
    """At most ``max_frames`` frames, uniformly spaced (CLIP4Clip's ``slice_framepos=2``)."""
    if array.shape[0] <= max_frames:
        return array
    return array[np.linspace(0, array.shape[0] - 1, num=max_frames).round().astype(int)]


def load_t2v_split(root: str | Path, split: str, *, max_frames: int = 12, layout: DataLayout = LAYOUT) -> T2VSplit:
    """Load ``split`` (one of :data:`SPLITS`) of the data root ``root``.

    Raises
    ------
    DataError
        A missing file, column, video or caption; features of the wrong shape or not finite.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
    root = Path(root)
    captions_path = root / layout.captions
    by_video = _captions_by_video(captions_path)
    queries: list[tuple[str, int, int]] = []  # (video id, row in the video's text features, sen_id)
    if split == "train":
        path = root / layout.train_csv
        video_ids = [row["video_id"] for row in _read_csv(path, ("video_id",))]
        for line, vid in enumerate(video_ids, start=2):
            if vid not in by_video:
                raise DataError(f"{path}: line {line}: video {vid} has no caption in {captions_path}")
            queries += [(vid, row, sen_id) for row, (sen_id, _) in enumerate(by_video[vid])]
    else:
        path = root / (layout.val_csv if split == "val" else layout.test_csv)
        rows = _read_csv(path, ("video_id", "sentence"))
        video_ids = list(dict.fromkeys(row["video_id"] for row in rows))
        for line, row in enumerate(rows, start=2):
            vid = row["video_id"]
            if vid not in by_video:
                raise DataError(f"{path}: line {line}: video {vid} has no caption in {captions_path}")
            if split == "test_all":
                continue
            texts = [caption for _, caption in by_video[vid]]
            if row["sentence"] not in texts:
                raise DataError(f"{path}: line {line}: video {vid}: sentence {row['sentence']!r} is not one of its "
                                f"captions in {captions_path}")
            position = texts.index(row["sentence"])
            queries.append((vid, position, by_video[vid][position][0]))
        if split == "test_all":
            queries = [(vid, r, sen_id) for vid in video_ids for r, (sen_id, _) in enumerate(by_video[vid])]
    if not video_ids:
        raise DataError(f"{path}: no videos")
    if len(set(video_ids)) != len(video_ids):
        raise DataError(f"{path}: video {next(v for v in video_ids if video_ids.count(v) > 1)} is listed twice")

    frame_store = _FeatureStore(root / layout.frame_features)
    text_store = _FeatureStore(root / layout.text_features)
    try:
        frames: list[np.ndarray] = []
        text_rows: dict[str, np.ndarray] = {}
        frame_dim: int | None = None
        text_dim: int | None = None
        for vid in video_ids:
            array = _sample_frames(frame_store.read(vid, frame_dim), max_frames)
            frame_dim = array.shape[1]
            frames.append(array)
            text_features = text_store.read(vid, text_dim)
            text_dim = text_features.shape[1]
            if text_features.shape[0] != len(by_video[vid]):
                raise DataError(f"{text_store.path}: video {vid}: {text_features.shape[0]} rows of text features for "
                                f"{len(by_video[vid])} captions in {captions_path}")
            text_rows[vid] = text_features
    finally:
        frame_store.close()
        text_store.close()
    length = max(a.shape[0] for a in frames)
    assert frame_dim is not None  # video_ids is not empty
    padded = np.zeros((len(frames), length, frame_dim), dtype=np.float32)
    mask = np.zeros((len(frames), length), dtype=bool)
    for i, array in enumerate(frames):
        padded[i, : array.shape[0]] = array
        mask[i, : array.shape[0]] = True
    video_index = {vid: i for i, vid in enumerate(video_ids)}
    return T2VSplit(
        video_ids=video_ids,
        frames=torch.from_numpy(padded),
        frame_mask=torch.from_numpy(mask),
        text=torch.from_numpy(np.stack([text_rows[vid][row] for vid, row, _ in queries])),
        query_video=torch.tensor([video_index[vid] for vid, _, _ in queries], dtype=torch.long),
        sen_ids=[sen_id for _, _, sen_id in queries],
    )


def validate_data_root(root: str | Path, *, max_frames: int = 12, layout: DataLayout = LAYOUT) -> dict[str, dict]:
    """Load every split of ``root`` and check that they agree; returns ``{split: {"videos", "queries"}}``.

    Besides the checks of :func:`load_t2v_split`: all splits have the same feature dimensions, and no video
    is both a training and a validation or test video.
    """
    loaded = {split: load_t2v_split(root, split, max_frames=max_frames, layout=layout) for split in SPLITS}
    first = loaded["train"]
    for split, data in loaded.items():
        if data.frames.shape[2] != first.frames.shape[2] or data.text.shape[1] != first.text.shape[1]:
            raise DataError(f"{Path(root)}: split {split}: feature dimensions {data.frames.shape[2]}/"
                            f"{data.text.shape[1]} differ from train's {first.frames.shape[2]}/{first.text.shape[1]}")
    train_ids = set(first.video_ids)
    for split, name in (("val", layout.val_csv), ("test", layout.test_csv)):
        overlap = train_ids.intersection(loaded[split].video_ids)
        if overlap:
            raise DataError(f"{Path(root) / name}: video {sorted(overlap)[0]} is also a training video")
    return {split: {"videos": d.num_videos, "queries": d.num_queries} for split, d in loaded.items()}


class TrainBatches:
    """CLIP4Clip's training order: each epoch, every training video once with one random caption of its own.

    Batches hold distinct videos, so in-batch positives are the diagonal. The order depends only on
    ``(seed, epoch)`` (what exact resume needs). A batch is ``(text [B, text_dim], frames [B, T, frame_dim],
    frame_mask [B, T])``.
    """

    def __init__(self, split: T2VSplit, batch_size: int, seed: int) -> None:
        self.split, self.batch_size, self.seed, self.epoch = split, batch_size, seed, 0
        self._captions = [torch.nonzero(split.query_video == v).flatten() for v in range(split.num_videos)]
        self._counts = torch.tensor([len(c) for c in self._captions])
        self._offsets = torch.cumsum(self._counts, 0) - self._counts
        self._order = torch.cat(self._captions)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return -(-self.split.num_videos // self.batch_size)

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        videos = torch.randperm(self.split.num_videos, generator=generator)
        pick = (torch.rand(self.split.num_videos, generator=generator) * self._counts).long()
        captions = self._order[self._offsets + pick]
        for start in range(0, len(videos), self.batch_size):
            v = videos[start : start + self.batch_size]
            yield self.split.text[captions[v]], self.split.frames[v], self.split.frame_mask[v]
