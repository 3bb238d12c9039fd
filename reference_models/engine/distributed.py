"""Multi-process training of any reference model under ``torchrun``: the process group, who writes, the shards.

``torchrun --nproc_per_node N -m reference_models.<task> train ...`` starts ``N`` processes (ranks) with
``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` in their environment. :func:`process_group_from_environment`
turns that environment into a :class:`DistributedRun`: the process group (NCCL on CUDA, where each rank
uses ``cuda:LOCAL_RANK``; gloo elsewhere) initialised with a bounded timeout, so that a rank whose peer
died or hangs stops after ``timeout`` seconds instead of waiting forever. Without that environment (a
plain ``python -m ...``, or ``torchrun`` with one process) the run is the single-process run, untouched.

What the engine does with a :class:`DistributedRun` (:class:`~reference_models.engine.trainer.Trainer`):
every rank builds the same model, trains it under ``DistributedDataParallel`` on its shard of each global
batch (:func:`shard_bounds`: contiguous, in rank order, so that concatenating the ranks' shards gives the
single-process batch) and loads the checkpoint on resume; rank 0 alone (:attr:`DistributedRun.is_writer`)
claims and writes the run folder (checkpoints, ``train.log``, TensorBoard, ``results.json``) and
validates, and sends the selection metric to the others (:meth:`DistributedRun.broadcast_value`), so that
every rank takes the same early-stopping decision. What rank 0 alone may refuse (a folder in use, a run
there already) every rank learns through :meth:`DistributedRun.on_writer`: rank 0 reports the problem in
one line, the others stop quietly (:class:`PeerStoppedError`).

The end of a run is bounded too (:meth:`~reference_models.engine.DistributedRun.close`): the ranks first meet at a barrier that waits
at most ``timeout`` seconds (on gloo a ``monitored_barrier``, whose error names the ranks that did not
arrive), then the process group is destroyed under a watchdog. gloo's teardown can block in native code
when a peer's connection is half closed; a rank whose teardown has not returned after
``TEARDOWN_GRACE_S`` seconds leaves it behind with one warning line (and ``exit_process`` ends the
process without waiting for it), and a teardown that never gives Python control back ends the process with
status 1 after a further ``TEARDOWN_GRACE_S`` seconds instead of leaving it waiting forever.
"""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import torch
import torch.distributed as dist

from reference_models.engine.errors import UserError

__all__ = [
    "DistributedRun",
    "PeerStoppedError",
    "ProcessGroupError",
    "DEFAULT_TIMEOUT_S",
    "TEARDOWN_GRACE_S",
    "exit_process",
    "launched_ranks",
    "process_group_from_environment",
    "rank_device",
    "shard_bounds",
    "quiet_logger",
]

#: Seconds a collective (and the start of the process group) waits for the other ranks before it fails.
DEFAULT_TIMEOUT_S = 1800.0

#: Seconds the destruction of the process group may take (after every rank has met) before it is left behind.
TEARDOWN_GRACE_S = 30.0

#: Teardowns that did not return within the grace time (daemon threads, possibly blocked in native code).
_ABANDONED_TEARDOWNS: list[threading.Thread] = []

T = TypeVar("T")


class ProcessGroupError(UserError):
    """The process group could not start, or a collective failed: another rank died or did not answer in time."""


class PeerStoppedError(UserError):
    """This rank stops because another rank (which reported why in one line) could not go on.

    ``quiet``: the command line prints nothing for it, so that a run ends with the failing rank's line only.
    """

    quiet = True


