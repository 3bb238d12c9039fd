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


def test_ci_runs_the_readme_drop_in_snippet_on_the_built_wheel():
    """.ci/run builds the distributions and hands them to .ci/check_dist.py, whose snippet is the README's drop-in
    block (the one tests/test_docs_code_blocks.py runs on the checkout) and which installs the wheel elsewhere."""
    import importlib.util

    from tests.test_docs_code_blocks import markdown_blocks

    spec = importlib.util.spec_from_file_location("check_dist", ROOT / ".ci" / "check_dist.py")
    assert spec is not None and spec.loader is not None
    check_dist = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_dist)
    snippet = check_dist.readme_snippet()
    assert "criterion.details(" in snippet and "loss.backward()" in snippet
    assert snippet.strip() in [block.code.strip() for block in markdown_blocks(ROOT / "README.md")]
    ci = CI_SCRIPT.read_text(encoding="utf-8")
    build = ci.index('python -m build --sdist --wheel --outdir "$dist" .')
    check = re.search(r'^python \.ci/check_dist\.py "\$dist"$', ci, re.M)
    assert check and build < check.start()
    source = (ROOT / ".ci" / "check_dist.py").read_text(encoding="utf-8")
    assert '"-m", "venv"' in source and "run_readme_snippet(wheels[0])" in source
