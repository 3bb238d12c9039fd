"""The test session's own settings: reproducible Hypothesis profiles for CI, and one thread per test."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch
from hypothesis import settings

from tests.conftest import MULTITHREADED_THREADS, hypothesis_profile

ROOT = Path(__file__).resolve().parents[1]
CI_SCRIPT = ROOT / ".ci" / "run"


def test_the_profile_comes_from_hypothesis_profile_then_ci():
    assert hypothesis_profile({}) == "default"
    assert hypothesis_profile({"CI": "true"}) == "ci"
    assert hypothesis_profile({"HYPOTHESIS_PROFILE": "ci"}) == "ci"
    assert hypothesis_profile({"HYPOTHESIS_PROFILE": "long", "CI": "true"}) == "long"
    with pytest.raises(pytest.UsageError, match="'nope' is not a registered profile"):
        hypothesis_profile({"HYPOTHESIS_PROFILE": "nope"})


def test_the_ci_profile_is_reproducible_and_the_long_profile_is_long():
    ci = settings.get_profile("ci")
    assert ci.derandomize and ci.database is None and ci.deadline is None
    long = settings.get_profile("long")
    assert long.max_examples >= 10_000 and not long.derandomize and long.deadline is None


def test_the_session_loaded_the_profile_its_environment_names():
    assert settings.get_current_profile_name() == hypothesis_profile(os.environ)


def test_ci_selects_the_ci_profile_and_runs_the_readme_command_verbatim():
    text = CI_SCRIPT.read_text(encoding="utf-8")
    select = re.search(r"^export HYPOTHESIS_PROFILE=ci$", text, re.M)
    run = re.search(r"^python -m pytest -q$", text, re.M)
    assert select and run and select.start() < run.start()


def test_tests_run_with_one_intra_op_thread():
    assert torch.get_num_threads() == 1


@pytest.mark.multithreaded
def test_a_multithreaded_test_gets_more_threads():
    assert torch.get_num_threads() == MULTITHREADED_THREADS


def test_ci_runs_the_own_videos_tests_as_the_readme_installs_them():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = CI_SCRIPT.read_text(encoding="utf-8")
    pair = "pip install torch==2.14.1 torchvision==0.29.1"
    command = "python -m pytest -q tests/own_videos"
    assert pair in readme and command in readme and '".[test,reference,video]"' in readme
    install = ci.index("python -m pip install --quiet torch==2.14.1 torchvision==0.29.1")
    extra = ci.index('python -m pip install --quiet -e ".[test,reference,faiss,video]"')
    run = re.search(r"^python -m pytest -q tests/own_videos$", ci, re.M)
    assert run and install < extra < run.start()
