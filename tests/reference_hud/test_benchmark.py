"""The embedded CVR benchmark plants what its design says (docs/guide/hud.rst), deterministically."""

from __future__ import annotations

import csv
import filecmp

import torch

from reference_models.hud.benchmark import CVRBenchmarkSpec, generate_cvr_benchmark
from tests.reference_hud.conftest import TINY


def read(root, split):
    with (root / "annotation" / f"{split}.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def video(root, vid):
    return torch.load(root / "embeddings" / f"{vid}.pth", weights_only=True)


def test_design_proportions_and_unseen_test_videos(tmp_path):
    root = tmp_path / "b"
    spec = CVRBenchmarkSpec().scaled(0.1)
    summary = generate_cvr_benchmark(root, seed=0, spec=spec)
    test = read(root, "test")
    assert len(test) == spec.test_videos * spec.eval_edits
    pronoun = [r for r in test if r["edit_type"] == "pronoun"]
    assert len(pronoun) / len(test) >= 0.34 and summary["test"]["pronoun"] == len(pronoun)
    assert all({"it", "them"} & set(r["edit"].split()) for r in pronoun)
    assert not any({"it", "them"} & set(r["edit"].split()) for r in test if r["edit_type"] != "pronoun")
    train_refs = {r["pth1"] for r in read(root, "train")}
    assert not train_refs & {r["pth1"] for r in test}
    assert len({r["pth2"] for r in test}) == len(test)  # every target is its own video


def test_key_details_are_few_tokens_and_targets_differ_only_where_edited(pristine_root):
    rows = read(pristine_root, "test")
    for row in rows:
        ref, tgt = video(pristine_root, row["pth1"]), video(pristine_root, row["pth2"])
        assert ref.shape == tgt.shape == (4, 8, 32)
        changed = ((tgt - ref).norm(dim=-1) > 0.25).sum().item()  # beyond re-encoding noise
        if "scene" in row["edit"]:
            assert changed > 16
        elif row["edit_type"] == "key_detail":
            assert 1 <= changed <= 2, row  # a key detail: one token in one or two frames
        else:
            assert 1 <= changed <= 12, row


def test_same_seed_same_files(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    generate_cvr_benchmark(a, seed=5, spec=TINY)
    generate_cvr_benchmark(b, seed=5, spec=TINY)
    assert filecmp.cmp(a / "annotation" / "test.csv", b / "annotation" / "test.csv", shallow=False)
    vid = read(a, "test")[0]["pth2"]
    assert torch.equal(video(a, vid), video(b, vid))
