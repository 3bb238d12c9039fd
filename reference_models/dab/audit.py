"""DAB's variance audit, ours beside the paper's (``python -m reference_models.dab diagnose --comparison DIR``).

DAB's summary ("Key Findings") reports an audit of its converged variances and of its KL margin as a selective
signal (:data:`~reference_models.dab.gradient_audit.PAPER_AUDIT`): mean video variance 2.979, text variance 0.507
(5.87 times apart), the bridge's intermediate variance 0.935 between them; ordering the queries by the KL margin
takes the AURC of the top-1 error from 0.429 to 0.256, with 85.6 % R@1 among the 25 % most confident queries.
0.429 reads as the AURC of no ordering at all, which is the top-1 error rate (a confidence that ties every query
gives the error rate; DAB's R@1 of 56.2-57.6 % is an error of 0.424-0.438).

:func:`variance_audit` reads one method's finished runs of a comparison folder (:mod:`reference_models.compare`,
the ``diagnostics.json`` and per-query ranks and confidences of each run) and sets beside those figures, over its
runs (mean, s.d. and every run):

* the mean variances :math:`\\sigma^2_v`, :math:`\\sigma^2_t`, the bridged :math:`\\hat\\sigma^2_t` and their ratio
  :math:`\\sigma^2_v / \\sigma^2_t`, and how many runs order them as DAB does (video > bridged > text);
* the text variance against the caption's drawn specificity (Spearman with each run's 95 % bootstrap interval;
  a variance that tracks how much a caption says correlates negatively), where the instance records it;
* the selective retrieval on the primary set: the AURC with no ordering (the error rate), the AURC by the method's
  own confidence (its KL margin) and by the base's (its max-score margin), R@1 at 25 % and 10 % coverage, and the
  differences method - base with the comparison tool's hierarchical-bootstrap interval
  (:func:`evidential_prvr.metrics.compare_selective_runs`).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np

from evidential_prvr.metrics import SELECTIVE_METRICS, compare_selective_runs
from reference_models.dab.comparison_runner import DABComparison
from reference_models.dab.gradient_audit import PAPER_AUDIT
from reference_models.engine import UserError
from reference_models.engine import seed_grid as grid

__all__ = ["format_variance_audit", "variance_audit"]


def variance_audit(out: str | Path, method: str = "dab", *, base: str | None = None, n_boot: int = 2000,
                   bootstrap_seed: int = 0) -> dict[str, Any]:
    """The audit of ``method``'s runs in the comparison folder ``out`` (module documentation).

    Parameters
    ----------
    out : str or pathlib.Path
        A DAB comparison folder (``python -m reference_models.compare run --task dab``).
    method : str
        A Gaussian-head method of the comparison (``dab`` or one of its ablations).
    base : str, optional
        The model whose confidence the method's is set against (default: the comparison's base).
    n_boot, bootstrap_seed : int
        The interval's bootstrap replicates and seed (the comparison tool's defaults).

    Returns
    -------
    dict
        ``{"method", "base", "runs", "paper", "sigma2", "ordering", "specificity", "selective"}``.
    """
    out = Path(out)
    plan = grid.read_plan(out)
    if plan.get("task") != "dab":
        raise UserError(f"--comparison {out}: a comparison of task {plan.get('task')!r}, not dab")
    spec = DABComparison.spec.against(method)
    if base is not None:
        if base not in (*spec.methods, spec.base) or base == method:
            raise UserError(f"--base {base}: choose another of the comparison's models ({spec.base}, "
                            f"{', '.join(m for m in spec.methods if m != method)})")
        offered = spec.methods
        spec = dataclasses.replace(spec, base=base, ablations=tuple(a for a in offered if a not in (base, method)))
    records = grid.read_runs(out)
    diagnostics = grid.collect_diagnostics(records, spec).get(method)
    if diagnostics is None:
        raise UserError(f"--comparison {out}: no finished {method} run with diagnostics.json (a Gaussian-head method "
                        "writes one; run the comparison with --methods including it)")
    runs = diagnostics["per_run"]
    per_run = []
    for run in runs:
        d = run["diagnostics"]
        s2 = d["sigma2"]
        row = {"data_seed": run["data_seed"], "seed": run["seed"], "text": s2["text"], "bridged": s2["bridged"],
               "video": s2["video"], "ratio": s2["video"] / s2["text"], "ordering": d["ordering"]}
        if "text_sigma2_vs_specificity" in d:
            row["specificity"] = d["text_sigma2_vs_specificity"]
        per_run.append(row)

    def summary(key: str) -> dict[str, float]:
        values = np.asarray([r[key] for r in per_run], dtype=np.float64)
        return {"mean": float(values.mean()), "sd": float(values.std(ddof=1)) if len(values) > 1 else float("nan")}

    result: dict[str, Any] = {
        "method": method, "base": spec.base, "comparison": str(out), "runs": per_run, "paper": dict(PAPER_AUDIT),
        "sigma2": {k: summary(k) for k in ("video", "text", "bridged", "ratio")},
        "ordering": {"paper_order_runs": sum(r["ordering"] == "video > bridged > text" for r in per_run),
                     "runs": len(per_run)},
    }
    with_spec = [r["specificity"] for r in per_run if "specificity" in r]
    if with_spec:
        rhos = np.asarray([s["spearman"] for s in with_spec])
        result["specificity"] = {"mean": float(rhos.mean()), "runs": len(with_spec),
                                 "below_zero": sum(s["high"] < 0 for s in with_spec),
                                 "above_zero": sum(s["low"] > 0 for s in with_spec)}
    result["selective"] = _selective(records, spec, n_boot, bootstrap_seed)
    result["learned"] = _learned(per_run, result)
    return result


def _learned(per_run: list[dict[str, Any]], result: dict[str, Any]) -> dict[str, Any]:
    """The guide's rule "the variances learn" (``docs/guide/dab.rst``, "The comparison and its rule"): (a) in every
    run the mean text and video variance are each at least twice or at most half the start :math:`e^{-2}`; (b) the
    Spearman interval against specificity lies below zero in all runs but at most one; (c) the paper's ordering
    video > bridged > text in all runs but at most one."""
    start = math.exp(-2.0)
    n = len(per_run)
    needed = max(1, n - 1)

    def far(value: float) -> bool:
        return value >= 2 * start or value <= start / 2

    moved = sum(far(r["text"]) and far(r["video"]) for r in per_run)
    rule: dict[str, Any] = {"runs": n, "moved": {"runs": moved, "met": moved == n},
                            "ordering": {"runs": result["ordering"]["paper_order_runs"],
                                         "met": result["ordering"]["paper_order_runs"] >= needed}}
    if "specificity" in result:
        below = result["specificity"]["below_zero"]
        rule["tracks_specificity"] = {"runs": below, "met": below >= needed and result["specificity"]["runs"] == n}
    return rule


def _selective(records: list[grid.RunRecord], spec: grid.ComparisonSpec, n_boot: int, seed: int) -> dict[str, Any]:
    collected = grid.collect_ranks(records, spec, spec.primary)
    confidence = collected["confidence"]
    if not collected["data_seeds"] or confidence is None:
        raise UserError(f"no data seed has finished runs of both {spec.method} and {spec.base} with per-query "
                        "confidences yet")
    comparisons = compare_selective_runs(confidence["method"], collected["method"], confidence["base"],
                                         collected["base"], SELECTIVE_METRICS, n_boot=n_boot, generator=seed)
    error = [float((ranks > 1).mean()) for ranks in collected["method"]]  # per instance, over its runs and queries
    return {"set": spec.primary, "confidence": confidence["names"], "error_rate": float(np.mean(error)),
            "metrics": {m: c.to_dict() for m, c in comparisons.items()}, "data_seeds": collected["data_seeds"]}


def _interval(c: dict[str, Any], digits: int) -> str:
    return f"{c['difference']:+.{digits}f} [{c['low']:+.{digits}f}, {c['high']:+.{digits}f}]"


def format_variance_audit(audit: dict[str, Any]) -> str:
    """The audit as a table: DAB's reported figure beside ours (mean ± s.d. over runs) and the intervals."""
    p, s2, method, base = audit["paper"], audit["sigma2"], audit["method"], audit["base"]
    sel = audit["selective"]
    m = sel["metrics"]
    runs = len(audit["runs"])

    def ours(key: str, digits: int = 3) -> str:
        return f"{s2[key]['mean']:.{digits}f} ± {s2[key]['sd']:.{digits}f}"

    rows = [
        ("mean sigma^2 video", f"{p['sigma2_video']:.3f}", ours("video")),
        ("mean sigma^2 text", f"{p['sigma2_text']:.3f}", ours("text")),
        ("mean sigma^2 bridged text", f"{p['sigma2_bridged']:.3f}", ours("bridged")),
        ("ratio video / text", f"{p['ratio_video_text']:.2f}", ours("ratio", 2)),
        ("order video > bridged > text", "yes", f"{audit['ordering']['paper_order_runs']} of {runs} runs"),
    ]
    if "specificity" in audit:
        sp = audit["specificity"]
        rows.append(("text sigma^2 vs specificity", "-", f"Spearman {sp['mean']:+.3f} (mean); interval below 0 in "
                     f"{sp['below_zero']} of {sp['runs']} runs, above 0 in {sp['above_zero']}"))
    aurc = m["AURC"]
    rows += [
        ("AURC, no ordering (error rate)", f"{p['aurc_before']:.3f}", f"{sel['error_rate']:.3f}"),
        (f"AURC by {sel['confidence']['method']}", f"{p['aurc_kl_margin']:.3f}",
         f"{aurc['method']['mean']:.3f}; {base} by {sel['confidence']['base']} {aurc['base']['mean']:.3f}, "
         f"{method} - {base} {_interval(aurc, 3)}"),
    ]
    for key, paper_key in (("R@1@25%", "R@1@25%"), ("R@1@10%", "R@1@10%")):
        c = m[key]
        rows.append((f"{key} ({sel['confidence']['method']})", f"{p[paper_key]:.1f}",
                     f"{c['method']['mean']:.2f}; {base} {c['base']['mean']:.2f}, {method} - {base} {_interval(c, 2)}"))
    width = max(len(r[0]) for r in rows)
    lines = [f"variance audit of {method} ({runs} runs, data seeds {sel['data_seeds']}; selective figures on "
             f"{sel['set']}, interval: 95 % hierarchical bootstrap)",
             f"{'figure':<{width}s}  {'DAB paper':>9s}  ours"]
    lines += [f"{name:<{width}s}  {paper:>9s}  {value}" for name, paper, value in rows]
    learned = audit["learned"]
    checks = [f"moved from e^-2 by 2x in {learned['moved']['runs']} of {runs} runs "
              f"({'met' if learned['moved']['met'] else 'not met'})"]
    if "tracks_specificity" in learned:
        t = learned["tracks_specificity"]
        checks.append(f"tracks specificity in {t['runs']} of {runs} ({'met' if t['met'] else 'not met'})")
    checks.append(f"paper's ordering in {learned['ordering']['runs']} of {runs} "
                  f"({'met' if learned['ordering']['met'] else 'not met'})")
    lines.append("the variances learn (the guide's rule): " + "; ".join(checks))
    lines.append("per run (data seed, seed): sigma^2 video / text / bridged, ratio, Spearman vs specificity [95%]")
    for r in audit["runs"]:
        sp = r.get("specificity")
        tail = f", {sp['spearman']:+.3f} [{sp['low']:+.3f}, {sp['high']:+.3f}]" if sp else ""
        lines.append(f"  ({r['data_seed']}, {r['seed']}): {r['video']:.4f} / {r['text']:.4f} / {r['bridged']:.4f}, "
                     f"{r['ratio']:.2f}{tail}")
    return "\n".join(lines)
