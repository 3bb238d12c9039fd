"""The one registry of on-disk visual-feature formats (HDF5, the MS-SL BigFile, and any format added later).

A format is one :class:`VisualFeatureFormat` subclass in its own module, registered with
:func:`register_visual_format`. Everything that depends on the format asks the registry: the layout
detection (:func:`detect_visual_format`),
the reader (``features.open_visual_reader``),
:func:`~reference_models.holmes.data.validate_data_root` and the embedded generator
(:func:`~reference_models.holmes.data.generate_embedded_benchmark`, ``feature_layout=``). The built-in
formats (:mod:`~reference_models.holmes.data.hdf5_format`, :mod:`~reference_models.holmes.data.bigfile_format`)
are registered when :mod:`reference_models.holmes.data` is imported.
"""

from __future__ import annotations

import abc
import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Protocol, TypeVar

import numpy as np

from reference_models.engine.errors import DataValidationError
from reference_models.holmes.data.layout import CollectionPaths

__all__ = [
    "VisualReader",
    "VisualFeatureFormat",
    "register_visual_format",
    "unregister_visual_format",
    "visual_format",
    "visual_format_names",
    "detect_visual_format",
]


class VisualReader(Protocol):
    """What a format's reader gives the data split: per-video frame features, read lazily and fork-safely.

    Attributes
    ----------
    path : Path
        The file the features are read from (in ``FeatureData/<feature>/``; named in error messages).
    """

    path: Path

    def read(self, video_id: str) -> np.ndarray:
        """The video's frame features, a finite float32 ``[n_frames, D_v]`` array."""

    def dim(self, video_id: str) -> int:
        """``D_v`` (without reading the features)."""

    def __contains__(self, video_id: str) -> bool:
        """Whether the video has features."""

    def close(self) -> None:
        """Close this process's handle (the reader reopens on the next read)."""


class VisualFeatureFormat(metaclass=abc.ABCMeta):
    """One on-disk format of the visual features in ``<root>/<collection>/FeatureData/<feature>/``.

    Class attributes
    ----------------
    name : str
        The format's name (``feature_layout=`` of the embedded generator, ``detect_visual_format(paths).name``).
    marker : str
        The file whose presence in the feature folder identifies the format.
    priority : int
        When several formats are present, the lowest priority is read (``feature.hdf5`` before a BigFile).
    """

    name: ClassVar[str]
    marker: ClassVar[str]
    priority: ClassVar[int] = 100

    def __init_subclass__(cls, *, name: str | None = None, marker: str | None = None, priority: int | None = None,
                          **kwargs: object) -> None:
        """The class attributes may also be given as class keywords:
        ``class HDF5Format(VisualFeatureFormat, name="hdf5", marker="feature.hdf5", priority=0)``."""
        super().__init_subclass__(**kwargs)
        for key, value in (("name", name), ("marker", marker), ("priority", priority)):
            if value is not None:
                setattr(cls, key, value)

    def present(self, paths: CollectionPaths) -> bool:
        """Whether the format's marker file exists in ``paths.feature_dir``."""
        return (paths.feature_dir / self.marker).is_file()

    @abc.abstractmethod
    def open_reader(self, paths: CollectionPaths, video_ids: Sequence[str] | None = None) -> VisualReader:
        """A lazy reader of the features (``video_ids``: the videos that will be read, when known)."""

    @abc.abstractmethod
    def validate(self, paths: CollectionPaths, video_ids: Sequence[str]) -> int:
        """Check that every video of ``video_ids`` has finite ``[n, D]`` features with one ``D``; return ``D``.

        Raises :class:`~reference_models.engine.DataValidationError` naming the file and the problem.
        """

    @abc.abstractmethod
    def write(self, paths: CollectionPaths, videos: dict[str, np.ndarray]) -> None:
        """Write ``videos`` (video id -> float32 ``[n_frames, D_v]``) in this format (the embedded generator)."""


_FORMATS: dict[str, VisualFeatureFormat] = {}

F = TypeVar("F", bound=type[VisualFeatureFormat])


def register_visual_format(cls: F) -> F:
    """Class decorator: register an instance of ``cls`` under ``cls.name`` (a name is registered once)."""
    if not (isinstance(cls, type) and issubclass(cls, VisualFeatureFormat)):
        raise TypeError(f"register_visual_format expects a VisualFeatureFormat subclass, got {cls!r}")
    if cls.name in _FORMATS:
        raise ValueError(f"a visual-feature format named {cls.name!r} is already registered")
    _FORMATS[cls.name] = cls()
    return cls


def unregister_visual_format(name: str) -> None:
    """Remove the format ``name`` from the registry (a test's temporary format)."""
    _FORMATS.pop(name, None)


def _ordered() -> list[VisualFeatureFormat]:
    return sorted(_FORMATS.values(), key=lambda fmt: fmt.priority)


def visual_format_names() -> tuple[str, ...]:
    """The registered formats' names, in detection order (``("hdf5", "bigfile")`` with the built-ins)."""
    return tuple(fmt.name for fmt in _ordered())


def visual_format(name: str) -> VisualFeatureFormat:
    """The registered format ``name``; ``ValueError`` naming the registered ones otherwise."""
    if name not in _FORMATS:
        raise ValueError(f"feature_layout must be one of {visual_format_names()}, got {name!r}")
    return _FORMATS[name]


def detect_visual_format(paths: CollectionPaths) -> VisualFeatureFormat:
    """The format present in ``paths.feature_dir`` (the lowest priority when several are).

    Raises
    ------
    DataValidationError
        When none is present.
    """
    formats = _ordered()
    for fmt in formats:
        if fmt.present(paths):
            return fmt
    markers = [fmt.marker for fmt in formats]
    listed = f"neither {markers[0]} nor {markers[1]}" if len(markers) == 2 else f"none of {', '.join(markers)}"
    raise DataValidationError(paths.feature_dir, f"missing visual features: {listed} exists"
                              + _existing_features_hint(paths.feature_dir, markers))


def _existing_features_hint(feature_dir: Path, markers: Sequence[str]) -> str:
    """``"; feature folders under FeatureData/: a, b (did you mean --visual-feature a?)"``, or ``""`` when the
    parent folder holds no other feature folder (as git names the command closest to a mistyped one)."""
    parent = feature_dir.parent
    if not parent.is_dir():
        return ""
    existing = sorted(d.name for d in parent.iterdir()
                      if d.is_dir() and d != feature_dir and any((d / m).exists() for m in markers))
    if not existing:
        return f"; no feature folder exists under {parent.name}/"
    hint = f"; feature folders under {parent.name}/: {', '.join(existing)}"
    closest = difflib.get_close_matches(feature_dir.name, existing, n=1, cutoff=0.4)
    return hint + (f" (did you mean --visual-feature {closest[0]}?)" if closest else "")
