"""``python -m reference_models.holmes.stability_report FOLDER... --figure PNG``: the identification stability of
the Holmes runs of comparison folders, per epoch, averaged over each variant's finished runs.

Reads every finished run's ``diagnostics.json`` (:class:`~reference_models.holmes.stability.ThresholdStability`),
prints, per folder and variant, the per-epoch mean over runs of the share of training queries whose type changed
since their previous visit and of the thresholds' spread across batches (s.d. of β_u and β_p, frame and clip
branches), and draws them as one row of panels per folder.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reference_models import engine
from reference_models.engine import seed_grid as grid

__all__ = ["QUANTITIES", "collect", "draw", "format_table", "main"]

#: The plotted quantities, each a pair (dotted key in an epoch's record, label).
QUANTITIES = (("type_changed", "queries whose type changed"), ("beta_u_sd.frame", "s.d. of β_u (frame)"),
              ("beta_u_sd.clip", "s.d. of β_u (clip)"), ("beta_p_sd.frame", "s.d. of β_p (frame)"),
              ("beta_p_sd.clip", "s.d. of β_p (clip)"))


def _value(entry: dict[str, Any], key: str) -> float:
    value: Any = entry
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) else math.nan


def collect(folder: Path) -> dict[str, dict[str, Any]]:
    """Per variant with diagnostics: ``{"runs": n, "epochs": [...], key: [mean over runs per epoch]}``."""
    per_variant: dict[str, list[dict[str, Any]]] = {}
    for record in grid.read_runs(folder):
        path = None if record.path is None else Path(record.path) / grid.DIAGNOSTICS_NAME
        if path is not None and path.is_file():
            per_variant.setdefault(record.variant, []).append(json.loads(path.read_text())["stability"])
    out: dict[str, dict[str, Any]] = {}
    for variant, runs in sorted(per_variant.items()):
        epochs = sorted({e for run in runs for e in run})
        block: dict[str, Any] = {"runs": len(runs), "epochs": epochs}
        for key, _ in QUANTITIES:
            means = []
            for epoch in epochs:
                values = [v for run in runs if epoch in run and not math.isnan(v := _value(run[epoch], key))]
                means.append(sum(values) / len(values) if values else math.nan)
            block[key] = means
        out[variant] = block
    return out


def format_table(name: str, data: dict[str, dict[str, Any]]) -> str:
    """One folder's per-epoch means, a row per variant and epoch."""
    rows: list[list[object]] = [["variant", "runs", "epoch", *(key for key, _ in QUANTITIES)]]
    for variant, block in data.items():
        for i, epoch in enumerate(block["epochs"]):
            rows.append([variant, block["runs"], epoch, *(f"{block[key][i]:.4f}" for key, _ in QUANTITIES)])
    return f"{name}:\n" + engine.format_table(rows)


def draw(folders: dict[str, dict[str, dict[str, Any]]], path: Path) -> Path:
    """One row of panels per folder (one panel per quantity), one line per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(folders), len(QUANTITIES), figsize=(3.0 * len(QUANTITIES), 2.4 * len(folders)),
                             squeeze=False)
    for row, (name, data) in enumerate(folders.items()):
        for col, (key, label) in enumerate(QUANTITIES):
            ax = axes[row][col]
            for variant, block in data.items():
                epochs = [int(e.removeprefix("epoch")) for e in block["epochs"]]
                ax.plot(epochs, block[key], marker="o", markersize=3, label=f"{variant} ({block['runs']} runs)")
            ax.set_title(label if row == 0 else "", fontsize=8)
            ax.set_xlabel("epoch", fontsize=7)
            ax.tick_params(labelsize=7)
            if col == 0:
                ax.set_ylabel(name, fontsize=8)
                ax.legend(fontsize=6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = engine.OneLineParser(prog="python -m reference_models.holmes.stability_report",
                                  description="Per-epoch identification stability of comparison folders' Holmes runs.")
    parser.add_argument("folders", nargs="+", type=Path, help="comparison folders (--out of reference_models.compare)")
    parser.add_argument("--figure", type=Path, help="write the curves to this PNG")
    args = parser.parse_args(argv)

    def handler(args: argparse.Namespace) -> int:
        folders = {}
        for folder in args.folders:
            data = collect(folder)
            if not data:
                raise engine.UserError(f"{folder}: no finished run with diagnostics.json")
            folders[folder.name] = data
            print(format_table(folder.name, data))
        if args.figure is not None:
            print(f"figure written to {draw(folders, args.figure)}")
        return 0

    return engine.run_main(handler, args)


if __name__ == "__main__":
    raise SystemExit(main())
