"""Figures and the HTML page of ``python -m reference_models.holmes diagnose``.

Every figure function takes plain arrays, draws with matplotlib's object API (``matplotlib.figure.Figure``,
rendered by the Agg canvas, no pyplot state) and writes one PNG. :func:`write_html` assembles the page.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "TYPE_COLOURS",
    "TransportExample",
    "QueryRow",
    "plot_uncertainty_space",
    "plot_transport",
    "plot_risk_coverage",
    "plot_type_recall",
    "plot_training",
    "write_html",
]

TYPE_NAMES = ("precise", "polysemous", "underdetermined")
TYPE_COLOURS = {"precise": "#1b9e77", "polysemous": "#d95f02", "underdetermined": "#7570b3", "unknown": "#999999"}


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=110, layout="constrained")


def _save(fig, path: Path) -> Path:
    fig.savefig(path, format="png")
    return path


def plot_uncertainty_space(
    path: Path,
    uncertainty: np.ndarray,
    consistency: np.ndarray,
    aleatoric: np.ndarray,
    runner_up: np.ndarray,
    colour_types: Sequence[str],
    identified: Sequence[str],
    thresholds: Mapping[str, float],
    colour_label: str,
) -> Path:
    """The u-c-ξ space of the queries (Holmes Fig. 2b) and two planes of the fitted identification.

    Left: 3-D scatter of :math:`(c, \\log_{10} u, \\xi)` coloured by ``colour_types`` (planted types where
    known). Middle and right: :math:`\\log_{10} u` against ξ and against the runner-up consistency r,
    coloured by the identified type, with the thresholds :math:`\\beta_u, \\beta_\\xi, \\beta_r` as lines (the
    c test is not drawn).
    """
    log_u = np.log10(np.maximum(uncertainty, 1e-300))
    fig = _figure(15.0, 4.6)
    ax3 = fig.add_subplot(1, 3, 1, projection="3d")
    for name in (*TYPE_NAMES, "unknown"):
        rows = np.array([t == name for t in colour_types], dtype=bool)
        if rows.any():
            ax3.scatter(consistency[rows], log_u[rows], aleatoric[rows], s=9, alpha=0.7, color=TYPE_COLOURS[name],
                        label=f"{name} ({int(rows.sum())})")
    ax3.set_xlabel("consistency c")
    ax3.set_ylabel("log10 epistemic u")
    ax3.set_zlabel("aleatoric ξ")
    ax3.set_title(f"u-c-ξ space, coloured by {colour_label} type", fontsize=10)
    ax3.set_box_aspect(None, zoom=0.82)
    ax3.legend(loc="upper left", fontsize=7)
    beta_u = thresholds.get("uncertainty", math.inf)
    for position, (values, label, key, name) in enumerate(((aleatoric, "aleatoric ξ (fused)", "aleatoric", "β_ξ"),
                                                           (runner_up, "runner-up consistency r", "runner_up", "β_r")),
                                                          start=2):
        ax = fig.add_subplot(1, 3, position)
        for type_name in TYPE_NAMES:
            rows = np.array([t == type_name for t in identified], dtype=bool)
            if rows.any():
                ax.scatter(log_u[rows], values[rows], s=9, alpha=0.7, color=TYPE_COLOURS[type_name],
                           label=f"identified {type_name} ({int(rows.sum())})")
        if math.isfinite(beta_u) and beta_u > 0:
            ax.axvline(math.log10(beta_u), color="k", lw=1, ls="--", label="β_u")
        if math.isfinite(thresholds.get(key, math.inf)):
            ax.axhline(thresholds[key], color="k", lw=1, ls=":", label=name)
        ax.set_xlabel("log10 epistemic u (fused)")
        ax.set_ylabel(label)
        ax.set_title("identification, thresholds fitted on val", fontsize=10)
        ax.legend(fontsize=7)
    return _save(fig, path)


@dataclass
class TransportExample:
    """One video's transport plans for the figure.

    Attributes
    ----------
    video_id : str
        Name of the video.
    ot_plan : numpy.ndarray
        ``[Mq, Mc]`` plan of standard entropic OT (no dustbin).
    fot_plan : numpy.ndarray
        ``[Mq, Mc]`` plan of flexible OT.
    dustbin : numpy.ndarray
        ``[Mc]`` mass each clip sends to the dustbin under flexible OT.
    query_labels : list of str
        Row labels (caption ids or short names).
    spans : list of tuple or None
        Each query's annotated event in clip units, a ``(start, end)`` pair of floats (``[start, end)``),
        drawn as an outline when known.
    """

    video_id: str
    ot_plan: np.ndarray
    fot_plan: np.ndarray
    dustbin: np.ndarray
    query_labels: list[str]
    spans: list[tuple[float, float]] | None = None

    @property
    def dustbin_share(self) -> float:
        """Share of the flexible plan's total mass that goes to the dustbin."""
        total = float(self.fot_plan.sum() + self.dustbin.sum())
        return float(self.dustbin.sum()) / total if total > 0 else math.nan


