"""Wall-clock timing shared by the benchmark scripts: repeated samples, CUDA synchronisation, thread count.

Import it as ``benchmarks._timing`` once the repository root is on ``sys.path``.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable

import torch


def set_threads(threads: int | None) -> None:
    """Use ``threads`` torch CPU threads; ``None`` (or 0) keeps torch's choice."""
    if threads:
        torch.set_num_threads(threads)


def synchronize(device: torch.device | None) -> None:
    """Wait for the work queued on a CUDA ``device`` so that a wall-clock time covers it; no-op elsewhere."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def time_samples_ms(
    fn: Callable[[], object],
    repeats: int,
    *,
    warmup: int = 1,
    device: torch.device | None = None,
    collect_garbage: bool = False,
) -> list[float]:
    """Wall times in milliseconds of ``repeats`` calls of ``fn()``, after ``warmup`` untimed calls.

    ``device`` is synchronised before and after each timed call; ``collect_garbage`` runs the garbage
    collector before each (outside the timed span).
    """
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        if collect_garbage:
            gc.collect()
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def median_ms(fn: Callable[[], object], repeats: int, *, warmup: int = 1, device: torch.device | None = None) -> float:
    """Median of :func:`time_samples_ms`."""
    return statistics.median(time_samples_ms(fn, repeats, warmup=warmup, device=device))
