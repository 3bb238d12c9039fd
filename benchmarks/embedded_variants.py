"""The embedded demo with the ``embedded`` preset's own architecture and with the release's, side by side.

Each variant trains Holmes and the MIL baseline on the embedded benchmark (as ``python -m reference_models.holmes
demo`` does) and reports their test SumR and training time, so the ``embedded`` preset's choice can be checked:

``embedded``
    The preset as it is (symmetric kernel, linear width weighting, output projections, AdamW).
``release_architecture``
    The release's architecture switches (kernel, cross-attention width weighting at the TVR temperature, no
    output projection, a feed-forward query block, additive mask, padded frames scoring 0, a second query
    encoding) at the preset's sizes and optimiser.
``release_architecture_and_optimizer``
    The same with the release's optimiser (BertStyleAdam, its schedule, per-tensor clipping, its decay groups).

Example (2 CPU threads, a few minutes per variant)::

    python benchmarks/embedded_variants.py --seed 0 --output-dir /tmp/embedded_variants
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from evidential_prvr.presets import holmes_settings  # noqa: E402
from reference_models.holmes.cli import run_comparison  # noqa: E402
from reference_models.holmes.config import HolmesConfig, preset  # noqa: E402
from reference_models.holmes.data import generate_embedded_benchmark  # noqa: E402

RELEASE_ARCHITECTURE = {
    "kernel": "release",
    "width_weighting": "cross_attention",
    "width_temperature": holmes_settings("release", "tvr").model.width_temperature,
    "attention_output_projection": False,
    "query_ffn_multiplier": 4,
    "attention_mask": "additive",
    "padded_frames": "zero",
    "second_query_encoding": True,
}
RELEASE_OPTIMIZER = {"optimizer": "bert_adam", "lr_schedule": "bert_warmup_linear", "grad_clip_mode": "per_parameter",
                     "no_decay": "embedding_norms", "eps": 1e-6}


def variants() -> dict[str, HolmesConfig]:
    """The compared configs by name."""
    base = preset("embedded")
    arch = base.replace(model=RELEASE_ARCHITECTURE)
    return {"embedded": base, "release_architecture": arch,
            "release_architecture_and_optimizer": arch.replace(optim=RELEASE_OPTIMIZER)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", nargs="*", help="variant names to run (default: all)")
    parser.add_argument("--output-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    data = args.output_dir / "data"
    generate_embedded_benchmark(data, "embedded", seed=args.seed)
    summary = {}
    for name, cfg in variants().items():
        if args.only and name not in args.only:
            continue
        start = time.perf_counter()
        res = run_comparison(data, "embedded", "synthetic", cfg, args.output_dir / name, seed=args.seed)
        summary[name] = {
            "seconds": time.perf_counter() - start,
            **{k: {"SumR": res[k]["recall"]["SumR"], "R@1": res[k]["recall"]["R@1"],
                   "train_seconds_per_epoch": res[k]["efficiency"]["train_seconds_per_epoch"]}
               for k in ("holmes", "baseline")},
        }
        print(name, json.dumps(summary[name]), flush=True)
    (args.output_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
