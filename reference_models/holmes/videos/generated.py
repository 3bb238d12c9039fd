"""A generated collection of short videos with captions: own-videos data that nobody has to download.

Every video is a few seconds of coloured shapes on a dark background, with several *events* one after the
other; an event is one shape of one colour moving in one direction (``"a red circle moves left"``). Each
specific caption describes one event of its video (partial relevance: the rest of the video is about
something else), and some videos also carry a *generic* caption (``"something is moving"``) that fits every
video of the collection, so that a search for it should not be trusted.

:func:`write_generated_collection` writes the videos with PyAV (``<dir>/videos/<id>.mp4``), the captions as
the CSV that ``extract`` reads (``video,caption,split``) and ``truth.json`` (each video's events with their
spans in seconds, each caption's kind and event). Everything is a deterministic function of the seed.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reference_models.engine import write_json

__all__ = ["COLOURS", "SHAPES", "MOTIONS", "GENERIC_CAPTIONS", "GeneratedCollection", "write_generated_collection"]

COLOURS = {"red": (230, 40, 40), "green": (40, 210, 60), "blue": (50, 80, 240), "yellow": (240, 230, 50),
           "white": (245, 245, 245), "magenta": (220, 50, 220), "cyan": (40, 220, 230), "orange": (245, 140, 30),
           "purple": (120, 40, 200), "pink": (250, 160, 190)}
SHAPES = ("square", "circle", "bar")
MOTIONS = {"left": (-1.0, 0.0), "right": (1.0, 0.0), "up": (0.0, -1.0), "down": (0.0, 1.0)}
GENERIC_CAPTIONS = ("something is moving", "a shape moves", "there is motion on the screen")


@dataclass(frozen=True)
class GeneratedCollection:
    """What :func:`write_generated_collection` wrote: the folders and files, and the caption kinds."""

    videos_dir: Path
    captions_csv: Path
    truth_json: Path
    video_ids: tuple[str, ...]
    specific_captions: int
    generic_captions: int


def _shape_mask(shape: str, size: int, cx: float, cy: float, radius: float) -> np.ndarray:
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float32)
    if shape == "circle":
        return (xs - cx) ** 2 + (ys - cy) ** 2 <= radius**2
    if shape == "square":
        return (np.abs(xs - cx) <= radius) & (np.abs(ys - cy) <= radius)
    return (np.abs(xs - cx) <= 1.6 * radius) & (np.abs(ys - cy) <= 0.45 * radius)  # bar


def _event_frames(rng: np.random.Generator, colour: str, shape: str, motion: str, n: int, size: int,
                  background: np.ndarray) -> np.ndarray:
    radius = size * 0.28  # large enough to move an untrained encoder's features, small enough to move
    dx, dy = MOTIONS[motion]
    travel = size * 0.3
    start_x = size / 2 - dx * travel / 2 + rng.uniform(-2, 2)
    start_y = size / 2 - dy * travel / 2 + rng.uniform(-2, 2)
    frames = np.empty((n, size, size, 3), dtype=np.uint8)
    for i in range(n):
        t = i / max(1, n - 1)
        frame = background.copy()
        frame[_shape_mask(shape, size, start_x + dx * travel * t, start_y + dy * travel * t, radius)] = COLOURS[colour]
        frames[i] = frame
    return frames


def write_generated_collection(
    folder: str | Path,
    *,
    n_videos: int = 60,
    events_per_video: int = 2,
    event_seconds: float = 2.0,
    fps: int = 8,
    size: int = 96,
    generic_fraction: float = 0.5,
    split_fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
    seed: int = 0,
) -> GeneratedCollection:
    """Write ``n_videos`` short MPEG-4 videos, their captions (CSV) and ``truth.json`` under ``folder``.

    Parameters
    ----------
    folder : path
        Created if missing; ``videos/``, ``captions.csv`` and ``truth.json`` are written into it.
    n_videos, events_per_video : int
        Videos, and events per video (distinct colour-shape-motion triples, one after the other).
    event_seconds, fps, size : float, int, int
        Each event's length, the frame rate and the (square) frame size in pixels.
    generic_fraction : float
        Share of the videos that also get one generic caption.
    split_fractions : tuple of float
        Shares of the videos in train, val and test (the CSV's ``split`` column).
    seed : int
        Everything is a function of it.
    """
    import av

    if n_videos < 3:
        raise ValueError(f"n_videos must be >= 3 (one per split at least), got {n_videos}")
    if not 1 <= events_per_video <= len(COLOURS):
        raise ValueError(f"events_per_video must be in [1, {len(COLOURS)}], got {events_per_video}")
    if len(split_fractions) != 3 or abs(sum(split_fractions) - 1.0) > 1e-6 or min(split_fractions) < 0:
        raise ValueError(f"split_fractions must be three shares summing to 1, got {split_fractions}")
    folder = Path(folder)
    videos_dir = folder / "videos"
    videos_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    n_val = max(1, round(split_fractions[1] * n_videos))
    n_test = max(1, round(split_fractions[2] * n_videos))
    splits = ["train"] * (n_videos - n_val - n_test) + ["val"] * n_val + ["test"] * n_test
    rows: list[tuple[str, str, str]] = []
    truth: dict[str, object] = {"fps": fps, "event_seconds": event_seconds, "videos": {}, "captions": []}
    frames_per_event = int(round(event_seconds * fps))
    n_specific = n_generic = 0
    ids = tuple(f"video{i:04d}" for i in range(n_videos))
    for vid, split in zip(ids, splits):
        background = np.full((size, size, 3), rng.integers(10, 50), dtype=np.uint8)
        colours = rng.choice(list(COLOURS), size=events_per_video, replace=False)
        events = [(str(c), str(rng.choice(SHAPES)), str(rng.choice(list(MOTIONS)))) for c in colours]
        clip = np.concatenate([_event_frames(rng, *event, frames_per_event, size, background) for event in events])
        with av.open(str(videos_dir / f"{vid}.mp4"), "w") as container:
            stream = container.add_stream("mpeg4", rate=fps)
            stream.width = stream.height = size
            stream.pix_fmt = "yuv420p"
            stream.bit_rate = 400_000
            for frame in clip:
                for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        spans = [(i * event_seconds, (i + 1) * event_seconds) for i in range(events_per_video)]
        truth["videos"][vid] = [{"colour": c, "shape": s, "motion": m, "span": span}  # type: ignore[index]
                                for (c, s, m), span in zip(events, spans)]
        for e, (colour, shape, motion) in enumerate(events):
            rows.append((vid, f"a {colour} {shape} moves {motion}", split))
            truth["captions"].append({"video": vid, "kind": "specific", "event": e})  # type: ignore[attr-defined]
            n_specific += 1
        if rng.random() < generic_fraction:
            rows.append((vid, str(rng.choice(GENERIC_CAPTIONS)), split))
            truth["captions"].append({"video": vid, "kind": "generic", "event": None})  # type: ignore[attr-defined]
            n_generic += 1
    captions_csv = folder / "captions.csv"
    with open(captions_csv, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(("video", "caption", "split"))
        writer.writerows(rows)
    write_json(folder / "truth.json", truth)
    return GeneratedCollection(videos_dir, captions_csv, folder / "truth.json", ids, n_specific, n_generic)
