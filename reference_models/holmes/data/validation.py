"""Check a data root before training: every file present, every caption and video has finite features, dims agree."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from reference_models.engine.errors import DataValidationError
from reference_models.holmes.data.hdf5_format import check_hdf5_entries
from reference_models.holmes.data.layout import MS_SL_TEXT_FEATURE, SPLITS, Caption, CollectionPaths, read_captions
from reference_models.holmes.data.visual_formats import detect_visual_format

__all__ = ["validate_data_root", "video_overlap_warnings"]

_REQUIRED_SPLITS = ("train", "val")


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


def validate_data_root(
    data_root: str | Path, collection: str, visual_feature: str, *, splits: Sequence[str] | None = None,
    text_feature: str = MS_SL_TEXT_FEATURE,
) -> list[str]:
    """Check a PRVR data root and raise :class:`DataValidationError` on the first problem found.

    Checks that the caption files parse (UTF-8, a leading byte-order mark allowed; ``train`` and ``val``
    must exist; ``test`` is checked when present, or required when listed in ``splits``), that every caption
    has a numeric 2-D token array in the text-feature file (``text_feature``: ``roberta`` for the
    lineage's releases) with one common ``D_t``, that the visual features
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
    text_feature : str
        Name of the text features (``TextData/<text_feature>_<collection>_query_feat.hdf5``).

    Raises
    ------
    DataValidationError
        A one-line message ``"<file>: <problem>"``.
    """
    paths = CollectionPaths(Path(data_root), collection, visual_feature, text_feature)
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

    check_hdf5_entries(paths.text_features, caption_ids, "caption")
    detect_visual_format(paths).validate(paths, video_ids)
    return video_overlap_warnings(per_split, paths)
