"""The CoVR data layout: reading, the vocabulary, the alternatives (HDF5, text features) and every bad input.

A bad input is one ``error:`` line naming the file, the row and the id, exit status 2, and nothing written.
"""

from __future__ import annotations

import csv

import h5py
import pytest
import torch

from reference_models.hud.cli import main
from reference_models.hud.data import SPLITS, SplitPaths, Vocabulary, load_cvr_split, read_annotations


def rows(path):
    with path.open(newline="") as handle:
        return list(csv.reader(handle))


def write_rows(path, table):
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(table)


def run_train(data_root, tmp_path, capsys, *extra):
    out = tmp_path / "run"
    rc = main(["train", "--data-root", str(data_root), "--output-dir", str(out), "--epochs", "1", "--no-progress",
               "--device", "cpu", *extra])
    err = capsys.readouterr().err
    return rc, err, out


def test_split_reads_back_what_the_generator_wrote(data_root):
    triplets = read_annotations(data_root / "annotation" / "train.csv")
    vocab = Vocabulary.build([t.edit for t in triplets])
    split = load_cvr_split("train", SplitPaths.default(data_root, "train"), vocab)
    assert len(split) == len(triplets) == 48 and split.video_shape == (4, 8, 32)
    first = triplets[0]
    stored = torch.load(data_root / "embeddings" / f"{first.reference}.pth", weights_only=True)
    assert torch.equal(split.videos[split.reference_index[0]], stored)
    ids, mask = vocab.encode(["make it UNSEENWORD"], 4)
    assert ids[0, :3].tolist() == [vocab.index["make"], vocab.index["it"], 1] and mask[0].tolist() == [True] * 3 + [False]


def test_hdf5_embeddings_and_text_features_are_read_like_pth(data_root):
    split_paths = SplitPaths.default(data_root, "val")
    triplets = read_annotations(split_paths.annotation)
    h5 = data_root / "val_embeddings.h5"
    feats = data_root / "val_text.h5"
    with h5py.File(h5, "w") as handle:
        for vid in {t.reference for t in triplets} | {t.target for t in triplets}:
            handle[vid] = torch.load(data_root / "embeddings" / f"{vid}.pth", weights_only=True).numpy()
    with h5py.File(feats, "w") as handle:
        for t in triplets:
            handle[str(t.row)] = torch.randn(3 + t.row % 2, 7).numpy()
    vocab = Vocabulary.build([t.edit for t in triplets])
    from_pth = load_cvr_split("val", split_paths, vocab)
    from_h5 = load_cvr_split("val", SplitPaths(split_paths.annotation, h5, feats), None)
    assert torch.equal(from_pth.videos, from_h5.videos)
    assert from_h5.text_features.shape == (len(triplets), 4, 7) and from_h5.text_mask.sum(1).min() == 3


def test_validate_reports_sizes_and_edit_types(data_root, capsys):
    assert main(["validate", "--data-root", str(data_root)]) == 0
    out = capsys.readouterr().out
    assert "'pronoun'" in out and out.strip().endswith("ok")


def _break(data_root, kind):
    csv_path = data_root / "annotation" / "train.csv"
    table = rows(csv_path)
    ref = table[2][0]
    if kind == "columns":
        write_rows(csv_path, [["pth1", "target", "edit"]] + table[1:])
        return csv_path, ["pth2"]
    if kind == "missing_id":
        table[2][0] = "train/nowhere"
        write_rows(csv_path, table)
        return data_root / "embeddings" / "train" / "nowhere.pth", ["row 2", "'train/nowhere'"]
    if kind == "dotdot":
        table[2][0] = "../secret"
        write_rows(csv_path, table)
        return csv_path, ["row 2", "'../secret'"]
    if kind == "empty_edit":
        table[2][2] = "  "
        write_rows(csv_path, table)
        return csv_path, ["row 2", repr(ref), "empty edit"]
    path = data_root / "embeddings" / f"{ref}.pth"
    tensor = torch.load(path, weights_only=True)
    first = next(i for i, r in enumerate(table[1:], 1) if ref in r[:2])  # the error names the first row using the id
    if kind == "nan":
        tensor[1, 2, 3] = float("nan")
        torch.save(tensor, path)
        return path, [f"row {first}", repr(ref), "NaN"]
    torch.save(tensor[0, 0], path)  # wrong rank: [dim]
    return path, [f"row {first}", repr(ref), "shape (32,)"]


@pytest.mark.parametrize("kind", ["columns", "missing_id", "dotdot", "empty_edit", "nan", "rank"])
def test_bad_input_is_one_line_naming_file_row_and_id_and_nothing_is_written(data_root, tmp_path, capsys, kind):
    path, fragments = _break(data_root, kind)
    rc, err, out = run_train(data_root, tmp_path, capsys)
    assert rc == 2 and err.count("\n") == 1 and err.startswith("error: ")
    assert str(path) in err, err
    for fragment in fragments:
        assert fragment in err, err
    assert not out.exists()
    assert main(["validate", "--data-root", str(data_root)]) == 2
    assert str(path) in capsys.readouterr().err


def test_test_videos_must_be_unseen(data_root, capsys):
    train = rows(data_root / "annotation" / "train.csv")
    test = rows(data_root / "annotation" / "test.csv")
    write_rows(data_root / "annotation" / "test.csv", test + [[train[1][0], test[1][1], "make it red", "pronoun"]])
    assert main(["validate", "--data-root", str(data_root)]) == 2
    assert "also a training video" in capsys.readouterr().err


def test_split_flags_point_elsewhere(data_root, tmp_path, capsys):
    moved = tmp_path / "elsewhere.csv"
    (data_root / "annotation" / "val.csv").rename(moved)
    assert main(["validate", "--data-root", str(data_root)]) == 2
    assert "val.csv: missing file" in capsys.readouterr().err
    assert main(["validate", "--data-root", str(data_root), "--annotation-val", str(moved)]) == 0
    assert all(s in SPLITS for s in ("train", "val", "test"))
