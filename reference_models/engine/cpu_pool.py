"""A pool of memory maps for PyTorch's CPU tensors of 1 MiB and more: freed blocks are reused, not re-faulted.

A training step allocates and frees the same activations every step (the same shapes, give or take a batch's
caption length). With glibc's default allocator they come from its heaps, where they fragment and the resident
size climbs above what is alive; with a fixed mmap threshold (the ``"mapped"`` policy of
:mod:`reference_models.engine.host_memory`) every one of them is a memory map of its own, so the resident size
follows what is alive, but every allocation faults its pages in afresh, which on the release-sized set costs
more time than the step's arithmetic saves (see the reference-model guide, "Training memory").

The pool keeps the memory maps instead of returning them. It is installed as PyTorch's CPU allocator
(``c10::SetCPUAllocator``; blocks below ``min_bytes`` still go to the allocator it replaces) and serves a block
of ``n`` bytes (rounded up to whole pages) with, in this order:

1. the smallest cached block of at least ``n`` bytes, whole when it is at most ``tolerance`` times as large,
   else with its tail beyond ``n`` unmapped (its first ``n`` bytes are resident already: no page faults);
2. when no cached block is large enough, the largest cached one grown to ``n`` (``mremap``: its pages move
   without faulting, only the growth faults), after the oldest cached blocks have been unmapped until as much
   as the growth is returned;
3. when nothing is cached, a fresh memory map.

Since a block is only ever mapped afresh, or grown, after as much cached memory has been unmapped, the memory
the pool holds (live and cached) never exceeds the most that was live at once (give or take a block and the
``tolerance``): the peak resident size of ``"mapped"``, with the page faults of a heap that is not returned.
Where the memory comes from changes nothing computed (a tensor's memory is written before it is read).

The pool is a small C++ library built on first use against the installed PyTorch's headers and ``libc10``
(the C++ compiler ``$CXX``, ``c++``, ``g++`` or ``clang++``; a few seconds) and cached under
``~/.cache/evidential_prvr`` (else the temporary folder); it needs Linux (``mremap``). Where it cannot be
built, :func:`install` says why and nothing changes. Use it through the ``"pool"`` policy
(:func:`reference_models.engine.host_memory.apply_host_memory_policy`, the training commands'
``--host-memory``); :func:`disable` hands every later allocation back to the allocator it replaced.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading

import torch

__all__ = ["install", "disable", "release_cached", "stats", "status", "POOL_MIN_BYTES", "POOL_TOLERANCE"]

#: Blocks of at least this many bytes come from the pool (1 MiB); smaller ones from the allocator it replaces.
POOL_MIN_BYTES = 1 << 20

#: A cached block serves a request whole when it is at most this many times as large (else its tail is unmapped).
POOL_TOLERANCE = 1.125

_STATS = ("cached_bytes", "live_bytes", "mapped_bytes", "peak_mapped_bytes", "reused", "shrunk", "grown", "fresh",
          "evicted", "failed")

_SOURCE = r"""
// The CPU memory pool of reference_models.engine.cpu_pool (see its docstring).
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <pthread.h>
#include <sys/mman.h>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <list>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace {

constexpr size_t kPage = 4096;
size_t whole_pages(size_t n) { return (n + kPage - 1) & ~(kPage - 1); }

enum Stat { kCached, kLive, kMapped, kPeakMapped, kReused, kShrunk, kGrown, kFresh, kEvicted, kFailed, kStats };

struct Pool final : c10::Allocator {
  c10::Allocator* base = nullptr;
  c10::DeleterFnPtr base_raw_deleter = nullptr;  // for raw_allocate's blocks below min_bytes
  std::atomic<bool> enabled{false};
  size_t min_bytes = 1 << 20;
  double tolerance = 1.125;
  std::mutex mu;
  using Lru = std::list<std::pair<size_t, void*>>;  // cached blocks, the oldest first
  Lru lru;
  std::multimap<size_t, Lru::iterator> by_size;
  std::unordered_map<void*, size_t> live;
  int64_t stat[kStats] = {0};

