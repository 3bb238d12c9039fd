"""The output folder of a training run: one run at a time, and no run silently replaced.

:class:`RunLock` holds an exclusive lock on ``<folder>/.lock`` while a run writes into the folder, so a
second run into the same folder is refused instead of interleaving its checkpoints with the first's. The
lock is an ``flock`` on POSIX systems, which the kernel drops when its process dies; the file also
records the holder's process id and host, so a lock left by a killed run is recognised, taken over and
reported. :func:`existing_run_files` tells whether a folder already holds a run (the CLI then asks for
``--resume`` or ``--overwrite``) and :func:`clear_run` removes one (``--overwrite``).
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path
from types import TracebackType

from reference_models.engine.checkpoint import RUN_OUTPUTS
from reference_models.engine.errors import UserError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: fall back to an exclusive-create lock file
    fcntl = None  # type: ignore[assignment]

__all__ = ["OutputFolderError", "RunLock", "LOCK_NAME", "prepare_output_folder", "existing_run_files", "clear_run",
           "holds_runs", "unused_folder"]

#: Name of the lock file inside an output folder.
LOCK_NAME = ".lock"


class OutputFolderError(UserError):
    """The output folder cannot be used: not a folder, not writable, in use, or holding a run."""


def prepare_output_folder(folder: str | Path, flag: str = "--output-dir") -> Path:
    """Create ``folder`` if needed; raise :class:`OutputFolderError` naming ``flag`` when it cannot hold outputs."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputFolderError(f"{flag} {folder}: exists and is not a folder") from None
    except OSError as exc:
        raise OutputFolderError(f"{flag} {folder}: cannot create it ({exc.strerror or exc})") from None
    if not folder.is_dir():
        raise OutputFolderError(f"{flag} {folder}: exists and is not a folder")
    return folder


def existing_run_files(folder: str | Path) -> list[str]:
    """The names of the run outputs (``last.pt``, ``best.pt``, ``config.json``, ``results.json``) in ``folder``."""
    folder = Path(folder)
    return [name for name in RUN_OUTPUTS if (folder / name).exists()]


def holds_runs(folder: str | Path) -> bool:
    """Whether ``folder`` or a folder below it holds a run output (:func:`existing_run_files`)."""
    folder = Path(folder)
    return folder.is_dir() and any(any(folder.rglob(name)) for name in RUN_OUTPUTS)


def unused_folder(folder: str | Path) -> Path:
    """``folder`` when it holds no run (:func:`holds_runs`), else the first of ``<folder>-2``, ``<folder>-3``, ...
    that holds none: where a command with a default output folder writes without replacing an earlier run."""
    folder = Path(folder)
    candidate, number = folder, 1
    while holds_runs(candidate) or (candidate.exists() and not candidate.is_dir()):
        number += 1
        candidate = folder.with_name(f"{folder.name}-{number}")
    return candidate


def clear_run(folder: str | Path) -> list[Path]:
    """Delete a previous run's outputs, ``train.log`` and TensorBoard event files from ``folder``; returns them."""
    folder = Path(folder)
    doomed = [folder / name for name in (*RUN_OUTPUTS, "train.log")]
    doomed += sorted((folder / "tensorboard").glob("events.out.tfevents.*"))
    removed = []
    for path in doomed:
        if path.is_file():
            path.unlink()
            removed.append(path)
    return removed


def _process_alive(pid: int) -> bool:
    """Whether a process with id ``pid`` exists on this host."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return False
    return True


def _parse_owner(text: str) -> tuple[int, str] | None:
    """``(pid, host)`` from a lock file's ``"<pid> <host>"`` text, or ``None`` when it holds neither."""
    parts = text.split()
    if len(parts) < 1 or not parts[0].isdigit():
        return None
    return int(parts[0]), (parts[1] if len(parts) > 1 else "")


class RunLock:
    """An exclusive lock on an output folder for the duration of a run; use as a context manager.

    Parameters
    ----------
    folder : str or Path
        The output folder (must exist).
    flag : str
        How the folder was given, for messages (``"--output-dir"``).

    Attributes
    ----------
    takeover : str or None
        After :meth:`acquire`, a message when the lock of a process that is no longer running was taken over.
    """

    def __init__(self, folder: str | Path, flag: str = "--output-dir") -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.flag = flag
        self.takeover: str | None = None
        self._fd: int | None = None

    # --- acquire / release -------------------------------------------------------------------------
    def acquire(self) -> RunLock:
        """Take the lock or raise :class:`OutputFolderError`; sets :attr:`takeover` when a stale lock was replaced."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this object")
        previous = self._acquire_flock() if fcntl is not None else self._acquire_exclusive()
        owner = _parse_owner(previous)
        if owner is not None:
            pid, host = owner
            self.takeover = (f"took over the lock of process {pid}" + (f" on {host}" if host else "")
                             + f", which is no longer running ({self.path})")
        return self

    def release(self) -> None:
        """Remove the lock file and drop the lock (idempotent)."""
        if self._fd is None:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    # --- helpers -----------------------------------------------------------------------------------
    def _open(self, flags: int) -> int:
        try:
            return os.open(self.path, flags, 0o666)
        except PermissionError as exc:
            raise OutputFolderError(
                f"{self.flag} {self.folder}: cannot write there ({exc.strerror or 'permission denied'})"
            ) from None
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                raise
            raise OutputFolderError(f"{self.flag} {self.folder}: cannot write there ({exc.strerror or exc})") from None

    def _in_use(self, text: str) -> OutputFolderError:
        owner = _parse_owner(text)
        who = "another run" if owner is None else f"process {owner[0]}" + (f" on {owner[1]}" if owner[1] else "")
        return OutputFolderError(
            f"{self.flag} {self.folder} is in use by {who} (lock file {self.path}); wait for it to finish or "
            f"choose another {self.flag}"
        )

    def _write_owner(self, fd: int) -> None:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
        os.fsync(fd)

    def _acquire_flock(self) -> str:
        """POSIX: ``flock`` the lock file (the kernel releases it when the holder dies); returns its old text."""
        while True:
            fd = self._open(os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                text = _read_fd(fd)
                os.close(fd)
                if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise self._in_use(text) from None
                raise OutputFolderError(
                    f"{self.flag} {self.folder}: cannot lock {self.path} ({exc.strerror})"
                ) from None
            try:  # the holder we waited on may have removed the file: lock the file that is there now
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            previous = _read_fd(fd)
            self._write_owner(fd)
            self._fd = fd
            return previous

    def _acquire_exclusive(self) -> str:  # pragma: no cover - used where fcntl is missing
        """Elsewhere: create the file exclusively; a file whose process is gone (same host) is replaced."""
        previous = ""
        for _ in range(2):
            try:
                fd = self._open(os.O_RDWR | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                previous = self.path.read_text(encoding="utf-8", errors="replace")
                owner = _parse_owner(previous)
                if owner is None or owner[1] != socket.gethostname() or _process_alive(owner[0]):
                    raise self._in_use(previous) from None
                self.path.unlink(missing_ok=True)
                continue
            self._write_owner(fd)
            self._fd = fd
            return previous
        raise self._in_use(previous)


def _read_fd(fd: int) -> str:
    """The (small) text content of an open file."""
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 4096).decode("utf-8", errors="replace")
