"""Data the loader must not accept silently: NaN/inf features, bad encodings, ambiguous BigFile parts, shared videos."""

from __future__ import annotations

import ast
import pickle

import h5py
import numpy as np
import pytest

from reference_models.holmes.data import DataValidationError, load_split, make_train_loader, validate_data_root
from reference_models.holmes.data.layout import read_captions
from tests.reference.data_helpers import COLLECTION, MICRO_SPEC, make_micro_benchmark

FEATURE = MICRO_SPEC.visual_feature


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    return {layout: make_micro_benchmark(tmp_path_factory.mktemp(layout), layout) for layout in ("hdf5", "bigfile")}


def validation_error(root) -> DataValidationError:
    with pytest.raises(DataValidationError) as info:
        validate_data_root(root, COLLECTION, FEATURE)
    assert "\n" not in str(info.value)
    return info.value


def poke(path, key, row, col, value):
    """Set one value of an HDF5 dataset."""
    with h5py.File(path, "a") as f:
        data = f[key][...]
        data[row, col] = value
        del f[key]
        f.create_dataset(key, data=data)


def test_validate_names_a_video_with_nan_in_feature_hdf5(copy_of):
    root, coll = copy_of("hdf5")
    split = load_split(root, COLLECTION, FEATURE, "val")
    vid = split.video_ids[-1]
    poke(coll / "FeatureData" / FEATURE / "feature.hdf5", vid, 0, 3, np.nan)
    err = validation_error(root)
    assert err.path.endswith("feature.hdf5") and f"video {vid!r} holds non-finite values (nan at frame 0, feature 3)" \
        in str(err)
    with pytest.raises(DataValidationError, match=f"feature.hdf5: video {vid!r} holds non-finite"):
        split.read_video(len(split.video_ids) - 1)
    split.read_video(0)  # the others still read


def test_validate_names_a_caption_with_inf_tokens(copy_of):
    root, coll = copy_of("hdf5")
    split = load_split(root, COLLECTION, FEATURE, "test")
    cid = split.caption_ids[-1]
    poke(coll / "TextData" / f"roberta_{COLLECTION}_query_feat.hdf5", cid, 1, 0, -np.inf)
    err = validation_error(root)
    assert err.path.endswith("query_feat.hdf5") and f"caption {cid!r} holds non-finite values (-inf at token 1" \
        in str(err)
    with pytest.raises(DataValidationError, match=f"caption {cid!r} holds non-finite"):
        split.read_query(len(split.caption_ids) - 1)


def test_validate_names_the_video_and_frame_with_nan_in_feature_bin(copy_of):
    root, coll = copy_of("bigfile")
    folder = coll / "FeatureData" / FEATURE
    mapping = ast.literal_eval((folder / "video2frames.txt").read_text())
    names = (folder / "id.txt").read_text().split()
    vid = "train00003"
    frame = mapping[vid][-1]
    dim = int((folder / "shape.txt").read_text().split()[1])
    features = np.fromfile(folder / "feature.bin", dtype="<f4").reshape(len(names), dim)
    features[names.index(frame), 2] = np.nan
    features.tofile(folder / "feature.bin")
    err = validation_error(root)
    assert err.path.endswith("feature.bin")
    assert f"video {vid!r} holds non-finite values (nan at frame {frame!r} (row {names.index(frame)}), feature 2)" \
        in str(err)
    split = load_split(root, COLLECTION, FEATURE, "train")
    with pytest.raises(DataValidationError, match=f"feature.bin: video {vid!r} holds non-finite"):
        split.read_video(split.video_ids.index(vid))


def test_a_worker_process_reports_bad_features_as_a_data_error(copy_of):
    root, coll = copy_of("hdf5")
    split = load_split(root, COLLECTION, FEATURE, "train")
    poke(coll / "FeatureData" / FEATURE / "feature.hdf5", split.video_ids[0], 0, 0, np.inf)
    loader = make_train_loader(split, 100, num_workers=1)
    with pytest.raises(DataValidationError, match=f"video {split.video_ids[0]!r} holds non-finite"):
        list(loader)


def test_a_byte_order_mark_is_dropped_from_a_caption_file(tmp_path):
    path = tmp_path / "c.caption.txt"
    path.write_bytes(b"\xef\xbb\xbfv1#enc#0 first\r\nv2#enc#0 second\n")
    assert [c.caption_id for c in read_captions(path)] == ["v1#enc#0", "v2#enc#0"]


def test_a_non_utf8_caption_file_names_the_byte_offset(tmp_path):
    path = tmp_path / "c.caption.txt"
    path.write_bytes(b"\xef\xbb\xbfv1#enc#0 caf\xe9\n")
    with pytest.raises(DataValidationError, match=r"c.caption.txt: not UTF-8 text: byte 0xe9 at byte offset 15"):
        read_captions(path)


def test_shape_txt_must_hold_exactly_two_integers(copy_of):
    root, coll = copy_of("bigfile")
    shape = coll / "FeatureData" / FEATURE / "shape.txt"
    n, d = shape.read_text().split()
    shape.write_text(f"{n} {d} 7")
    err = validation_error(root)
    assert err.path.endswith("shape.txt") and "expected 'N D' (two integers)" in str(err) and "extra" in str(err)
    shape.write_bytes(f"{n} {d}".encode() + b"\xff")
    err = validation_error(root)
    assert err.path.endswith("shape.txt") and f"byte offset {len(n) + len(d) + 1}" in str(err)


def test_a_video_listed_twice_in_video2frames_is_an_error(copy_of):
    root, coll = copy_of("bigfile")
    path = coll / "FeatureData" / FEATURE / "video2frames.txt"
    mapping = ast.literal_eval(path.read_text())
    items = [f"{k!r}: {v!r}" for k, v in mapping.items()]
    first = next(iter(mapping))
    path.write_text("{\n" + ",\n".join(items) + f",\n{first!r}: {mapping[first][:1]!r}\n}}")
    err = validation_error(root)
    assert err.path.endswith("video2frames.txt")
    assert f"video id {first!r} is listed twice (lines 2 and {len(items) + 2})" in str(err)
    with pytest.raises(DataValidationError, match="listed twice"):
        load_split(root, COLLECTION, FEATURE, "train")


def test_a_non_utf8_video2frames_names_the_byte_offset(copy_of):
    root, coll = copy_of("bigfile")
    path = coll / "FeatureData" / FEATURE / "video2frames.txt"
    path.write_bytes(b"{'a\x80': []}")
    err = validation_error(root)
    assert err.path.endswith("video2frames.txt") and "byte 0x80 at byte offset 3" in str(err)


def test_shared_videos_between_train_and_an_evaluation_split_are_warnings(copy_of):
    root, coll = copy_of("hdf5")
    assert validate_data_root(root, COLLECTION, FEATURE) == []
    val_file = coll / "TextData" / f"{COLLECTION}val.caption.txt"
    val_file.write_text(val_file.read_text() + "train00001#enc#0 dup of a train caption\n")
    warnings = validate_data_root(root, COLLECTION, FEATURE)
    assert len(warnings) == 1 and "'train00001'" in warnings[0]
    assert "1 video of the val split (tinyval.caption.txt) is also in the train split" in warnings[0]


def test_data_validation_errors_survive_pickling():
    err = pickle.loads(pickle.dumps(DataValidationError("/x/feature.bin", "truncated")))
    assert isinstance(err, DataValidationError) and (err.path, err.problem) == ("/x/feature.bin", "truncated")
