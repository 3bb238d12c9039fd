"""Own videos, the demo: ``prvr-videos demo`` writes the generated world, indexes it with the bundled encoder and
prints, on the held-out test captions, recall per caption kind beside chance, the mean probability shown and the
calibration's error; a second run of the same command finds everything indexed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("av", reason="the video extra (av) is not installed")
pytest.importorskip("open_clip", reason="the video extra (open_clip_torch) is not installed")

from tests.own_videos.helpers import videos_cli  # noqa: E402

KINDS = ("appearance", "motion", "order", "generic", "all")


def _table(stdout: str) -> dict[str, list[float]]:
    rows = {}
    for line in stdout.splitlines():
        cells = line.split()
        if cells and cells[0] in KINDS and len(cells) == 7:
            rows[cells[0]] = [float(c) for c in cells[1:]]
    return rows


def test_demo_prints_recall_against_chance_and_the_probability_shown(tmp_path: Path) -> None:
    run = videos_cli("demo", "--out", str(tmp_path / "demo"))
    assert run.returncode == 0, run.stderr
    table = _table(run.stdout)
    assert set(table) == set(KINDS), run.stdout
    n, r1, r5, r10, chance, shown = table["all"]
    assert n == sum(table[k][0] for k in KINDS[:-1])
    assert chance == pytest.approx(100 * 5 / 120, abs=0.05)
    assert 0 <= r1 <= r5 <= r10 <= 100
    assert r5 > 5 * chance  # the bundled encoder finds far more than chance
    assert all(0 <= row[5] <= 100 for row in table.values())
    ece = re.search(r"expected calibration error (\d\.\d+) on the test captions", run.stdout)
    assert ece is not None and 0 <= float(ece.group(1)) <= 0.2, run.stdout
    again = videos_cli("demo", "--out", str(tmp_path / "demo"))
    assert again.returncode == 0, again.stderr
    assert re.search(r"indexed 120 videos into .* \(0 encoded, 120 unchanged\)", again.stdout), again.stdout
    assert _table(again.stdout) == table
