"""A tiny embedded CVR benchmark, written once per test session (the real design, few videos)."""

from __future__ import annotations

import shutil

import pytest

from reference_models.hud.benchmark import CVRBenchmarkSpec, generate_cvr_benchmark

TINY = CVRBenchmarkSpec().scaled(0.02)  # 24 training videos (48 triplets), 2 val and 3 test videos x 4 edits


@pytest.fixture(scope="session")
def pristine_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("cvr") / "data"
    generate_cvr_benchmark(root, seed=3, spec=TINY)
    return root


@pytest.fixture
def data_root(pristine_root, tmp_path):
    """A writable copy of the tiny benchmark."""
    dst = tmp_path / "data"
    shutil.copytree(pristine_root, dst)
    return dst
