"""Checkpoints of a training run (any reference model): atomic writes, safe reads and the random-number-generator states.

A checkpoint written by :func:`save_checkpoint` holds plain tensors, numbers, strings, lists and dicts
only, so :func:`load_checkpoint` reads it with ``torch.load(..., weights_only=True)`` and refuses anything
else. Every output file (checkpoints, ``config.json``, ``results.json``) is written by
:func:`atomic_write`: to a temporary file in the same folder, moved into place with :func:`os.replace`,
so an interruption leaves either the previous file or the new one, never a truncated file. The file gets
the mode a plain ``open(path, "w")`` would give it (``0o666`` less the umask). A temporary file left by a
killed process is removed by :func:`remove_orphan_temporaries` on the next start.
"""

from __future__ import annotations

import os
import pickle
import random
import re
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from reference_models.engine.errors import UserError

__all__ = [
    "CheckpointError",
    "seed_everything",
    "capture_rng_state",
    "restore_rng_state",
    "atomic_write",
    "save_checkpoint",
    "load_checkpoint",
    "remove_orphan_temporaries",
    "require_keys",
    "RUN_OUTPUTS",
]

#: The files a training run writes into its output folder (atomically).
RUN_OUTPUTS = ("last.pt", "best.pt", "config.json", "results.json")


class CheckpointError(UserError, ValueError):
    """A checkpoint that is missing, not a file, unreadable (truncated, corrupted) or refused (unsafe content)."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"checkpoint {self.path}: {problem}")


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


def _new_file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: ``0o666`` less the process umask."""
    try:  # Linux >= 4.7 reports the umask without changing it
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: read it by setting it, then put it back at once
    os.umask(mask)
    return 0o666 & ~mask


def _temporary_prefix(name: str) -> str:
    return f".{name}."


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], object]) -> Path:
    """Write ``path`` atomically: ``write(handle)`` fills a temporary file in the same folder, then ``os.replace``.

    The temporary file is named ``.<name>.<random>.tmp``, flushed and fsync'ed before the move, removed
    if ``write`` fails, and given the mode of a plainly created file (``mkstemp`` would leave ``0o600``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=_temporary_prefix(path.name), suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            if hasattr(os, "fchmod"):
                os.fchmod(handle.fileno(), _new_file_mode())
            else:  # pragma: no cover - Windows
                os.chmod(tmp_name, _new_file_mode())
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
        raise
    return path


def save_checkpoint(payload: dict[str, Any], path: str | Path) -> Path:
    """Write ``payload`` to ``path`` atomically (see :func:`atomic_write`)."""
    return atomic_write(path, lambda handle: torch.save(payload, handle))


def remove_orphan_temporaries(folder: str | Path, names: Iterable[str] = RUN_OUTPUTS) -> list[Path]:
    """Delete the temporary files that an interrupted :func:`atomic_write` of one of ``names`` left in ``folder``.

    Only call this while no other process writes into ``folder`` (the CLI holds the folder's lock).
    Returns the deleted paths.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    patterns = [re.compile(re.escape(_temporary_prefix(n)) + r"[^/\\]+\.tmp\Z") for n in names]
    legacy = {f"{n}.tmp" for n in names}  # an older writer used "<name>.tmp"
    removed = []
    for entry in sorted(folder.iterdir()):
        if entry.is_file() and (entry.name in legacy or any(p.match(entry.name) for p in patterns)):
            entry.unlink()
            removed.append(entry)
    return removed


_UNSUPPORTED = re.compile(r"(Unsupported (?:global|operand)[^\n.]*)")


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` with ``weights_only=True`` (no arbitrary code).

    Raises
    ------
    CheckpointError
        One line naming the file: missing, a folder, not a complete PyTorch checkpoint (truncated or
        corrupted), refused (it holds objects other than tensors and plain values), or not a dict.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(path, "no such file")
    if path.is_dir():
        raise CheckpointError(path, "is a folder, expected a checkpoint file such as best.pt or last.pt in it")
    try:
        complete = zipfile.is_zipfile(path)
    except OSError as exc:
        raise CheckpointError(path, f"cannot read it ({exc.strerror or exc})") from None
    if not complete:
        raise CheckpointError(path, "not a complete PyTorch checkpoint (truncated or corrupted)")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        found = _UNSUPPORTED.search(str(exc))
        detail = f" ({found.group(1).strip()})" if found else ""
        raise CheckpointError(
            path, f"refused: it holds objects other than tensors and plain values{detail}; only checkpoints "
                  "written by this trainer can be loaded"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(path, f"not a readable PyTorch checkpoint (truncated or corrupted: {first})") from None
    if not isinstance(state, dict):
        raise CheckpointError(path, f"expected a dict of training state, got {type(state).__name__}")
    return state


def require_keys(state: dict[str, Any], path: str | Path, keys: Iterable[str]) -> None:
    """Raise :class:`CheckpointError` naming the first of ``keys`` that ``state`` lacks."""
    missing = [k for k in keys if k not in state]
    if missing:
        raise CheckpointError(path, f"missing {', '.join(map(repr, missing))}: not a checkpoint of this trainer")
