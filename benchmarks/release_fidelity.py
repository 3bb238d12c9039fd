"""Learning curve of the reference model on a release-sized synthetic set, for comparison with the release.

Two subcommands:

``data``
    Writes the embedded benchmark at TVR-like sizes (600 training videos with 4 captions each, 200
    validation and 200 test videos, 3072-d frame features, 768-d token features) in the MS-SL layout, and
    also ``FeatureData/<feature>/video2frames.txt``, which the MS-SL-style releases read even when the
    features are in ``feature.hdf5``.
``train``
    Trains ``--config`` (a preset or a JSON file) for ``--epochs`` epochs with a ``--warmup-stage``-epoch
    first stage and hard negatives from ``--hard-negative-epoch``, and writes ``<output-dir>/curve.json``:
    per epoch the mean losses, the validation recalls, the training seconds and (on CUDA) the peak GPU
    memory; the test recalls of the best validation epoch; the peak resident memory of the process; with
    ``--log-steps``, every step's unweighted loss terms, gradient norm and learning rate.

Example (the comparison in the reference-model guide; 2 CPU threads)::

    python benchmarks/release_fidelity.py data --root /tmp/fidelity
    python benchmarks/release_fidelity.py train --root /tmp/fidelity --config tvr --epochs 8 \\
        --warmup-stage 3 --hard-negative-epoch 3 --threads 2 --output-dir /tmp/fidelity-runs/tvr
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from reference_models.holmes.config import PRESETS, HolmesConfig, preset  # noqa: E402
from reference_models.holmes.data import EmbeddedBenchmarkSpec, generate_embedded_benchmark, load_split  # noqa: E402

COLLECTION = "tvr"
FEATURE = "synthetic"

#: The release-sized set: about 4.7 batches of 128 videos per epoch, as TVR-scale training has in its first steps.
RELEASE_SIZED_SPEC = EmbeddedBenchmarkSpec(
    n_train_videos=600,
    n_val_videos=200,
    n_test_videos=200,
    captions_per_video=(4, 4),
    visual_dim=3072,
    text_dim=768,
    visual_feature=FEATURE,
)


def write_data(root: Path, seed: int, visual_dim: int | None = None, text_dim: int | None = None) -> Path:
    """Write the release-sized set under ``root/tvr`` (plus ``video2frames.txt``) and return that folder.

    ``visual_dim`` / ``text_dim`` replace the 3072-d frame and 768-d token features (the set of the release's
    shape at another width, e.g. the 64-d set of the memory benchmarks: ``--visual-dim 64 --text-dim 32``)."""
    spec = dataclasses.replace(RELEASE_SIZED_SPEC, visual_dim=visual_dim or RELEASE_SIZED_SPEC.visual_dim,
                               text_dim=text_dim or RELEASE_SIZED_SPEC.text_dim)
    out = generate_embedded_benchmark(root, COLLECTION, seed=seed, spec=spec)
    import h5py

    feature_dir = out / "FeatureData" / FEATURE
    with h5py.File(feature_dir / "feature.hdf5", "r") as f:
        video2frames = {vid: [f"{vid}_{t}" for t in range(f[vid].shape[0])] for vid in f}
    (feature_dir / "video2frames.txt").write_text(repr(video2frames), encoding="utf-8")
    return out


def peak_rss_gib() -> float:
    """Peak resident memory of this process in GiB (``ru_maxrss`` is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _record_steps(trainer) -> list[dict]:
    """Record every training step's loss terms (unweighted, as the release's runner logs them), the global
    gradient norm before clipping and the learning rate of the update, through the objective's criterion's
    ``details`` (which the objective calls), the trainer's clipping and an optimiser hook."""
    import reference_models.engine.trainer as trainer_module

    steps: list[dict] = []
    criterion = trainer.objective.criterion

    def value(x: torch.Tensor) -> float:
        return float(x.detach())

    details = criterion.details

    def recording_details(*args, **kwargs):
        out = details(*args, **kwargs)
        base = out.base_details
        step = {"epoch": criterion.epoch, "loss": value(out.loss), "triplet": value(base.clip_triplet + base.frame_triplet),
                "nce_clip": value(base.clip_nce), "nce_frame": value(base.frame_nce), "div": value(base.diversity),
                "intra": value(out.intra)}
        if out.inter_details is not None:
            inter = out.inter_details
            step.update(edl_frame=value(inter.frame_loss), edl_clip=value(inter.clip_loss),
                        edl_fused=value(inter.fused_loss))
        steps.append(step)
        return out

    clip = trainer_module.clip_gradients

    def recording_clip(params, max_norm, mode):
        norm = clip(params, max_norm, mode)  # the norm of all gradients before clipping
        steps[-1]["grad_norm"] = value(norm)
        return norm

    def step_hook(optimizer, args, kwargs):
        steps[-1]["lr"] = optimizer.param_groups[0]["lr"]

    criterion.details = recording_details
    trainer_module.clip_gradients = recording_clip
    trainer.optimizer.register_step_pre_hook(step_hook)
    return steps


def run_config(args: argparse.Namespace) -> HolmesConfig:
    """``--config`` (a preset or a JSON file) with the run's epochs, batch size and stage switches."""
    cfg = HolmesConfig.from_json(args.config) if Path(args.config).suffix == ".json" else preset(args.config)
    return cfg.replace(
        optim={"videos_per_batch": args.videos_per_batch},
        schedule={"epochs": args.epochs, "warmup_stage_epochs": args.warmup_stage,
                  "hard_negative_epoch": args.hard_negative_epoch},
    )


def load_splits(root: Path, cfg: HolmesConfig) -> dict:
    """The train, val and test splits of the set under ``root``."""
    return {name: load_split(root, COLLECTION, FEATURE, name, max_query_len=cfg.model.max_query_len)
            for name in ("train", "val", "test")}


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that choose the data, the config and the run (shared with ``training_memory.py``)."""
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--config", default="tvr", help=f"a preset ({', '.join(sorted(PRESETS))}) or a .json file")
    for flag, default in (("--epochs", 8), ("--warmup-stage", 3), ("--hard-negative-epoch", 3),
                          ("--videos-per-batch", 128), ("--seed", 0), ("--threads", 2)):
        parser.add_argument(flag, type=int, default=default)


def train_curve(args: argparse.Namespace) -> dict:
    """Train and evaluate one config; the returned dict is what ``curve.json`` holds."""
    from reference_models.engine import Trainer
    from reference_models.holmes.evaluate import evaluate_retrieval, model_parameters
    from reference_models.holmes.task import HolmesTask

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = run_config(args)
    splits = load_splits(args.root, cfg)
    out = Path(args.output_dir)
    trainer = Trainer(HolmesTask(cfg, splits["train"], splits["val"]), out, device=args.device, seed=args.seed, amp=args.amp,
                      show_progress=False, verbose=True)
    steps = _record_steps(trainer) if args.log_steps else None
    start = time.perf_counter()
    result = trainer.fit()
    for record in result.history:
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in record.items()}), flush=True)
    model = trainer.load_best()
    test = evaluate_retrieval(model, splits["test"], cfg, device=args.device)
    return {
        "config": cfg.to_dict(),
        "seed": args.seed,
        "device": args.device,
        "threads": torch.get_num_threads(),
        "parameters_millions": model_parameters(model) / 1e6,
        "epochs": result.history,
        "best_epoch": trainer.best_epoch,
        "test": test.recall,
        "total_seconds": time.perf_counter() - start,
        "peak_rss_gib": peak_rss_gib(),
        "steps": steps,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    data = sub.add_parser("data", help="write the release-sized synthetic set")
    data.add_argument("--root", type=Path, required=True)
    data.add_argument("--seed", type=int, default=0)
    data.add_argument("--visual-dim", type=int, help="frame feature width (default 3072)")
    data.add_argument("--text-dim", type=int, help="token feature width (default 768)")
    train = sub.add_parser("train", help="train one config and write curve.json")
    add_run_arguments(train)
    train.add_argument("--device", default="cpu")
    train.add_argument("--amp", action="store_true")
    train.add_argument("--log-steps", action="store_true", help="also record every step's loss terms")
    train.add_argument("--output-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "data":
        print(write_data(args.root, args.seed, args.visual_dim, args.text_dim))
        return 0
    result = train_curve(args)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "curve.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"test": result["test"], "peak_rss_gib": result["peak_rss_gib"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
