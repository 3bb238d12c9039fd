"""Resident memory of a training process: freed activations go back to the operating system.

On CPU, PyTorch takes every tensor's memory from the C library's ``malloc``. glibc serves a request of at
least ``M_MMAP_THRESHOLD`` bytes with a memory map of its own, which ``free`` hands back to the operating
system at once, and smaller requests from its heaps, whose freed space it keeps (resident) for reuse. The
threshold is dynamic by default: whenever a mapped block is freed, it rises to that block's size, up to
32 MiB. A training step allocates and frees gigabytes of activations between 1 and 32 MiB (attention maps,
the outputs of every width block, their dropout masks), so after the first backward pass nearly all of them
come from the heaps, where they fragment: the resident size then stays far above what is alive and climbs
from step to step. On the release-sized synthetic set (``benchmarks/release_fidelity.py``) a step holds
about 9 GiB at its peak, yet the process sat at 5.4 GiB between the first two steps with 0.9 GiB alive,
and its peak grew to 13.8-14.3 GiB over the run (see the reference-model guide, "Training memory").

:func:`keep_large_blocks_mapped` fixes the threshold (``mallopt(M_MMAP_THRESHOLD, ...)``, which also stops
the dynamic adjustment), so every block of at least 1 MiB is a memory map of its own and the resident size
follows what is alive. It changes where memory comes from, never a value computed: results stay bit for
bit the same. The :class:`~reference_models.engine.Trainer` calls it; it does nothing where the C library
is not glibc, or when the environment sets glibc's own ``MALLOC_MMAP_THRESHOLD_`` (the user's choice wins).
"""

from __future__ import annotations

import ctypes
import os
import platform

__all__ = ["keep_large_blocks_mapped", "MMAP_THRESHOLD_BYTES"]

#: Blocks of at least this many bytes get a memory map of their own (1 MiB).
MMAP_THRESHOLD_BYTES = 1 << 20

#: glibc's ``mallopt`` parameter number of the mmap threshold (``<malloc.h>``).
_M_MMAP_THRESHOLD = -3

_ENVIRONMENT_SETTING = "MALLOC_MMAP_THRESHOLD_"


def keep_large_blocks_mapped(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Serve every allocation of at least ``threshold`` bytes from its own memory map (glibc only).

    Returns whether the setting was applied: ``False`` where the C library is not glibc or the environment
    already sets ``MALLOC_MMAP_THRESHOLD_``. Calling it again is harmless.

    Parameters
    ----------
    threshold : int
        Size in bytes, between 1 and 32 MiB (glibc's largest threshold, ``HEAP_MAX_SIZE / 2`` on 64-bit
        systems).
    """
    if isinstance(threshold, bool) or not isinstance(threshold, int) or not 0 < threshold <= 32 << 20:
        raise ValueError(f"threshold must be an int number of bytes in [1, {32 << 20}], got {threshold!r}")
    if _ENVIRONMENT_SETTING in os.environ or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # pragma: no cover - a glibc without mallopt
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt(_M_MMAP_THRESHOLD, threshold) == 1
