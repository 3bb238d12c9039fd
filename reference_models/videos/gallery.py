"""A gallery on disk: the folder ``index`` writes and ``search``, ``serve`` and ``train`` read.

::

    ROOT/gallery.json         collection, feature names, encoder (with a digest of its weights), sampling, videos folder
    ROOT/videos.json          each video of the gallery: its file, content digest (SHA-256), size, time, or its problem
    ROOT/captions.json        the captions the gallery was given, each with its split (absent without captions)
    ROOT/index_report.json    what the last ``index`` did: every problem, the videos encoded, kept and dropped
    ROOT/encoder_config.json  the JSON model configuration, when the encoder was given as one
    ROOT/parts/part-<digest>.npz                  encoded videos, keyed by their content digests
    ROOT/<collection>/FeatureData/<feature>/feature.hdf5       [frames, D] per video      (the MS-SL layout that
    ROOT/<collection>/FeatureData/<feature>/frame_times.json   each frame's time           ``holmes train`` reads)
    ROOT/<collection>/TextData/<feature>_<collection>_query_feat.hdf5   [tokens, D] per caption id
    ROOT/<collection>/TextData/<collection>{train,val,test}.caption.txt
    ROOT/search/zero-shot/               the saved search index of the zero-shot search
    ROOT/search/holmes-<digest>/         the saved search index of one trained checkpoint (its SHA-256, 16 digits)

A part file holds several videos (``encode_videos`` writes one every few videos, atomically): their frame
features concatenated, each one's frame times, rate, duration, video id and content digest. A video's
features are found by its content digest, so a renamed file is not encoded again, and a changed one is.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reference_models import engine
from reference_models.holmes.data.layout import GALLERY_RECORD, CollectionPaths

__all__ = ["GALLERY_FILE", "VIDEOS_FILE", "CAPTIONS_FILE", "REPORT_FILE", "ENCODER_CONFIG", "PARTS_DIR", "SEARCH_DIR",
           "EncodedVideo", "GalleryFiles", "file_digest", "read_gallery", "read_part", "part_contents", "part_catalogue"]

GALLERY_FILE = GALLERY_RECORD
VIDEOS_FILE = "videos.json"
CAPTIONS_FILE = "captions.json"
REPORT_FILE = "index_report.json"
ENCODER_CONFIG = "encoder_config.json"
PARTS_DIR = "parts"
SEARCH_DIR = "search"


def file_digest(path: Path) -> str:
    """The SHA-256 of a file's content (hex): a video's identity in the gallery, a checkpoint's in a search index."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class EncodedVideo:
    """One encoded video read from a part: ``features [n, D]``, ``times [n]`` (seconds), rate and duration."""

    video_id: str
    digest: str
    features: np.ndarray
    times: np.ndarray
    rate: float
    duration: float


@dataclass(frozen=True)
class GalleryFiles:
    """The paths of a gallery whose ``gallery.json`` is ``record``."""

    root: Path
    record: dict[str, Any]

    @property
    def collection(self) -> CollectionPaths:
        r = self.record
        return CollectionPaths(self.root, r["collection"], r["visual_feature"], r["text_feature"])

    @property
    def parts(self) -> Path:
        return self.root / PARTS_DIR

    @property
    def videos_file(self) -> Path:
        return self.root / VIDEOS_FILE

    @property
    def captions_file(self) -> Path:
        return self.root / CAPTIONS_FILE

    def search_index(self, key: str) -> Path:
        """The folder of the saved search index named ``key`` (``zero-shot`` or ``holmes-<digest>``)."""
        return self.root / SEARCH_DIR / key

    def videos(self) -> dict[str, dict[str, Any]]:
        """``videos.json``: video id -> its entry (``file``, ``digest``, ... or ``problem``); ``{}`` before any index."""
        if not self.videos_file.is_file():
            return {}
        return dict(engine.read_json_file(self.videos_file, "--gallery"))

    def encoded_videos(self) -> dict[str, str]:
        """Video id -> content digest of every video of the gallery that has features (sorted by id)."""
        return {vid: e["digest"] for vid, e in sorted(self.videos().items()) if "problem" not in e}

    def captions(self) -> list[dict[str, str]]:
        """``captions.json``: ``{"caption_id", "video", "sentence", "split"}`` per caption; ``[]`` without captions."""
        if not self.captions_file.is_file():
            return []
        return list(engine.read_json_file(self.captions_file, "--gallery")["captions"])


def read_gallery(root: str | Path, flag: str = "--gallery") -> GalleryFiles:
    """The gallery ``index`` wrote into ``root``, or a :class:`~reference_models.engine.UserError` naming ``flag``."""
    root = Path(root)
    path = root / GALLERY_FILE
    if not path.is_file():
        raise engine.UserError(f"{flag} {root}: no {GALLERY_FILE} (not a folder written by index)")
    return GalleryFiles(root, engine.read_json_file(path, flag))


def read_part(path: Path) -> list[EncodedVideo]:
    """Every video of one part file (read with ``allow_pickle=False``)."""
    with np.load(path, allow_pickle=False) as data:
        offsets, features, times = data["offsets"], data["features"], data["times"]
        return [EncodedVideo(str(vid), str(digest), features[a:b], times[a:b], float(rate), float(duration))
                for vid, digest, a, b, rate, duration in zip(data["video_ids"], data["digests"], offsets[:-1],
                                                             offsets[1:], data["rates"], data["durations"])]


def part_contents(parts: Path) -> dict[Path, list[str]]:
    """Every part file in ``parts`` and the content digests of the videos it holds (only those are read)."""
    contents: dict[Path, list[str]] = {}
    for path in sorted(parts.glob("part-*.npz")):
        with np.load(path, allow_pickle=False) as data:
            contents[path] = [str(d) for d in data["digests"]]
    return contents


def part_catalogue(parts: Path) -> dict[str, Path]:
    """Content digest -> the part file that holds its features, over every part in ``parts``."""
    catalogue: dict[str, Path] = {}
    for path, digests in part_contents(parts).items():
        for digest in digests:
            catalogue.setdefault(digest, path)
    return catalogue
