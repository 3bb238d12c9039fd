"""The MS-SL BigFile visual-feature format: ``feature.bin`` (float32 rows), ``id.txt`` (row names),
``shape.txt`` (``N D``) and ``video2frames.txt`` (video id -> its rows' names)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from reference_models.engine.errors import DataValidationError
from reference_models.holmes.data.features import BigFileReader, check_finite, read_bigfile_header, read_video2frames
from reference_models.holmes.data.visual_formats import VisualFeatureFormat, register_visual_format

if TYPE_CHECKING:
    from reference_models.holmes.data.layout import CollectionPaths

__all__ = ["BigFileFormat"]

#: Bytes of ``feature.bin`` scanned for NaN/inf at a time.
_SCAN_BYTES = 1 << 26


def _check_finite_rows(paths: CollectionPaths, n_rows: int, dim: int, video_frames: Mapping[str, list[str]],
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


@register_visual_format
class BigFileFormat(VisualFeatureFormat, name="bigfile", marker="feature.bin", priority=10):
    """The BigFile of MS-SL / GMMFormer (read through a per-process ``numpy.memmap``)."""

    def open_reader(self, paths: CollectionPaths, video_ids: Sequence[str] | None = None) -> BigFileReader:
        return BigFileReader(paths, video_ids)

    def validate(self, paths: CollectionPaths, video_ids: Sequence[str]) -> int:
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
        _check_finite_rows(paths, n_rows, dim, video_frames, name_to_row, video_ids)
        return dim

    def write(self, paths: CollectionPaths, videos: dict[str, np.ndarray]) -> None:
        names: list[str] = []
        video2frames: dict[str, list[str]] = {}
        with open(paths.bigfile("feature.bin"), "wb") as f:
            for vid, frames in videos.items():
                rows = [f"{vid}_{t}" for t in range(frames.shape[0])]
                video2frames[vid] = rows
                names.extend(rows)
                f.write(np.ascontiguousarray(frames, dtype="<f4").tobytes())
        dim = next(iter(videos.values())).shape[1]
        paths.bigfile("id.txt").write_text(" ".join(names), encoding="utf-8")
        paths.bigfile("shape.txt").write_text(f"{len(names)} {dim}", encoding="utf-8")
        paths.bigfile("video2frames.txt").write_text(repr(video2frames), encoding="utf-8")
