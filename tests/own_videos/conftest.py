"""Shared fixtures of the own-videos tests: a small open_clip configuration created without weights, and one
generated collection run through extract and train --config clip once per session (about 90 s on two cores).

The tests need the ``video`` extra (open_clip_torch, av, flask); each module skips with the reason without it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.own_videos.helpers import TINY_CLIP, cli


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("encoder") / "tiny-clip.json"
    path.write_text(json.dumps(TINY_CLIP), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> dict[str, Path]:
    from reference_models.holmes.videos.generated import write_generated_collection

    base = tmp_path_factory.mktemp("own_videos")
    coll = write_generated_collection(base / "coll", n_videos=120, seed=0)
    root, run = base / "root", base / "run"
    extract = cli("extract", "--videos", str(coll.videos_dir), "--captions", str(coll.captions_csv), "--out",
                   str(root), "--model", str(tiny_model), "--pretrained", "none", "--fps", "2", "--no-progress")
    assert extract.returncode == 0, extract.stderr
    train = cli("train", "--config", "clip", "--data-root", str(root), "--output-dir", str(run), "--no-progress")
    assert train.returncode == 0, train.stderr[-2000:]
    return {"coll": base / "coll", "root": root, "run": run, "base": base}
