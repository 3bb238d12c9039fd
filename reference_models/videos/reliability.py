"""How well the probability a search shows is calibrated: expected calibration error and a reliability diagram.

``python -m reference_models.videos.reliability --comparison DIR --figure PATH`` reads the benchmark instances of a
comparison folder written by ``python -m reference_models.compare run --task videos`` (each a generated world's
gallery, :mod:`reference_models.videos.comparison_runner`) and its trained runs. For every gallery and scorer
(zero-shot; each trained checkpoint), the probability that the right video is among the top ``k``
(:meth:`~reference_models.videos.calibration.Calibration.probability`, fitted on the gallery's ``val`` captions)
is set against what happened on its ``test`` captions, which the calibration never saw: per ``k``, the expected
calibration error (:func:`~reference_models.videos.calibration.expected_calibration_error`, ten equal-width bins)
over all test captions of all instances, its range over the instances, and the reliability diagram (hit rate
against mean probability per bin, pooled over the instances) drawn to ``PATH``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from reference_models import engine

__all__ = ["KS", "held_out_probabilities", "summarise", "draw", "main"]

#: The ``k`` of the probabilities measured.
KS = (1, 5, 10)


def held_out_probabilities(answerer: Any, ks: Sequence[int] = KS) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per ``k``: the probability shown for each ``test`` caption of the gallery and whether its video was among the k."""
    captions = [c for c in answerer.gallery.captions() if c["split"] == "test"]
    if not captions or not answerer.calibrated:
        raise engine.UserError(f"{answerer.root}: needs test captions and a calibration (val captions)")
    out = {}
    for k in ks:
        answers = answerer.answer([c["sentence"] for c in captions], k=k)
        p = np.array([a.probability for a in answers], dtype=np.float64)
        hit = np.array([any(h.video == c["video"] for h in a.results) for c, a in zip(captions, answers)])
        out[k] = (p, hit)
    return out


def summarise(per_instance: list[dict[int, tuple[np.ndarray, np.ndarray]]]) -> dict[int, dict[str, Any]]:
    """Per ``k``: the pooled ECE, the range of the instances' ECEs, the captions, the mean probability and hit rate."""
    from reference_models.videos.calibration import expected_calibration_error

    out = {}
    for k in per_instance[0]:
        p = np.concatenate([inst[k][0] for inst in per_instance])
        hit = np.concatenate([inst[k][1] for inst in per_instance])
        each = [expected_calibration_error(*inst[k]) for inst in per_instance]
        out[k] = {"ece": expected_calibration_error(p, hit), "ece_min": min(each), "ece_max": max(each),
                  "captions": int(len(p)), "mean_probability": float(p.mean()), "hit_rate": float(hit.mean())}
    return out


def draw(pooled: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]], path: Path, summary: dict[str, Any]) -> None:
    """The reliability diagram: per scorer and ``k``, the hit rate against the mean probability of each bin."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from reference_models.videos.calibration import reliability_bins

    fig, axes = plt.subplots(1, len(pooled), figsize=(4.6 * len(pooled), 4.4), squeeze=False)
    for ax, (scorer, per_k) in zip(axes[0], pooled.items()):
        ax.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--", label="perfect calibration")
        for k, (p, hit) in per_k.items():
            mean_p, rate, count = reliability_bins(p, hit)
            used = count > 0
            ax.plot(mean_p[used], rate[used], marker="o", label=f"k = {k}: ECE {summary[scorer][k]['ece']:.3f}")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("probability shown (mean per bin)")
        ax.set_ylabel("right video among the k shown (share)")
        ax.set_title(f"{scorer}: {summary[scorer][next(iter(per_k))]['captions']} test captions")
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = engine.OneLineParser(prog="python -m reference_models.videos.reliability",
                                  description="Calibration error and reliability diagram of the probability shown.")
    parser.add_argument("--comparison", type=Path, required=True, help="a folder of compare run --task videos")
    parser.add_argument("--figure", type=Path, required=True, help="the reliability diagram (PNG)")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    def run(args: argparse.Namespace) -> int:
        from reference_models.engine import seed_grid as grid
        from reference_models.videos.answers import Answerer

        galleries = sorted(Path(args.comparison).glob("data/data*/gallery"))
        if not galleries:
            raise engine.UserError(f"--comparison {args.comparison}: no data/data*/gallery (not a videos comparison)")
        scorers: dict[str, list[dict[int, tuple[np.ndarray, np.ndarray]]]] = {"zero-shot": [], "trained": []}
        for gallery in galleries:
            data_seed = int(gallery.parent.name.removeprefix("data"))
            scorers["zero-shot"].append(held_out_probabilities(Answerer(gallery, device=args.device)))
            for checkpoint in sorted((Path(args.comparison) / "runs" / f"data{data_seed}").glob("seed*/holmes/best.pt")):
                if (checkpoint.parent / grid.RANKS_NAME).is_file():
                    scorers["trained"].append(held_out_probabilities(Answerer(gallery, checkpoint=checkpoint,
                                                                          device=args.device)))
        scorers = {name: runs for name, runs in scorers.items() if runs}
        summary = {name: summarise(runs) for name, runs in scorers.items()}
        pooled = {name: {k: (np.concatenate([r[k][0] for r in runs]), np.concatenate([r[k][1] for r in runs]))
                         for k in KS} for name, runs in scorers.items()}
        rows = [["scorer", "k", "runs", "test captions", "ECE (pooled)", "ECE per run (min-max)", "mean probability",
                 "hit rate"]]
        for name, per_k in summary.items():
            for k, s in per_k.items():
                rows.append([name, str(k), str(len(scorers[name])), str(s["captions"]), f"{s['ece']:.3f}",
                             f"{s['ece_min']:.3f}-{s['ece_max']:.3f}", f"{s['mean_probability']:.3f}",
                             f"{s['hit_rate']:.3f}"])
        print(engine.format_table(rows))
        draw(pooled, Path(args.figure), summary)
        print(f"reliability diagram written to {args.figure}")
        if args.json:
            engine.write_json(args.json, {name: {str(k): v for k, v in per_k.items()} for name, per_k in summary.items()})
        return 0

    return engine.run_main(run, args, program=argv is None)


if __name__ == "__main__":
    raise SystemExit(main())
