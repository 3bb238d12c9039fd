"""The registry of visual-feature formats: adding a format is one class and one registration.

The test format below (one ``.npy`` file per video in ``FeatureData/<feature>/npy/``) is written by the
embedded generator, detected by the layout, checked by ``validate`` and read by ``load_split`` without any
other change, and reads back the very features of the HDF5 layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from reference_models.holmes.data import (
    DataValidationError,
    VisualFeatureFormat,
    load_split,
    register_visual_format,
    validate_data_root,
    visual_format_names,
)
from reference_models.holmes.data.layout import CollectionPaths
from reference_models.holmes.data.visual_formats import detect_visual_format, unregister_visual_format
from tests.reference.data_helpers import COLLECTION, make_micro_benchmark
from tests.reference.run_helpers import FEATURE


class NpyReader:
    """Reads ``npy/<video id>.npy``; keeps nothing open, so it is fork-safe as it is."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "index.txt"
        self.folder = folder

    def read(self, video_id: str) -> np.ndarray:
        return np.load(self.folder / f"{video_id}.npy").astype(np.float32)

    def dim(self, video_id: str) -> int:
        return int(np.load(self.folder / f"{video_id}.npy", mmap_mode="r").shape[1])

    def __contains__(self, video_id: str) -> bool:
        return (self.folder / f"{video_id}.npy").is_file()

    def close(self) -> None:
        pass


class NpyFormat(VisualFeatureFormat):
    """One ``.npy`` array per video, listed in ``npy/index.txt``."""

    name = "npy_test"
    marker = "npy/index.txt"
    priority = 5  # detected after feature.hdf5, before a BigFile

    def open_reader(self, paths: CollectionPaths, video_ids: Sequence[str] | None = None) -> NpyReader:
        return NpyReader(paths.feature_dir / "npy")

    def validate(self, paths: CollectionPaths, video_ids: Sequence[str]) -> int:
        reader = self.open_reader(paths)
        for vid in video_ids:
            if vid not in reader:
                raise DataValidationError(reader.path, f"video {vid!r} has no visual features")
        return reader.dim(video_ids[0])

    def write(self, paths: CollectionPaths, videos: dict[str, np.ndarray]) -> None:
        folder = paths.feature_dir / "npy"
        folder.mkdir(parents=True, exist_ok=True)
        for vid, frames in videos.items():
            np.save(folder / f"{vid}.npy", frames)
        (folder / "index.txt").write_text("\n".join(videos), encoding="utf-8")


@pytest.fixture
def npy_format():
    register_visual_format(NpyFormat)
    yield NpyFormat
    unregister_visual_format(NpyFormat.name)


def test_a_registered_format_is_written_detected_validated_and_read(npy_format, tmp_path):
    assert visual_format_names() == ("hdf5", "npy_test", "bigfile")
    npy_root = make_micro_benchmark(tmp_path / "npy", layout="npy_test")
    hdf5_root = make_micro_benchmark(tmp_path / "hdf5", layout="hdf5")
    paths = CollectionPaths(npy_root, COLLECTION, FEATURE)
    assert detect_visual_format(paths).name == "npy_test" and not (paths.feature_dir / "feature.hdf5").exists()
    assert validate_data_root(npy_root, COLLECTION, FEATURE) == []
    npy = load_split(npy_root, COLLECTION, FEATURE, "train", n_clips=4, n_frames=8)
    hdf5 = load_split(hdf5_root, COLLECTION, FEATURE, "train", n_clips=4, n_frames=8)
    assert npy.video_ids == hdf5.video_ids and npy.visual_dim == hdf5.visual_dim
    for i in range(npy.num_videos):
        for ours, theirs in zip(npy.read_video(i), hdf5.read_video(i)):
            assert np.array_equal(ours, theirs)


def test_the_built_in_formats_and_the_missing_features_message(tmp_path):
    assert visual_format_names() == ("hdf5", "bigfile")
    paths = CollectionPaths(tmp_path, COLLECTION, FEATURE)
    paths.feature_dir.mkdir(parents=True)
    with pytest.raises(DataValidationError, match="neither feature.hdf5 nor feature.bin exists"):
        detect_visual_format(paths)


def test_a_name_is_registered_once(npy_format):
    with pytest.raises(ValueError, match="already registered"):
        register_visual_format(NpyFormat)
    with pytest.raises(TypeError, match="VisualFeatureFormat subclass"):
        register_visual_format(NpyReader)
