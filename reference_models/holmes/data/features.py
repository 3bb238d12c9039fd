"""Lazy, fork-safe readers of the visual (HDF5 or BigFile) and text (HDF5) feature files.

Readers store paths only and open their file on first access in the current process (keyed by PID),
so a reader created in the main process can be used by forked or spawned ``DataLoader`` workers:
each worker opens its own handle and no open HDF5 handle is ever shared across ``fork``.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from reference_models.engine.errors import DataValidationError
from reference_models.holmes.data.layout import CollectionPaths, read_utf8_text
from reference_models.holmes.data.visual_formats import VisualReader, detect_visual_format

__all__ = [
    "HDF5Reader",
    "BigFileReader",
    "open_visual_reader",
    "read_video2frames",
    "read_bigfile_header",
    "hdf5_dataset",
    "check_finite",
]


def check_finite(array: np.ndarray, path: Path, what: str, row_label: str = "row",
                 row_names: Any = None) -> None:
    """Raise :class:`DataValidationError` naming ``path``, ``what`` and the first bad entry if ``array`` holds NaN/inf.

    ``what`` names the item (e.g. ``"video 'v1'"``); ``row_label`` names a row (``"frame"``, ``"token"``);
    ``row_names`` (optional, indexable) gives each row's label, e.g. its row in ``feature.bin``.
    """
    finite = np.isfinite(array)
    if finite.all():
        return
    row, col = (int(i[0]) for i in np.nonzero(~finite))
    value = array[row, col]
    where = f"{row_label} {row}" if row_names is None else f"{row_label} {row_names[row]}"
    raise DataValidationError(path, f"{what} holds non-finite values ({value} at {where}, feature {col})")


class _RowLabels:
    """Lazy ``"<i> (row <r>)"`` labels of a BigFile video's frames (built only when an error names one)."""

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = rows

    def __getitem__(self, i: int) -> str:
        return f"{i} (row {int(self.rows[i])} of feature.bin)"


def hdf5_dataset(handle: Any, key: str, path: Path, what: str) -> Any:
    """The numeric ``h5py.Dataset`` under ``key``, or a :class:`DataValidationError` saying what is there instead."""
    import h5py

    try:
        obj = handle[key]
    except KeyError:
        raise DataValidationError(path, f"{what} {key!r} has no features") from None
    if isinstance(obj, h5py.Group):
        raise DataValidationError(path, f"{what} {key!r} is an HDF5 group, expected a numeric [n, D] dataset")
    if not isinstance(obj, h5py.Dataset):
        raise DataValidationError(path, f"{what} {key!r} is a {type(obj).__name__}, expected a numeric [n, D] dataset")
    if obj.dtype.kind not in "fiu":
        kind = "string" if obj.dtype.kind in "SUO" else f"{obj.dtype}"
        raise DataValidationError(path, f"{what} {key!r} is a {kind} dataset, expected numbers (dtype {obj.dtype})")
    return obj


