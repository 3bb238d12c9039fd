"""Helpers of the own-videos tests: the small encoder configuration, the command line, the held-out captions."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A small open_clip CLIP (average-pooled patches, so that an untrained model's frame features still differ).
TINY_CLIP = {"embed_dim": 64,
             "vision_cfg": {"image_size": 64, "layers": 2, "width": 64, "head_width": 32, "patch_size": 16,
                            "pool_type": "avg"},
             "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2}}


def cli(*args: str, cwd: Path | None = None, timeout: float = 280) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reference_models.holmes", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**cli_env(), "OMP_NUM_THREADS": "2"})


def cli_env() -> dict[str, str]:
    repo = str(ROOT)
    return {**os.environ, "PYTHONPATH": repo + os.pathsep + os.environ.get("PYTHONPATH", "")}


def problem_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("problem: ")]


def held_out_captions(root: Path, split: str = "test") -> list[tuple[str, str]]:
    """A split's ``(caption id, sentence)`` pairs of an extracted root (the held-out test split by default)."""
    lines = (root / "videos" / "TextData" / f"videos{split}.caption.txt").read_text(encoding="utf-8").splitlines()
    return [tuple(line.split(" ", 1)) for line in lines]  # type: ignore[misc]