def _row_normalised(plan: np.ndarray) -> np.ndarray:
    peaks = plan.max(axis=1, keepdims=True)
    return np.divide(plan, peaks, out=np.zeros_like(plan), where=peaks > 0)


def plot_transport(path: Path, examples: Sequence[TransportExample]) -> Path:
    """Standard OT against flexible OT with its dustbin row Z, one row of panels per video (Holmes Fig. 4).

    Each row of a plan is scaled to its own maximum (the dustbin's marginal is much larger than a query's,
    so raw masses would hide the query rows); white outlines mark annotated events.
    """
    from matplotlib.patches import Rectangle

    n = max(1, len(examples))
    fig = _figure(11.0, 2.2 + 1.9 * n)
    for i, ex in enumerate(examples):
        ax_ot = fig.add_subplot(n, 2, 2 * i + 1)
        ax_fot = fig.add_subplot(n, 2, 2 * i + 2)
        ax_ot.imshow(_row_normalised(ex.ot_plan), aspect="auto", cmap="viridis", interpolation="nearest")
        ax_ot.set_title(f"{ex.video_id}: standard OT", fontsize=9)
        stacked = _row_normalised(np.vstack([ex.fot_plan, ex.dustbin[None, :]]))
        ax_fot.imshow(stacked, aspect="auto", cmap="viridis", interpolation="nearest")
        ax_fot.axhline(ex.fot_plan.shape[0] - 0.5, color="w", lw=1.5)
        ax_fot.set_title(f"{ex.video_id}: flexible OT, dustbin Z holds {100 * ex.dustbin_share:.0f}% of the mass",
                         fontsize=9)
        for ax, labels in ((ax_ot, ex.query_labels), (ax_fot, [*ex.query_labels, "Z"])):
            ax.set_yticks(range(len(labels)))
            ax.set_yticklabels(labels, fontsize=7)
            ax.set_xlabel("clip (each row scaled to its maximum)", fontsize=8)
            for row, (start, end) in enumerate(ex.spans or []):
                ax.add_patch(Rectangle((start - 0.5, row - 0.5), end - start, 1.0, fill=False, ec="w", lw=1.2))
    if not examples:
        ax = fig.add_subplot(1, 1, 1)
        ax.text(0.5, 0.5, "no video with a caption in this split", ha="center", va="center")
        ax.set_axis_off()
    return _save(fig, path)


