"""Training-step time of the CVR reference model: HUD vs its base (CoVR-2 composition + hard-negative NCE).

The goal is a ratio of at most 1.5. Both variants run forward + backward + AdamW step on the same backbone
sizes and the same random batch shaped like the embedded CVR benchmark's (``--batch`` triplets of
``frames x tokens x dim`` videos and ``--words``-word edits). Steps of the two variants alternate (base, HUD, base,
...), so that a change of machine load during the run affects both alike; the medians of ``--repeats`` timed steps
each are reported with their ratio.

Example (the demo's sizes)::

    OMP_NUM_THREADS=1 python benchmarks/hud_step_time.py --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks._timing import set_threads, synchronize  # noqa: E402
from reference_models.hud.config import HUDRunConfig  # noqa: E402
from reference_models.hud.data import CVRBatch  # noqa: E402
from reference_models.hud.model import METHODS, BackboneSettings  # noqa: E402
from reference_models.hud.task import build_cvr_model  # noqa: E402


def random_batch(args: argparse.Namespace, device: torch.device) -> CVRBatch:
    """A random batch with the benchmark's shapes; the edits use the first half of the word slots."""
    g = torch.Generator().manual_seed(0)
    shape = (args.batch, args.frames, args.tokens, args.video_dim)
    ids = torch.randint(2, args.vocabulary, (args.batch, args.words), generator=g)
    ids[:, args.words // 2 + 1 :] = 0
    return CVRBatch(torch.randn(shape, generator=g), torch.randn(shape, generator=g), ids, ids != 0, None,
                    torch.arange(args.batch)).to(device)


def main(argv: list[str] | None = None) -> dict[str, float]:
    defaults = HUDRunConfig()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=defaults.batch_size)
    parser.add_argument("--frames", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--video-dim", type=int, default=32)
    parser.add_argument("--words", type=int, default=defaults.max_words)
    parser.add_argument("--vocabulary", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    device = torch.device(args.device)
    settings = BackboneSettings(video_dim=args.video_dim, frames=args.frames, tokens_per_frame=args.tokens,
                                vocabulary_size=args.vocabulary, max_words=args.words, **defaults.backbone_sizes())
    batch = random_batch(args, device)
    steps = {}
    for name, method in METHODS.items():
        torch.manual_seed(0)
        config = HUDRunConfig(method=name)
        model, objective = build_cvr_model(config, settings).to(device), method.build_objective().to(device)
        params = [p for module in (model, objective) for p in module.parameters()]
        optimizer = torch.optim.AdamW(params, lr=defaults.lr)

        def step(method=method, model=model, objective=objective, optimizer=optimizer) -> None:
            loss = method.loss(model, objective, batch).total
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        steps[name] = step
    for _ in range(args.warmup):
        for step in steps.values():
            step()
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.repeats):
        for name, step in steps.items():
            synchronize(device)
            start = time.perf_counter()
            step()
            synchronize(device)
            samples[name].append((time.perf_counter() - start) * 1e3)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    ratio = medians["hud"] / medians["base"]
    print(f"base (CoVR-2 composition + HN-NCE): {medians['base']:.1f} ms/step")
    print(f"HUD (HUDObjective, paper preset):   {medians['hud']:.1f} ms/step")
    print(f"ratio HUD / base: {ratio:.2f} (goal <= 1.5); batch {args.batch}, {torch.get_num_threads()} thread(s), {device}")
    return {**medians, "ratio": ratio}


if __name__ == "__main__":
    main()
