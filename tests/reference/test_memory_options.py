"""Training-memory options of the reference model: activation checkpointing gives the same losses and gradients
bit for bit for fewer saved activations, and the engine's allocator setting returns freed tensors to the system."""

from __future__ import annotations

import importlib.util
import json
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reference_models.engine import Trainer as EngineTrainer
from reference_models.engine import host_memory
from reference_models.engine.host_memory import (
    DEFAULT_HOST_MEMORY,
    HOST_MEMORY_POLICIES,
    PRELOADED_ALLOCATORS,
    allocator_loaded,
    apply_host_memory_policy,
    keep_large_blocks_mapped,
)
from reference_models.holmes.config import preset
from reference_models.holmes.factory import build_model
from reference_models.holmes.objective import HolmesObjective
from tests.reference.test_model import D_T, D_V, make_batch

ROOT = Path(__file__).resolve().parents[2]


def _config(checkpointing: bool, **model):
    # the tvr preset's architecture (8 widths, cross-attention width weights, dropout 0.2, 4x feed-forward)
    # at toy sizes, so that every dropout layer draws masks in the recomputed forward passes
    return preset("tvr").replace(model={"hidden_size": 16, "num_heads": 2, "n_clips": 8, "n_frames": 20,
                                        "max_query_len": 6, "position_table": 20,
                                        "activation_checkpointing": checkpointing, **model})


def _step(checkpointing: bool, epoch: int, **model):
    """One training step's loss, every parameter's gradient and the random state after it."""
    torch.manual_seed(0)
    cfg = _config(checkpointing, **model)
    net = build_model(cfg, D_V, D_T, cfg.model.n_clips, cfg.model.n_frames).train()
    objective = HolmesObjective(cfg, cfg.model.hidden_size)
    objective.set_epoch(epoch)
    batch = make_batch(num_videos=5, per_video=2)
    batch.clip_mask = torch.ones(5, 8, dtype=torch.bool)
    torch.manual_seed(1)
    terms = objective(net(batch), batch)
    terms.total.backward()
    grads = {name: p.grad.clone() for name, p in net.named_parameters() if p.grad is not None}
    return terms.total.detach(), grads, torch.get_rng_state()


@pytest.mark.parametrize("epoch", [0, 5], ids=["first stage", "second stage"])
@pytest.mark.parametrize("weighting", ["cross_attention", "linear"])
def test_checkpointing_gives_the_same_loss_gradients_and_random_state(epoch, weighting):
    loss, grads, rng = _step(False, epoch, width_weighting=weighting)
    loss_ckpt, grads_ckpt, rng_ckpt = _step(True, epoch, width_weighting=weighting)
    assert torch.equal(loss, loss_ckpt)
    assert grads.keys() == grads_ckpt.keys() and len(grads) > 50
    for name in grads:
        assert torch.equal(grads[name], grads_ckpt[name]), name
    assert torch.equal(rng, rng_ckpt)  # the rest of the run draws the same numbers


def _saved_bytes(checkpointing: bool) -> int:
    """Bytes of the distinct storages autograd keeps for the backward pass of the model's forward."""
    torch.manual_seed(0)
    cfg = _config(checkpointing)
    net = build_model(cfg, D_V, D_T, cfg.model.n_clips, cfg.model.n_frames).train()
    storages: dict[int, int] = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        net(make_batch(num_videos=5, per_video=2))
    return sum(storages.values())


def test_checkpointing_keeps_fewer_activations_and_only_in_training():
    assert _saved_bytes(True) < 0.5 * _saved_bytes(False)
    cfg = _config(True)
    net = build_model(cfg, D_V, D_T, cfg.model.n_clips, cfg.model.n_frames).eval()
    off = build_model(_config(False), D_V, D_T, cfg.model.n_clips, cfg.model.n_frames).eval()
    off.load_state_dict(net.state_dict())
    batch = make_batch()
    with torch.no_grad():
        assert torch.equal(net(batch).score, off(batch).score)


def test_the_switch_is_a_validated_config_field_off_by_default():
    assert preset("tvr").model.activation_checkpointing is False
    with pytest.raises(ValueError, match="model.activation_checkpointing"):
        preset("tvr").replace(model={"activation_checkpointing": 1})
    cfg = _config(True)
    assert type(cfg).from_dict(cfg.to_dict()) == cfg


def test_allocator_threshold_is_checked():
    for bad in (0, -1, 64 << 20, 1.5, True):
        with pytest.raises(ValueError, match="threshold"):
            keep_large_blocks_mapped(bad)