  void forget(std::multimap<size_t, Lru::iterator>::iterator it) {
    stat[kCached] -= static_cast<int64_t>(it->first);
    lru.erase(it->second);
    by_size.erase(it);
  }
  void unmap(void* p, size_t n) {
    munmap(p, n);
    stat[kMapped] -= static_cast<int64_t>(n);
  }
  void evict_oldest() {
    auto oldest = lru.front();
    auto range = by_size.equal_range(oldest.first);
    for (auto it = range.first; it != range.second; ++it) {
      if (it->second == lru.begin()) { forget(it); break; }
    }
    unmap(oldest.second, oldest.first);
    stat[kEvicted]++;
  }

  void* take(size_t n, size_t* got) {
    size_t size = whole_pages(n);
    std::lock_guard<std::mutex> guard(mu);
    void* p = nullptr;
    auto fit = by_size.lower_bound(size);
    if (fit != by_size.end()) {  // reuse the smallest block large enough; return its tail when far too large
      size_t have = fit->first;
      p = fit->second->second;
      forget(fit);
      if (static_cast<double>(have) > static_cast<double>(size) * tolerance) {
        unmap(static_cast<char*>(p) + size, have - size);
        stat[kShrunk]++;
      } else {
        size = have;
        stat[kReused]++;
      }
    } else if (!by_size.empty()) {  // grow the largest, after returning as much of the oldest
      auto largest = std::prev(by_size.end());
      size_t have = largest->first;
      void* q = largest->second->second;
      forget(largest);
      size_t freed = 0;
      while (!lru.empty() && freed < size - have) { freed += lru.front().first; evict_oldest(); }
      void* grown = mremap(q, have, size, MREMAP_MAYMOVE);
      if (grown == MAP_FAILED) {
        unmap(q, have);
      } else {
        p = grown;
        stat[kMapped] += static_cast<int64_t>(size - have);
        stat[kGrown]++;
      }
    }
    if (p == nullptr) {
      p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) { stat[kFailed]++; return nullptr; }
      stat[kMapped] += static_cast<int64_t>(size);
      stat[kFresh]++;
    }
    if (stat[kMapped] > stat[kPeakMapped]) stat[kPeakMapped] = stat[kMapped];
    live.emplace(p, size);
    stat[kLive] += static_cast<int64_t>(size);
    *got = size;
    return p;
  }

  size_t give(void* p) {  // the block's size; 0: not the pool's (a raw_allocate of the allocator replaced)
    std::lock_guard<std::mutex> guard(mu);
    auto it = live.find(p);
    if (it == live.end()) return 0;
    size_t n = it->second;
    live.erase(it);
    stat[kLive] -= static_cast<int64_t>(n);
    if (!enabled.load()) { unmap(p, n); return n; }
    lru.emplace_back(n, p);
    by_size.emplace(n, std::prev(lru.end()));
    stat[kCached] += static_cast<int64_t>(n);
    return n;
  }

  void report(void* p, int64_t delta) {  // to the profiler, outside the lock (it may allocate)
    if (c10::memoryProfilingEnabled()) {
      c10::reportMemoryUsageToProfiler(p, delta, static_cast<size_t>(stat[kLive]), static_cast<size_t>(stat[kMapped]),
                                       c10::Device(c10::DeviceType::CPU));
    }
  }

  void release() {
    std::lock_guard<std::mutex> guard(mu);
    while (!lru.empty()) evict_oldest();
  }

  static void deleter(void* p);

  c10::DataPtr allocate(size_t n) override {
    if (n < min_bytes || !enabled.load()) return base->allocate(n);
    size_t got = 0;
    void* p = take(n, &got);
    if (p == nullptr) return base->allocate(n);  // the allocator replaced reports the failure its way
    report(p, static_cast<int64_t>(got));
    return {p, p, &Pool::deleter, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Pool::deleter; }  // raw_deallocate calls it
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

Pool* pool = nullptr;
void Pool::deleter(void* p) {
  size_t n = pool->give(p);
  if (n == 0) {
    pool->base_raw_deleter(p);
  } else {
    pool->report(p, -static_cast<int64_t>(n));
  }
}

// A fork (a data-loader worker) while another thread holds the lock would leave the child's lock held.
void before_fork() { pool->mu.lock(); }
void after_fork() { pool->mu.unlock(); }

}  // namespace