class _PerProcessHandle:
    """Base for readers that open a file lazily once per process."""

    def __init__(self) -> None:
        self._handle: Any = None
        self._pid: int | None = None

    def _open(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _close_handle(self, handle: Any) -> None:
        close = getattr(handle, "close", None)
        if close is not None:
            close()

    @property
    def handle(self) -> Any:
        pid = os.getpid()
        if self._handle is None or self._pid != pid:
            # A handle inherited from the parent through fork is dropped, never used or closed here.
            self._handle = self._open()
            self._pid = pid
        return self._handle

    def close(self) -> None:
        """Close this process's handle (a later access reopens it)."""
        if self._handle is not None and self._pid == os.getpid():
            self._close_handle(self._handle)
        self._handle = None
        self._pid = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_handle"] = None
        state["_pid"] = None
        return state


class HDF5Reader(_PerProcessHandle):
    """Read ``key -> [n, D]`` arrays from an HDF5 file (visual ``feature.hdf5`` or the RoBERTa query file).

    ``kind`` names an entry in messages (``"video"`` or ``"caption"``). Every array read is checked for
    NaN/inf, so bad features fail with the file and the entry's name, not somewhere downstream.
    """

    def __init__(self, path: Path, kind: str = "entry") -> None:
        super().__init__()
        self.path = Path(path)
        self.kind = kind
        if not self.path.is_file():
            raise DataValidationError(self.path, "missing file")

    def _open(self) -> Any:
        import h5py

        try:
            return h5py.File(self.path, "r")
        except OSError as exc:
            raise DataValidationError(self.path, f"cannot open HDF5 file ({exc})") from None

    def __contains__(self, key: str) -> bool:
        return key in self.handle

    def read(self, key: str) -> np.ndarray:
        """The ``float32 [n, D]`` array stored under ``key`` (checked to be finite)."""
        ds = hdf5_dataset(self.handle, key, self.path, self.kind)
        arr = np.asarray(ds[...], dtype=np.float32)
        if arr.ndim != 2 or arr.shape[0] == 0:
            raise DataValidationError(
                self.path, f"{self.kind} {key!r} must be a non-empty [n, D] array, got shape {arr.shape}"
            )
        check_finite(arr, self.path, f"{self.kind} {key!r}", "token" if self.kind == "caption" else "frame")
        return arr

    def shape(self, key: str) -> tuple[int, ...]:
        """The shape of ``key``'s array (reads only metadata)."""
        return tuple(int(n) for n in hdf5_dataset(self.handle, key, self.path, self.kind).shape)

    def dim(self, key: str) -> int:
        """The feature dimension ``D`` of ``key`` (reads only metadata)."""
        shape = self.shape(key)
        if len(shape) != 2:
            raise DataValidationError(self.path, f"{self.kind} {key!r} must be a 2-D [n, D] array, got shape {shape}")
        return int(shape[1])


def read_bigfile_header(paths: CollectionPaths) -> tuple[int, int, dict[str, int]]:
    """Parse ``shape.txt`` and ``id.txt`` and check ``feature.bin``'s size; returns ``(N, D, name -> row)``."""
    for name in ("feature.bin", "id.txt", "shape.txt"):
        if not paths.bigfile(name).is_file():
            raise DataValidationError(paths.bigfile(name), "missing file")
    shape_path = paths.bigfile("shape.txt")
    parts = read_utf8_text(shape_path).split()
    try:
        if len(parts) != 2:
            raise ValueError
        n_rows, dim = int(parts[0]), int(parts[1])
    except ValueError:
        extra = " (extra tokens)" if len(parts) > 2 else ""
        raise DataValidationError(
            shape_path, f"expected 'N D' (two integers), got {' '.join(parts)[:200]!r}{extra}"
        ) from None
    if n_rows < 1 or dim < 1:
        raise DataValidationError(shape_path, f"N and D must be >= 1, got N={n_rows}, D={dim}")
    id_path = paths.bigfile("id.txt")
    raw = id_path.read_bytes()
    try:
        names = raw.decode("utf-8").split()
    except UnicodeDecodeError:  # the MS-SL release reads row names as ISO-8859-1
        names = raw.decode("latin-1").split()
    if len(names) != n_rows:
        raise DataValidationError(id_path, f"holds {len(names)} row names but shape.txt says N={n_rows}")
    name_to_row = {name: i for i, name in enumerate(names)}
    if len(name_to_row) != n_rows:
        raise DataValidationError(id_path, "row names are not unique")
    bin_path = paths.bigfile("feature.bin")
    expected = n_rows * dim * 4
    size = bin_path.stat().st_size
    if size < expected:
        raise DataValidationError(
            bin_path, f"truncated: {size} bytes, expected {expected} (N={n_rows} x D={dim} float32)"
        )
    if size > expected:
        raise DataValidationError(
            bin_path, f"size mismatch: {size} bytes, expected {expected} (N={n_rows} x D={dim} float32)"
        )
    return n_rows, dim, name_to_row


def read_video2frames(path: Path) -> dict[str, list[str]]:
    """Parse ``video2frames.txt``, a Python dict literal ``video id -> [row name, ...]`` (``ast.literal_eval``).

    Nothing in the file is executed. A video id listed twice is an error (a dict literal would silently
    keep the last one).
    """
    path = Path(path)
    if not path.is_file():
        raise DataValidationError(path, "missing file")
    text = read_utf8_text(path)
    try:
        tree = ast.parse(text, mode="eval")
        value = ast.literal_eval(tree)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
        raise DataValidationError(path, f"not a Python dict literal ({type(exc).__name__})") from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, (list, tuple)) for k, v in value.items()
    ):
        raise DataValidationError(path, "must map video ids (str) to lists of row names")
    if isinstance(tree.body, ast.Dict) and len(tree.body.keys) != len(value):
        _raise_duplicate_key(path, tree.body)
    return {k: [str(x) for x in v] for k, v in value.items()}


