"""Check a data root before training: every file present, every caption and video has finite features, dims agree."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from reference_models.holmes.data.errors import DataValidationError
from reference_models.holmes.data.features import (
    check_finite,
    hdf5_dataset,
    read_bigfile_header,
    read_video2frames,
)
from reference_models.holmes.data.layout import SPLITS, Caption, CollectionPaths, read_captions

__all__ = ["validate_data_root", "video_overlap_warnings"]

#: Bytes of ``feature.bin`` scanned for NaN/inf at a time.
_SCAN_BYTES = 1 << 26

_REQUIRED_SPLITS = ("train", "val")


def _open_hdf5(path: Path):
    import h5py

    if not path.is_file():
        raise DataValidationError(path, "missing file")
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise DataValidationError(path, f"cannot open HDF5 file ({exc})") from None


def _check_hdf5_entries(path: Path, keys: Sequence[str], what: str) -> int:
    """Every key a non-empty numeric [n, D] dataset with one common D and finite values; returns D.

    Shapes are checked first (metadata only), then every value is read once.
    """
    dim: int | None = None
    first = ""
    row_label = "token" if what == "caption" else "frame"
    with _open_hdf5(path) as f:
        for key in keys:
            shape = hdf5_dataset(f, key, path, what).shape
            if len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
                raise DataValidationError(path, f"{what} {key!r}: expected a non-empty [n, D] array, got shape {shape}")
            if dim is None:
                dim, first = int(shape[1]), key
            elif shape[1] != dim:
                raise DataValidationError(
                    path, f"inconsistent dims: {what} {key!r} has D={shape[1]} but {first!r} has D={dim}"
                )
        for key in keys:
            check_finite(np.asarray(f[key][...], dtype=np.float32), path, f"{what} {key!r}", row_label)
    assert dim is not None
    return dim


def _check_bigfile_finite(paths: CollectionPaths, n_rows: int, dim: int, video_frames: Mapping[str, list[str]],
                          name_to_row: Mapping[str, int], video_ids: Sequence[str]) -> None:
    """Scan ``feature.bin`` in blocks for NaN/inf and name the first listed video that uses a bad row."""
    path = paths.bigfile("feature.bin")
    features = np.memmap(path, dtype=np.float32, mode="r", shape=(n_rows, dim))
    try:
        bad = np.zeros(n_rows, dtype=bool)
        step = max(1, _SCAN_BYTES // (4 * dim))
        for start in range(0, n_rows, step):
            bad[start : start + step] = ~np.isfinite(features[start : start + step]).all(axis=1)
        if not bad.any():
            return
        for vid in video_ids:
            names = video_frames[vid]
            rows = np.fromiter((name_to_row[n] for n in names), dtype=np.int64, count=len(names))
            if bad[rows].any():
                labels = [f"{name!r} (row {row})" for name, row in zip(names, rows.tolist())]
                check_finite(np.array(features[rows]), path, f"video {vid!r}", "frame", labels)
    finally:
        mm = getattr(features, "_mmap", None)
        if mm is not None:
            mm.close()


def video_overlap_warnings(
    video_ids: Mapping[str, Sequence[str]], paths: CollectionPaths | None = None, *, max_examples: int = 3
) -> list[str]:
    """One message per evaluation split (``val``, ``test``) that shares videos with ``train``.

    Shared videos do not stop training, but they make the metrics of that split optimistic.
    """
    if "train" not in video_ids:
        return []
    train = set(video_ids["train"])
    messages = []
    for split in ("val", "test"):
        if split not in video_ids:
            continue
        shared = [v for v in dict.fromkeys(video_ids[split]) if v in train]
        if not shared:
            continue
        where = f" ({paths.caption_file(split).name})" if paths is not None else ""
        examples = ", ".join(repr(v) for v in shared[:max_examples]) + (", ..." if len(shared) > max_examples else "")
        videos = "1 video" if len(shared) == 1 else f"{len(shared)} videos"
        verb = "is" if len(shared) == 1 else "are"
        messages.append(
            f"{videos} of the {split} split{where} {verb} also in the train split (e.g. {examples}): "
            f"{split} metrics may be optimistic"
        )
    return messages


def _check_bigfile(paths: CollectionPaths, video_ids: Sequence[str]) -> int:
    n_rows, dim, name_to_row = read_bigfile_header(paths)
    v2f_path = paths.bigfile("video2frames.txt")
    video_frames = read_video2frames(v2f_path)
    id_path = paths.bigfile("id.txt")
    for vid in video_ids:
        names = video_frames.get(vid)
        if names is None:
            raise DataValidationError(v2f_path, f"video {vid!r} has no visual features")
        if not names:
            raise DataValidationError(v2f_path, f"video {vid!r} lists no frames")
        for name in names:
            if name not in name_to_row:
                raise DataValidationError(id_path, f"frame {name!r} of video {vid!r} is not a row name")
    _check_bigfile_finite(paths, n_rows, dim, video_frames, name_to_row, video_ids)
    return dim


def validate_data_root(
    data_root: str | Path, collection: str, visual_feature: str, *, splits: Sequence[str] | None = None
) -> list[str]:
    """Check a PRVR data root and raise :class:`DataValidationError` on the first problem found.

    Checks that the caption files parse (UTF-8, a leading byte-order mark allowed; ``train`` and ``val``
    must exist; ``test`` is checked when present, or required when listed in ``splits``), that every caption
    has a numeric 2-D token array in the RoBERTa file with one common ``D_t``, that the visual features
    (``feature.hdf5`` or a BigFile) exist, are complete (``feature.bin`` is exactly ``N x D`` float32,
    ``shape.txt`` holds exactly ``N D``, no video id is listed twice in ``video2frames.txt``) and cover every
    video with one common ``D_v``, and that every feature value is finite (this reads all features once).

    Returns
    -------
    list of str
        Warnings that do not make the data unusable: evaluation splits sharing videos with ``train``.

    Parameters
    ----------
    data_root, collection, visual_feature : str or Path
    splits : sequence of str, optional
        Splits whose caption files must exist. Default: train and val, plus test when its file exists.

    Raises
    ------
    DataValidationError
        A one-line message ``"<file>: <problem>"``.
    """
    paths = CollectionPaths(Path(data_root), collection, visual_feature)
    if not paths.collection_dir.is_dir():
        raise DataValidationError(paths.collection_dir, "missing collection directory")
    if splits is None:
        wanted = list(_REQUIRED_SPLITS) + (["test"] if paths.caption_file("test").is_file() else [])
    else:
        wanted = list(splits)
        for s in wanted:
            if s not in SPLITS:
                raise ValueError(f"splits must hold values from {SPLITS}, got {s!r}")
    captions: list[Caption] = []
    per_split: dict[str, list[str]] = {}
    for s in wanted:
        split_captions = read_captions(paths.caption_file(s))
        per_split[s] = [c.video_id for c in split_captions]
        captions.extend(split_captions)
    caption_ids = list(dict.fromkeys(c.caption_id for c in captions))
    video_ids = list(dict.fromkeys(c.video_id for c in captions))

    _check_hdf5_entries(paths.text_features, caption_ids, "caption")
    if paths.visual_layout() == "hdf5":
        _check_hdf5_entries(paths.feature_hdf5, video_ids, "video")
    else:
        _check_bigfile(paths, video_ids)
    return video_overlap_warnings(per_split, paths)
