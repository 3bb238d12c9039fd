"""A tiny embedded benchmark for fast data-pipeline tests (seconds, not minutes)."""

from __future__ import annotations

from pathlib import Path

from reference_models.holmes.data import EmbeddedBenchmarkSpec, generate_embedded_benchmark

COLLECTION = "tiny"

# Video lengths cover the pooling edge cases (shorter than M_c, between M_c and M_f, longer than M_f).
TINY_SPEC = EmbeddedBenchmarkSpec(
    n_train_videos=14,
    n_val_videos=5,
    n_test_videos=5,
    captions_per_video=(1, 4),
    video_length=(1, 200),
    visual_dim=12,
    text_dim=10,
    concept_dim=6,
    query_length=(2, 12),
    n_function_words=8,
    polysemous_fraction=0.3,
    underdetermined_fraction=0.3,
    spurious_fraction=0.5,
)


def make_tiny_benchmark(root: Path, layout: str = "hdf5", seed: int = 0) -> Path:
    """Write the tiny benchmark under ``root/tiny`` and return the data root."""
    generate_embedded_benchmark(root, COLLECTION, seed=seed, spec=TINY_SPEC, feature_layout=layout)
    return Path(root)

# Smaller still, for command-line runs that train end to end (a run takes about a second).
MICRO_SPEC = EmbeddedBenchmarkSpec(
    n_train_videos=8,
    n_val_videos=4,
    n_test_videos=4,
    captions_per_video=(1, 2),
    video_length=(2, 24),
    visual_dim=8,
    text_dim=6,
    concept_dim=4,
    query_length=(2, 6),
    n_function_words=4,
)


def make_micro_benchmark(root: Path, layout: str = "hdf5", seed: int = 0, **changes) -> Path:
    """Write the micro benchmark (``MICRO_SPEC`` with ``changes``) under ``root/tiny``; return the data root."""
    from dataclasses import replace

    generate_embedded_benchmark(root, COLLECTION, seed=seed, spec=replace(MICRO_SPEC, **changes), feature_layout=layout)
    return Path(root)
