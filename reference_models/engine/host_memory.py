"""Resident memory of a training process: the allocator that serves PyTorch's CPU tensors, and what it keeps.

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
follows what is alive; but then every such allocation page-faults its pages afresh, which costs system time.

A general-purpose allocator built for this, tcmalloc or jemalloc, replaces ``malloc`` when it is preloaded at
the start of the process (``LD_PRELOAD``), as PyTorch's CPU launcher (``python -m torch.backends.xeon.run_cpu``)
does it. The :class:`~reference_models.engine.Trainer` applies one of the named **policies** below
(:func:`apply_host_memory_policy`; its ``host_memory`` argument, ``--host-memory`` on
``python -m reference_models.holmes train``) and calls :meth:`HostMemory.after_step` once after every
optimiser step:

``"tcmalloc"`` (the default, :data:`DEFAULT_HOST_MEMORY`) and ``"jemalloc"``
    that allocator serves every allocation. It must be loaded when the process starts: the reference models'
    commands start themselves again once with it preloaded (:func:`start_with_allocator`; one line on standard
    error where it is not installed), and :func:`preload_environment` gives the environment for any other
    command. Where it is not loaded, the policy applies ``"trim"`` instead and :attr:`HostMemory.note` says so.

``"trim"``
    the heaps serve every block below 32 MiB (the threshold fixed where glibc's dynamic rule ends up, and the
    top of the heap trimmed automatically only beyond 64 MiB, as that rule sets it), and once per step,
    after the optimiser step, ``malloc_trim(0)`` hands every free page of the heaps back to the system. Within
    a step freed blocks are reused without page faults; between steps the fragmentation that made the
    resident size climb is returned.
``"mapped"``
    every block of at least 1 MiB in a memory map of its own (:func:`keep_large_blocks_mapped`), freed at once:
    the lowest resident size, the most page faults.
``"off"``
    the allocator as it is (glibc's dynamic threshold in a fresh process); nothing per step.

A policy changes where memory comes from, never a value computed: results stay bit for bit the same. The
settings are the process's (``mallopt``): a later policy in the same process replaces an earlier one's, and
``"off"`` leaves whatever an earlier one set in the C library. Where the C library
is not glibc a policy does nothing (and :attr:`HostMemory.note` says so), and when the environment sets glibc's own ``MALLOC_MMAP_THRESHOLD_`` the
user's choice wins: the allocator is left as it is and nothing is trimmed. The measured peak resident memory
and time of each policy are in the reference-model guide ("Training memory").
"""

from __future__ import annotations

import ctypes
import glob
import os
import platform
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "keep_large_blocks_mapped",
    "find_allocator",
    "allocator_loaded",
    "preload_environment",
    "start_with_allocator",
    "PRELOADED_ALLOCATORS",
    "FALLBACK_HOST_MEMORY",
    "PRELOAD_MARK",
    "JEMALLOC_CONF",
    "release_free_memory",
    "apply_host_memory_policy",
    "check_host_memory_policy",
    "HostMemory",
    "HOST_MEMORY_POLICIES",
    "DEFAULT_HOST_MEMORY",
    "MMAP_THRESHOLD_BYTES",
]

#: Blocks of at least this many bytes get a memory map of their own (1 MiB).
MMAP_THRESHOLD_BYTES = 1 << 20

#: glibc's largest mmap threshold (``HEAP_MAX_SIZE / 2`` on 64-bit systems), where its dynamic rule ends up.
_MAX_MMAP_THRESHOLD_BYTES = 32 << 20

#: The general-purpose allocators that replace the C library's ``malloc`` when preloaded (``LD_PRELOAD``), as
#: PyTorch's CPU launcher (``python -m torch.backends.xeon.run_cpu``) offers them.
PRELOADED_ALLOCATORS = ("jemalloc", "tcmalloc")

#: jemalloc's settings (``MALLOC_CONF``) under PyTorch's CPU launcher, used unless the environment sets its own.
JEMALLOC_CONF = "oversize_threshold:1,background_thread:true,metadata_thp:auto"

#: The policies :func:`apply_host_memory_policy` knows, in the order the guide lists them.
HOST_MEMORY_POLICIES = (*PRELOADED_ALLOCATORS, "trim", "mapped", "off")

#: The policy the engine's :class:`~reference_models.engine.Trainer` applies unless told otherwise.
DEFAULT_HOST_MEMORY = "tcmalloc"

#: The policy a preloaded allocator's policy applies where that allocator is not loaded.
FALLBACK_HOST_MEMORY = "trim"

#: glibc's ``mallopt`` parameter numbers (``<malloc.h>``).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4

#: glibc's default limit on the number of memory maps (``DEFAULT_MMAP_MAX``), restored by the mapping policies.
_DEFAULT_MMAP_MAX = 65536

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
    if _unavailable() is not None:
        return False
    return _mallopt(_M_MMAP_THRESHOLD, threshold)


