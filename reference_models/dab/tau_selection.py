"""The choice of DAB's PAC temperature rule on the development instance (the rule is written in
``docs/guide/dab.rst``, "The PAC temperature on the base's footing", before any run of it).

:func:`select_tau_rule` writes development data seed :data:`DEV_DATA_SEED` of a named benchmark, trains DAB (its
config preset) once per candidate rule with training seed 0, and reads each run's best validation R@1 and the
validation MnR of that epoch; no test split is scored. :func:`decide` applies the written rule to those figures.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from reference_models.dab.benchmark import benchmark_spec, generate_t2v_benchmark
from reference_models.dab.config import TAU_RULES, preset
from reference_models.dab.data import load_t2v_split
from reference_models.dab.model import T2VModel
from reference_models.dab.task import T2VTask
from reference_models.engine import Trainer

__all__ = ["CANDIDATES", "DEV_DATA_SEED", "R1_MARGIN", "decide", "select_tau_rule"]

#: The data seed of the development instance, never a reported one.
DEV_DATA_SEED = 100
#: The two rules the choice is between, each putting τ on the base's footing (set once, or learned).
CANDIDATES = ("matched", "learned")
#: Validation R@1 points by which a candidate must lead to win on R@1 alone (2.5 of 250 validation queries).
R1_MARGIN = 1.0


def decide(figures: dict[str, dict[str, float]]) -> tuple[str, str]:
    """The rule of the guide applied to each candidate's validation figures.

    A candidate wins if its validation R@1 is higher than every other's by more than :data:`R1_MARGIN`; otherwise
    the lower validation MnR wins among those within the margin of the best R@1; a tie there goes to ``matched``
    (no parameter the base does not have).

    Parameters
    ----------
    figures : dict
        ``{rule: {"val_R@1": float, "val_MnR": float}}`` for the candidates.

    Returns
    -------
    chosen : str
        The chosen rule.
    reason : str
        Why, in words.
    """
    unknown = set(figures) - set(TAU_RULES)
    if not figures or unknown:
        raise ValueError(f"figures must map rules of {', '.join(TAU_RULES)} to their figures, got {sorted(figures)!r}")
    best = max(f["val_R@1"] for f in figures.values())
    close = [r for r, f in figures.items() if best - f["val_R@1"] <= R1_MARGIN]
    if len(close) == 1:
        return close[0], f"validation R@1 higher by more than {R1_MARGIN} points"
    low = min(figures[r]["val_MnR"] for r in close)
    lowest = [r for r in close if figures[r]["val_MnR"] == low]
    if len(lowest) == 1:
        return lowest[0], f"validation R@1 within {R1_MARGIN} points; lower validation MnR"
    return ("matched" if "matched" in lowest else lowest[0]), "validation R@1 and MnR tied; the rule without a parameter"


def select_tau_rule(out: str | Path, *, benchmark: str = "msrvtt-regime", epochs: int | None = None,
                    device: str = "cpu", candidates: tuple[str, ...] = CANDIDATES) -> dict[str, Any]:
    """Train DAB once per candidate rule on the development instance and apply :func:`decide`.

    Parameters
    ----------
    out : str or pathlib.Path
        Folder of the instance (``data``), the runs (one per rule) and ``selection.json``.
    benchmark : str
        The named benchmark (:data:`~reference_models.dab.benchmark.BENCHMARKS`), trained with its config preset.
    epochs : int, optional
        Override of the preset's epochs (``None``: the preset's, as the rule says).
    device : str
        Torch device.
    candidates : tuple of str
        The rules compared (:data:`CANDIDATES`).

    Returns
    -------
    dict
        ``{"benchmark", "data_seed", "seed", "epochs", "figures": {rule: {"val_R@1", "val_MnR", "best_epoch",
        "tau_start", "tau_end", "seconds"}}, "chosen", "reason"}`` (also written to ``out/selection.json``).
    """
    out = Path(out)
    data = out / "data"
    spec = benchmark_spec(benchmark)
    if not (data / "benchmark_meta.json").is_file():
        generate_t2v_benchmark(data, seed=DEV_DATA_SEED, spec=spec)
    config = preset(benchmark)
    if epochs is not None:
        config = config.replace(optim={"epochs": epochs})
    train, val = (load_t2v_split(data, s, max_frames=config.backbone.max_frames) for s in ("train", "val"))
    figures: dict[str, dict[str, float]] = {}
    for rule in candidates:
        start = time.perf_counter()
        trainer = Trainer(T2VTask(config.replace(head={"tau_rule": rule}), train, val), out / rule, device=device,
                          seed=0, show_progress=False)
        fit = trainer.fit(resume=True)
        at_best = next(h for h in fit.history if h["epoch"] == fit.best_epoch)
        model = trainer.load_best()
        assert isinstance(model, T2VModel)
        figures[rule] = {"val_R@1": float(fit.best_metric), "val_MnR": float(at_best["val/MnR"]),
                         "best_epoch": float(fit.best_epoch), "tau_start": float(model.tau_start),
                         "tau_end": float(model.pac_tau().detach()), "seconds": time.perf_counter() - start}
    chosen, reason = decide({r: {k: f[k] for k in ("val_R@1", "val_MnR")} for r, f in figures.items()})
    result = {"benchmark": benchmark, "data_seed": DEV_DATA_SEED, "seed": 0, "epochs": config.optim.epochs,
              "figures": figures, "chosen": chosen, "reason": reason}
    (out / "selection.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result
