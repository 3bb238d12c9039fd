"""Decoding video files into frames at a stated rate, with PyAV (FFmpeg's libraries, carried by its wheels).

Why PyAV and not torchcodec: PyAV's wheels carry FFmpeg, so ``pip install av`` is the whole install on
Linux, macOS and Windows, and it does not link against libtorch, so it works beside any PyTorch build.
torchcodec needs FFmpeg's shared libraries from the system and a wheel built for the installed torch.

:func:`decode_video` samples one frame every ``1 / fps`` seconds (the first decoded frame at or after each
sampling time), fewer when the video is longer than ``max_frames / fps`` seconds (the rate is lowered so
that ``max_frames`` frames cover the whole video), resizes the short side to ``size`` and crops the centre
square: the CLIP preprocessing, done by FFmpeg's scaler in the decoding process (``extract`` calls it in
``DataLoader`` workers, so that decoding overlaps encoding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["VIDEO_SUFFIXES", "SampledVideo", "decode_video"]

#: File suffixes taken for videos (case-insensitive); other files in the folder are ignored and counted.
VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".mpg", ".mpeg", ".flv", ".wmv", ".ts")


@dataclass
class SampledVideo:
    """The sampled frames of one video, or why there are none.

    Attributes
    ----------
    video_id : str
        The file name without its suffix.
    frames : numpy.ndarray or None
        ``uint8 [n, size, size, 3]`` RGB frames; ``None`` when ``problem`` is set.
    times : numpy.ndarray
        ``float64 [n]``: each frame's time in seconds.
    rate : float
        The sampling rate actually used (frames per second).
    duration : float
        The video's duration in seconds (the last decoded frame's end when the container does not say).
    problem : str or None
        ``"empty file"``, ``"unreadable: <FFmpeg's message>"`` or ``"no video frames"``.
    """

    video_id: str
    frames: np.ndarray | None
    times: np.ndarray
    rate: float
    duration: float
    problem: str | None = None


def _failed(video_id: str, problem: str) -> SampledVideo:
    return SampledVideo(video_id, None, np.zeros(0), 0.0, 0.0, problem)


def _resize_shape(width: int, height: int, size: int) -> tuple[int, int]:
    scale = size / min(width, height)
    return max(size, round(width * scale)), max(size, round(height * scale))


def decode_video(path: str | Path, *, fps: float, max_frames: int, size: int) -> SampledVideo:
    """Sample the frames of the video file ``path`` (see the module documentation); never raises for a bad file.

    Parameters
    ----------
    path : path
        A video file.
    fps : float
        Frames sampled per second of video (> 0).
    max_frames : int
        At most this many frames per video (>= 1).
    size : int
        Side of the square frames returned (the encoder's input size).
    """
    import av

    path = Path(path)
    video_id = path.stem
    if fps <= 0 or not math.isfinite(fps):
        raise ValueError(f"fps must be a positive number, got {fps!r}")
    if max_frames < 1:
        raise ValueError(f"max_frames must be >= 1, got {max_frames!r}")
    try:
        if path.stat().st_size == 0:
            return _failed(video_id, "empty file")
        with av.open(str(path)) as container:
            if not container.streams.video:
                return _failed(video_id, "no video stream")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            known = float(container.duration / 1e6) if container.duration else 0.0
            rate = min(fps, max_frames / known) if known > 0 else fps
            frames: list[np.ndarray] = []
            times: list[float] = []
            next_time = 0.0
            last_end = 0.0
            frame_step = 1.0 / float(stream.average_rate) if stream.average_rate else 0.0
            for frame in container.decode(stream):
                t = float(frame.time) if frame.time is not None else len(times) / rate
                last_end = max(last_end, t + frame_step)
                if t + 1e-6 < next_time:
                    continue
                width, height = _resize_shape(frame.width, frame.height, size)
                rgb = frame.to_ndarray(format="rgb24", width=width, height=height, interpolation="BICUBIC")
                top, left = (height - size) // 2, (width - size) // 2
                frames.append(np.ascontiguousarray(rgb[top : top + size, left : left + size]))
                times.append(t)
                next_time = (len(times)) / rate
    except (av.FFmpegError, OSError, ValueError) as exc:  # a broken or foreign file: reported, not raised
        return _failed(video_id, f"unreadable: {exc}")
    if not frames:
        return _failed(video_id, "no video frames")
    stacked, stamps = np.stack(frames), np.asarray(times, dtype=np.float64)
    if len(stacked) > max_frames:  # the container's duration was missing or short: keep max_frames, evenly
        keep = np.linspace(0, len(stacked) - 1, max_frames).round().astype(np.int64)
        stacked, stamps = stacked[keep], stamps[keep]
        rate = max_frames / max(last_end, 1e-9)
    return SampledVideo(video_id, stacked, stamps, float(rate), max(known, last_end))

