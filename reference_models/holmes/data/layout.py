"""Paths and caption files of the on-disk layout shared by MS-SL, GMMFormer, HLFormer and Holmes.

::

    <root>/<collection>/TextData/<collection>{train,val,test}.caption.txt
    <root>/<collection>/TextData/<text feature>_<collection>_query_feat.hdf5   (MS-SL: roberta_<collection>_...)
    <root>/<collection>/FeatureData/<feature>/feature.hdf5                    (HDF5 layout), or
    <root>/<collection>/FeatureData/<feature>/{feature.bin,id.txt,shape.txt,video2frames.txt}   (BigFile)

The text feature's name is ``roberta`` in the lineage's releases (MS-SL's RoBERTa token features); a gallery
that ``prvr-videos index`` wrote names its CLIP token features after its encoder and records the name in its
``gallery.json`` (:data:`GALLERY_RECORD`), where the commands find it.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

from reference_models.engine.errors import DataValidationError

__all__ = [
    "SPLITS",
    "BIGFILE_NAMES",
    "GALLERY_RECORD",
    "MS_SL_TEXT_FEATURE",
    "CollectionPaths",
    "Caption",
    "video_id_of",
    "parse_caption_line",
    "read_captions",
    "read_utf8_text",
]

SPLITS = ("train", "val", "test")
BIGFILE_NAMES = ("feature.bin", "id.txt", "shape.txt", "video2frames.txt")
#: The record of a data root written by ``prvr-videos index``: its collection, visual and text feature names.
GALLERY_RECORD = "gallery.json"
#: The text feature of the MS-SL lineage's releases, RoBERTa token features in ``roberta_<collection>_query_feat.hdf5``.
MS_SL_TEXT_FEATURE = "roberta"


@dataclass(frozen=True)
class CollectionPaths:
    """Every path of one collection, visual feature and text feature under a data root."""

    data_root: Path
    collection: str
    visual_feature: str
    text_feature: str = MS_SL_TEXT_FEATURE

    @property
    def collection_dir(self) -> Path:
        return Path(self.data_root) / self.collection

    @property
    def text_dir(self) -> Path:
        return self.collection_dir / "TextData"

    def caption_file(self, split: str) -> Path:
        """``TextData/<collection><split>.caption.txt``."""
        return self.text_dir / f"{self.collection}{split}.caption.txt"

    @property
    def text_features(self) -> Path:
        """``TextData/<text feature>_<collection>_query_feat.hdf5``."""
        return self.text_dir / f"{self.text_feature}_{self.collection}_query_feat.hdf5"

    @property
    def feature_dir(self) -> Path:
        return self.collection_dir / "FeatureData" / self.visual_feature

    @property
    def feature_hdf5(self) -> Path:
        return self.feature_dir / "feature.hdf5"

    def bigfile(self, name: str) -> Path:
        """One of the BigFile parts: ``feature.bin``, ``id.txt``, ``shape.txt``, ``video2frames.txt``."""
        return self.feature_dir / name


@dataclass(frozen=True)
class Caption:
    """One caption line: its id, the video it belongs to and the sentence."""

    caption_id: str
    video_id: str
    sentence: str


def video_id_of(caption_id: str) -> str:
    """The video id of a caption id: the text before the first ``#`` (``vid#enc#3`` -> ``vid``)."""
    return caption_id.split("#", 1)[0]


def parse_caption_line(line: str) -> Caption | None:
    """Parse ``<video_id>#enc#<n> <sentence>``, split at the first space; ``None`` for a blank line."""
    line = line.strip()
    if not line:
        return None
    caption_id, _, sentence = line.partition(" ")
    return Caption(caption_id, video_id_of(caption_id), sentence.strip())


_UTF8_BOM = b"\xef\xbb\xbf"


def read_utf8_text(path: Path) -> str:
    """The text of a UTF-8 file (a leading byte-order mark is dropped).

    Raises
    ------
    DataValidationError
        When the file is not valid UTF-8, naming the first bad byte and its offset in the file.
    """
    path = Path(path)
    raw = path.read_bytes()
    skip = len(_UTF8_BOM) if raw.startswith(_UTF8_BOM) else 0
    try:
        return raw[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = skip + exc.start
        raise DataValidationError(
            path, f"not UTF-8 text: byte 0x{raw[offset]:02x} at byte offset {offset} ({exc.reason})"
        ) from None


def read_captions(path: Path) -> list[Caption]:
    """All captions of a caption file in file order.

    A UTF-8 byte-order mark at the start of the file is accepted (and dropped).

    Raises
    ------
    DataValidationError
        If the file is missing, not UTF-8, empty, or repeats a caption id or has an empty video id.
    """
    path = Path(path)
    if not path.exists():
        raise DataValidationError(path, "missing caption file")
    if not path.is_file():
        raise DataValidationError(path, "caption file is not a regular file")
    captions: list[Caption] = []
    seen: set[str] = set()
    # Universal newlines, as reading in text mode: \n, \r\n and \r end a line, nothing else does.
    for lineno, line in enumerate(io.StringIO(read_utf8_text(path), newline=None), start=1):
        cap = parse_caption_line(line)
        if cap is None:
            continue
        if not cap.video_id:
            raise DataValidationError(path, f"line {lineno}: caption id {cap.caption_id!r} has no video id")
        if cap.caption_id in seen:
            raise DataValidationError(path, f"line {lineno}: duplicate caption id {cap.caption_id!r}")
        seen.add(cap.caption_id)
        captions.append(cap)
    if not captions:
        raise DataValidationError(path, "caption file holds no captions")
    return captions
