"""The engine's CPU memory pool (``"pool"`` policy): freed tensors' memory maps are reused, the memory it holds
never exceeds the most that was live at once, and it hands back to PyTorch's allocator when turned off."""

from __future__ import annotations

import random
import sys

import pytest
import torch

from reference_models.engine import cpu_pool
from reference_models.engine.host_memory import DEFAULT_HOST_MEMORY, apply_host_memory_policy

MIB = 1 << 20

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pool needs Linux")


@pytest.fixture
def pool():
    """The pool on, its cache empty; the engine's default policy afterwards (the pool is the process's)."""
    applied = apply_host_memory_policy("pool")
    if cpu_pool.status() != "built":
        pytest.skip(f"the pool is {cpu_pool.status()}")
    assert applied.applied and "pool" in applied.note
    cpu_pool.release_cached()
    yield
    apply_host_memory_policy(DEFAULT_HOST_MEMORY)


def test_a_freed_block_is_reused_without_a_fresh_map(pool):
    before = cpu_pool.stats()
    for _ in range(5):  # a step's activation, allocated and freed every step
        block = torch.empty(3 * MIB, dtype=torch.uint8)
        block.fill_(1)
        del block
    after = cpu_pool.stats()
    assert after["fresh"] - before["fresh"] == 1 and after["reused"] - before["reused"] == 4
    assert after["cached_bytes"] == 3 * MIB and after["enabled"] == 1
    small = torch.empty(1024)  # 4 KiB: the allocator the pool replaced
    assert cpu_pool.stats()["live_bytes"] == after["live_bytes"]
    del small


def test_the_memory_held_never_exceeds_the_most_that_was_live(pool):
    generator = random.Random(0)
    alive: list[torch.Tensor] = []
    most_live = cpu_pool.stats()["live_bytes"]
    for _ in range(400):
        if alive and generator.random() < 0.5:
            alive.pop(generator.randrange(len(alive)))
        else:
            alive.append(torch.empty(generator.randrange(MIB, 12 * MIB), dtype=torch.uint8))
        now = cpu_pool.stats()
        most_live = max(most_live, now["live_bytes"])
        assert now["mapped_bytes"] == now["live_bytes"] + now["cached_bytes"]
        assert now["mapped_bytes"] <= most_live
    stats = cpu_pool.stats()
    assert stats["reused"] + stats["shrunk"] + stats["grown"] > stats["fresh"]  # most blocks came from the cache


def test_values_survive_reuse_growth_and_turning_the_pool_off(pool):
    kept = torch.arange(2 * MIB, dtype=torch.float32)  # 8 MiB, live across everything below
    for size in (MIB, 3 * MIB, 2 * MIB, 5 * MIB):  # reuse, growth and shrinking of the cached blocks
        scratch = torch.full((size,), 7.0)
        assert float(scratch.sum()) == 7.0 * size
        del scratch
    apply_host_memory_policy("mapped")  # turns the pool off: cached blocks unmapped, new tensors elsewhere
    assert cpu_pool.stats()["enabled"] == 0 and cpu_pool.stats()["cached_bytes"] == 0
    other = torch.ones(3 * MIB)
    assert cpu_pool.stats()["live_bytes"] == kept.numel() * 4  # only the tensor from before
    assert torch.equal(kept, torch.arange(2 * MIB, dtype=torch.float32)) and float(other.sum()) == 3 * MIB
    del kept
    assert cpu_pool.stats()["mapped_bytes"] == 0  # unmapped when freed, not cached


def test_raw_buffers_of_kernels_are_freed_by_their_allocator(pool):
    """Kernels that take scratch memory with ``raw_allocate`` (GELU's, for one) free it through the pool's raw
    deleter, which hands the blocks below 1 MiB back to the allocator the pool replaced."""
    for n in (1000, 3 * MIB):  # a crash here was an internal assert of raw_deallocate (no raw deleter)
        x = torch.linspace(-3, 3, n)
        y = torch.nn.functional.gelu(x)
        assert torch.isfinite(y).all() and float(y[-1]) == pytest.approx(3 * 0.99865, rel=1e-4)


def test_settings_are_checked():
    for bad in (0, 4095, 1.5, True, "1"):
        with pytest.raises(ValueError, match="min_bytes"):
            cpu_pool.install(bad)
    for bad in (0.5, True, None):
        with pytest.raises(ValueError, match="tolerance"):
            cpu_pool.install(MIB, bad)


def test_the_environment_setting_wins_over_the_pool(monkeypatch):
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    applied = apply_host_memory_policy("pool")
    assert applied.applied is False and "MALLOC_MMAP_THRESHOLD_" in applied.note
    assert cpu_pool.stats()["enabled"] == 0


def test_without_a_compiler_the_policy_falls_back_to_mapped(monkeypatch):
    apply_host_memory_policy("mapped")  # the pool (if built) off before it is hidden
    monkeypatch.setattr(cpu_pool, "_library", None)
    monkeypatch.setattr(cpu_pool, "_state", "unavailable: no C++ compiler found ($CXX, c++, g++, clang++)")
    applied = apply_host_memory_policy("pool")
    assert "unavailable (no C++ compiler found" in applied.note and "as under 'mapped'" in applied.note
    assert not applied.trims