def test_the_environment_setting_wins(monkeypatch):
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert keep_large_blocks_mapped() is False
    for policy in HOST_MEMORY_POLICIES:  # no policy sets anything, none trims
        applied = apply_host_memory_policy(policy)
        assert applied.applied is False and applied.trims is False
        if policy != "off":
            assert "MALLOC_MMAP_THRESHOLD_" in applied.note


_GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


@pytest.fixture
def restore_default_policy():
    """The policies are the process's settings: leave the engine's default behind for the other tests."""
    yield
    apply_host_memory_policy(DEFAULT_HOST_MEMORY)


@pytest.mark.parametrize("bad", ["fast", "MAPPED", "", None, 1, True])
def test_the_policy_is_checked_naming_the_argument(bad, tmp_path):
    from tests.reference.test_engine import ToyTask

    with pytest.raises(ValueError, match="host_memory must be one of 'jemalloc', 'tcmalloc', 'trim', 'mapped', 'off'"):
        apply_host_memory_policy(bad)
    with pytest.raises(ValueError, match=r"host_memory .* got " + re.escape(repr(bad))):
        EngineTrainer(ToyTask(), tmp_path, show_progress=False, host_memory=bad)
    with pytest.raises(ValueError, match="--host-memory must be one of"):
        apply_host_memory_policy(bad, argument="--host-memory")
    assert DEFAULT_HOST_MEMORY in HOST_MEMORY_POLICIES


@pytest.mark.parametrize("policy", HOST_MEMORY_POLICIES)
def test_the_trimming_policies_trim_once_per_optimiser_step(policy, tmp_path, monkeypatch, restore_default_policy):
    from tests.reference.test_engine import ToyTask

    calls = []
    monkeypatch.setattr(host_memory, "release_free_memory", lambda: calls.append(1) or True)
    trainer = EngineTrainer(ToyTask(epochs=3), tmp_path, show_progress=False, host_memory=policy)
    assert trainer.host_memory.policy == policy
    trainer.fit()
    loaded = policy in PRELOADED_ALLOCATORS and allocator_loaded(policy)
    trimming = policy == "trim" or (policy in PRELOADED_ALLOCATORS and not loaded)  # its fallback
    expected = 3 * trainer.steps_per_epoch if trimming and _GLIBC else 0
    assert len(calls) == expected and trainer.host_memory.trims == (expected > 0)
    assert trainer.host_memory.applied == (loaded or (_GLIBC and policy not in ("off", *PRELOADED_ALLOCATORS)))


def test_every_policy_trains_to_the_same_weights_bit_for_bit(tmp_path, restore_default_policy):
    """A small Holmes run (three steps per epoch; attention maps and feed-forward outputs of 1-2 MiB, so the
    policies serve them differently) under every policy in one process: the same losses, validation recalls
    and weights."""
    import dataclasses

    from reference_models.engine import Trainer
    from reference_models.holmes.data import generate_embedded_benchmark, load_split
    from reference_models.holmes.task import HolmesTask
    from tests.reference.data_helpers import COLLECTION, TINY_SPEC

    root = tmp_path / "data"
    generate_embedded_benchmark(root, COLLECTION, seed=0, spec=dataclasses.replace(
        TINY_SPEC, n_train_videos=48, n_val_videos=8, n_test_videos=4))
    splits = {s: load_split(root, COLLECTION, "synthetic", s, n_clips=8, n_frames=64) for s in ("train", "val")}
    cfg = preset("embedded").replace(
        model={"hidden_size": 128, "num_heads": 4, "widths": [None, 1.0], "ffn_multiplier": 4},
        optim={"videos_per_batch": 16, "lr": 1e-3, "eval_video_batch": 16, "eval_query_batch": 32, "score_chunk": 16},
        schedule={"epochs": 2, "warmup_stage_epochs": 1, "hard_negative_epoch": 1},
        dab={"embed_dim": 8, "n_steps": 2},
    )
    runs = {}
    for policy in HOST_MEMORY_POLICIES:
        trainer = Trainer(HolmesTask(cfg, splits["train"], splits["val"]), tmp_path / policy, seed=3, show_progress=False,
                          host_memory=policy)
        result = trainer.fit()
        history = [{k: v for k, v in h.items() if k != "train_seconds"} for h in result.history]
        runs[policy] = history, {k: v.clone() for k, v in trainer.model.state_dict().items()}
    first_history, first_weights = runs[HOST_MEMORY_POLICIES[0]]
    for policy, (history, weights) in runs.items():
        assert history == first_history, policy
        for name, value in weights.items():
            assert torch.equal(value, first_weights[name]), (policy, name)


