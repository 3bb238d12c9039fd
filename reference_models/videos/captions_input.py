"""The captions ``index`` reads: an MS-SL caption file or a CSV, checked line by line, with a split per video.

* MS-SL caption files: one ``<video_id>#enc#<n> <sentence>`` per line (the caption id is kept).
* CSV with a header naming ``video`` and ``caption`` (and optionally ``split``: train, val or test); caption
  ids are made as MS-SL's, ``<video>#enc#<n>`` in file order per video.

A problem in one line (a caption for a video that is not in the folder, a duplicate caption id, a bad split,
an empty caption) drops that caption and is reported; it never stops the indexing. Videos without a
``split`` are divided into train, val and test (70 / 15 / 15 %) by a seeded hash of their id, so that a video
keeps its split when others are added or removed (with three videos or more, a split that the hash leaves
empty gets the train videos of highest hash).
"""

from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

from reference_models.holmes.data.layout import SPLITS, parse_caption_line, read_utf8_text

__all__ = ["InputCaption", "CaptionProblem", "read_caption_input", "assign_splits", "SPLIT_FRACTIONS"]

#: Shares of train, val and test for videos whose split the caption file does not give.
SPLIT_FRACTIONS = (0.7, 0.15, 0.15)


@dataclass(frozen=True)
class InputCaption:
    """One usable caption: its id, video, sentence and split (``None`` until :func:`assign_splits`)."""

    caption_id: str
    video_id: str
    sentence: str
    split: str | None


@dataclass(frozen=True)
class CaptionProblem:
    """A caption line that was dropped, and why (one entry of the extraction report)."""

    line: int
    video_id: str
    problem: str


def _is_csv(text: str) -> bool:
    first = text.lstrip().split("\n", 1)[0].lower()
    return "," in first and {"video", "caption"} <= {c.strip() for c in first.split(",")}


def read_caption_input(path: str | Path, videos: set[str]) -> tuple[list[InputCaption], list[CaptionProblem]]:
    """The usable captions of ``path`` and the problems of the others (``videos``: the ids in the folder).

    Raises
    ------
    reference_models.engine.errors.DataValidationError
        When the file is missing or not UTF-8 text (nothing could be read).
    """
    text = read_utf8_text(Path(path))
    rows: list[tuple[int, str | None, str, str, str | None]] = []  # line, caption id, video, sentence, split
    problems: list[CaptionProblem] = []
    if _is_csv(text):
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = {name.strip().lower(): name for name in reader.fieldnames or ()}
        for lineno, row in enumerate(reader, start=2):
            video = (row.get(header["video"]) or "").strip()
            sentence = (row.get(header["caption"]) or "").strip()
            split = (row.get(header["split"]) or "").strip().lower() if "split" in header else ""
            rows.append((lineno, None, video, sentence, split or None))
    else:
        for lineno, line in enumerate(io.StringIO(text, newline=None), start=1):
            cap = parse_caption_line(line)
            if cap is not None:
                rows.append((lineno, cap.caption_id, cap.video_id, cap.sentence, None))
    captions: list[InputCaption] = []
    seen: set[str] = set()
    per_video: dict[str, int] = {}
    for lineno, caption_id, video, sentence, split in rows:
        if not video:
            problems.append(CaptionProblem(lineno, video, "caption without a video id"))
        elif not sentence:
            problems.append(CaptionProblem(lineno, video, "empty caption"))
        elif video not in videos:
            problems.append(CaptionProblem(lineno, video, f"caption for a missing video {video!r}"))
        elif split is not None and split not in SPLITS:
            problems.append(CaptionProblem(lineno, video, f"split {split!r} is not one of {', '.join(SPLITS)}"))
        else:
            if caption_id is None:
                caption_id = f"{video}#enc#{per_video.get(video, 0)}"
                per_video[video] = per_video.get(video, 0) + 1
            if caption_id in seen or " " in caption_id:
                why = "duplicate caption id" if caption_id in seen else "caption id with a space"
                problems.append(CaptionProblem(lineno, video, f"{why} {caption_id!r}"))
                continue
            seen.add(caption_id)
            captions.append(InputCaption(caption_id, video, sentence, split))
    return captions, problems


def _unit_hash(seed: int, video_id: str) -> float:
    """A number in [0, 1) drawn from ``(seed, video_id)`` alone."""
    digest = hashlib.sha256(f"{seed}\n{video_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def assign_splits(captions: list[InputCaption], seed: int) -> list[InputCaption]:
    """Every caption with a split: the file's, else its video's by a seeded hash of its id (:data:`SPLIT_FRACTIONS`).

    A video's captions all land in one split; a video given a split by one line keeps it for all its lines. A
    video's drawn split depends on the seed and its id only (it stays when videos come and go), except that with
    three videos or more a split the hash leaves empty gets the train videos of highest hash.
    """
    given = {c.video_id: c.split for c in captions if c.split is not None}
    free = sorted({c.video_id for c in captions} - set(given))
    u = {v: _unit_hash(seed, v) for v in free}
    cut_train, cut_val = SPLIT_FRACTIONS[0], SPLIT_FRACTIONS[0] + SPLIT_FRACTIONS[1]
    drawn = {v: "train" if u[v] < cut_train else "val" if u[v] < cut_val else "test" for v in free}
    if len(free) >= 3:
        for split in ("val", "test"):
            if split not in drawn.values():
                spare = sorted((v for v in free if drawn[v] == "train"), key=lambda v: u[v])
                if len(spare) > 1:
                    drawn[spare[-1]] = split
    split_of = {**drawn, **given}
    return [InputCaption(c.caption_id, c.video_id, c.sentence, split_of[c.video_id]) for c in captions]
