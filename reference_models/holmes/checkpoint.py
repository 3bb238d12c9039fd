"""Checkpoints of a training run: atomic writes, safe reads and the random-number-generator states.

A checkpoint written by :func:`save_checkpoint` holds plain tensors, numbers, strings, lists and dicts
only, so :func:`load_checkpoint` reads it with ``torch.load(..., weights_only=True)``. Writes go to a
temporary file in the same folder and are moved into place with :func:`os.replace`, so an interruption
leaves either the previous checkpoint or the new one, never a truncated file.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["seed_everything", "capture_rng_state", "restore_rng_state", "save_checkpoint", "load_checkpoint"]


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's (all devices) global generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def capture_rng_state() -> dict[str, Any]:
    """Every global generator state, as ``weights_only``-loadable values (lists and tensors)."""
    py_version, py_state, py_gauss = random.getstate()
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state: dict[str, Any] = {
        "python": [py_version, list(py_state), py_gauss],
        "numpy": [np_kind, torch.from_numpy(np.asarray(np_keys, dtype=np.int64)), int(np_pos), int(np_has_gauss),
                  float(np_gauss)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`."""
    py_version, py_state, py_gauss = state["python"]
    random.setstate((py_version, tuple(py_state), py_gauss))
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = state["numpy"]
    np.random.set_state((np_kind, np_keys.numpy().astype(np.uint32), np_pos, np_has_gauss, np_gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(payload: dict[str, Any], path: str | Path) -> Path:
    """Write ``payload`` to ``path`` atomically (temporary file in the same folder, then ``os.replace``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
        raise
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` (``weights_only=True``: no arbitrary code)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    return torch.load(path, map_location=map_location, weights_only=True)
