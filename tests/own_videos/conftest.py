"""Shared fixtures of the own-videos tests: a generated world indexed with the bundled encoder and its captions,
a second, smaller one (also indexed without captions), and a Holmes checkpoint trained on the first (once per
session).

The tests need the ``video`` extra (open_clip_torch, av, flask); each module skips with the reason without it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.own_videos.helpers import TINY_CLIP, holmes_cli, videos_cli


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("encoder") / "tiny-clip.json"
    path.write_text(json.dumps(TINY_CLIP), encoding="utf-8")
    return path


def _world(base: Path, name: str, n_videos: int, seed: int) -> dict[str, Path]:
    from reference_models.videos.generated import write_generated_collection

    coll = write_generated_collection(base / f"{name}-world", n_videos=n_videos, seed=seed)
    root = base / name
    run = videos_cli("index", "--videos", str(coll.videos_dir), "--captions", str(coll.captions_csv), "--out",
                     str(root), "--model", "prvr-tiny", "--fps", "2", "--no-progress", "--workers", "1")
    assert run.returncode == 0, run.stderr
    return {"world": base / f"{name}-world", "root": root}


@pytest.fixture(scope="session")
def gallery(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """120 generated videos with captions, indexed with the bundled encoder (the zero-shot search is calibrated)."""
    return _world(tmp_path_factory.mktemp("own_videos"), "gallery", 120, 0)


@pytest.fixture(scope="session")
def second_gallery(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Another generated world (40 videos, another seed), indexed the same way."""
    return _world(tmp_path_factory.mktemp("own_videos_second"), "second", 40, 7)


@pytest.fixture(scope="session")
def uncalibrated(second_gallery: dict[str, Path]) -> Path:
    """The second world's videos indexed without captions: a gallery whose search is not calibrated."""
    root = second_gallery["root"].parent / "uncalibrated"
    run = videos_cli("index", "--videos", str(second_gallery["world"] / "videos"), "--out", str(root), "--model",
                     "prvr-tiny", "--fps", "2", "--no-progress", "--workers", "1")
    assert run.returncode == 0 and "not calibrated" in run.stdout, run.stderr
    return root


@pytest.fixture(scope="session")
def trained(gallery: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``best.pt`` of ``holmes train --config clip`` on the first gallery (10 epochs: the tests need a checkpoint,
    not its best figures, which the guide's comparison measures; the tests that use it allow 15 minutes, for a
    shared machine)."""
    run_dir = tmp_path_factory.mktemp("holmes") / "run"
    run = holmes_cli("train", "--config", "clip", "--data-root", str(gallery["root"]), "--output-dir", str(run_dir),
                     "--epochs", "10", "--no-progress", timeout=840)
    assert run.returncode == 0, run.stderr[-2000:]
    return run_dir / "best.pt"
