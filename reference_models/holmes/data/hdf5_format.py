"""The HDF5 visual-feature format: ``FeatureData/<feature>/feature.hdf5``, one ``[n_frames, D_v]`` dataset per video.

Also the checks of an HDF5 feature file that the text features (``roberta_<collection>_query_feat.hdf5``) share.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from reference_models.engine.errors import DataValidationError
from reference_models.holmes.data.features import HDF5Reader, check_finite, hdf5_dataset
from reference_models.holmes.data.visual_formats import VisualFeatureFormat, register_visual_format

if TYPE_CHECKING:
    from reference_models.holmes.data.layout import CollectionPaths

__all__ = ["HDF5Format", "check_hdf5_entries"]


def _open_hdf5(path: Path):
    import h5py

    if not path.is_file():
        raise DataValidationError(path, "missing file")
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise DataValidationError(path, f"cannot open HDF5 file ({exc})") from None


def check_hdf5_entries(path: Path, keys: Sequence[str], what: str) -> int:
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


@register_visual_format
class HDF5Format(VisualFeatureFormat, name="hdf5", marker="feature.hdf5", priority=0):
    """``feature.hdf5``: the video id is the dataset's key (preferred when a BigFile is present as well)."""

    def open_reader(self, paths: CollectionPaths, video_ids: Sequence[str] | None = None) -> HDF5Reader:
        return HDF5Reader(paths.feature_hdf5, kind="video")

    def validate(self, paths: CollectionPaths, video_ids: Sequence[str]) -> int:
        return check_hdf5_entries(paths.feature_hdf5, video_ids, "video")

    def write(self, paths: CollectionPaths, videos: dict[str, np.ndarray]) -> None:
        import h5py

        with h5py.File(paths.feature_hdf5, "w") as f:
            for vid, frames in videos.items():
                f.create_dataset(vid, data=frames)