extern "C" {
int evidential_prvr_pool_install(long long min_bytes, double tolerance) {
  if (pool == nullptr) {
    pool = new Pool();
    pool->base = c10::GetCPUAllocator();
    pool->base_raw_deleter = pool->base->raw_deleter();
    if (pool->base_raw_deleter == nullptr) { delete pool; pool = nullptr; return 0; }
    pthread_atfork(before_fork, after_fork, after_fork);
    c10::SetCPUAllocator(pool, 100);
  }
  {
    std::lock_guard<std::mutex> guard(pool->mu);
    pool->min_bytes = static_cast<size_t>(min_bytes);
    pool->tolerance = tolerance;
  }
  pool->enabled.store(true);
  return c10::GetCPUAllocator() == pool ? 1 : 0;
}
void evidential_prvr_pool_disable(void) {
  if (pool == nullptr) return;
  pool->enabled.store(false);
  pool->release();
}
void evidential_prvr_pool_release(void) {
  if (pool != nullptr) pool->release();
}
int evidential_prvr_pool_enabled(void) { return pool != nullptr && pool->enabled.load() ? 1 : 0; }
void evidential_prvr_pool_stats(long long* out) {
  for (int i = 0; i < kStats; i++) out[i] = 0;
  if (pool == nullptr) return;
  std::lock_guard<std::mutex> guard(pool->mu);
  for (int i = 0; i < kStats; i++) out[i] = pool->stat[i];
}
}
"""

_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_state = "not built"


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name:
            path = shutil.which(name)
            if path:
                return path
    return None


def _cache_dirs() -> list[str]:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    return [os.path.join(base, "evidential_prvr"), os.path.join(tempfile.gettempdir(), f"evidential_prvr_{user}")]


def _build(cxx: str, out_dir: str, stem: str, flags: list[str]) -> str:
    """Build the library into ``out_dir`` unless it is there; return its path."""
    os.makedirs(out_dir, exist_ok=True)
    target = os.path.join(out_dir, stem + ".so")
    if os.path.isfile(target):
        return target
    fd, source = tempfile.mkstemp(suffix=".cpp", dir=out_dir)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(_SOURCE)
    partial = source[:-4] + ".so.partial"
    try:
        result = subprocess.run([cxx, *flags[:-3], source, *flags[-3:], "-o", partial], capture_output=True,
                                text=True, timeout=180)
        if result.returncode != 0:
            last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["failed"]
            raise RuntimeError(f"compiler {cxx} failed: {last[0]}")
        os.replace(partial, target)  # atomic: concurrent builders never see half a file
        return target
    finally:
        for path in (source, partial):
            with contextlib.suppress(OSError):
                os.remove(path)


def _load() -> ctypes.CDLL | None:
    """The pool's library, built on first use; ``None`` when unavailable (the reason in :func:`status`)."""
    global _library, _state
    with _lock:
        if _library is not None or _state != "not built":
            return _library
        try:
            if not sys.platform.startswith("linux"):
                raise RuntimeError(f"it needs Linux (mremap), not {sys.platform}")
            cxx = _compiler()
            if cxx is None:
                raise RuntimeError("no C++ compiler found ($CXX, c++, g++, clang++)")
            torch_dir = os.path.dirname(torch.__file__)
            include, lib = os.path.join(torch_dir, "include"), os.path.join(torch_dir, "lib")
            if not os.path.isfile(os.path.join(include, "c10", "core", "CPUAllocator.h")):
                raise RuntimeError(f"this PyTorch has no C++ headers ({include})")
            abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
            flags = ["-O2", "-std=c++17", "-shared", "-fPIC", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{include}",
                     f"-L{lib}", "-lc10", f"-Wl,-rpath,{lib}"]
            version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
            key = "\n".join([_SOURCE, " ".join(flags), cxx, version, torch.__version__, sys.platform])
            stem = "cpu_pool_" + hashlib.sha256(key.encode()).hexdigest()[:20]
            errors, path = [], None
            for folder in _cache_dirs():
                try:
                    path = _build(cxx, folder, stem, flags)
                    break
                except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
                    errors.append(str(exc))
            if path is None:
                raise RuntimeError("; ".join(errors))
            library = ctypes.CDLL(path)
            library.evidential_prvr_pool_install.argtypes = (ctypes.c_longlong, ctypes.c_double)
            library.evidential_prvr_pool_install.restype = ctypes.c_int
            library.evidential_prvr_pool_enabled.restype = ctypes.c_int
            library.evidential_prvr_pool_stats.argtypes = (ctypes.POINTER(ctypes.c_longlong),)
            for name in ("evidential_prvr_pool_disable", "evidential_prvr_pool_release", "evidential_prvr_pool_stats"):
                getattr(library, name).restype = None
        except Exception as exc:  # any failure: PyTorch's own allocator serves every tensor
            _state = f"unavailable: {exc}"
            return None
        _library, _state = library, "built"
        return _library


