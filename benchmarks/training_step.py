"""Training-step time of the reference model: full Holmes objective vs L_base only (MIL), same model and batch.

The paper reports that hierarchical evidential learning adds negligible training overhead (Table 2); the goal
here is a ratio of at most 1.10. Both objectives run forward + backward + optimiser step on the *same* model
and the *same* random batch (a TVR-like batch of ``--videos`` videos with ``--captions`` captions each), after
warm-up iterations; the median of ``--repeats`` timed steps is reported. Holmes runs in its second stage
(L_inter with calibration and L_intra with flexible OT), i.e. its most expensive configuration. It also times
the objective's own :class:`~evidential_prvr.FlexibleOT` transport alone on the step's problem (one call per step:
``--videos`` videos, ``--captions`` caption slots by 32 clips; L_intra's label is detached, so the transport has
no backward pass) and prints its share of the Holmes step.

Example (the release's scale; use smaller sizes for a quick check)::

    python benchmarks/training_step.py --videos 128 --captions 5 --hidden 384 --device cpu
    python benchmarks/training_step.py --videos 16 --captions 3 --hidden 64 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks._timing import time_samples_ms  # noqa: E402
from evidential_prvr import FlexibleOT  # noqa: E402
from reference_models.holmes.config import preset  # noqa: E402
from reference_models.holmes.factory import build_model  # noqa: E402
from reference_models.holmes.objective import HolmesObjective  # noqa: E402
from reference_models.holmes.optimization import build_optimizer  # noqa: E402


def random_batch(args: argparse.Namespace, device: torch.device) -> SimpleNamespace:
    """A random L2-normalised batch shaped like the data package's ``TrainBatch``."""
    g = torch.Generator().manual_seed(0)
    v, q = args.videos, args.videos * args.captions
    norm = lambda x: torch.nn.functional.normalize(x, dim=-1).to(device)  # noqa: E731
    frame_mask = torch.ones(v, args.frames, dtype=torch.bool)
    return SimpleNamespace(
        clip_feats=norm(torch.randn(v, 32, args.visual_dim, generator=g)),
        frame_feats=norm(torch.randn(v, args.frames, args.visual_dim, generator=g)),
        frame_mask=frame_mask.to(device),
        clip_mask=torch.ones(v, 32, dtype=torch.bool, device=device),
        query_feats=norm(torch.randn(q, args.query_len, args.text_dim, generator=g)),
        query_mask=torch.ones(q, args.query_len, dtype=torch.bool, device=device),
        query_video=torch.arange(v).repeat_interleave(args.captions).to(device),
    )


def time_steps(model, objective, batch, args, device) -> float:
    """Median seconds per training step."""
    optimizer = build_optimizer([model, objective], 1e-4, 0.01)
    objective.set_epoch(args.epoch)

    def step() -> None:
        terms = objective(model(batch), batch, args.captions)
        optimizer.zero_grad(set_to_none=True)
        terms.total.backward()
        optimizer.step()

    return statistics.median(time_samples_ms(step, args.repeats, warmup=args.warmup, device=device)) / 1e3


def time_transport(objective, args, device) -> float:
    """Median milliseconds of the objective's FlexibleOT on one step's problem (videos x captions x 32 clips)."""
    (fot,) = [m for m in objective.modules() if isinstance(m, FlexibleOT)]
    g = torch.Generator().manual_seed(1)
    sim = (2 * torch.rand(args.videos, args.captions, 32, generator=g) - 1).to(device)
    query_mask = torch.ones(args.videos, args.captions, dtype=torch.bool, device=device)
    clip_mask = torch.ones(args.videos, 32, dtype=torch.bool, device=device)
    with torch.no_grad():
        samples = time_samples_ms(lambda: fot(sim, query_mask, clip_mask), max(args.repeats, 20), warmup=args.warmup,
                                  device=device)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=128)
    parser.add_argument("--captions", type=int, default=5, help="captions per video")
    parser.add_argument("--frames", type=int, default=128)
    parser.add_argument("--query-len", type=int, default=30)
    parser.add_argument("--visual-dim", type=int, default=3072)
    parser.add_argument("--text-dim", type=int, default=768)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--config", default="tvr")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--epoch", type=int, default=50, help="epoch whose stage is timed (>= 20: stage 2)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave as is)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cfg = preset(args.config).replace(model={"hidden_size": args.hidden})
    batch = random_batch(args, device)
    results = {}
    for name in ("baseline", "full"):
        variant = cfg.with_ablation(name)
        torch.manual_seed(0)
        model = build_model(variant, args.visual_dim, args.text_dim, 32, args.frames).to(device)
        objective = HolmesObjective(variant, args.hidden).to(device)
        results[name] = time_steps(model, objective, batch, args, device)
    transport_ms = time_transport(objective, args, device)  # the full objective's
    ratio = results["full"] / results["baseline"]
    print(f"batch: {args.videos} videos x {args.captions} captions, hidden {args.hidden}, device {device}, "
          f"threads {torch.get_num_threads()}")
    print(f"L_base only (MIL): {1e3 * results['baseline']:.1f} ms/step")
    print(f"Holmes (stage 2):  {1e3 * results['full']:.1f} ms/step")
    print(f"ratio: {ratio:.3f} (goal <= 1.10)")
    share = transport_ms / (1e3 * results["full"])
    print(f"FlexibleOT transport of one step, alone: {transport_ms:.2f} ms, {100 * share:.3f} % of the Holmes step")


if __name__ == "__main__":
    main()