def plot_risk_coverage(
    path: Path, curves: Mapping[str, tuple[np.ndarray, np.ndarray, float]], oracle: tuple[np.ndarray, np.ndarray]
) -> Path:
    """Selective risk against coverage of every confidence in one plot, with the oracle ordering.

    ``curves`` maps a confidence name to ``(coverage, risk, AURC)``; each curve is drawn through its operating
    points and extended flat to coverage 0, the curve :func:`evidential_prvr.metrics.aurc` integrates.
    """
    fig = _figure(6.4, 4.6)
    ax = fig.add_subplot(1, 1, 1)
    for name, (coverage, risk, area) in sorted(curves.items(), key=lambda kv: kv[1][2]):
        ax.plot(np.r_[0.0, coverage], np.r_[risk[0], risk], lw=1.4, label=f"{name} (AURC {area:.3f})")
    ax.plot(np.r_[0.0, oracle[0]], np.r_[oracle[1][0], oracle[1]], "k--", lw=1, label="oracle")
    ax.set_xlabel("coverage (share of queries answered)")
    ax.set_ylabel("selective risk (top-1 error among answered)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("risk-coverage of each confidence")
    return _save(fig, path)


def plot_type_recall(path: Path, recall: Mapping[str, Mapping[str, float]]) -> Path:
    """Grouped bars: R@1 (%) per query type, one bar group per type and one bar per grouping.

    ``recall`` maps a grouping name (e.g. ``"planted"``, ``"identified"``) to ``{type: R@1}``.
    """
    fig = _figure(6.4, 4.0)
    ax = fig.add_subplot(1, 1, 1)
    groups = list(recall)
    width = 0.8 / max(1, len(groups))
    for g, group in enumerate(groups):
        values = [recall[group].get(t, math.nan) for t in TYPE_NAMES]
        xs = np.arange(len(TYPE_NAMES)) + (g - (len(groups) - 1) / 2) * width
        bars = ax.bar(xs, [0 if math.isnan(v) else v for v in values], width, label=f"by {group} type")
        for bar, v in zip(bars, values):
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height() + 1, "-" if math.isnan(v) else f"{v:.0f}",
                    ha="center", fontsize=8)
    ax.set_xticks(range(len(TYPE_NAMES)))
    ax.set_xticklabels(TYPE_NAMES)
    ax.set_ylabel("R@1 (%)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=8)
    ax.set_title("top-1 recall per query type")
    return _save(fig, path)


def plot_training(path: Path, history: Sequence[Mapping[str, Any]]) -> Path:
    """Training losses and validation recall per epoch from a run's history."""
    fig = _figure(11.0, 4.0)
    ax_loss, ax_val = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    epochs = [int(h["epoch"]) + 1 for h in history]
    loss_keys = sorted({k for h in history for k in h if k.startswith("loss/")})
    for key in loss_keys:
        values = [h.get(key, math.nan) for h in history]
        if any(v > 0 for v in values):  # a term that is off (0) in some epochs is left out there (log axis)
            ax_loss.plot(epochs, [v if v > 0 else math.nan for v in values], marker=".", label=key.split("/", 1)[1])
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("mean training loss")
    ax_loss.set_yscale("log")
    ax_loss.legend(fontsize=8)
    ax_loss.set_title("training losses")
    ax_sum = ax_val.twinx()
    for key, ax, style in (("val/R@1", ax_val, "C0"), ("val/SumR", ax_sum, "C3")):
        values = [h.get(key, math.nan) for h in history]
        ax.plot(epochs, values, marker=".", color=style, label=key)
        ax.set_ylabel(key, color=style)
    ax_val.set_xlabel("epoch")
    ax_val.set_title("validation recall")
    return _save(fig, path)


@dataclass
class QueryRow:
    """One line of the most/least-sure query tables."""

    caption_id: str
    sentence: str
    planted: str
    identified: str
    confidence: float
    correct: bool
    top_videos: list[tuple[str, float, bool]]  # (video id, score, is the ground truth)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _query_table(rows: Sequence[QueryRow], confidence_name: str) -> str:
    cells = []
    for r in rows:
        videos = "<br>".join(
            f"{'<b>' if gt else ''}{html.escape(v)} ({s:.3f}){' ✓' if gt else ''}{'</b>' if gt else ''}"
            for v, s, gt in r.top_videos
        )
        cells.append([html.escape(r.caption_id), html.escape(r.sentence), html.escape(r.planted),
                      html.escape(r.identified), f"{r.confidence:.4g}", "yes" if r.correct else "no", videos])
    return _table(["caption", "sentence", "planted", "identified", confidence_name, "top-1 right", "top-5 videos"],
                  cells)


def write_html(
    path: Path,
    *,
    title: str,
    summary: Sequence[tuple[str, str]],
    figures: Sequence[tuple[str, str, str]],
    tables: Sequence[tuple[str, Sequence[str], Sequence[Sequence[str]]]],
    most_sure: Sequence[QueryRow],
    least_sure: Sequence[QueryRow],
    confidence_name: str,
) -> Path:
    """Write the report page.

    ``summary``: (label, value) lines; ``figures``: (heading, PNG file name, caption); ``tables``: (heading,
    header, rows) with cells already HTML-safe.
    """
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;margin:0.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 7px;"
        "font-size:13px;vertical-align:top}th{background:#f3f3f3}img{max-width:100%;border:1px solid #ddd}"
        "figcaption{font-size:13px;color:#555;margin-bottom:1.5em}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        _table(["", ""], [[html.escape(k), html.escape(v)] for k, v in summary]),
    ]
    for heading, header, rows in tables:
        parts += [f"<h2>{html.escape(heading)}</h2>", _table(header, rows)]
    for heading, file_name, caption in figures:
        parts += [f"<h2>{html.escape(heading)}</h2>",
                  f"<figure><img src='{html.escape(file_name)}' alt='{html.escape(heading)}'>"
                  f"<figcaption>{html.escape(caption)}</figcaption></figure>"]
    parts += [f"<h2>Queries the model is most sure of (by {html.escape(confidence_name)})</h2>",
              _query_table(most_sure, confidence_name),
              f"<h2>Queries the model is least sure of (by {html.escape(confidence_name)})</h2>",
              _query_table(least_sure, confidence_name), "</body></html>"]
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
