"""One split (train, val or test) of a PRVR collection: its captions, videos and lazy feature access."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reference_models.engine.errors import DataValidationError
from reference_models.engine.fingerprint import fingerprint_differences
from reference_models.holmes.data.features import HDF5Reader, open_visual_reader
from reference_models.holmes.data.layout import MS_SL_TEXT_FEATURE, SPLITS, CollectionPaths, read_captions
from reference_models.holmes.data.sampling import BOUNDARY_MODES, l2_normalize, pool_segments, sample_frames
from reference_models.holmes.data.visual_formats import VisualReader

__all__ = ["PRVRSplit", "load_split", "load_gallery", "fingerprint_differences"]


@dataclass
class PRVRSplit:
    """Captions and videos of one split, with features read lazily from disk.

    Attributes
    ----------
    collection, split : str
        Collection name and split name.
    video_ids : list of str
        Videos of the split, in first-appearance order of its captions.
    caption_ids : list of str
        Captions in file order.
    caption_video_index : torch.LongTensor
        ``[Nq]``: index into ``video_ids`` of each caption's video.
    video_caption_indices : list of numpy.ndarray
        For each video, the indices into ``caption_ids`` of all its captions (file order).
    visual_dim, text_dim : int
        Feature dimensions read from the data.
    max_query_len, n_clips, n_frames : int
        Token cut-off, clip count ``M_c`` and frame count ``M_f``.
    boundaries : str
        Segment-boundary convention of the pooling (see :mod:`~reference_models.holmes.data.sampling`).
    """

    collection: str
    split: str
    video_ids: list[str]
    caption_ids: list[str]
    caption_video_index: torch.Tensor
    video_caption_indices: list[np.ndarray]
    visual_dim: int
    text_dim: int
    max_query_len: int
    n_clips: int
    n_frames: int
    boundaries: str
    _visual: VisualReader = field(repr=False)  # HDF5Reader, BigFileReader or another format's reader
    _text: HDF5Reader = field(repr=False)

    @property
    def num_videos(self) -> int:
        return len(self.video_ids)

    @property
    def num_captions(self) -> int:
        return len(self.caption_ids)

    def _raw_video(self, index: int) -> np.ndarray:
        """Frame features ``[n, D_v]`` of video ``index`` as stored (checked: shape and finite values)."""
        video_id = self.video_ids[index]
        frames = self._visual.read(video_id)
        if frames.ndim != 2 or frames.shape[0] == 0 or frames.shape[1] != self.visual_dim:
            raise DataValidationError(
                self._visual.path,
                f"video {video_id!r} has shape {frames.shape}, expected [n >= 1, {self.visual_dim}]",
            )
        return frames

    def _raw_query(self, index: int) -> np.ndarray:
        """Token features ``[L, D_t]`` of caption ``index`` as stored (checked: shape and finite values)."""
        caption_id = self.caption_ids[index]
        tokens = self._text.read(caption_id)
        if tokens.shape[1] != self.text_dim:
            raise DataValidationError(
                self._text.path, f"caption {caption_id!r} has shape {tokens.shape}, expected [L, {self.text_dim}]"
            )
        return tokens

    def read_video(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Clip ``[n_clips, D_v]`` and frame ``[min(n, n_frames), D_v]`` features of video ``index``, L2-normalised.

        Raises :class:`DataValidationError` naming the file and the video when its features are missing,
        mis-shaped or hold NaN/inf.
        """
        frames = self._raw_video(index)
        clips = l2_normalize(pool_segments(frames, self.n_clips, self.boundaries))
        sampled = l2_normalize(sample_frames(frames, self.n_frames, self.boundaries))
        return clips, sampled

    def read_query(self, index: int) -> np.ndarray:
        """Token features ``[min(L, max_query_len), D_t]`` of caption ``index``, each token L2-normalised.

        Raises :class:`DataValidationError` naming the file and the caption when its features are missing,
        mis-shaped or hold NaN/inf.
        """
        return l2_normalize(self._raw_query(index)[: self.max_query_len])

    def check_features(self) -> None:
        """Read every video and caption of the split once; raise on the first missing, mis-shaped or non-finite one.

        Costs one pass over the split's features: meant for the evaluation splits before a long training
        run, so that bad data fails in seconds instead of at the first validation or the final test.
        """
        try:
            for i in range(self.num_videos):
                self._raw_video(i)
            for i in range(self.num_captions):
                self._raw_query(i)
        finally:
            self.close()

    def fingerprint(self) -> dict[str, Any]:
        """What identifies the split's data, cheaply (no feature is read).

        Collection, split, feature folder and text-feature file names, numbers of videos and captions, a
        SHA-256 of the caption ids in file order (the video ids follow from them), the feature sizes
        ``D_v`` / ``D_t`` and the clip, frame and token counts. A checkpoint stores it, so that a resume on
        other data is refused (:func:`reference_models.engine.fingerprint_differences`).
        """
        digest = hashlib.sha256("\n".join(self.caption_ids).encode("utf-8")).hexdigest()
        return {
            "collection": self.collection,
            "split": self.split,
            "visual_feature": self._visual.path.parent.name,
            "text_features": self._text.path.name,
            "videos": self.num_videos,
            "captions": self.num_captions,
            "caption_ids_sha256": digest,
            "visual_dim": self.visual_dim,
            "text_dim": self.text_dim,
            "n_clips": self.n_clips,
            "n_frames": self.n_frames,
            "max_query_len": self.max_query_len,
        }

    def close(self) -> None:
        """Close this process's feature-file handles."""
        self._visual.close()
        self._text.close()


