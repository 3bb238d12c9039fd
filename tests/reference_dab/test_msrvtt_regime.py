"""The msrvtt-regime benchmark and config (the paper's regime, docs/guide/dab.rst): the spec's validation, sizes,
determinism, the MSR-VTT files read back, the shared feature space, the identity backbone and the two groups."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from reference_models.compare import build_parser as compare_parser
from reference_models.compare import runner_for
from reference_models.dab.benchmark import BENCHMARKS, T2VBenchmarkSpec, benchmark_spec, generate_t2v_benchmark
from reference_models.dab.config import PRESETS, T2VConfig, preset
from reference_models.dab.data import LAYOUT, load_t2v_split, validate_data_root
from reference_models.dab.model import T2VModel
from reference_models.dab.task import T2VTask

REGIME = BENCHMARKS["msrvtt-regime"]
#: The regime's design with few videos and small features, so that a test writes it in well under a second.
SMALL = dataclasses.replace(REGIME, n_train=12, n_val=4, n_test=6, feature_dims=(16, 16))


def test_named_benchmarks_and_presets_resolve_and_the_embedded_ones_are_the_defaults() -> None:
    assert BENCHMARKS["embedded"] == T2VBenchmarkSpec() and PRESETS["embedded"] == T2VConfig()
    assert benchmark_spec("msrvtt-regime") is REGIME and preset("msrvtt-regime") is PRESETS["msrvtt-regime"]
    with pytest.raises(ValueError, match="unknown text-to-video benchmark"):
        benchmark_spec("msvd")
    with pytest.raises(ValueError, match="preset"):
        preset("msvd")
    assert (REGIME.n_test, REGIME.feature_space, REGIME.feature_dims) == (1000, "shared", (256, 256))
    o = PRESETS["msrvtt-regime"].optim
    assert (o.lr, o.head_lr, o.weight_decay, o.warmup_ratio, o.groups, o.epochs) == (1e-6, 1e-4, 0.02, 0.1,
                                                                                      "encoders", 10)
    assert PRESETS["msrvtt-regime"].backbone.encoder == "identity"


def test_spec_validation() -> None:
    with pytest.raises(ValueError, match="feature_space"):
        T2VBenchmarkSpec(feature_space="joint")
    with pytest.raises(ValueError, match="alignment"):
        T2VBenchmarkSpec(alignment=1.5)
    with pytest.raises(ValueError, match="modality_gap"):
        T2VBenchmarkSpec(modality_gap=-0.1)
    with pytest.raises(ValueError, match="feature_dims must be equal"):
        T2VBenchmarkSpec(feature_space="shared", feature_dims=(16, 12))
    assert REGIME.scaled(0.01) == dataclasses.replace(REGIME, n_train=20, n_val=4, n_test=10)


def test_full_size_test_split_sizes_and_files_read_back(tmp_path: Path) -> None:
    # the real test size; tiny training and validation splits and features keep it fast
    spec = dataclasses.replace(REGIME, n_train=4, n_val=4, feature_dims=(8, 8))
    root = generate_t2v_benchmark(tmp_path / "b", seed=0, spec=spec)
    with (root / LAYOUT.test_csv).open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len({r["video_id"] for r in rows}) == 1000  # 1k-A: one caption per test video
    sizes = validate_data_root(root)
    assert sizes["test"] == {"videos": 1000, "queries": 1000}
    meta = json.loads((root / "benchmark_meta.json").read_text())
    test_all = load_t2v_split(root, "test_all")
    assert sizes["test_all"]["queries"] == test_all.num_queries == sum(
        2 * len(meta["videos"][v]["events"]) + 1 for v in test_all.video_ids)
    kinds = [meta["sentences"][str(i)]["kind"] for i in test_all.sen_ids]
    assert kinds.count("generic") == 1000 and meta["spec"]["feature_space"] == "shared"
    assert {len(v["events"]) for v in meta["videos"].values()} == {1, 2, 3}


def test_same_seed_same_files_other_seed_other_files(tmp_path: Path) -> None:
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        generate_t2v_benchmark(tmp_path / name, seed=seed, spec=SMALL)
    for name in (LAYOUT.captions, LAYOUT.train_csv, LAYOUT.val_csv, LAYOUT.test_csv, "benchmark_meta.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    a, b, c = (load_t2v_split(tmp_path / n, "test_all") for n in "abc")
    assert torch.equal(a.frames, b.frames) and torch.equal(a.text, b.text)
    assert not torch.equal(a.frames, c.frames)


def test_shared_space_is_unit_norm_partially_aligned_with_a_modality_gap(tmp_path: Path) -> None:
    spec = dataclasses.replace(REGIME, n_train=4, n_val=4, n_test=200, feature_dims=(64, 64))
    root = generate_t2v_benchmark(tmp_path / "b", seed=0, spec=spec)
    with h5py.File(root / LAYOUT.frame_features) as h5:
        frame_norms = np.concatenate([np.linalg.norm(h5[k][()], axis=1) for k in h5])
    assert np.allclose(frame_norms, 1.0, atol=1e-5)
    test = load_t2v_split(root, "test_all")
    video = torch.nn.functional.normalize(test.frames.mean(1), dim=-1)
    own = (test.text * video[test.query_video]).sum(-1).mean()
    any_video = (test.text @ video.T).mean()
    assert own > any_video + 0.1  # partly aligned: a caption is closer to its own video than to any video
    assert own < 0.5  # ... but far from identical
    gap = (test.text.mean(0) - test.frames.reshape(-1, 64).mean(0)).norm()
    assert 0.6 < gap < 1.0  # the two modality centroids apart, as CLIP's (0.82)
    # no gap: the centroids meet
    flat = generate_t2v_benchmark(tmp_path / "flat", seed=0, spec=dataclasses.replace(spec, modality_gap=0.0))
    flat_test = load_t2v_split(flat, "test_all")
    assert (flat_test.text.mean(0) - flat_test.frames.reshape(-1, 64).mean(0)).norm() < gap / 2


def test_identity_backbone_starts_at_the_features_cosine() -> None:
    config = preset("msrvtt-regime").replace(backbone={"hidden": 16, "heads": 2, "temporal_layers": 2},
                                              head={"variant": "base"})
    model = T2VModel(16, 16, config).eval()
    text, frames = torch.randn(3, 16), torch.randn(5, 12, 16)
    mask = torch.ones(5, 12, dtype=torch.bool)
    with torch.no_grad():
        logits = model(text, frames, mask).logits
    cosine = torch.nn.functional.normalize(text, dim=-1) @ torch.nn.functional.normalize(frames.mean(1), dim=-1).T
    assert torch.allclose(logits, config.head.logit_scale * cosine, atol=1e-4)
    with pytest.raises(ValueError, match="identity"):
        T2VModel(16, 8, config)


def _task(config: T2VConfig, tmp_path: Path) -> T2VTask:
    root = generate_t2v_benchmark(tmp_path / "d", seed=0, spec=SMALL)
    return T2VTask(config.replace(backbone={"hidden": 16, "heads": 2, "temporal_layers": 1},
                                  head={"gaussian_dim": 16}, bridge={"n_steps": 2, "time_dim": 8}),
                   load_t2v_split(root, "train"), load_t2v_split(root, "val"))


@pytest.mark.parametrize("variant", ["dab", "base"])
def test_two_parameter_groups_encoders_at_lr_the_rest_at_head_lr(variant: str, tmp_path: Path) -> None:
    task = _task(preset("msrvtt-regime").replace(head={"variant": variant}), tmp_path)
    model = task.build_model()
    optimizer = task.build_optimizer([model, task.build_objective()])
    (encoders, lr), (rest, head_lr) = ((g["params"], g["lr"]) for g in optimizer.param_groups)
    assert (lr, head_lr) == (1e-6, 1e-4)
    expected = {id(p) for part in (model.text_mlp, model.frame_proj) for p in part.parameters()}
    assert {id(p) for p in encoders} == expected and not expected & {id(p) for p in rest}
    assert {id(p) for p in model.temporal.parameters()} <= {id(p) for p in rest}
    assert sum(p.numel() for p in encoders) + sum(p.numel() for p in rest) == sum(
        p.numel() for p in model.parameters())
    frozen = _task(preset("msrvtt-regime").replace(optim={"encoders": "frozen"}, head={"variant": variant}), tmp_path)
    model = frozen.build_model()
    (group,) = frozen.build_optimizer([model]).param_groups
    assert group["lr"] == 1e-4
    assert not any(p.requires_grad for p in model.text_mlp.parameters())
    assert {id(p) for p in group["params"]}.isdisjoint(id(p) for p in model.frame_proj.parameters())
    with pytest.raises(ValueError, match="frozen"):
        T2VConfig().replace(optim={"encoders": "frozen"})


def test_flags_select_the_named_benchmark_and_its_config() -> None:
    args = compare_parser().parse_args(["run", "--task", "dab", "--out", "x", "--benchmark", "msrvtt-regime"])
    regime = runner_for("dab", benchmark=args.benchmark)
    assert regime.benchmark == REGIME and regime.config == PRESETS["msrvtt-regime"]
    assert regime.spec.sets == ("test", "test_all", "generic_multi") and regime.spec.primary == "test"
    assert regime.variant_config("base").optim == regime.config.optim  # the same backbone treatment
    embedded = runner_for("dab")
    assert embedded.benchmark == T2VBenchmarkSpec() and embedded.config == T2VConfig()
    assert embedded.spec.sets == ("test", "test_all")
    # the comparison's settings hold every field of the config and of the benchmark design
    assert embedded.settings()["config"] == T2VConfig().to_dict()
    assert embedded.settings()["benchmark"]["feature_space"] == "separate"
    assert runner_for("dab", benchmark="msrvtt-regime", scale=0.5).benchmark == REGIME.scaled(0.5)
