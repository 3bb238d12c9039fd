"""Training-step time and retrieval cost of the text-to-video model: DAB against its CLIP4Clip base, same run.

Both variants use the demo's backbone (``reference_models.dab.config`` defaults) on the same random batch of
``--batch`` distinct videos (``--frames`` frames of ``--frame-dim`` features, one ``--text-dim`` caption
each); a step is forward + PAC / InfoNCE + backward + AdamW update. Retrieval: one query at a time against a
gallery of ``--gallery`` pre-encoded videos (``reference_models.dab.evaluate.query_cost``: median latency and
FLOPs per query). Printed: the medians, the ratios DAB / base (the goal: step ratio <= 1.5) and the
same for the ablation variants with ``--all-variants``.

``--config msrvtt-regime`` times the comparison's models instead (the ``msrvtt-regime`` preset: 256-d features,
identity encoders) and their ablations (:data:`reference_models.dab.config.ABLATIONS`: the text-only and the
video-conditioned bridge, heads only, bridge only at DAB's width, W2, mean-distance ranking), with the ratio of
each to the base and to DAB with the text-only bridge; use ``--gallery 1000`` for the 1k-A gallery.

Examples (the numbers in docs/guide/dab.rst)::

    OMP_NUM_THREADS=1 python benchmarks/dab_step_time.py --threads 1
    OMP_NUM_THREADS=1 python benchmarks/dab_step_time.py --threads 1 --config msrvtt-regime --gallery 1000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks._timing import median_ms, set_threads  # noqa: E402
from reference_models.dab.comparison_runner import DABComparison  # noqa: E402
from reference_models.dab.config import DEMO_ABLATIONS, PRESETS, T2VConfig, ablation_config  # noqa: E402
from reference_models.dab.data import T2VSplit  # noqa: E402
from reference_models.dab.evaluate import query_cost  # noqa: E402
from reference_models.dab.model import T2VModel  # noqa: E402
from reference_models.dab.task import T2VObjective  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--frames", type=int, default=12)
    parser.add_argument("--frame-dim", type=int, default=64)
    parser.add_argument("--text-dim", type=int, default=64)
    parser.add_argument("--gallery", type=int, default=240, help="videos in the retrieval gallery")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's choice)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--all-variants", action="store_true", help="also time prob / bridge / W2 / T'=8, 64")
    parser.add_argument("--config", choices=tuple(PRESETS), default="embedded",
                        help="the models to time: the demo's (embedded) or the msrvtt-regime comparison's")
    args = parser.parse_args(argv)
    if args.config == "msrvtt-regime":  # identity encoders: features of the backbone's width
        args.frame_dim = args.text_dim = PRESETS["msrvtt-regime"].backbone.hidden
    return args


def make_step(config: T2VConfig, batch: tuple[torch.Tensor, ...], args: argparse.Namespace, device: torch.device):
    """A closure running one training step of ``config`` on ``batch``."""
    torch.manual_seed(0)
    model = T2VModel(args.frame_dim, args.text_dim, config).to(device)
    objective = T2VObjective(config.head)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.02)

    def step() -> None:
        loss = objective(model(*batch)).total
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return model, step


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    set_threads(args.threads)
    device = torch.device(args.device)
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(args.batch, args.text_dim, generator=g).to(device),
             torch.randn(args.batch, args.frames, args.frame_dim, generator=g).to(device),
             torch.ones(args.batch, args.frames, dtype=torch.bool, device=device))
    gallery = T2VSplit(
        video_ids=[f"v{i}" for i in range(args.gallery)],
        frames=torch.randn(args.gallery, args.frames, args.frame_dim, generator=g),
        frame_mask=torch.ones(args.gallery, args.frames, dtype=torch.bool),
        text=torch.randn(32, args.text_dim, generator=g), query_video=torch.zeros(32, dtype=torch.long),
        sen_ids=list(range(32)),
    )
    default = PRESETS[args.config]
    if args.config == "embedded":
        variants = {"base": default.replace(head={"variant": "base"}), "dab": default}
        if args.all_variants:
            variants.update({name: ablation_config(default, name) for name in DEMO_ABLATIONS})
    else:
        runner = DABComparison(default)
        variants = {name: runner.variant_config(name) for name in ("base", *runner.spec.methods)}
    rows = {}
    for name, config in variants.items():
        model, step = make_step(config, batch, args, device)
        step_ms = median_ms(step, args.repeats, warmup=3, device=device)
        cost = query_cost(model, gallery, device)
        rows[name] = (step_ms, cost["latency_ms_per_query"], cost["flops_per_query"])
    base = rows["base"]
    b = default.backbone
    print(f"backbone hidden={b.hidden} temporal_layers={b.temporal_layers} pooling={b.pooling}; batch {args.batch}, "
          f"{args.frames} frames; gallery {args.gallery} videos; threads {torch.get_num_threads()}; {device}")
    dab = rows["dab"]
    print(f"{'variant':<14} {'step ms':>8} {'x base':>7} {'query ms':>9} {'x base':>7} {'x dab':>7} "
          f"{'MFLOPs/query':>13} {'x base':>7} {'x dab':>7}")
    for name, (step_ms, latency, flops) in rows.items():
        print(f"{name:<14} {step_ms:8.2f} {step_ms / base[0]:7.2f} {latency:9.3f} {latency / base[1]:7.2f} "
              f"{latency / dab[1]:7.2f} {flops / 1e6:13.2f} {flops / base[2]:7.2f} {flops / dab[2]:7.2f}")
    ratio = rows["dab"][0] / base[0]
    print(f"DAB training step / base: {ratio:.2f}x (goal <= 1.5x): {'OK' if ratio <= 1.5 else 'ABOVE GOAL'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
