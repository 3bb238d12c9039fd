"""evidential_prvr.native: building a shared library at run time, cached and written atomically."""

from __future__ import annotations

import ctypes
import shutil
import sys

import pytest

from evidential_prvr.native import OUTPUT, SOURCE, build_library, cache_dirs, find_compiler

C_SOURCE = "int evidential_prvr_native_test_add(int a, int b) { return a + b; }\n"


@pytest.fixture
def cc():
    path = find_compiler("CC", ("cc", "gcc", "clang"))
    if path is None or not sys.platform.startswith("linux"):
        pytest.skip("no C compiler on this machine")
    return path


def test_builds_loads_and_reuses_the_cached_library(cc, tmp_path):
    command = [cc, "-O1", "-shared", "-fPIC", SOURCE, "-o", OUTPUT]
    path = build_library(C_SOURCE, "add_test", [command], suffix=".c", folder=str(tmp_path / "cache"))
    assert ctypes.CDLL(path).evidential_prvr_native_test_add(2, 40) == 42
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["add_test.so"]  # no source or partial left
    broken = [cc, "--no-such-flag", SOURCE, "-o", OUTPUT]
    assert build_library(C_SOURCE, "add_test", [broken], suffix=".c", folder=str(tmp_path / "cache")) == path


def test_tries_each_command_and_reports_the_last_failure(cc, tmp_path):
    good = [cc, "-shared", "-fPIC", SOURCE, "-o", OUTPUT]
    bad = [cc, "-this-flag-does-not-exist", SOURCE, "-o", OUTPUT]
    path = build_library(C_SOURCE, "fallback", [bad, good], suffix=".c", folder=str(tmp_path))
    assert path.endswith("fallback.so")
    with pytest.raises(RuntimeError, match=f"compiler {cc} failed: "):
        build_library("this is not C", "broken", [good], suffix=".c", folder=str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fallback.so"]


def test_commands_must_not_be_empty(tmp_path):
    with pytest.raises(ValueError, match="commands must hold at least one compiler invocation"):
        build_library(C_SOURCE, "x", [], suffix=".c", folder=str(tmp_path))


def test_compiler_and_cache_folders_follow_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dirs()[0] == str(tmp_path / "evidential_prvr")
    monkeypatch.setenv("CC", "definitely-not-a-compiler-xyz")
    monkeypatch.setenv("PATH", "")
    assert find_compiler("CC", ("cc", "gcc")) is None
    if shutil.which("sh", path="/bin"):
        monkeypatch.setenv("PATH", "/bin")
        assert find_compiler("CC", ("sh",)) == shutil.which("sh", path="/bin")


def test_cached_build_uses_the_first_folder_that_works(cc, monkeypatch, tmp_path):
    from evidential_prvr.native import build_cached_library

    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder should be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # <blocked>/evidential_prvr cannot be created
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    path = build_cached_library(C_SOURCE, "cached", [[cc, "-shared", "-fPIC", SOURCE, "-o", OUTPUT]], suffix=".c")
    assert path.startswith(str(tmp_path / "tmp")) and ctypes.CDLL(path).evidential_prvr_native_test_add(1, 1) == 2
    with pytest.raises(RuntimeError, match="; compiler"):  # both folders tried, both failures reported
        build_cached_library("not C", "bad", [[cc, "-shared", SOURCE, "-o", OUTPUT]], suffix=".c")
