"""The generated world: short videos of moving shapes with captions, own-videos data that nobody has to download.

Every video shows a few *events* one after the other on one background; an event is one shape of one colour
crossing the frame in one direction (left, right, up or down). The captions describe one or two events at
varying specificity, and each caption's *kind* says what it takes to find its video:

``appearance``
    Colour and shape, sometimes the background (``"a red circle on a grey background"``): one frame shows it.
``motion``
    Colour, shape and direction (``"a red circle moves left"``): one frame cannot show the direction.
``order``
    Two consecutive events in their order (``"a red circle, then a blue bar"``): one frame cannot show it.
``generic``
    ``"something is moving"``: fits every video, so a search for it should not be trusted.

**Twins** make the last two kinds hard: a share of the videos has a twin that differs only in the direction of
every motion (``motion_twin``) or only in the order of its events (``order_twin``), so that an appearance
match cannot tell the two apart and only the motion or the order can.

:func:`write_generated_collection` writes the videos with PyAV (``<dir>/videos/<id>.mp4``), the captions as
the CSV that ``index`` reads (``video,caption,split``) and ``truth.json`` (each video's events with their spans
in seconds and its twin, each caption's id, kind and events). :func:`render_frame` draws one frame; the
encoder's training script (:mod:`reference_models.videos.train_encoder`) draws its frames with it. Everything
is a deterministic function of the seed.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reference_models.engine import write_json

__all__ = ["COLOURS", "SHAPES", "BACKGROUNDS", "MOTIONS", "CAPTION_KINDS", "GENERIC_CAPTIONS", "GeneratedCollection",
           "render_frame", "event_positions", "write_generated_collection"]

COLOURS = {"red": (230, 40, 40), "green": (40, 200, 60), "blue": (50, 90, 245), "yellow": (240, 230, 50),
           "white": (245, 245, 245), "magenta": (220, 50, 220), "cyan": (40, 220, 230), "orange": (245, 140, 30),
           "purple": (130, 50, 210), "pink": (250, 165, 195)}
SHAPES = ("square", "circle", "bar", "triangle", "ring")
BACKGROUNDS = {"black": (12, 12, 12), "grey": (105, 105, 105), "navy": (18, 28, 85), "brown": (85, 55, 25)}
MOTIONS = {"left": (-1.0, 0.0), "right": (1.0, 0.0), "up": (0.0, -1.0), "down": (0.0, 1.0)}
OPPOSITE = {"left": "right", "right": "left", "up": "down", "down": "up"}
CAPTION_KINDS = ("appearance", "motion", "order", "generic")
GENERIC_CAPTIONS = ("something is moving", "a shape moves", "there is motion on the screen")
#: Share of the frame's side that a shape crosses during its event.
TRAVEL = 0.5
#: Half-size of a shape as a share of the frame's side.
RADIUS = 0.17


@dataclass(frozen=True)
class GeneratedCollection:
    """What :func:`write_generated_collection` wrote: the folders and files, and the captions per kind."""

    videos_dir: Path
    captions_csv: Path
    truth_json: Path
    video_ids: tuple[str, ...]
    captions_per_kind: dict[str, int]


def _shape_mask(shape: str, size: int, cx: float, cy: float, radius: float) -> np.ndarray:
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5
    dx, dy = xs - cx, ys - cy
    if shape == "circle":
        return dx**2 + dy**2 <= radius**2
    if shape == "ring":
        d2 = dx**2 + dy**2
        return (d2 <= radius**2) & (d2 >= (0.55 * radius) ** 2)
    if shape == "square":
        return (np.abs(dx) <= 0.85 * radius) & (np.abs(dy) <= 0.85 * radius)
    if shape == "triangle":  # pointing up: the base at cy + r, the apex at cy - r
        return (dy <= radius) & (dy >= -radius) & (np.abs(dx) <= (dy + radius) * 0.5)
    return (np.abs(dx) <= 1.5 * radius) & (np.abs(dy) <= 0.4 * radius)  # bar


def render_frame(colour: str, shape: str, background: str, x: float, y: float, size: int) -> np.ndarray:
    """``uint8 [size, size, 3]``: one shape centred at ``(x, y)`` (shares of the side, 0..1) on a background."""
    frame = np.empty((size, size, 3), dtype=np.uint8)
    frame[:] = BACKGROUNDS[background]
    frame[_shape_mask(shape, size, x * size, y * size, RADIUS * size)] = COLOURS[colour]
    return frame


def event_positions(motion: str, n: int, jitter: tuple[float, float] = (0.0, 0.0)) -> np.ndarray:
    """``[n, 2]`` centres (shares of the side) of a shape crossing the frame in ``motion`` over ``n`` frames."""
    dx, dy = MOTIONS[motion]
    t = np.linspace(0.0, 1.0, n) if n > 1 else np.zeros(1)
    x = 0.5 + jitter[0] + dx * TRAVEL * (t - 0.5)
    y = 0.5 + jitter[1] + dy * TRAVEL * (t - 0.5)
    return np.stack([x, y], axis=1)


def _write_mp4(path: Path, frames: np.ndarray, fps: int) -> None:
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width = stream.height = frames.shape[1]
        stream.pix_fmt = "yuv420p"
        stream.bit_rate = 600_000
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def _appearance(rng: np.random.Generator, colour: str, shape: str, background: str) -> str:
    if rng.random() < 0.35:
        return f"a {colour} {shape} on a {background} background"
    return f"a {colour} {shape}"


def _draw_videos(rng: np.random.Generator, n_videos: int, events: tuple[int, int],
                 twin_fraction: float) -> list[dict]:
    """Each video's background, events ``(colour, shape, motion)`` and twin, drawn in one order."""
    videos: list[dict] = []
    while len(videos) < n_videos:
        n = int(rng.integers(events[0], events[1] + 1))
        colours = rng.choice(list(COLOURS), size=n, replace=False)
        evs = [(str(c), str(rng.choice(SHAPES)), str(rng.choice(list(MOTIONS)))) for c in colours]
        background = str(rng.choice(list(BACKGROUNDS)))
        videos.append({"background": background, "events": evs, "twin": None})
        if len(videos) < n_videos and rng.random() < twin_fraction:
            kind = "order_twin" if n >= 2 and rng.random() < 0.5 else "motion_twin"
            twin_events = evs[::-1] if kind == "order_twin" else [(c, s, OPPOSITE[m]) for c, s, m in evs]
            videos[-1]["twin"] = (len(videos), kind)
            videos.append({"background": background, "events": twin_events, "twin": (len(videos) - 1, kind)})
    return videos


