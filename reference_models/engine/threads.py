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
   less the load on them from other processes, rounded to whole cores, at least one, at most ``at_most`` when
   given. The load is the larger of the one-minute load average (``os.getloadavg``) minus this process's own
   share of it (:func:`own_load`) and the cores kept busy right now (``/proc/stat`` over a quarter of a second
   while this process sleeps, :func:`busy_cores`): the load average trails a job that started seconds ago by
   most of a minute.

The one-minute load average counts every runnable thread of the machine, so on a machine with more cores than
this process may use the load of the others' cores is counted too: the choice errs towards fewer threads. The
count is chosen once, when a command starts; a job that starts later is not seen.
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

__all__ = ["ThreadChoice", "choose_cpu_threads", "use_cpu_threads", "own_load", "busy_cores"]

#: The time constant of the kernel's one-minute load average, in seconds.
_LOAD_WINDOW_S = 60.0

#: How long :func:`busy_cores` watches the cores, in seconds.
_BUSY_WINDOW_S = 0.25


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


def _process_age_s() -> float | None:
    """Seconds since this process started (``/proc/self/stat``), or ``None`` where that cannot be read."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of stat(5), counted after the command name
    except (OSError, ValueError, IndexError):
        return None
    return max(uptime - started, 0.0)


def own_load(cpu_s: float | None = None, age_s: float | None = None) -> float:
    """This process's own share of the one-minute load average.

    The load average decays with a time constant of a minute; a process that kept ``cpu_s / age_s`` threads
    runnable on average since it started ``age_s`` seconds ago contributes about
    ``cpu_s / age_s * (1 - exp(-age_s / 60))``. Both default to this process's (user + system CPU time of all its
    threads, and its age); ``0.0`` where the age is unknown.
    """
    if cpu_s is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu_s = usage.ru_utime + usage.ru_stime
    if age_s is None:
        age_s = _process_age_s()
    if age_s is None or age_s <= 0:
        return 0.0
    return cpu_s / age_s * (1.0 - math.exp(-age_s / _LOAD_WINDOW_S))


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


def busy_cores(cores: set[int], window_s: float = _BUSY_WINDOW_S) -> float | None:
    """How many of ``cores`` (CPU numbers) other processes keep busy now: their busy fraction over ``window_s``
    seconds, during which this process sleeps, times their number. ``None`` where ``/proc/stat`` cannot be
    read."""
    before = _core_times(cores)
    time.sleep(window_s)
    after = _core_times(cores)
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1]) * len(cores)


def _allowed_cores() -> set[int] | None:
    """The CPU numbers this process may run on, or ``None`` where the system does not say (not Linux)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # not available on this system
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
    load, now = _load_average(), busy_cores(allowed) if allowed else None
    if load is None and now is None:
        return ThreadChoice(limit, f"{limit} thread(s): {cores} core(s) available, load unknown")
    others = max(0.0 if load is None else load - own_load(), 0.0 if now is None else now)
    threads = max(1, min(limit, math.floor(cores - others + 0.5)))
    return ThreadChoice(threads, f"{threads} thread(s): {cores} core(s) available, load {others:.2f} from "
                                 "other processes", fewer_for_load=threads < limit)


def use_cpu_threads(requested: int | None = None, *, at_most: int | None = None) -> ThreadChoice:
    """:func:`choose_cpu_threads` and ``torch.set_num_threads`` with its count; returns the choice."""
    choice = choose_cpu_threads(requested, at_most=at_most)
    torch.set_num_threads(choice.threads)
    return choice
