"""Where the reference model's training memory goes: resident memory per stage of a few training steps.

Runs ``--steps`` training steps of ``--config`` on the set that ``release_fidelity.py data`` writes, then one
validation, and prints per stage (building the batch, forward pass and loss, backward pass, clipping and the
optimiser step, validation) the resident memory before it, its peak during it and after it; and, for the
first forward pass, the memory that autograd keeps for the backward pass per part of the model (distinct
storages, so a tensor shared by two parts counts once, under the first). The peak of a stage is the largest of
the kernel's ``VmHWM`` after resetting it (``/proc/self/clear_refs``) and the resident sizes read before and
after the stage: the kernel refreshes its high-water mark only when it unmaps pages, from its per-CPU
approximation of the resident size (off by up to a batch of pages per CPU, 256 KiB on two CPUs), while
``VmRSS`` is the exact sum, so a resident size read before a stage that frees memory can exceed the kernel's
mark (by 60-210 KiB, measured on the step that trims the heaps). This runs on Linux only, and it resets
``ru_maxrss`` as well: measure a run's peak with ``release_fidelity.py train``, not here.

``--host-memory POLICY`` chooses the engine's allocator policy (:mod:`reference_models.engine.host_memory`;
default the engine's, called after every optimiser step as the engine's loop does); ``--glibc-default``
(``--host-memory off``) leaves glibc's allocator as it is, to show what a policy changes;
``--activation-checkpointing`` turns on ``model.activation_checkpointing``.

Example (the profile in the reference-model guide; hold the memory lock on a shared machine)::

    python benchmarks/release_fidelity.py data --root /tmp/fidelity
    python benchmarks/training_memory.py --root /tmp/fidelity --config tvr --steps 2 --threads 1
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from release_fidelity import add_run_arguments, load_splits, run_config  # noqa: E402

from reference_models.engine.host_memory import DEFAULT_HOST_MEMORY, HOST_MEMORY_POLICIES  # noqa: E402

GIB = 2**30


def resident_gib() -> tuple[float, float]:
    """``(VmRSS, VmHWM)`` of this process in GiB."""
    values = {}
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024 / GIB
    return values["VmRSS"], values["VmHWM"]


def reset_peak() -> None:
    """Reset the kernel's high-water mark (``VmHWM``) to the current resident size."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")


class StageMeter:
    """Records resident memory before, at the peak of and after each stage.

    The peak is the largest of the kernel's mark and the two resident sizes read (the module's docstring says
    why the kernel's mark alone can fall below them), so ``before <= peak >= after`` holds by construction.
    """

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def __call__(self, name: str, fn):
        reset_peak()
        before = resident_gib()[0]
        start = time.perf_counter()
        result = fn()
        after, kernel_peak = resident_gib()
        peak = max(kernel_peak, before, after)
        # rounding is monotone, so the rounded figures keep before <= peak >= after
        self.rows.append({"stage": name, "before_gib": round(before, 2), "peak_gib": round(peak, 2),
                          "after_gib": round(after, 2), "seconds": round(time.perf_counter() - start, 1)})
        print(json.dumps(self.rows[-1]), flush=True)
        return result


def model_parts(model, objective) -> dict[str, list]:
    """The modules whose saved activations are counted separately."""
    parts: dict[str, list] = {"text encoder (both encodings)": [model.text_encoder], "criterion": [objective]}
    for branch in ("clip", "frame"):
        module = getattr(model, f"{branch}_branch")
        parts[f"{branch} branch: input projection, positions"] = [module.projection, module.position]
        parts[f"{branch} branch: width blocks"] = [b for layer in module.layers for b in layer.blocks]
        parts[f"{branch} branch: width weighting"] = [layer.weights for layer in module.layers
                                                     if layer.weights is not None]
    return parts


def saved_by_part(model, objective, step):
    """Run ``step()`` and return its result and the GiB that autograd keeps for backward, per part."""
    current = ["scores, feature copy, rest"]
    saved: dict[str, dict[int, int]] = defaultdict(dict)
    handles = []

    def leave(module, args, output) -> None:
        current.pop()

    for name, modules in model_parts(model, objective).items():
        for module in modules:
            handles.append(module.register_forward_pre_hook(lambda m, a, name=name: current.append(name)))
            handles.append(module.register_forward_hook(leave))
    seen: set[int] = set()

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            saved[current[-1]][storage.data_ptr()] = storage.nbytes()
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            result = step()
    finally:
        for handle in handles:
            handle.remove()
    return result, {name: sum(sizes.values()) / GIB for name, sizes in saved.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser)
    parser.add_argument("--steps", type=int, default=2, help="training steps (from the first epoch)")
    parser.add_argument("--epoch", type=int, default=0, help="the epoch whose stage and negatives the steps use")
    parser.add_argument("--host-memory", choices=HOST_MEMORY_POLICIES, default=DEFAULT_HOST_MEMORY,
                        help=f"the engine's allocator policy (default {DEFAULT_HOST_MEMORY})")
    parser.add_argument("--glibc-default", action="store_true", help="the same as --host-memory off")
    parser.add_argument("--activation-checkpointing", action="store_true")
    parser.add_argument("--output", type=Path, help="also write the profile here (JSON)")
    args = parser.parse_args(argv)
    from reference_models.engine import Trainer
    from reference_models.engine.optimization import clip_gradients
    from reference_models.holmes.evaluate import evaluate_retrieval
    from reference_models.holmes.task import HolmesTask

    host_memory = "off" if args.glibc_default else args.host_memory
    torch.set_num_threads(args.threads)
    cfg = run_config(args)
    if args.activation_checkpointing:
        cfg = cfg.replace(model={"activation_checkpointing": True})
    meter = StageMeter()
    splits = meter("load splits", lambda: load_splits(args.root, cfg))
    with tempfile.TemporaryDirectory() as out:
        trainer = meter("build model and optimiser", lambda: Trainer(HolmesTask(cfg, splits["train"], splits["val"]), out,
                                                                      seed=args.seed, show_progress=False,
                                                                      host_memory=host_memory))
        model, objective, task, schedule = trainer.model, trainer.objective, trainer.task, trainer.schedule
        model.train()
        objective.train()
        objective.set_epoch(args.epoch)
        trainer.loader.set_epoch(args.epoch)
        batches = iter(trainer.loader)
        saved = {}
        for step in range(args.steps):
            batch = meter(f"step {step}: build the batch", lambda: next(batches))

            def forward():
                return task.training_step(model, objective, batch, trainer.device)  # noqa: F821 (deleted after the step; the closure runs within it)

            if step == 0:
                terms, saved = meter("step 0: forward and loss", lambda: saved_by_part(model, objective, forward))
            else:
                terms = meter(f"step {step}: forward and loss", forward)
            trainer.optimizer.zero_grad(set_to_none=True)
            meter(f"step {step}: backward", terms.total.backward)
            del terms, batch
            meter(f"step {step}: clip and optimiser step", lambda: (
                clip_gradients(trainer.params, schedule.grad_clip, schedule.grad_clip_mode), trainer.optimizer.step(),
                trainer.host_memory.after_step()))
        meter("validation", lambda: evaluate_retrieval(model, splits["val"], cfg))
    print("kept for backward by the first forward pass (GiB):")
    for name, gib in sorted(saved.items(), key=lambda item: -item[1]):
        print(f"  {name:45s} {gib:6.3f}")
    print(f"  {'total':45s} {sum(saved.values()):6.3f}")
    if args.output:
        args.output.write_text(json.dumps({"stages": meter.rows, "saved_gib": saved}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
