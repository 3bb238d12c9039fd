"""Shared libraries compiled at run time from source text, cached per user.

The opt-in fused Sinkhorn kernel (``EVIDENTIAL_PRVR_SINKHORN``) is built with it, and so can a training codebase's
own native helpers be (the reference engine's CPU memory pool is). A library is built once per key (its source,
flags, compiler and platform, hashed into ``stem`` by the caller) into the first writable cache folder,
``$XDG_CACHE_HOME/evidential_prvr`` (default ``~/.cache/evidential_prvr``) or a per-user folder in the temporary
directory, and written atomically, so that processes building it at once (torchrun ranks) never load half a file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

__all__ = ["OUTPUT", "SOURCE", "build_cached_library", "build_library", "cache_dirs", "find_compiler"]

#: Placeholder of the source file's path in a build command.
SOURCE = "{source}"
#: Placeholder of the output library's path in a build command.
OUTPUT = "{output}"


def find_compiler(variable: str, names: Sequence[str]) -> str | None:
    """The path of the compiler named by the environment ``variable`` (e.g. ``"CC"``), else of the first of
    ``names`` on ``PATH``; ``None`` when there is none."""
    for name in (os.environ.get(variable), *names):
        if name:
            path = shutil.which(name)
            if path:
                return path
    return None


def cache_dirs() -> list[str]:
    """The folders a library may be built into, in the order they are tried."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    return [os.path.join(base, "evidential_prvr"), os.path.join(tempfile.gettempdir(), f"evidential_prvr_{user}")]


def build_library(source: str, stem: str, commands: Sequence[Sequence[str]], *, suffix: str,
                  folder: str, timeout: float = 180.0) -> str:
    """Build ``source`` into ``folder/stem.so`` unless it is there, and return the library's path.

    Parameters
    ----------
    source : str
        The C or C++ source text.
    stem : str
        The library's file name without ``.so``; the caller makes it unique to what the build depends on.
    commands : sequence of sequence of str
        Compiler invocations tried in turn until one succeeds, with :data:`SOURCE` and :data:`OUTPUT` where the
        source and output paths go (e.g. native flags first, then portable ones).
    suffix : str
        The source file's suffix (``".c"``, ``".cpp"``).
    folder : str
        The cache folder (one of :func:`cache_dirs`); created when missing.
    timeout : float
        Seconds each command may take.

    Raises
    ------
    RuntimeError
        Every command failed; the message holds the last line of the last compiler's output.
    """
    if not commands:
        raise ValueError("commands must hold at least one compiler invocation, got none")
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, stem + ".so")
    if os.path.isfile(target):
        return target
    fd, path = tempfile.mkstemp(suffix=suffix, dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(source)
    partial = path[: -len(suffix)] + ".so.partial"
    try:
        error = "failed"
        for command in commands:
            argv = [path if a == SOURCE else partial if a == OUTPUT else a for a in command]
            result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
            if result.returncode == 0:
                os.replace(partial, target)  # atomic: concurrent builders never see half a file
                return target
            error = ((result.stderr or result.stdout).strip().splitlines()[-1:] or ["failed"])[0]
        raise RuntimeError(f"compiler {commands[-1][0]} failed: {error}")
    finally:
        for leftover in (path, partial):
            with contextlib.suppress(OSError):
                os.remove(leftover)


def build_cached_library(source: str, stem: str, commands: Sequence[Sequence[str]], *, suffix: str,
                         timeout: float = 180.0) -> str:
    """:func:`build_library` into the first of :func:`cache_dirs` where it succeeds; return the library's path.

    Raises ``RuntimeError`` with every folder's failure when none succeeds.
    """
    errors = []
    for folder in cache_dirs():
        try:
            return build_library(source, stem, commands, suffix=suffix, folder=folder, timeout=timeout)
        except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
            errors.append(str(exc))
    raise RuntimeError("; ".join(errors))
