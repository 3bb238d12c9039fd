"""Shared fixtures of the text-to-video reference model's tests: a tiny embedded benchmark and a tiny config."""

from __future__ import annotations

from pathlib import Path

import pytest

from reference_models.dab.benchmark import T2VBenchmarkSpec, generate_t2v_benchmark
from reference_models.dab.config import T2VConfig

TINY_SPEC = T2VBenchmarkSpec(n_train=24, n_val=6, n_test=8, topics=3, events_per_topic=4, frames=6,
                             feature_dims=(12, 10))
TINY_CONFIG = T2VConfig().replace(backbone={"hidden": 16, "temporal_layers": 1, "heads": 2, "max_frames": 6},
                                  head={"gaussian_dim": 8}, bridge={"n_steps": 4, "time_dim": 8},
                                  optim={"epochs": 2, "batch_size": 8})


@pytest.fixture(scope="session")
def tiny_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny embedded benchmark (seed 0), written once per session; tests must not modify it."""
    return generate_t2v_benchmark(tmp_path_factory.mktemp("dab_data"), seed=0, spec=TINY_SPEC)