def status() -> str:
    """``"not built"``, ``"built"`` (:func:`stats` says whether it is on), or ``"unavailable: <why>"``."""
    return _state


def install(min_bytes: int = POOL_MIN_BYTES, tolerance: float = POOL_TOLERANCE) -> str | None:
    """Serve every CPU tensor of at least ``min_bytes`` bytes from the pool (built on first use).

    Returns ``None`` when the pool serves them, else why not (nothing is changed then). Calling it again only
    changes the two settings. ``min_bytes`` is at least one page (4096); ``tolerance`` at least 1.
    """
    if isinstance(min_bytes, bool) or not isinstance(min_bytes, int) or min_bytes < 4096:
        raise ValueError(f"min_bytes must be an int of at least 4096, got {min_bytes!r}")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not tolerance >= 1:
        raise ValueError(f"tolerance must be a number of at least 1, got {tolerance!r}")
    library = _load()
    if library is None:
        return _state.removeprefix("unavailable: ")
    if library.evidential_prvr_pool_install(min_bytes, float(tolerance)) != 1:
        library.evidential_prvr_pool_disable()
        return "PyTorch's CPU allocator could not be replaced (another of a higher priority is installed)"
    return None


def disable() -> None:
    """Hand every later allocation back to the allocator the pool replaced, and unmap the cached blocks (the live
    ones are unmapped when freed). Nothing happens where the pool was never installed."""
    if _library is not None:
        _library.evidential_prvr_pool_disable()


def release_cached() -> None:
    """Unmap the pool's cached (free) blocks, e.g. after training; the pool stays on."""
    if _library is not None:
        _library.evidential_prvr_pool_release()


def stats() -> dict[str, int]:
    """The pool's counters: bytes cached, live, mapped (both) and the most mapped at once; blocks reused whole,
    reused with their tail unmapped, grown, mapped afresh and unmapped from the cache; failed maps; and
    ``enabled`` (0 or 1). All zero where it was never installed."""
    out = (ctypes.c_longlong * len(_STATS))()
    enabled = 0
    if _library is not None:
        _library.evidential_prvr_pool_stats(out)
        enabled = _library.evidential_prvr_pool_enabled()
    return {**dict(zip(_STATS, (int(v) for v in out))), "enabled": int(enabled)}
