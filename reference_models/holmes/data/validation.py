"""Check a data root before training: every file present, every caption and video has features, dims agree."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from reference_models.holmes.data.errors import DataValidationError
from reference_models.holmes.data.features import read_bigfile_header, read_video2frames
from reference_models.holmes.data.layout import SPLITS, Caption, CollectionPaths, read_captions

__all__ = ["validate_data_root"]

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
    """Every key present as a non-empty [n, D] dataset with one common D; returns D."""
    dim: int | None = None
    first = ""
    with _open_hdf5(path) as f:
        for key in keys:
            if key not in f:
                raise DataValidationError(path, f"{what} {key!r} has no features")
            shape = getattr(f[key], "shape", None)
            if shape is None or len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
                raise DataValidationError(path, f"{what} {key!r}: expected a non-empty [n, D] array, got shape {shape}")
            if dim is None:
                dim, first = int(shape[1]), key
            elif shape[1] != dim:
                raise DataValidationError(
                    path, f"inconsistent dims: {what} {key!r} has D={shape[1]} but {first!r} has D={dim}"
                )
    assert dim is not None
    return dim


def _check_bigfile(paths: CollectionPaths, video_ids: Sequence[str]) -> int:
    _, dim, name_to_row = read_bigfile_header(paths)
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
    return dim


def validate_data_root(
    data_root: str | Path, collection: str, visual_feature: str, *, splits: Sequence[str] | None = None
) -> None:
    """Check a PRVR data root and raise :class:`DataValidationError` on the first problem found.

    Checks that the caption files parse (``train`` and ``val`` must exist; ``test`` is checked when present,
    or required when listed in ``splits``), that every caption has a 2-D token array in the RoBERTa file
    with one common ``D_t``, that the visual features (``feature.hdf5`` or a BigFile) exist, are complete
    (``feature.bin`` is exactly ``N x D`` float32) and cover every video with one common ``D_v``.

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
    for s in wanted:
        captions.extend(read_captions(paths.caption_file(s)))
    caption_ids = list(dict.fromkeys(c.caption_id for c in captions))
    video_ids = list(dict.fromkeys(c.video_id for c in captions))

    _check_hdf5_entries(paths.text_features, caption_ids, "caption")
    if paths.visual_layout() == "hdf5":
        _check_hdf5_entries(paths.feature_hdf5, video_ids, "video")
    else:
        _check_bigfile(paths, video_ids)