def _check_int(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def load_split(
    data_root: str | Path,
    collection: str,
    visual_feature: str,
    split: str,
    *,
    max_query_len: int = 30,
    n_clips: int = 32,
    n_frames: int = 128,
    boundaries: str = "release",
    text_feature: str = MS_SL_TEXT_FEATURE,
) -> PRVRSplit:
    """Read a split's caption file and set up lazy access to its features.

    Parameters
    ----------
    data_root, collection, visual_feature : str or Path
        Locate ``<data_root>/<collection>/{TextData,FeatureData/<visual_feature>}``.
    split : {"train", "val", "test"}
        Which caption file to read.
    max_query_len : int
        Tokens kept per caption (30 for TVR and Charades-STA, 64 for ActivityNet Captions).
    n_clips, n_frames : int
        ``M_c`` (clip segments) and ``M_f`` (maximum frames).
    boundaries : {"release", "inclusive"}
        Pooling boundary convention; ``"release"`` matches the public MS-SL/GMMFormer code.
    text_feature : str
        Name of the text features: ``TextData/<text_feature>_<collection>_query_feat.hdf5`` (``roberta`` in the
        lineage's releases; a gallery of ``prvr-videos index`` records its own in ``gallery.json``).

    Returns
    -------
    PRVRSplit

    Raises
    ------
    DataValidationError
        When a file is missing or unreadable. Only the first video and caption are inspected here (to
        read the dimensions); :func:`~reference_models.holmes.data.validate_data_root` checks everything.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if boundaries not in BOUNDARY_MODES:
        raise ValueError(f"boundaries must be one of {BOUNDARY_MODES}, got {boundaries!r}")
    _check_int(max_query_len, "max_query_len")
    _check_int(n_clips, "n_clips")
    _check_int(n_frames, "n_frames")
    paths = CollectionPaths(Path(data_root), collection, visual_feature, text_feature)
    captions = read_captions(paths.caption_file(split))

    video_index: dict[str, int] = {}
    per_video: list[list[int]] = []
    cap_video = np.empty(len(captions), dtype=np.int64)
    for i, cap in enumerate(captions):
        v = video_index.setdefault(cap.video_id, len(video_index))
        if v == len(per_video):
            per_video.append([])
        per_video[v].append(i)
        cap_video[i] = v

    visual = open_visual_reader(paths, list(video_index))
    text = HDF5Reader(paths.text_features, kind="caption")
    try:
        visual_dim = visual.dim(captions[0].video_id)
        text_dim = text.dim(captions[0].caption_id)
    finally:
        # Metadata was read in this process; close so no open HDF5 handle is inherited by forked workers.
        visual.close()
        text.close()
    return PRVRSplit(
        collection=collection,
        split=split,
        video_ids=list(video_index),
        caption_ids=[c.caption_id for c in captions],
        caption_video_index=torch.from_numpy(cap_video),
        video_caption_indices=[np.asarray(ix, dtype=np.int64) for ix in per_video],
        visual_dim=visual_dim,
        text_dim=text_dim,
        max_query_len=max_query_len,
        n_clips=n_clips,
        n_frames=n_frames,
        boundaries=boundaries,
        _visual=visual,
        _text=text,
    )


def load_gallery(
    data_root: str | Path,
    collection: str,
    visual_feature: str,
    *,
    max_query_len: int = 30,
    n_clips: int = 32,
    n_frames: int = 128,
    boundaries: str = "release",
    text_feature: str = MS_SL_TEXT_FEATURE,
    video_ids: Sequence[str] | None = None,
) -> PRVRSplit:
    """Every video of an HDF5 feature file (``feature.hdf5``) as a split without captions, in key order.

    What a search with a trained checkpoint encodes: the whole collection, also the videos no caption file
    names; ``video_ids``: only these videos, in this order (the ones a saved search index does not hold yet).
    The other arguments are those of :func:`load_split`.

    Raises
    ------
    DataValidationError
        When the feature file is missing, unreadable or holds no video.
    """
    import h5py

    _check_int(n_clips, "n_clips")
    _check_int(n_frames, "n_frames")
    paths = CollectionPaths(Path(data_root), collection, visual_feature, text_feature)
    if not paths.feature_hdf5.is_file():
        raise DataValidationError(paths.feature_hdf5, "missing file")
    try:
        with h5py.File(paths.feature_hdf5, "r") as f:
            stored = sorted(f.keys())
            visual_dim = int(f[stored[0]].shape[1]) if stored else 0
    except OSError as exc:
        raise DataValidationError(paths.feature_hdf5, f"cannot open HDF5 file ({exc})") from None
    if not stored:
        raise DataValidationError(paths.feature_hdf5, "holds no video")
    if video_ids is None:
        video_ids = stored
    else:
        missing = sorted(set(video_ids) - set(stored))
        if missing:
            raise DataValidationError(paths.feature_hdf5, f"holds no video {missing[0]!r}")
        video_ids = list(video_ids)
    return PRVRSplit(
        collection=collection, split="gallery", video_ids=video_ids, caption_ids=[],
        caption_video_index=torch.zeros(0, dtype=torch.int64), video_caption_indices=[],
        visual_dim=visual_dim, text_dim=0, max_query_len=max_query_len, n_clips=n_clips, n_frames=n_frames,
        boundaries=boundaries, _visual=HDF5Reader(paths.feature_hdf5, kind="video"),
        _text=HDF5Reader(paths.text_features, kind="caption"),
    )