def _libc() -> ctypes.CDLL | None:
    """The process's C library when it is glibc (which has ``mallopt`` and ``malloc_trim``), else ``None``."""
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt, libc.malloc_trim  # noqa: B018 (both must exist)
    except (OSError, AttributeError):  # pragma: no cover - a glibc without them
        return None
    return libc


def _unavailable() -> str | None:
    """Why no policy can be applied here (not glibc, or the environment's setting wins), or ``None``."""
    if _ENVIRONMENT_SETTING in os.environ:
        return f"the environment sets {_ENVIRONMENT_SETTING}, which wins: the allocator is left as it is"
    if _libc() is None:
        return f"the C library is not glibc ({platform.libc_ver()[0] or 'unknown'}): the allocator is left as it is"
    return None


def _mallopt(parameter: int, value: int) -> bool:
    libc = _libc()
    if libc is None:  # pragma: no cover - callers check first
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt(parameter, value) == 1


def release_free_memory() -> bool:
    """``malloc_trim(0)``: hand every free page of the C library's heaps back to the system (glibc only).

    Returns whether any memory was released (``False`` where the C library is not glibc). What is alive is not
    touched, so nothing computed changes; the pages released are faulted in again when the heaps reuse them.
    """
    libc = _libc()
    if libc is None:
        return False
    trim = libc.malloc_trim
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int
    return trim(0) == 1


def check_host_memory_policy(policy: object, argument: str = "host_memory") -> str:
    """``policy`` when it names one of :data:`HOST_MEMORY_POLICIES`, else a ``ValueError`` naming ``argument``."""
    if not isinstance(policy, str) or policy not in HOST_MEMORY_POLICIES:
        raise ValueError(f"{argument} must be one of {', '.join(repr(p) for p in HOST_MEMORY_POLICIES)}, got {policy!r}")
    return policy


@dataclass(frozen=True)
class HostMemory:
    """An allocator policy as applied to this process (:func:`apply_host_memory_policy`).

    Attributes
    ----------
    policy : str
        The policy asked for.
    applied : bool
        Whether its settings took effect (``False`` for ``"off"``, where the C library is not glibc, where
        the environment sets ``MALLOC_MMAP_THRESHOLD_``, or where a preloaded allocator is not loaded).
    note : str
        What was done, or why nothing was.
    trims : bool
        Whether :meth:`after_step` returns the free pages of the heaps (``malloc_trim``).
    """

    policy: str
    applied: bool
    note: str
    trims: bool = False

    def after_step(self) -> None:
        """Called once after every optimiser step: ``malloc_trim(0)`` under the trimming policies."""
        if self.trims:
            release_free_memory()


def apply_host_memory_policy(policy: str = DEFAULT_HOST_MEMORY, *, argument: str = "host_memory") -> HostMemory:
    """Validate ``policy`` (one of :data:`HOST_MEMORY_POLICIES`; a ``ValueError`` names ``argument``), set the
    C library's allocator for it and return what was applied, with the per-step hook.

    Where no policy can be applied (not glibc, or ``MALLOC_MMAP_THRESHOLD_`` in the environment) nothing is
    set and nothing will be trimmed; :attr:`HostMemory.note` says why.
    """
    check_host_memory_policy(policy, argument)
    if policy in PRELOADED_ALLOCATORS:
        if allocator_loaded(policy):
            return HostMemory(policy, True, f"{policy} serves every allocation (preloaded at start)")
        fallback = apply_host_memory_policy(FALLBACK_HOST_MEMORY)
        return HostMemory(policy, False, f"{policy} is not loaded in this process (it must be preloaded at start: "
                                         f"LD_PRELOAD), so {FALLBACK_HOST_MEMORY!r} applies: {fallback.note}",
                          trims=fallback.trims)
    if policy == "off":
        return HostMemory(policy, False, "the allocator is left as it is")
    why_not = _unavailable()
    if why_not is not None:
        return HostMemory(policy, False, why_not)
    if policy == "mapped":
        ok = _mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX) and keep_large_blocks_mapped()
        return HostMemory(policy, ok, f"every block of at least {MMAP_THRESHOLD_BYTES >> 20} MiB is a memory map "
                                      "of its own")
    ok = (_mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
          and _mallopt(_M_MMAP_THRESHOLD, _MAX_MMAP_THRESHOLD_BYTES)
          and _mallopt(_M_TRIM_THRESHOLD, 2 * _MAX_MMAP_THRESHOLD_BYTES))
    return HostMemory(policy, ok, "blocks below 32 MiB from the heaps, their free pages returned after every step",
                      trims=ok)


