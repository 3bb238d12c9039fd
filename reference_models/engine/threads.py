"""How many CPU threads a command's PyTorch work uses: the cores this process may run on, less those that other
processes keep busy.

PyTorch's CPU kernels split their work over ``torch.get_num_threads()`` threads (by default one per physical
core) and wait for the slowest at the end of every parallel region. When another process keeps those cores
busy, one of the threads is always waiting for a core, so every region waits with it: on a two-core machine, a
small training run beside one other two-thread PyTorch job took many times as long with two threads as with
one. :func:`choose_cpu_threads` therefore takes, in this order:

1. the number given (a command's ``--threads``);
2. ``OMP_NUM_THREADS`` when the environment sets it to a positive integer (the user's choice, as PyTorch takes it);
3. the cores this process may use (``os.sched_getaffinity``, e.g. under ``taskset`` or a container's CPU set),
   less the cores other processes keep busy right now, rounded to whole cores, at least one, at most
   ``at_most`` when given. "Right now" is :func:`busy_cores`: the busy time of those cores in ``/proc/stat``
   over half a second while this process sleeps, less the CPU time this process itself used meanwhile.

The one-minute load average is not read: it trails the machine by most of a minute both ways. Right after an
install in the same command line it still counts the install, which is over, and so took a thread from the
README's demo on an idle two-core machine; and a job that started seconds ago is not in it yet.
Where ``/proc/stat`` cannot be read (not Linux) every allowed core is used. The count is chosen once, when a
command starts; a job that starts later is not seen.
:func:`use_cpu_threads` applies the choice (``torch.set_num_threads``); every reference model's command does so
for ``--device cpu`` before it starts (``reference_models.engine.run_main``).
"""

from __future__ import annotations

import math
import os
import resource
import time
from dataclasses import dataclass

import torch

__all__ = ["ThreadChoice", "choose_cpu_threads", "use_cpu_threads", "busy_cores"]

#: How long :func:`busy_cores` watches the cores, in seconds.
_BUSY_WINDOW_S = 0.5


@dataclass(frozen=True)
class ThreadChoice:
    """A thread count and where it came from.

    Attributes
    ----------
    threads : int
        The number of threads, at least 1.
    reason : str
        One line saying why (the flag, the environment, or the cores and the load seen).
    fewer_for_load : bool
        Whether the load from other processes made the count smaller than the cores (and ``at_most``) allow.
    """

    threads: int
    reason: str
    fewer_for_load: bool = False


def _core_times(cores: set[int]) -> tuple[float, float] | None:
    """Busy and total clock ticks of ``cores`` since boot (``/proc/stat``), or ``None`` where unreadable."""
    busy = total = 0.0
    try:
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                name, *ticks = line.split()
                if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
                    values = [float(t) for t in ticks[:8]]  # user nice system idle iowait irq softirq steal
                    total += sum(values)
                    busy += sum(values) - values[3] - values[4]
    except (OSError, ValueError, IndexError):
        return None
    return (busy, total) if total > 0 else None


def _own_cpu_s() -> float:
    """User + system CPU time of all of this process's threads so far, in seconds."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def busy_cores(cores: set[int], window_s: float = _BUSY_WINDOW_S) -> float | None:
    """How many of ``cores`` (CPU numbers) other processes keep busy now.

    The busy fraction of ``cores`` over ``window_s`` seconds (``/proc/stat``), during which the calling thread
    sleeps, times their number, less the CPU time this process's other threads used in the window (as cores).
    ``None`` where ``/proc/stat`` cannot be read or names none of ``cores``.
    """
    before, own_before = _core_times(cores), _own_cpu_s()
    time.sleep(window_s)
    after, own_after = _core_times(cores), _own_cpu_s()
    if before is None or after is None or after[1] <= before[1]:
        return None
    busy = (after[0] - before[0]) / (after[1] - before[1]) * len(cores)
    own = (own_after - own_before) / window_s if window_s > 0 else 0.0
    return min(max(busy - own, 0.0), float(len(cores)))


def _allowed_cores() -> set[int] | None:
    """The CPU numbers this process may run on, or ``None`` where the system does not say (not Linux)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def choose_cpu_threads(
    requested: int | None = None,
    *,
    at_most: int | None = None,
    environ: dict[str, str] | None = None,
) -> ThreadChoice:
    """The number of CPU threads to use (see the module's description for the order of the rules).

    Parameters
    ----------
    requested : int or None
        A thread count given by the user (``--threads``): used as given.
    at_most : int or None
        An upper bound on the count chosen from the cores and the load (not on ``requested`` or
        ``OMP_NUM_THREADS``).
    environ : dict or None
        The environment to read ``OMP_NUM_THREADS`` from (default ``os.environ``).

    Returns
    -------
    ThreadChoice
        The count and a one-line reason.
    """
    for name, value in (("requested", requested), ("at_most", at_most)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive int or None, got {value!r}")
    if requested is not None:
        return ThreadChoice(requested, f"{requested} thread(s) as given")
    setting = (os.environ if environ is None else environ).get("OMP_NUM_THREADS", "").strip()
    if setting.isdigit() and int(setting) > 0:
        return ThreadChoice(int(setting), f"{int(setting)} thread(s) from OMP_NUM_THREADS")
    allowed = _allowed_cores()
    cores = len(allowed) if allowed else os.cpu_count() or 1
    limit = cores if at_most is None else min(cores, at_most)
    others = busy_cores(allowed) if allowed else None
    if others is None:
        return ThreadChoice(limit, f"{limit} thread(s): {cores} core(s) available, their use unknown")
    threads = max(1, min(limit, math.floor(cores - others + 0.5)))
    return ThreadChoice(threads, f"{threads} thread(s): {cores} core(s) available, {others:.2f} kept busy by "
                                 "other processes", fewer_for_load=threads < limit)


def use_cpu_threads(requested: int | None = None, *, at_most: int | None = None) -> ThreadChoice:
    """:func:`choose_cpu_threads` and ``torch.set_num_threads`` with its count; returns the choice."""
    choice = choose_cpu_threads(requested, at_most=at_most)
    torch.set_num_threads(choice.threads)
    return choice