@dataclass(frozen=True)
class DistributedRun:
    """One process's place in a multi-process run (the defaults: a single-process run).

    Attributes
    ----------
    rank, world_size, local_rank : int
        As ``torchrun`` sets them (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``).
    device : torch.device
        Where this rank trains (``cuda:LOCAL_RANK`` under ``torchrun`` on CUDA).
    timeout_s : float
        How long a collective, and the meeting of the ranks in :meth:`close`, waits for the others.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def is_distributed(self) -> bool:
        """Whether several processes train together (a process group is initialised)."""
        return self.world_size > 1

    @property
    def is_writer(self) -> bool:
        """Whether this rank writes the run folder (rank 0)."""
        return self.rank == 0

    def close(self) -> None:
        """End this rank's part in the process group (idempotent; e.g. once training is over, so that rank 0
        evaluates as a single process and the other ranks may exit). Nothing with one process.

        Every rank first waits for the others, at most :attr:`timeout_s` seconds; then the group is destroyed
        under the watchdog described in the module's introduction.

        Raises
        ------
        ProcessGroupError
            When a rank did not arrive within :attr:`timeout_s` (it died, or it left the run early); the
            group is destroyed all the same.
        """
        self._teardown(meet=True)

    def _teardown(self, meet: bool) -> None:
        """:meth:`close`; ``meet=False`` (an error is on its way, and a peer may be inside another collective,
        which a barrier must not be mixed with) destroys the group at once."""
        if not (self.is_distributed and dist.is_initialized()):
            return
        try:
            if meet:
                self._meet_every_rank()
        except (dist.DistError, RuntimeError) as exc:
            raise ProcessGroupError(f"rank {self.rank}: the ranks did not all reach the end of the run within "
                                    f"{self.timeout_s:g} s ({_first_line(exc)})") from None
        finally:
            _destroy_process_group_bounded(self.rank, TEARDOWN_GRACE_S)  # read at call time: tests shorten it

    def _meet_every_rank(self) -> None:
        timeout = datetime.timedelta(seconds=float(self.timeout_s))
        if dist.get_backend() == "gloo":  # rank 0 names the ranks that do not arrive
            dist.monitored_barrier(timeout=timeout, wait_all_ranks=True)
        else:
            dist.barrier()

    def barrier(self) -> None:
        """Wait for every rank (nothing with one process)."""
        if self.is_distributed:
            dist.barrier()

    def broadcast_value(self, value: float) -> float:
        """Rank 0's ``value`` on every rank (as a float64; itself with one process)."""
        if not self.is_distributed:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.broadcast(tensor, src=0)
        return float(tensor.item())

    def all_succeeded(self, ok: bool) -> bool:
        """Whether ``ok`` holds on every rank (one all-reduce; ``ok`` itself with one process)."""
        if not self.is_distributed:
            return ok
        flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())

    def on_writer(self, action: Callable[[], T]) -> T | None:
        """Run ``action`` on rank 0 only and tell every rank whether it succeeded.

        Rank 0 returns ``action()``'s result or raises its error; the other ranks return ``None``, or raise
        :class:`PeerStoppedError` when rank 0's action failed. With one process: ``action()``.
        """
        if not self.is_distributed:
            return action()
        result: T | None = None
        ok = False
        try:
            if self.is_writer:
                result = action()
            ok = True
        finally:
            agreed = self.all_succeeded(ok)
        if not agreed:
            raise PeerStoppedError(f"rank {self.rank}: rank 0 stopped the run (it says why)")
        return result

    def on_every_rank(self, action: Callable[[], T]) -> T:
        """Run ``action`` on every rank and go on only if it succeeded on all of them.

        A rank whose ``action`` failed raises its own error (one line from each rank that failed); the
        ranks where it succeeded raise :class:`PeerStoppedError` (quiet) instead of waiting at the next
        collective for a rank that left. With one process: ``action()``.
        """
        if not self.is_distributed:
            return action()
        ok = False
        try:
            result = action()
            ok = True
        finally:
            agreed = self.all_succeeded(ok)
        if not agreed:
            raise PeerStoppedError(f"rank {self.rank}: another rank stopped the run (it says why)")
        return result

    def broadcast_object(self, value: T) -> T:
        """Rank 0's ``value`` (a plain picklable value) on every rank; ``value`` itself with one process.

        The value travels between the run's own processes (``torch.distributed.broadcast_object_list``).
        """
        if not self.is_distributed:
            return value
        box: list[Any] = [value if self.is_writer else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather_to_writer(self, value: Any) -> list[Any] | None:
        """Every rank's ``value`` (plain values and CPU tensors) in rank order on rank 0, ``None`` elsewhere.

        The values travel between the run's own processes (``torch.distributed.gather_object``); with one
        process: ``[value]``.
        """
        if not self.is_distributed:
            return [value]
        out: list[Any] | None = [None] * self.world_size if self.is_writer else None
        dist.gather_object(value, out, dst=0)
        return out


def launched_ranks(environ: Mapping[str, str] | None = None) -> tuple[int, int, int] | None:
    """``(rank, world_size, local_rank)`` from a launcher's environment, or ``None`` for a single process.

    ``None`` when ``WORLD_SIZE`` is unset or 1 (``torchrun --nproc_per_node 1`` is the single-process run).

    Raises
    ------
    ProcessGroupError
        When the variables are not integers or ``RANK`` / ``LOCAL_RANK`` are missing or out of range.
    """
    env = os.environ if environ is None else environ
    if env.get("WORLD_SIZE", "1").strip() in ("", "1"):
        return None
    try:
        world, rank = int(env["WORLD_SIZE"]), int(env["RANK"])
        local = int(env.get("LOCAL_RANK", env["RANK"]))
    except (KeyError, ValueError):
        raise ProcessGroupError(
            f"WORLD_SIZE={env.get('WORLD_SIZE')!r} asks for a multi-process run, but RANK={env.get('RANK')!r} and "
            f"LOCAL_RANK={env.get('LOCAL_RANK')!r} are not integers: start it with torchrun"
        ) from None
    if not (world >= 2 and 0 <= rank < world and 0 <= local < world):
        raise ProcessGroupError(f"RANK={rank}, LOCAL_RANK={local} do not fit WORLD_SIZE={world}")
    return rank, world, local


def rank_device(device: str | torch.device, local_rank: int) -> torch.device:
    """The device of the process ``local_rank`` on its machine: ``cuda:LOCAL_RANK`` for ``cuda``, else ``device``.

    Raises
    ------
    ProcessGroupError
        For a numbered CUDA device (each process takes its own), or when the machine has fewer CUDA devices
        than ``local_rank + 1``.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return device
    if device.index is not None:
        raise ProcessGroupError(f"--device {device} under torchrun: each process uses cuda:LOCAL_RANK; pass --device cuda")
    if local_rank >= torch.cuda.device_count():
        raise ProcessGroupError(f"LOCAL_RANK={local_rank} but this machine has {torch.cuda.device_count()} CUDA "
                                f"device(s): start at most that many processes per machine")
    return torch.device("cuda", local_rank)


@contextlib.contextmanager
def process_group_from_environment(device: str | torch.device,
                                   timeout_s: float = DEFAULT_TIMEOUT_S) -> Iterator[DistributedRun]:
    """The :class:`DistributedRun` of this process, with its process group for the duration of the block.

    Under ``torchrun`` (``WORLD_SIZE`` > 1): initialises the default process group from the environment
    (``env://``), NCCL when ``device`` is CUDA (this rank then uses ``cuda:LOCAL_RANK``) and gloo
    otherwise, with ``timeout_s`` for the start and for every collective; destroys it at the end. A
    collective that fails (a rank died, or did not answer within ``timeout_s``) becomes a one-line
    :class:`ProcessGroupError`. Otherwise: ``DistributedRun(device=device)``, and nothing else happens.
    """
    ranks = launched_ranks()
    if ranks is None:
        yield DistributedRun(device=torch.device(device))
        return
    rank, world, local = ranks
    run_device = rank_device(device, local)
    backend = "nccl" if run_device.type == "cuda" else "gloo"
    if run_device.type == "cuda":
        torch.cuda.set_device(run_device)
    timeout = datetime.timedelta(seconds=float(timeout_s))
    device_option: dict[str, Any] = {"device_id": run_device} if backend == "nccl" else {}
    try:
        dist.init_process_group(backend, timeout=timeout, rank=rank, world_size=world, **device_option)
    except (dist.DistError, RuntimeError, ValueError) as exc:
        raise ProcessGroupError(f"rank {rank}: cannot start the {backend} process group of {world} processes "
                                f"({_first_line(exc)})") from None
    run = DistributedRun(rank, world, local, run_device, float(timeout_s))
    try:
        yield run
    except RuntimeError as exc:
        run._teardown(meet=False)
        if not _from_communication(exc):
            raise
        raise ProcessGroupError(f"rank {rank}: another process of the run failed or did not answer within "
                                f"{timeout_s:g} s ({_first_line(exc)})") from None
    except BaseException:
        run._teardown(meet=False)
        raise
    run.close()


def _destroy_process_group_bounded(rank: int, grace_s: float) -> None:
    """``dist.destroy_process_group()`` that returns within about ``grace_s`` seconds whatever gloo does.

    The destruction runs in a daemon thread. If it has not returned after ``grace_s`` seconds, this rank goes
    on without it (one warning line; ``exit_process`` later ends the process without waiting for it). If
    the thread keeps Python's lock, nothing in Python can run again: ``faulthandler`` (a native watchdog)
    then prints where each thread was and ends the process with status 1 after another ``grace_s`` seconds.
    """
    thread = threading.Thread(target=dist.destroy_process_group, name=f"rank{rank}-teardown", daemon=True)
    stream = _native_stream()
    if stream is not None:
        faulthandler.dump_traceback_later(2 * grace_s, exit=True, file=stream)
    try:
        thread.start()
        thread.join(grace_s)
    finally:
        if stream is not None:
            faulthandler.cancel_dump_traceback_later()
    if thread.is_alive():
        _ABANDONED_TEARDOWNS.append(thread)
        print(f"warning: rank {rank}: the process group's teardown did not finish within {grace_s:g} s; "
              "leaving it behind", file=sys.stderr, flush=True)


def _native_stream() -> Any:
    """Standard error as a stream with a file descriptor (``faulthandler`` writes with ``write(2)``), even when
    ``sys.stderr`` is redirected to a Python object; ``None`` when the process has none."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both an OSError and a ValueError
            continue
    return None


def exit_process(status: int) -> NoReturn:
    """End the process with ``status``; without waiting for a process-group teardown left behind by
    :meth:`~reference_models.engine.DistributedRun.close` (which could keep the interpreter from exiting), when there is one."""
    if any(thread.is_alive() for thread in _ABANDONED_TEARDOWNS):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    raise SystemExit(status)


def _from_communication(exc: RuntimeError) -> bool:
    """Whether ``exc`` comes from the process group (a ``DistError``, or gloo's and NCCL's plain
    ``RuntimeError`` when a peer's connection drops or times out) rather than from the training code."""
    text = str(exc)
    return isinstance(exc, dist.DistError) or any(mark in text for mark in ("gloo/transport", "/gloo/", "NCCL"))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def shard_bounds(size: int, rank: int, world_size: int) -> tuple[int, int]:
    """``(start, stop)`` of ``rank``'s contiguous shard of ``size`` items split over ``world_size`` ranks.

    The first ``size % world_size`` ranks get one item more; the shards in rank order cover ``0:size``,
    so the concatenation of every rank's shard of a global batch is that batch, in its order.

    >>> [shard_bounds(8, r, 3) for r in range(3)]
    [(0, 3), (3, 6), (6, 8)]
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size - 1}], got {rank}")
    base, extra = divmod(int(size), world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def quiet_logger(name: str, rank: int) -> logging.Logger:
    """The logger of a rank that does not write the run folder: warnings and errors only, on standard error,
    marked ``[rank N]``."""
    logger = logging.getLogger(f"reference_models.{name}.rank{rank}")
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    if not logger.handlers:
        stream = logging.StreamHandler()
        stream.setFormatter(logging.Formatter(f"[rank {rank}] %(message)s"))
        logger.addHandler(stream)
    return logger
