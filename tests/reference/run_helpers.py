"""Helpers of the command-line tests: a fast config, running ``main`` as a process would, reading its errors."""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from reference_models.holmes.cli import main
from reference_models.holmes.config import HolmesConfig, preset
from tests.reference.data_helpers import COLLECTION, TINY_SPEC

FEATURE = TINY_SPEC.visual_feature


def micro_config(**optim) -> HolmesConfig:
    """A model small enough that a one-epoch run on the micro benchmark takes about a second.

    ``optim`` changes ``optim`` fields, and ``epochs`` / ``early_stop_patience`` of ``schedule``.
    """
    schedule = {"epochs": 1, "warmup_stage_epochs": 1, "hard_negative_epoch": 1,
                **{name: optim.pop(name) for name in ("epochs", "early_stop_patience") if name in optim}}
    return preset("embedded").replace(
        model={"hidden_size": 16, "num_heads": 2, "widths": [None, 1.0], "ffn_multiplier": 1},
        optim={"videos_per_batch": 4, "lr": 1e-3, "eval_video_batch": 8, "eval_query_batch": 16, "score_chunk": 8,
               **optim},
        schedule=schedule,
        dab={"embed_dim": 8, "n_steps": 2},
    )


def write_config(path: Path, **optim) -> Path:
    """Write :func:`micro_config` as JSON to ``path`` and return it."""
    micro_config(**optim).to_json(path)
    return path


@dataclass
class CliRun:
    """Exit status and captured output of one ``main`` call; ``rc`` is 1 where a process would show a traceback."""

    rc: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]

    def error_line(self, *needles: str) -> str:
        """Assert a user error: status 2, no traceback, the last stderr line names every needle; return it."""
        assert self.rc == 2, (self.rc, self.err)
        assert "Traceback" not in self.err, self.err
        line = self.err_lines[-1]
        assert line.startswith(("error:", "invalid data root:")) or ": error: " in line, self.err
        for needle in needles:
            assert needle in line, (needle, line)
        return line

    def only_error_line(self, *needles: str) -> str:
        """:meth:`error_line`, and nothing else on stderr."""
        line = self.error_line(*needles)
        assert len(self.err_lines) == 1, self.err
        return line


def run_cli(capsys, *argv: object) -> CliRun:
    """Call ``main`` the way ``python -m reference_models.holmes`` would and capture what it prints."""
    capsys.readouterr()
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    except Exception:  # the process would die with this traceback and status 1
        rc = 1
        sys.stderr.write(traceback.format_exc())
    out, err = capsys.readouterr()
    return CliRun(rc, out, err)


def data_args(root: Path) -> list[str]:
    """``--data-root/--collection/--visual-feature`` of a generated root."""
    return ["--data-root", str(root), "--collection", COLLECTION, "--visual-feature", FEATURE]


def train_args(root: Path, out: Path, config: Path, *extra: object) -> list[str]:
    """A quiet CPU ``train`` command line."""
    return ["train", *data_args(root), "--config-file", str(config), "--device", "cpu", "--output-dir", str(out),
            "--no-progress", *map(str, extra)]
