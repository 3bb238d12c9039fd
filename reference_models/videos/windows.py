"""Multi-scale windows of consecutive frames: what a zero-shot search compares a sentence with.

A video's frame features (``encode_image`` of each sampled frame) are L2-normalised and grouped into at most
:data:`MAX_UNITS` *units* of consecutive frames (all frames when the video has fewer; otherwise as equal as
possible). A *window* is a run of consecutive units of width 1, 2, 4, ... up to all of them (the whole video is
always one), taken every ``max(1, width // 2)`` units; its embedding is the mean of its frames' normalised
features, normalised again. A sentence scores a video by its best window (cosine), and that window's span in
seconds is the *moment*: short windows find one event, wide ones a sentence that names several.

Every video has :func:`window_count` windows at most (42 with 16 units); a video with fewer repeats its first
window up to that count, which leaves its best window, and so its score and moment, unchanged, so that a
gallery is one ``[V, W, d]`` tensor and the library's exact search (:func:`evidential_prvr.search.gallery_search`)
scores it as it scores clips.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["MAX_UNITS", "unit_bounds", "window_layout", "window_count", "video_windows"]

#: Units of consecutive frames a video is divided into at most.
MAX_UNITS = 16


def unit_bounds(n_frames: int, max_units: int = MAX_UNITS) -> np.ndarray:
    """``int64 [U + 1]`` frame boundaries of the units of a video of ``n_frames`` frames (``U = min(n, max_units)``)."""
    if n_frames < 1:
        raise ValueError(f"n_frames must be >= 1, got {n_frames}")
    if max_units < 1:
        raise ValueError(f"max_units must be >= 1, got {max_units}")
    units = min(n_frames, max_units)
    return np.round(np.linspace(0, n_frames, units + 1)).astype(np.int64)


def window_layout(units: int) -> list[tuple[int, int]]:
    """``(first unit, width)`` of every window over ``units`` units, narrowest first."""
    widths = [w for w in (2**i for i in range(units.bit_length())) if w <= units]
    if widths[-1] != units:
        widths.append(units)
    return [(start, w) for w in widths for start in list(range(0, units - w + 1, max(1, w // 2)))
            + ([units - w] if (units - w) % max(1, w // 2) else [])]


def window_count(max_units: int = MAX_UNITS) -> int:
    """The most windows a video has (that of a video with ``max_units`` units or more)."""
    return len(window_layout(max_units))


def video_windows(features: np.ndarray | torch.Tensor, times: np.ndarray, duration: float, rate: float, *,
                  max_units: int = MAX_UNITS) -> tuple[torch.Tensor, torch.Tensor]:
    """The windows of one video, padded to :func:`window_count` by repeating the first.

    Parameters
    ----------
    features : numpy.ndarray or torch.Tensor
        ``[n, d]``: the video's frame features (any scale; normalised here).
    times : numpy.ndarray
        ``[n]``: each frame's time in seconds.
    duration, rate : float
        The video's duration in seconds and its sampling rate in frames per second (a frame covers ``1 / rate``).
    max_units : int
        See :data:`MAX_UNITS`.

    Returns
    -------
    tuple of torch.Tensor
        ``float32 [W, d]`` unit-norm window embeddings and ``float32 [W, 2]`` their spans in seconds.
    """
    x = F.normalize(torch.as_tensor(np.asarray(features), dtype=torch.float32), dim=-1)
    n = x.shape[0]
    if n < 1 or len(times) != n:
        raise ValueError(f"features [n >= 1, d] and times [n] must agree, got {tuple(x.shape)} and {len(times)}")
    bounds = unit_bounds(n, max_units)
    cumulative = torch.cat([torch.zeros(1, x.shape[1]), x.cumsum(dim=0)])
    layout = window_layout(len(bounds) - 1)
    first = torch.tensor([bounds[s] for s, _ in layout])
    last = torch.tensor([bounds[s + w] for s, w in layout])  # exclusive frame bound
    windows = F.normalize((cumulative[last] - cumulative[first]) / (last - first)[:, None].float(), dim=-1)
    t = np.asarray(times, dtype=np.float64)
    step = 1.0 / rate if rate > 0 else 0.0
    end_limit = max(float(duration), float(t[-1]) + step)
    spans = torch.tensor([[t[a], min(t[b - 1] + step, end_limit)] for a, b in zip(first.tolist(), last.tolist())],
                         dtype=torch.float32)
    pad = window_count(max_units) - len(layout)
    if pad > 0:
        windows = torch.cat([windows, windows[:1].expand(pad, -1)])
        spans = torch.cat([spans, spans[:1].expand(pad, -1)])
    return windows, spans
