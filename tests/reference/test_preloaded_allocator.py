"""jemalloc and tcmalloc as the engine's allocator: found, preloaded as PyTorch's CPU launcher does, the command
started again once with it, and one line where it is not installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reference_models.engine import cli, host_memory
from reference_models.engine.host_memory import (
    JEMALLOC_CONF,
    PRELOAD_MARK,
    PRELOADED_ALLOCATORS,
    allocator_loaded,
    apply_host_memory_policy,
    find_allocator,
    preload_environment,
    start_with_allocator,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def libraries(tmp_path, monkeypatch):
    """A library folder of the test's own, the only one searched."""
    monkeypatch.setattr(host_memory, "_library_folders", lambda environ: [str(tmp_path)])
    return tmp_path


def test_finds_the_unversioned_then_the_versioned_library(libraries):
    assert find_allocator("jemalloc") is None
    (libraries / "libjemalloc.so.2").write_bytes(b"")
    assert find_allocator("jemalloc") == str(libraries / "libjemalloc.so.2")
    (libraries / "libjemalloc.so").write_bytes(b"")
    assert find_allocator("jemalloc") == str(libraries / "libjemalloc.so")
    assert find_allocator("tcmalloc") is None
    (libraries / "libtcmalloc_minimal.so.4").write_bytes(b"")  # the minimal build when the full one is absent
    assert find_allocator("tcmalloc") == str(libraries / "libtcmalloc_minimal.so.4")


def test_searches_the_launchers_folders_and_the_multiarch_ones(tmp_path):
    folders = host_memory._library_folders({"VIRTUAL_ENV": str(tmp_path), "CONDA_PREFIX": "/conda"})
    assert folders[:2] == ["/conda/lib", f"{tmp_path}/lib"]
    assert {"/usr/local/lib", "/usr/lib", "/usr/lib64"} <= set(folders)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libtcmalloc.so").write_bytes(b"")
    assert find_allocator("tcmalloc", {"VIRTUAL_ENV": str(tmp_path)}) == f"{tmp_path}/lib/libtcmalloc.so"


def test_environment_as_the_launcher_sets_it(libraries):
    (libraries / "libjemalloc.so.2").write_bytes(b"")
    (libraries / "libtcmalloc.so.4").write_bytes(b"")
    env = preload_environment("jemalloc", {"LD_PRELOAD": "/other.so", "PATH": "/bin"})
    assert env == {"LD_PRELOAD": f"{libraries}/libjemalloc.so.2:/other.so", "PATH": "/bin", "MALLOC_CONF": JEMALLOC_CONF}
    assert preload_environment("jemalloc", {"MALLOC_CONF": "narenas:1"})["MALLOC_CONF"] == "narenas:1"  # the user's
    assert preload_environment("tcmalloc", {}) == {"LD_PRELOAD": f"{libraries}/libtcmalloc.so.4"}
    (libraries / "libtcmalloc.so.4").unlink()
    assert preload_environment("tcmalloc", {}) is None


@pytest.mark.parametrize("call", [find_allocator, allocator_loaded, preload_environment])
def test_unknown_allocator_is_named(call):
    with pytest.raises(ValueError, match="name must be one of 'jemalloc', 'tcmalloc', got 'ptmalloc'"):
        call("ptmalloc")


def test_start_with_allocator_starts_the_command_again_once(libraries, monkeypatch):
    started = []
    monkeypatch.setattr(host_memory.os, "execve", lambda path, argv, env: started.append((path, argv, env)))
    monkeypatch.delenv(PRELOAD_MARK, raising=False)
    monkeypatch.setattr(host_memory, "allocator_loaded", lambda name: False)
    assert start_with_allocator("mapped") is None and not started  # not a preloaded allocator: nothing to do
    note = start_with_allocator("jemalloc")
    assert note.startswith("jemalloc is not installed (Debian/Ubuntu: apt-get install libjemalloc2)")
    (libraries / "libjemalloc.so.2").write_bytes(b"")
    start_with_allocator("jemalloc")
    [(path, argv, env)] = started
    assert (path, argv) == (sys.executable, sys.orig_argv)
    assert env["LD_PRELOAD"].startswith(f"{libraries}/libjemalloc.so.2") and env[PRELOAD_MARK] == "jemalloc"
    monkeypatch.setenv(PRELOAD_MARK, "jemalloc")  # started again already, and still not loaded: no loop
    assert "was preloaded but is not loaded" in start_with_allocator("jemalloc")
    assert len(started) == 1
    monkeypatch.setattr(host_memory, "allocator_loaded", lambda name: name == "tcmalloc")  # the user's own choice
    assert start_with_allocator("jemalloc") is None
    with pytest.raises(ValueError, match="host_memory must be one of"):
        start_with_allocator("jemalloc2")


def test_commands_start_again_only_as_the_program(monkeypatch, capsys):
    asked = []
    monkeypatch.setattr(host_memory, "start_with_allocator", lambda policy: asked.append(policy) or "why not")
    parser = cli.OneLineParser()
    cli.add_device_arguments(parser)
    cli.add_host_memory_argument(parser)
    args = parser.parse_args(["--device", "cpu", "--host-memory", "tcmalloc", "--threads", "1"])
    assert cli.run_main(lambda a: 0, args) == 0 and asked == []  # a caller's argv: never execve
    assert cli.run_main(lambda a: 0, args, program=True) == 0 and asked == ["tcmalloc"]
    assert capsys.readouterr().err == "note: why not\n"
    monkeypatch.setenv("RANK", "1")  # another rank of a torchrun run: rank 0 says it
    assert cli.run_main(lambda a: 0, args, program=True) == 0 and asked == ["tcmalloc", "tcmalloc"]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("name", PRELOADED_ALLOCATORS)
def test_a_real_process_starts_again_with_the_allocator(name):
    if find_allocator(name) is None or not sys.platform.startswith("linux"):
        pytest.skip(f"{name} is not installed")
    code = ("from reference_models.engine.host_memory import start_with_allocator, apply_host_memory_policy\n"
            f"print(start_with_allocator({name!r}), apply_host_memory_policy({name!r}).applied)")
    env = {k: v for k, v in os.environ.items() if k not in (PRELOAD_MARK, "LD_PRELOAD", "MALLOC_CONF")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                          check=True)
    assert done.stdout.split() == ["None", "True"]


def test_policy_without_the_library_loaded_says_so():
    for name in PRELOADED_ALLOCATORS:
        if not allocator_loaded(name):
            applied = apply_host_memory_policy(name)
            assert not applied.applied and "is not loaded in this process" in applied.note
