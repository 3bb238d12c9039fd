"""Command-line helpers shared by every reference model: one-line errors (exit status 2), argument types that
name what they expect, the run flags, the output folder's claim and strict JSON.

A reference model's ``main`` parses its arguments with an :class:`OneLineParser` and hands the chosen
subcommand to :func:`run_main`, which turns every :class:`~reference_models.engine.errors.UserError` (and an
``OSError`` on a named file) into one ``error: <message>`` line on standard error and exit status 2. A
traceback means a bug. A command run on the CPU first chooses its thread count
(:func:`reference_models.engine.threads.use_cpu_threads`: ``--threads``, else ``OMP_NUM_THREADS``, else the free
cores).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reference_models.engine import host_memory
from reference_models.engine.checkpoint import atomic_write
from reference_models.engine.distributed import DEFAULT_TIMEOUT_S
from reference_models.engine.errors import TrainingDivergedError, UserError
from reference_models.engine.host_memory import DEFAULT_HOST_MEMORY, HOST_MEMORY_POLICIES
from reference_models.engine.run_folder import OutputFolderError, existing_run_files
from reference_models.engine.threads import use_cpu_threads

__all__ = [
    "EXIT_USER_ERROR",
    "OneLineParser",
    "int_at_least",
    "positive_number",
    "device_arg",
    "add_device_arguments",
    "add_threads_argument",
    "add_output_arguments",
    "add_distributed_arguments",
    "add_host_memory_argument",
    "add_run_arguments",
    "claim_output_folder",
    "read_json_file",
    "run_main",
    "print_line",
    "user_message",
    "write_text",
    "write_json",
    "finite_or_none",
]

#: Exit status of a problem the user can fix (one line on standard error, no traceback).
EXIT_USER_ERROR = 2


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on standard error (exit status 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message} (see --help)\n")


# --- argument types: each names what it expects and what it got ---------------------------------------
def int_at_least(minimum: int, why: str = "") -> Callable[[str], int]:
    """An argparse type: an integer ``>= minimum`` (``why`` is appended to the message when it is smaller)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}{why}, got {value}")
        return value

    return parse