def write_generated_collection(
    folder: str | Path,
    *,
    n_videos: int = 60,
    events_per_video: int | tuple[int, int] = (2, 3),
    event_seconds: float = 2.0,
    fps: int = 8,
    size: int = 96,
    twin_fraction: float = 0.3,
    generic_fraction: float = 0.3,
    order_fraction: float = 0.5,
    split_fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
    seed: int = 0,
) -> GeneratedCollection:
    """Write ``n_videos`` short MPEG-4 videos, their captions (CSV) and ``truth.json`` under ``folder``.

    Parameters
    ----------
    folder : path
        Created if missing; ``videos/``, ``captions.csv`` and ``truth.json`` are written into it.
    n_videos : int
        Videos (>= 3, one per split at least).
    events_per_video : int or tuple of int
        Events per video, or the range ``(min, max)`` drawn from (distinct colours within a video).
    event_seconds, fps, size : float, int, int
        Each event's length, the frame rate and the (square) frame size in pixels.
    twin_fraction : float
        Share of the videos drawn with a twin (the twin is the next video: motions reversed, or events reversed).
    generic_fraction, order_fraction : float
        Share of the videos that also get a generic caption, and an order caption (videos with two events or
        more).
    split_fractions : tuple of float
        Shares of the videos in train, val and test (the CSV's ``split`` column; twins share a split).
    seed : int
        Everything is a function of it.
    """
    low, high = (events_per_video, events_per_video) if isinstance(events_per_video, int) else events_per_video
    if n_videos < 3:
        raise ValueError(f"n_videos must be >= 3 (one per split at least), got {n_videos}")
    if not 1 <= low <= high <= len(COLOURS):
        raise ValueError(f"events_per_video must be in [1, {len(COLOURS)}] (a range low <= high), got {events_per_video}")
    if len(split_fractions) != 3 or abs(sum(split_fractions) - 1.0) > 1e-6 or min(split_fractions) < 0:
        raise ValueError(f"split_fractions must be three shares summing to 1, got {split_fractions}")
    for name, value in (("twin_fraction", twin_fraction), ("generic_fraction", generic_fraction),
                        ("order_fraction", order_fraction)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value}")
    folder = Path(folder)
    videos_dir = folder / "videos"
    videos_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    drawn = _draw_videos(rng, n_videos, (low, high), twin_fraction)
    ids = tuple(f"video{i:04d}" for i in range(n_videos))
    # splits by groups (a video and its twin together), in a seeded order
    groups = sorted({min(i, d["twin"][0]) if d["twin"] else i for i, d in enumerate(drawn)})
    order = [groups[j] for j in rng.permutation(len(groups))]
    n_val = max(1, round(split_fractions[1] * len(order)))
    n_test = max(1, round(split_fractions[2] * len(order)))
    split_of_group = {g: ("train" if r < len(order) - n_val - n_test else "val" if r < len(order) - n_test else "test")
                      for r, g in enumerate(order)}
    rows: list[tuple[str, str, str]] = []
    truth: dict[str, object] = {"fps": fps, "event_seconds": event_seconds, "seed": seed, "videos": {},
                                "captions": []}
    per_kind = dict.fromkeys(CAPTION_KINDS, 0)
    frames_per_event = int(round(event_seconds * fps))
    for i, (vid, video) in enumerate(zip(ids, drawn)):
        group = min(i, video["twin"][0]) if video["twin"] else i
        split = split_of_group[group]
        jitters = [tuple(rng.uniform(-0.06, 0.06, size=2)) for _ in video["events"]]
        clip = np.concatenate([
            np.stack([render_frame(c, s, video["background"], x, y, size)
                      for x, y in event_positions(m, frames_per_event, jitter)])
            for (c, s, m), jitter in zip(video["events"], jitters)])
        _write_mp4(videos_dir / f"{vid}.mp4", clip, fps)
        spans = [(e * event_seconds, (e + 1) * event_seconds) for e in range(len(video["events"]))]
        twin = None if video["twin"] is None else {"video": ids[video["twin"][0]], "kind": video["twin"][1]}
        truth["videos"][vid] = {  # type: ignore[index]
            "background": video["background"], "twin": twin,
            "events": [{"colour": c, "shape": s, "motion": m, "span": span}
                       for (c, s, m), span in zip(video["events"], spans)]}
        captions: list[tuple[str, str, list[int]]] = []
        for e, (colour, shape, motion) in enumerate(video["events"]):
            if rng.random() < 0.5:
                captions.append(("motion", f"a {colour} {shape} moves {motion}", [e]))
            else:
                captions.append(("appearance", _appearance(rng, colour, shape, video["background"]), [e]))
        if len(video["events"]) >= 2 and rng.random() < order_fraction:
            e = int(rng.integers(0, len(video["events"]) - 1))
            (c1, s1, _), (c2, s2, _) = video["events"][e], video["events"][e + 1]
            captions.append(("order", f"a {c1} {s1}, then a {c2} {s2}", [e, e + 1]))
        if rng.random() < generic_fraction:
            captions.append(("generic", str(rng.choice(GENERIC_CAPTIONS)), []))
        for n, (kind, sentence, events) in enumerate(captions):
            rows.append((vid, sentence, split))
            truth["captions"].append({"caption_id": f"{vid}#enc#{n}", "video": vid, "kind": kind,  # type: ignore[attr-defined]
                                      "events": events, "split": split})
            per_kind[kind] += 1
    captions_csv = folder / "captions.csv"
    with open(captions_csv, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(("video", "caption", "split"))
        writer.writerows(rows)
    write_json(folder / "truth.json", truth)
    return GeneratedCollection(videos_dir, captions_csv, folder / "truth.json", ids, per_kind)
