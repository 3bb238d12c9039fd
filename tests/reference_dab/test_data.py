"""The MSR-VTT layout reader, the validator, the training order and the embedded benchmark generator."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from reference_models.dab.benchmark import T2VBenchmarkSpec, generate_t2v_benchmark
from reference_models.dab.data import LAYOUT, DataError, TrainBatches, load_t2v_split, validate_data_root
from tests.reference_dab.conftest import TINY_SPEC


def _copy(root: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(root, tmp_path / "root"))


def test_splits_follow_the_files(tiny_root: Path) -> None:
    data = json.loads((tiny_root / LAYOUT.captions).read_text())
    captions_of: dict[str, list[str]] = {}
    for s in data["sentences"]:
        captions_of.setdefault(s["video_id"], []).append(s["caption"])
    with (tiny_root / LAYOUT.test_csv).open() as handle:
        rows = list(csv.DictReader(handle))
    test, test_all, train = (load_t2v_split(tiny_root, s) for s in ("test", "test_all", "train"))
    assert test.video_ids == [r["video_id"] for r in rows] and test.num_queries == TINY_SPEC.n_test
    assert test_all.video_ids == test.video_ids
    assert test_all.num_queries == sum(len(captions_of[v]) for v in test.video_ids)
    assert train.num_queries == sum(len(captions_of[v]) for v in train.video_ids)
    # every query's text row is the features row of its caption in text_features.h5
    sentence_of = {s["sen_id"]: s for s in data["sentences"]}
    with h5py.File(tiny_root / LAYOUT.text_features) as h5:
        for q in range(test.num_queries):
            s = sentence_of[test.sen_ids[q]]
            assert s["caption"] == rows[q]["sentence"] and s["video_id"] == test.video_ids[test.query_video[q]]
            row = captions_of[s["video_id"]].index(s["caption"])
            assert torch.equal(test.text[q], torch.from_numpy(h5[s["video_id"]][row]))
    assert test.frames.shape == (TINY_SPEC.n_test, TINY_SPEC.frames, TINY_SPEC.feature_dims[0]) and test.frame_mask.all()


def test_generator_is_deterministic_and_plants_generic_captions(tiny_root: Path, tmp_path: Path) -> None:
    again = generate_t2v_benchmark(tmp_path / "again", seed=0, spec=TINY_SPEC)
    for name in (LAYOUT.captions, LAYOUT.test_csv, LAYOUT.val_csv, "benchmark_meta.json"):
        assert (again / name).read_bytes() == (tiny_root / name).read_bytes()
    assert torch.equal(load_t2v_split(again, "train").frames, load_t2v_split(tiny_root, "train").frames)
    meta = json.loads((tiny_root / "benchmark_meta.json").read_text())
    kinds = [v["kind"] for v in meta["sentences"].values()]
    videos = TINY_SPEC.n_train + TINY_SPEC.n_val + TINY_SPEC.n_test
    assert kinds.count("generic") == videos * TINY_SPEC.generic_per_video
    assert {v["events"] for v in meta["sentences"].values()} <= {1, 2, 3}
    with pytest.raises(ValueError, match="events_probs"):
        T2VBenchmarkSpec(events_probs=(0.5, 0.4))


def test_npy_folders_read_like_hdf5(tiny_root: Path, tmp_path: Path) -> None:
    root = _copy(tiny_root, tmp_path)
    for name in (LAYOUT.frame_features, LAYOUT.text_features):
        folder = root / Path(name).stem
        folder.mkdir()
        with h5py.File(root / name) as h5:
            for vid in h5:
                np.save(folder / f"{vid}.npy", np.asarray(h5[vid]))
        (root / name).unlink()
    a, b = load_t2v_split(tiny_root, "test_all"), load_t2v_split(root, "test_all")
    assert torch.equal(a.frames, b.frames) and torch.equal(a.text, b.text)


def test_long_videos_are_sampled_uniformly(tiny_root: Path) -> None:
    split, full = load_t2v_split(tiny_root, "val", max_frames=3), load_t2v_split(tiny_root, "val")
    assert torch.equal(split.frames, full.frames[:, [0, 2, 5]])  # first, middle, last of 6 frames


def _error(root: Path, split: str = "test") -> str:
    with pytest.raises(DataError) as info:
        validate_data_root(root) if split == "all" else load_t2v_split(root, split)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_bad_inputs_name_the_file_and_the_id(tiny_root: Path, tmp_path: Path) -> None:
    root = _copy(tiny_root, tmp_path)
    test_ids = load_t2v_split(tiny_root, "test").video_ids
    with h5py.File(root / LAYOUT.frame_features, "a") as h5:
        del h5[test_ids[2]]
    message = _error(root)
    assert LAYOUT.frame_features in message and test_ids[2] in message
    with h5py.File(root / LAYOUT.frame_features, "a") as h5:
        h5.create_dataset(test_ids[2], data=np.full((TINY_SPEC.frames, TINY_SPEC.feature_dims[0]), np.nan, np.float32))
    assert "NaN" in _error(root) and test_ids[2] in _error(root)

    root2 = _copy(tiny_root, tmp_path / "b")
    path = root2 / LAYOUT.test_csv
    lines = path.read_text().splitlines()
    lines[3] = lines[3].rsplit(",", 1)[0] + ",a caption nobody wrote"
    path.write_text("\n".join(lines) + "\n")
    message = _error(root2)
    assert LAYOUT.test_csv in message and "line 4" in message and "nobody" in message

    with h5py.File(root2 / LAYOUT.text_features, "a") as h5:
        vid = load_t2v_split(tiny_root, "train").video_ids[0]
        data = np.asarray(h5[vid])
        del h5[vid]
        h5.create_dataset(vid, data=data[:1])
    message = _error(root2, "train")
    assert LAYOUT.text_features in message and vid in message and "rows" in message
    (root2 / LAYOUT.captions).write_text("{not json")
    assert LAYOUT.captions in _error(root2, "train")


def test_validator_refuses_a_test_video_in_training(tiny_root: Path, tmp_path: Path) -> None:
    root = _copy(tiny_root, tmp_path)
    assert validate_data_root(root)["test"] == {"videos": TINY_SPEC.n_test, "queries": TINY_SPEC.n_test}
    test_id = load_t2v_split(tiny_root, "test").video_ids[0]
    with (root / LAYOUT.train_csv).open("a") as handle:
        handle.write(f"{test_id}\n")
    message = _error(root, "all")
    assert test_id in message and LAYOUT.test_csv in message


def test_training_order_has_distinct_videos_and_depends_on_seed_and_epoch(tiny_root: Path) -> None:
    train = load_t2v_split(tiny_root, "train")
    loader = TrainBatches(train, batch_size=8, seed=3)
    epoch0 = [b[0] for b in loader]
    assert len(epoch0) == len(loader) == 3 and sum(len(t) for t in epoch0) == train.num_videos
    text_to_video = {tuple(t.tolist()): int(v) for t, v in zip(train.text, train.query_video)}
    videos = [text_to_video[tuple(t.tolist())] for batch in epoch0 for t in batch]
    assert sorted(videos) == list(range(train.num_videos))  # each video once, so in-batch positives are the diagonal
    assert all(torch.equal(a, b) for a, b in zip(epoch0, (b[0] for b in TrainBatches(train, 8, 3))))
    loader.set_epoch(1)
    assert not all(torch.equal(a, b) for a, b in zip(epoch0, (b[0] for b in loader)))
