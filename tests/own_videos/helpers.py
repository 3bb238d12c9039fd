"""Helpers of the own-videos tests: a small untrained encoder configuration, the command lines, the held-out captions."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A small open_clip CLIP created without weights (average-pooled patches, so that its frame features still differ):
# for the tests of the encoder's plumbing and of bad input, where what the features mean does not matter.
TINY_CLIP = {"embed_dim": 64,
             "vision_cfg": {"image_size": 48, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16,
                            "pool_type": "avg"},
             "text_cfg": {"context_length": 20, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}}


def _run(module: str, args: tuple[str, ...], cwd: Path | None, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env={**cli_env(), "OMP_NUM_THREADS": "2"})


def videos_cli(*args: str, cwd: Path | None = None, timeout: float = 280) -> subprocess.CompletedProcess[str]:
    """``prvr-videos ARGS`` (as ``python -m reference_models.videos``)."""
    return _run("reference_models.videos", args, cwd, timeout)


def holmes_cli(*args: str, cwd: Path | None = None, timeout: float = 280) -> subprocess.CompletedProcess[str]:
    """``python -m reference_models.holmes ARGS``."""
    return _run("reference_models.holmes", args, cwd, timeout)


def cli_env() -> dict[str, str]:
    repo = str(ROOT)
    return {**os.environ, "PYTHONPATH": repo + os.pathsep + os.environ.get("PYTHONPATH", "")}


def problem_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("problem: ")]


def held_out_captions(root: Path, split: str = "test") -> list[tuple[str, str]]:
    """A split's ``(caption id, sentence)`` pairs of a gallery (the held-out test split by default)."""
    lines = (root / "videos" / "TextData" / f"videos{split}.caption.txt").read_text(encoding="utf-8").splitlines()
    return [tuple(line.split(" ", 1)) for line in lines]  # type: ignore[misc]