def positive_number(text: str) -> float:
    """An argparse type: a finite number ``> 0`` (a learning rate)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def device_arg(text: str) -> str:
    """An argparse type: a device this machine has (``cpu``, ``cuda``/``cuda:N`` with CUDA, ``mps`` where available)."""
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"not a torch device: {text!r} (e.g. cpu, cuda, cuda:1)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise argparse.ArgumentTypeError(
                f"{text!r}: CUDA is not available on this machine (torch {torch.__version__}); use --device cpu"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise argparse.ArgumentTypeError(
                f"{text!r}: this machine has {torch.cuda.device_count()} CUDA device(s), numbered from 0"
            )
    elif device.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise argparse.ArgumentTypeError(f"{text!r}: MPS is not available on this machine; use --device cpu")
    return text


# --- the run flags ----------------------------------------------------------------------------------
def add_device_arguments(parser: argparse.ArgumentParser) -> None:
    """``--device``, ``--seed``, ``--num-workers`` and ``--no-progress``."""
    parser.add_argument("--device", type=device_arg, default="cuda" if torch.cuda.is_available() else "cpu",
                        help="torch device (default: cuda when available, else cpu)")
    parser.add_argument("--seed", type=int_at_least(0), default=0, help="seed of every generator and the batch order")
    parser.add_argument("--num-workers", type=int_at_least(0), default=0, help="data-loader worker processes")
    parser.add_argument("--no-progress", action="store_true", help="hide tqdm progress bars")
    add_threads_argument(parser)


def add_threads_argument(parser: argparse.ArgumentParser, at_most: int | None = None) -> None:
    """``--threads N``: CPU threads of a ``--device cpu`` run (:mod:`reference_models.engine.threads`; by default
    chosen from the cores this process may use and the load on them, at most ``at_most``)."""
    cap = f", at most {at_most}" if at_most else ""
    parser.add_argument("--threads", type=int_at_least(1), metavar="N",
                        help="CPU threads (default: OMP_NUM_THREADS when set, else the cores this process may use "
                             f"less the load other processes put on them{cap})")
    parser.set_defaults(threads_at_most=at_most)


def add_output_arguments(parser: argparse.ArgumentParser, default: Path) -> None:
    """``--output-dir`` (default ``default``) and the exclusive ``--resume`` / ``--overwrite``."""
    parser.add_argument("--output-dir", type=Path, default=default, help="checkpoints, log, results.json")
    again = parser.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="continue the run in <output-dir> from its last.pt")
    again.add_argument("--overwrite", action="store_true",
                       help="replace the run in <output-dir> (its checkpoints, log and results) with a new one")


def add_distributed_arguments(parser: argparse.ArgumentParser) -> None:
    """``--dist-timeout``: how long a process of a ``torchrun`` run waits for the others
    (:mod:`reference_models.engine.distributed`)."""
    parser.add_argument("--dist-timeout", type=positive_number, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help="under torchrun: seconds a process waits for the others (start, validation on rank 0, "
                             f"every collective) before the run stops (default: {DEFAULT_TIMEOUT_S:g})")


def add_host_memory_argument(parser: argparse.ArgumentParser) -> None:
    """``--host-memory POLICY``: the C library's allocator policy of the training process
    (:mod:`reference_models.engine.host_memory`; the ``host_memory`` argument of the engine's ``Trainer``)."""
    parser.add_argument("--host-memory", choices=HOST_MEMORY_POLICIES, default=DEFAULT_HOST_MEMORY, metavar="POLICY",
                        help=f"allocator policy: {', '.join(HOST_MEMORY_POLICIES)} (default: {DEFAULT_HOST_MEMORY}: "
                             "the command starts again with it preloaded, as PyTorch's CPU launcher does, or says "
                             "in one line that it is not installed and uses trim; trim: glibc's heaps returned after "
                             "every step; mapped: every block of 1 MiB or more freed at once; off: glibc as it is); "
                             "never changes a result")


def add_run_arguments(parser: argparse.ArgumentParser, default_output: Path | str = "runs/train") -> None:
    """Every flag of a training command: :func:`add_device_arguments`, ``--epochs``,
    :func:`add_output_arguments` and ``--amp``."""
    add_device_arguments(parser)
    parser.add_argument("--epochs", type=int_at_least(1), help="override the preset's number of epochs")
    add_output_arguments(parser, Path(default_output))
    parser.add_argument("--amp", action="store_true", help="mixed precision (torch.autocast)")


def claim_output_folder(out: Path, *, resume: bool, overwrite: bool) -> None:
    """Refuse a folder that holds a run unless ``--resume`` or ``--overwrite`` says what to do with it."""
    found = existing_run_files(out)
    if not found or overwrite:
        return
    if not resume:
        raise OutputFolderError(
            f"--output-dir {out} already holds a run ({', '.join(found)}); add --resume to continue it or "
            f"--overwrite to replace it"
        )
    if "last.pt" not in found and ({"best.pt", "results.json"} & set(found)):
        raise OutputFolderError(
            f"--output-dir {out} holds a run ({', '.join(found)}) but no last.pt to resume from; add --overwrite "
            f"(instead of --resume) to replace it"
        )


def read_json_file(path: Path, flag: str) -> Any:
    """The JSON value in the file ``path`` (UTF-8, a byte-order mark allowed), or a :class:`UserError` whose
    one line names ``<flag> <path>`` and the problem (missing, a folder, not UTF-8, not JSON and where)."""
    where = f"{flag} {path}"
    if not path.exists():
        raise UserError(f"{where}: no such file")
    if path.is_dir():
        raise UserError(f"{where}: is a folder, expected a JSON file")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(f"{where}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte offset {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None


# --- running a subcommand ----------------------------------------------------------------------------
def run_main(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace, *, program: bool = False) -> int:
    """Run ``handler(args)``; a :class:`UserError` or an ``OSError`` on a named file becomes one
    ``error: ...`` line on standard error and exit status 2. Returns the exit status.

    A command with ``--device`` first starts again with its allocator preloaded when ``program`` (the
    command line is this process's own, not a caller's ``argv``) and its ``--host-memory`` policy (else the
    engine's default) is a preloaded allocator
    (:func:`reference_models.engine.host_memory.start_with_allocator`; one line on standard error when it is not
    installed), and on the CPU sets its thread count
    (:func:`reference_models.engine.threads.use_cpu_threads`)."""
    try:
        if program and hasattr(args, "device"):
            _start_allocator(getattr(args, "host_memory", None))
        _use_threads(args)
        return handler(args)
    except UserError as exc:
        if not getattr(exc, "quiet", False):  # quiet: another process of the run printed the reason
            print_line("error", user_message(exc))
    except OSError as exc:  # reading or writing a named file failed (permissions, disk full, ...)
        if exc.filename is None:
            raise
        print_line("error", f"{exc.filename}: {exc.strerror or exc}")
    return EXIT_USER_ERROR


def _start_allocator(policy: str | None) -> None:
    """Start the command again with the preloaded allocator of ``policy`` (at most once); one line where it
    cannot be preloaded."""
    why_not = host_memory.start_with_allocator(DEFAULT_HOST_MEMORY if policy is None else policy)
    if why_not is not None and os.environ.get("RANK", "0") == "0":  # under torchrun, one line from rank 0 only
        print_line("note", why_not)


def _use_threads(args: argparse.Namespace) -> None:
    """For a command on the CPU: ``torch.set_num_threads`` with ``--threads``, ``OMP_NUM_THREADS`` or the free
    cores (:func:`reference_models.engine.threads.use_cpu_threads`); one line on standard error when the load
    from other processes made it fewer."""

    device = getattr(args, "device", None)
    if not isinstance(device, str) or torch.device(device).type != "cpu":
        return
    choice = use_cpu_threads(getattr(args, "threads", None), at_most=getattr(args, "threads_at_most", None))
    if choice.fewer_for_load:
        print_line("note", f"{choice.reason} (--threads N or OMP_NUM_THREADS sets it)")


def user_message(exc: UserError) -> str:
    """The one-line message of a user error, phrased for the command line."""
    if isinstance(exc, TrainingDivergedError):
        return f"loss became non-finite at epoch {exc.epoch} step {exc.step}; lower --lr (it is {exc.lr:g})"
    return str(exc)


def print_line(kind: str, message: str) -> None:
    """``<kind>: <message>`` as exactly one line on standard error."""
    text = re.sub(r"\s*[\r\n]+\s*", " ", str(message).strip())
    print(f"{kind}: {text}", file=sys.stderr, flush=True)


# --- output ---------------------------------------------------------------------------------------
def finite_or_none(value: Any) -> Any:
    """Standard JSON: NaN/inf (e.g. a precision of a type never identified) become ``None``; other NumPy
    scalars become Python numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def write_text(path: str | Path, text: str, flag: str | None = None) -> None:
    """Write ``text`` to ``path`` atomically; an OS error becomes a :class:`UserError` naming the file (and flag)."""
    path = Path(path)
    try:
        atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))
    except OSError as exc:
        where = f"{flag} {path}" if flag else str(path)
        raise UserError(f"{where}: cannot write it ({exc.strerror or exc})") from None


def write_json(path: str | Path, data: dict[str, Any], flag: str | None = None) -> None:
    """Strict JSON (NaN/inf as ``null``, sorted keys, indented), written atomically."""
    text = json.dumps(finite_or_none(data), indent=2, sort_keys=True, allow_nan=False) + "\n"
    write_text(path, text, flag)