_FREE_AND_MEASURE = """
import json, sys
import torch
from reference_models.engine.host_memory import keep_large_blocks_mapped
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
from reference_models.engine.host_memory import apply_host_memory_policy
mode = sys.argv[1]
policy = apply_host_memory_policy(mode) if mode == "trim" else None
applied = keep_large_blocks_mapped() if mode == "on" else policy is not None and policy.applied
for _ in range(2):  # what a training step does: free a large block, then many of a few MiB
    big = torch.ones(8 << 20); del big
    blocks = [torch.ones(1 << 20) for _ in range(64)]  # 64 x 4 MiB, written
    keep = [torch.ones(16) for _ in range(64)]  # small survivors between them
    before_free = rss(); del blocks
    if policy is not None:
        policy.after_step()  # the end of the step
print(json.dumps({"applied": applied, "released_mib": before_free - rss()}))
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_freed_blocks_leave_the_resident_set():
    """After the setting, 256 MiB of freed 4 MiB tensors leave the resident set; without it (glibc's dynamic
    threshold, raised by the freed 32 MiB block) they stay."""
    def run(mode):
        env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", _FREE_AND_MEASURE, mode], capture_output=True, text=True,
                             env=env, check=True, cwd=ROOT)
        return json.loads(out.stdout.strip().splitlines()[-1])

    on, off = run("on"), run("off")
    assert on["applied"] is True and off["applied"] is False
    assert on["released_mib"] > 200
    assert off["released_mib"] < 100
    trimmed = run("trim")  # the heaps keep the blocks within the step, the trim returns them
    assert trimmed["applied"] is True and trimmed["released_mib"] > 200


def _training_memory_benchmark():
    """``benchmarks/training_memory.py`` as a module (it puts the benchmarks folder on ``sys.path``; undone)."""
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location("training_memory_benchmark", ROOT / "benchmarks" / "training_memory.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


@pytest.mark.parametrize("readings, expected", [
    # a stage that frees memory: the kernel's mark (refreshed from its per-CPU approximation of the resident
    # size) below the exact resident size read before the stage, as measured on the step that trims the heaps
    ([(0.3551, 0.3551), (0.21, 0.3549)], {"before_gib": 0.36, "peak_gib": 0.36, "after_gib": 0.21}),
    # a stage that grows and frees: the kernel's mark is the peak
    ([(0.30, 0.30), (0.31, 0.52)], {"before_gib": 0.3, "peak_gib": 0.52, "after_gib": 0.31}),
    # a stage that only grows, the mark read before the last pages were counted
    ([(0.30, 0.30), (0.4012, 0.3987)], {"before_gib": 0.3, "peak_gib": 0.4, "after_gib": 0.4}),
])
def test_stage_peak_is_the_largest_resident_size_known(monkeypatch, readings, expected):
    """The peak of a stage is the larger of the kernel's ``VmHWM`` and the resident sizes read before and after it,
    so a mark below a size read (the kernel's counter is approximate) cannot put ``before`` above the peak."""
    benchmark = _training_memory_benchmark()
    reads = iter(readings)
    monkeypatch.setattr(benchmark, "reset_peak", lambda: None)
    monkeypatch.setattr(benchmark, "resident_gib", lambda: next(reads))
    meter = benchmark.StageMeter()
    assert meter("stage", lambda: "result") == "result"
    row = meter.rows[0]
    assert {key: row[key] for key in expected} == expected


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc/self")
def test_training_memory_benchmark_profiles_every_stage(tmp_path):
    """``benchmarks/training_memory.py`` on a tiny set in the release-fidelity layout: every stage measured, and
    the activations kept for the backward pass split by part."""
    import dataclasses

    from reference_models.holmes.data import generate_embedded_benchmark
    from tests.reference.data_helpers import MICRO_SPEC

    generate_embedded_benchmark(tmp_path / "data", "tvr", seed=0,
                                spec=dataclasses.replace(MICRO_SPEC, visual_feature="synthetic"))
    out = tmp_path / "profile.json"
    args = f"--root {tmp_path / 'data'} --config embedded --videos-per-batch 4 --steps 2 --threads 1 --output {out}"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "training_memory.py"), *args.split()],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    profile = json.loads(out.read_text())
    stages = [row["stage"] for row in profile["stages"]]
    assert stages[-1] == "validation" and "step 1: backward" in stages
    for row in profile["stages"]:
        assert 0 < row["before_gib"] <= row["peak_gib"] and row["after_gib"] <= row["peak_gib"]
    saved = profile["saved_gib"]
    assert {"frame branch: width blocks", "clip branch: width blocks", "text encoder (both encodings)"} <= set(saved)
    assert saved["frame branch: width blocks"] > saved["clip branch: width blocks"] > 0
