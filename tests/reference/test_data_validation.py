"""validate_data_root and load_split on missing and corrupt files: a DataValidationError naming the file."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from reference_models.holmes.data import DataValidationError, load_split, validate_data_root
from tests.reference.data_helpers import COLLECTION, TINY_SPEC, make_tiny_benchmark

FEATURE = TINY_SPEC.visual_feature


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    return {
        layout: make_tiny_benchmark(tmp_path_factory.mktemp(f"pristine_{layout}"), layout)
        for layout in ("hdf5", "bigfile")
    }


def check_fails(root, file_name: str, problem: str):
    with pytest.raises(DataValidationError) as info:
        validate_data_root(root, COLLECTION, FEATURE)
    message = str(info.value)
    assert "\n" not in message
    assert file_name in message and problem in message, message
    assert file_name in info.value.path


def first_caption(coll, split="train"):
    return (coll / "TextData" / f"{COLLECTION}{split}.caption.txt").read_text().split(" ", 1)[0]


@pytest.mark.parametrize("layout", ["hdf5", "bigfile"])
def test_generated_roots_validate(pristine, layout):
    validate_data_root(pristine[layout], COLLECTION, FEATURE)
    validate_data_root(pristine[layout], COLLECTION, FEATURE, splits=["train", "val", "test"])


@pytest.mark.parametrize("split", ["train", "val"])
def test_missing_caption_file(copy_of, split):
    root, coll = copy_of("hdf5")
    (coll / "TextData" / f"{COLLECTION}{split}.caption.txt").unlink()
    check_fails(root, f"{COLLECTION}{split}.caption.txt", "missing caption file")
    with pytest.raises(DataValidationError, match=f"{COLLECTION}{split}.caption.txt"):
        load_split(root, COLLECTION, FEATURE, split)


def test_missing_test_split_is_optional_unless_requested(copy_of):
    root, coll = copy_of("hdf5")
    (coll / "TextData" / f"{COLLECTION}test.caption.txt").unlink()
    validate_data_root(root, COLLECTION, FEATURE)
    with pytest.raises(DataValidationError, match="test.caption.txt: missing"):
        validate_data_root(root, COLLECTION, FEATURE, splits=["train", "test"])


def test_missing_collection_and_text_features(copy_of):
    root, coll = copy_of("hdf5")
    with pytest.raises(DataValidationError, match="nocoll: missing collection directory"):
        validate_data_root(root, "nocoll", FEATURE)
    (coll / "TextData" / f"roberta_{COLLECTION}_query_feat.hdf5").unlink()
    check_fails(root, f"roberta_{COLLECTION}_query_feat.hdf5", "missing file")
    with pytest.raises(DataValidationError, match="query_feat.hdf5: missing file"):
        load_split(root, COLLECTION, FEATURE, "train")


def test_missing_visual_features(copy_of):
    root, coll = copy_of("hdf5")
    with pytest.raises(DataValidationError, match="other: missing visual features"):
        validate_data_root(root, COLLECTION, "other")
    (coll / "FeatureData" / FEATURE / "feature.hdf5").unlink()
    check_fails(root, FEATURE, "neither feature.hdf5 nor feature.bin")


def test_caption_without_text_features(copy_of):
    root, coll = copy_of("bigfile")
    cid = first_caption(coll, "val")
    with h5py.File(coll / "TextData" / f"roberta_{COLLECTION}_query_feat.hdf5", "a") as f:
        del f[cid]
    check_fails(root, "query_feat.hdf5", f"caption {cid!r} has no features")


def test_caption_with_wrong_dims(copy_of):
    root, coll = copy_of("hdf5")
    cid = first_caption(coll, "test")
    with h5py.File(coll / "TextData" / f"roberta_{COLLECTION}_query_feat.hdf5", "a") as f:
        del f[cid]
        f.create_dataset(cid, data=np.zeros((4, TINY_SPEC.text_dim + 1), np.float32))
    check_fails(root, "query_feat.hdf5", "inconsistent dims")


def test_caption_with_1d_features(copy_of):
    root, coll = copy_of("hdf5")
    cid = first_caption(coll)
    with h5py.File(coll / "TextData" / f"roberta_{COLLECTION}_query_feat.hdf5", "a") as f:
        del f[cid]
        f.create_dataset(cid, data=np.zeros(TINY_SPEC.text_dim, np.float32))
    check_fails(root, "query_feat.hdf5", "expected a non-empty [n, D] array")


def test_video_without_visual_features_hdf5(copy_of):
    root, coll = copy_of("hdf5")
    vid = first_caption(coll).split("#")[0]
    with h5py.File(coll / "FeatureData" / FEATURE / "feature.hdf5", "a") as f:
        del f[vid]
    check_fails(root, "feature.hdf5", f"video {vid!r} has no features")
    with pytest.raises(DataValidationError, match="feature.hdf5"):
        load_split(root, COLLECTION, FEATURE, "train").read_video(0)


def test_video_with_wrong_dims_hdf5(copy_of):
    root, coll = copy_of("hdf5")
    split = load_split(root, COLLECTION, FEATURE, "val")
    vid = split.video_ids[1]  # not the first video, from which load_split reads D_v
    with h5py.File(coll / "FeatureData" / FEATURE / "feature.hdf5", "a") as f:
        del f[vid]
        f.create_dataset(vid, data=np.zeros((7, TINY_SPEC.visual_dim - 2), np.float32))
    check_fails(root, "feature.hdf5", "inconsistent dims")
    split.read_video(0)
    with pytest.raises(DataValidationError, match=r"feature.hdf5: video .* has shape \(7, 10\)"):
        split.read_video(1)


def test_truncated_feature_bin(copy_of):
    root, coll = copy_of("bigfile")
    path = coll / "FeatureData" / FEATURE / "feature.bin"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 6])
    check_fails(root, "feature.bin", "truncated")
    with pytest.raises(DataValidationError, match="feature.bin: truncated"):
        load_split(root, COLLECTION, FEATURE, "train")


def test_oversized_feature_bin(copy_of):
    root, coll = copy_of("bigfile")
    path = coll / "FeatureData" / FEATURE / "feature.bin"
    path.write_bytes(path.read_bytes() + b"\0" * 4)
    check_fails(root, "feature.bin", "size mismatch")


def test_shape_txt_disagrees_with_id_txt(copy_of):
    root, coll = copy_of("bigfile")
    shape = coll / "FeatureData" / FEATURE / "shape.txt"
    n, d = map(int, shape.read_text().split())
    shape.write_text(f"{n + 1} {d}")
    check_fails(root, "id.txt", f"but shape.txt says N={n + 1}")
    shape.write_text("garbage")
    check_fails(root, "shape.txt", "expected 'N D'")


@pytest.mark.parametrize("name", ["id.txt", "shape.txt", "video2frames.txt"])
def test_missing_bigfile_part(copy_of, name):
    root, coll = copy_of("bigfile")
    (coll / "FeatureData" / FEATURE / name).unlink()
    check_fails(root, name, "missing file")


def test_video_missing_from_video2frames(copy_of):
    root, coll = copy_of("bigfile")
    vid = first_caption(coll, "test").split("#")[0]
    path = coll / "FeatureData" / FEATURE / "video2frames.txt"
    import ast

    mapping = ast.literal_eval(path.read_text())
    del mapping[vid]
    path.write_text(repr(mapping))
    check_fails(root, "video2frames.txt", f"video {vid!r} has no visual features")
    split = load_split(root, COLLECTION, FEATURE, "test")
    with pytest.raises(DataValidationError, match=f"video2frames.txt: video {vid!r} has no visual features"):
        split.read_video(split.video_ids.index(vid))


def test_frame_name_missing_from_id_txt(copy_of):
    root, coll = copy_of("bigfile")
    vid = first_caption(coll).split("#")[0]
    path = coll / "FeatureData" / FEATURE / "video2frames.txt"
    import ast

    mapping = ast.literal_eval(path.read_text())
    mapping[vid] = mapping[vid] + ["ghost_frame"]
    path.write_text(repr(mapping))
    check_fails(root, "id.txt", "'ghost_frame'")
    split = load_split(root, COLLECTION, FEATURE, "train")
    split.read_video(1)
    with pytest.raises(DataValidationError, match="id.txt: frame 'ghost_frame'"):
        split.read_video(split.video_ids.index(vid))


def test_video2frames_is_never_evaluated(copy_of, tmp_path):
    root, coll = copy_of("bigfile")
    marker = tmp_path / "pwned"
    path = coll / "FeatureData" / FEATURE / "video2frames.txt"
    path.write_text(f"__import__('pathlib').Path({str(marker)!r}).write_text('x')")
    check_fails(root, "video2frames.txt", "not a Python dict literal")
    assert not marker.exists()
    path.write_text("[1, 2]")
    check_fails(root, "video2frames.txt", "must map video ids")


def test_corrupt_hdf5_file(copy_of):
    root, coll = copy_of("hdf5")
    (coll / "FeatureData" / FEATURE / "feature.hdf5").write_bytes(b"not an hdf5 file")
    check_fails(root, "feature.hdf5", "cannot open HDF5 file")


def test_error_is_a_value_error_with_path_and_problem():
    err = DataValidationError("/x/feature.bin", "truncated")
    assert isinstance(err, ValueError)
    assert str(err) == "/x/feature.bin: truncated" and err.problem == "truncated"