def _library_folders(environ: Mapping[str, str]) -> list[str]:
    """Where :func:`find_allocator` looks: the folders PyTorch's CPU launcher searches, then the system's
    multiarch folders (Debian and Ubuntu install ``libjemalloc.so.2`` under ``/usr/lib/x86_64-linux-gnu``)."""
    folders = [f"{environ[name]}/lib" for name in ("CONDA_PREFIX", "VIRTUAL_ENV") if name in environ]
    folders += [os.path.expanduser("~/.local/lib"), "/usr/local/lib", "/usr/local/lib64", "/usr/lib", "/usr/lib64"]
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        folders += [f"/usr/lib/{multiarch}", f"/lib/{multiarch}"]
    return folders


def find_allocator(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The shared library of the allocator ``name`` (one of :data:`PRELOADED_ALLOCATORS`), or ``None``.

    Looks for ``lib<name>.so`` and then its versioned files (``lib<name>.so.2``) in the folders PyTorch's CPU
    launcher searches (``$CONDA_PREFIX/lib``, ``$VIRTUAL_ENV/lib``, ``~/.local/lib``, ``/usr/local/lib``,
    ``/usr/lib``, ...) and the system's multiarch folders; for tcmalloc also its minimal build.
    """
    if name not in PRELOADED_ALLOCATORS:
        raise ValueError(f"name must be one of {', '.join(repr(a) for a in PRELOADED_ALLOCATORS)}, got {name!r}")
    folders = _library_folders(os.environ if environ is None else environ)
    stems = [f"lib{name}"] + (["libtcmalloc_minimal"] if name == "tcmalloc" else [])
    for stem in stems:
        for folder in folders:
            exact = os.path.join(folder, f"{stem}.so")
            if os.path.isfile(exact):
                return exact
            versioned = sorted(glob.glob(os.path.join(folder, f"{stem}.so.[0-9]*")), key=len)
            if versioned:
                return versioned[0]
    return None


def allocator_loaded(name: str) -> bool:
    """Whether the allocator ``name`` (one of :data:`PRELOADED_ALLOCATORS`) is mapped into this process."""
    if name not in PRELOADED_ALLOCATORS:
        raise ValueError(f"name must be one of {', '.join(repr(a) for a in PRELOADED_ALLOCATORS)}, got {name!r}")
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return any(f"/lib{name}" in line for line in maps)
    except OSError:  # not Linux
        return False


def preload_environment(name: str, environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The environment (a copy of ``environ``, default ``os.environ``) in which a new process starts with the
    allocator ``name`` preloaded as PyTorch's CPU launcher does it: its library first in ``LD_PRELOAD`` and,
    for jemalloc, ``MALLOC_CONF`` set to :data:`JEMALLOC_CONF` unless already set. ``None`` when the library is
    not installed (:func:`find_allocator`)."""
    environ = os.environ if environ is None else environ
    library = find_allocator(name, environ)
    if library is None:
        return None
    env = dict(environ)
    env["LD_PRELOAD"] = ":".join(p for p in (library, environ.get("LD_PRELOAD", "").strip(":")) if p)
    if name == "jemalloc":
        env.setdefault("MALLOC_CONF", JEMALLOC_CONF)
    return env


#: Set in the environment of a process started again by :func:`start_with_allocator` (to the allocator's name),
#: so that it never starts itself a second time.
PRELOAD_MARK = "REFERENCE_MODELS_PRELOADED"


def start_with_allocator(policy: str) -> str | None:
    """Early in a command's ``main``: when ``policy`` is a preloaded allocator (:data:`PRELOADED_ALLOCATORS`)
    that this process has not loaded, start the same command again in this process (``os.execve`` of
    ``sys.orig_argv``) with the allocator preloaded as PyTorch's CPU launcher does it (:func:`preload_environment`);
    that call does not return.

    Returns ``None`` when nothing needs doing (another policy, the allocator already loaded, or another
    preloaded allocator loaded: the user's choice), else one line saying why the allocator is not used (not
    installed, or this process was already started again once, :data:`PRELOAD_MARK`); the command then goes on
    with the C library's allocator.
    """
    check_host_memory_policy(policy, "host_memory")
    if policy not in PRELOADED_ALLOCATORS or any(allocator_loaded(name) for name in PRELOADED_ALLOCATORS):
        return None
    if os.environ.get(PRELOAD_MARK) == policy:
        return f"{policy} was preloaded but is not loaded (LD_PRELOAD={os.environ.get('LD_PRELOAD', '')!r})"
    env = preload_environment(policy)
    if env is None:
        return (f"{policy} is not installed (Debian/Ubuntu: apt-get install "
                f"{'libjemalloc2' if policy == 'jemalloc' else 'libgoogle-perftools4'}), so the C library's "
                "allocator is used")
    env[PRELOAD_MARK] = policy
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)
    return None  # pragma: no cover - execve does not return