def _raise_duplicate_key(path: Path, node: ast.Dict) -> None:
    """Raise the error naming the first key of a dict literal that is listed twice, with both line numbers."""
    first_line: dict[object, int] = {}
    for key in node.keys:
        name = ast.literal_eval(key) if key is not None else None
        if name in first_line:
            raise DataValidationError(
                path, f"video id {name!r} is listed twice (lines {first_line[name]} and {getattr(key, 'lineno', 0)})"
            )
        first_line[name] = getattr(key, "lineno", 0)


class BigFileReader(_PerProcessHandle):
    """Read per-video frame features from an MS-SL BigFile with a per-process ``numpy.memmap``.

    With ``video_ids``, the row indices of just those videos are resolved up front and the (large)
    row-name table is dropped, which keeps a split's memory small on data sets with millions of frames.
    A video whose frames cannot be resolved raises :class:`DataValidationError` when it is read.
    """

    def __init__(self, paths: CollectionPaths, video_ids: Sequence[str] | None = None) -> None:
        super().__init__()
        self.path = paths.bigfile("feature.bin")
        self._id_path = paths.bigfile("id.txt")
        self._video2frames_path = paths.bigfile("video2frames.txt")
        self.n_rows, self.visual_dim, name_to_row = read_bigfile_header(paths)
        video_frames = read_video2frames(self._video2frames_path)
        wanted = video_frames.keys() if video_ids is None else video_ids
        # video id -> int64 row indices, or the DataValidationError to raise when it is read
        self._rows: dict[str, np.ndarray | DataValidationError] = {}
        for vid in wanted:
            self._rows[vid] = self._resolve(vid, video_frames.get(vid), name_to_row)

    def _resolve(self, video_id: str, names: list[str] | None, name_to_row: dict[str, int]):
        if names is None:
            return DataValidationError(self._video2frames_path, f"video {video_id!r} has no visual features")
        if not names:
            return DataValidationError(self._video2frames_path, f"video {video_id!r} lists no frames")
        missing = next((n for n in names if n not in name_to_row), None)
        if missing is not None:
            return DataValidationError(self._id_path, f"frame {missing!r} of video {video_id!r} is not a row name")
        return np.fromiter((name_to_row[n] for n in names), dtype=np.int64, count=len(names))

    def _open(self) -> np.memmap:
        return np.memmap(self.path, dtype=np.float32, mode="r", shape=(self.n_rows, self.visual_dim))

    def _close_handle(self, handle: Any) -> None:
        mm = getattr(handle, "_mmap", None)
        if mm is not None:
            mm.close()

    def __contains__(self, video_id: str) -> bool:
        return isinstance(self._rows.get(video_id), np.ndarray)

    def rows(self, video_id: str) -> np.ndarray:
        """Row indices of ``video_id``'s frames in ``feature.bin``, in ``video2frames`` order."""
        rows = self._rows.get(video_id)
        if rows is None:
            raise DataValidationError(self._video2frames_path, f"video {video_id!r} has no visual features")
        if isinstance(rows, DataValidationError):
            raise rows
        return rows

    def read(self, video_id: str) -> np.ndarray:
        """``float32 [n, D]`` frame features of ``video_id`` (checked to be finite)."""
        rows = self.rows(video_id)
        frames = np.array(self.handle[rows], dtype=np.float32)
        check_finite(frames, self.path, f"video {video_id!r}", "frame", _RowLabels(rows))
        return frames

    def dim(self, video_id: str) -> int:
        return self.visual_dim


def open_visual_reader(paths: CollectionPaths, video_ids: Sequence[str] | None = None) -> VisualReader:
    """The reader of whichever registered visual-feature format is present (``feature.hdf5`` is preferred).

    ``video_ids`` limits a BigFile reader to those videos (see :class:`BigFileReader`).
    """
    return detect_visual_format(paths).open_reader(paths, video_ids)
