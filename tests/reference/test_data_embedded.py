"""The embedded benchmark generator: determinism, planted types and the planted structure in the features."""

from __future__ import annotations

import dataclasses
import json

import h5py
import numpy as np
import pytest

from reference_models.holmes.data import (
    EmbeddedBenchmarkSpec,
    generate_embedded_benchmark,
    load_split,
    planted_event_features,
    read_planted_events,
    read_planted_types,
    validate_data_root,
)
from reference_models.holmes.data.layout import read_captions
from tests.reference.data_helpers import COLLECTION, TINY_SPEC, make_tiny_benchmark

FEATURE = TINY_SPEC.visual_feature
TYPES = {"precise", "polysemous", "underdetermined"}


def snapshot(root):
    """Every caption line, token array, frame array and side file of a generated benchmark."""
    coll = root / COLLECTION
    out = {p.name: p.read_text() for p in sorted((coll / "TextData").glob("*.txt"))}
    out["planted_types"] = (coll / "planted_types.json").read_text()
    out["planted_events"] = (coll / "planted_events.json").read_text()
    for name, path in (("text", coll / "TextData" / f"roberta_{COLLECTION}_query_feat.hdf5"),
                       ("video", coll / "FeatureData" / FEATURE / "feature.hdf5")):
        with h5py.File(path, "r") as f:
            out[name] = {k: f[k][...] for k in f}
    return out


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], dict):
            assert a[k].keys() == b[k].keys()
            for key in a[k]:
                np.testing.assert_array_equal(a[k][key], b[k][key])
        else:
            assert a[k] == b[k], k


def test_same_seed_same_benchmark_other_seed_differs(tmp_path):
    a = snapshot(make_tiny_benchmark(tmp_path / "a", seed=5))
    b = snapshot(make_tiny_benchmark(tmp_path / "b", seed=5))
    assert_same(a, b)
    c = snapshot(make_tiny_benchmark(tmp_path / "c", seed=6))
    assert a["planted_types"] != c["planted_types"] or any(
        not np.array_equal(a["video"][k], c["video"].get(k, np.zeros(0))) for k in a["video"]
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_benchmark(tmp_path_factory.mktemp("tiny_embedded"), "bigfile", seed=2)


def test_layout_meta_and_validation(tiny):
    validate_data_root(tiny, COLLECTION, FEATURE, splits=["train", "val", "test"])
    meta = json.loads((tiny / COLLECTION / "benchmark_meta.json").read_text())
    assert meta["seed"] == 2 and meta["feature_layout"] == "bigfile"
    assert EmbeddedBenchmarkSpec(**{k: tuple(v) if isinstance(v, list) else v
                                    for k, v in meta["spec"].items()}) == TINY_SPEC


def test_every_caption_has_a_planted_type(tiny):
    types = read_planted_types(tiny, COLLECTION)
    ids = []
    for split in ("train", "val", "test"):
        ids += [c.caption_id for c in read_captions(tiny / COLLECTION / "TextData" / f"{COLLECTION}{split}.caption.txt")]
    assert sorted(types) == sorted(ids)
    assert set(types.values()) == TYPES


def test_split_sizes_and_ranges(tiny):
    spec = TINY_SPEC
    for split, n in (("train", spec.n_train_videos), ("val", spec.n_val_videos), ("test", spec.n_test_videos)):
        s = load_split(tiny, COLLECTION, FEATURE, split, max_query_len=10_000)
        assert s.num_videos == n
        counts = np.bincount(s.caption_video_index.numpy(), minlength=n)
        assert counts.min() >= spec.captions_per_video[0] and counts.max() <= spec.captions_per_video[1]
        for j in range(s.num_captions):
            assert spec.query_length[0] <= len(s.read_query(j)) <= spec.query_length[1]
    events = read_planted_events(tiny, COLLECTION)
    for cid, e in events.items():
        assert e["video"] == cid.split("#")[0]
        assert spec.video_length[0] <= e["video_length"] <= spec.video_length[1]
        assert 0 <= e["span"][0] < e["span"][1] <= e["video_length"]
        assert e["video"] not in e["spurious_videos"] + e["sharing_videos"]
        assert not set(e["spurious_videos"]) & set(e["sharing_videos"])
        assert bool(e["sharing_videos"]) == (e["type"] == "polysemous")
        assert all(v[:3] == e["video"][:3] for v in e["spurious_videos"] + e["sharing_videos"])  # same split


def cos(a, b):
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    return a @ b.T


def best_window_match(frames, signal, width):
    """Best cosine between ``signal`` and the mean of any ``width`` consecutive frames."""
    cums = np.concatenate([np.zeros((1, frames.shape[1])), np.cumsum(frames, axis=0)])
    windows = cums[width:] - cums[:-width]
    return cos(windows, signal).max()


def test_planted_structure_is_in_the_features(tmp_path):
    spec = dataclasses.replace(
        EmbeddedBenchmarkSpec(), n_train_videos=30, n_val_videos=2, n_test_videos=2, video_length=(60, 120),
        polysemous_fraction=0.3, spurious_fraction=0.5,
    )
    coll = generate_embedded_benchmark(tmp_path, "emb", seed=1, spec=spec)
    events = read_planted_events(tmp_path, "emb")
    spurious, poly, frame_baseline, window_baseline = [], [], [], []
    with h5py.File(coll / "FeatureData" / spec.visual_feature / "feature.hdf5", "r") as f:
        videos = {k: f[k][...] for k in f}
    for e in events.values():
        if not e["video"].startswith("train"):
            continue
        signal = videos[e["video"]][e["span"][0] : e["span"][1]].mean(0, keepdims=True)  # noise averages out
        width = max(2, (e["span"][1] - e["span"][0]) // 2)
        uninvolved = sorted(set(videos) - {e["video"], *e["spurious_videos"], *e["sharing_videos"]})[0]
        frame_baseline.append(best_window_match(videos[uninvolved], signal, 1))
        window_baseline.append(best_window_match(videos[uninvolved], signal, width))
        # A spurious frame is a clean copy of the concept: one frame matches far better than any frame of
        # an unrelated video.
        spurious += [best_window_match(videos[v], signal, 1) for v in e["spurious_videos"]]
        # A polysemous query's concept is an event of each sharing video: a window of it matches.
        poly += [best_window_match(videos[v], signal, width) for v in e["sharing_videos"]]
    assert spurious and poly
    assert np.median(spurious) > np.median(frame_baseline) + 0.25
    assert np.median(poly) > np.median(window_baseline) + 0.15


def test_underdetermined_queries_carry_a_weaker_signal(tmp_path):
    spec = dataclasses.replace(
        EmbeddedBenchmarkSpec(), n_train_videos=60, n_val_videos=2, n_test_videos=2, token_noise=0.0,
        concept_jitter=0.0, underdetermined_fraction=0.4, polysemous_fraction=0.0,
    )
    coll = generate_embedded_benchmark(tmp_path, "emb", seed=3, spec=spec)
    types = read_planted_types(tmp_path, "emb")
    norms = {"precise": [], "underdetermined": []}
    with h5py.File(coll / "TextData" / "roberta_emb_query_feat.hdf5", "r") as f:
        for cid, kind in types.items():
            # Without noise, function words have unit norm and content tokens |W_t (a c)|, ~a.
            tokens = f[cid][...]
            norms[kind].append(np.linalg.norm(tokens, axis=1).min())
    assert np.median(norms["underdetermined"]) < 0.5 * np.median(norms["precise"])


def test_planted_event_features_are_the_mean_frame_of_each_span_in_either_layout(tmp_path):
    roots = {layout: make_tiny_benchmark(tmp_path / layout, layout, seed=5) for layout in ("hdf5", "bigfile")}
    events = read_planted_events(roots["hdf5"], COLLECTION)
    captions = sorted(events)[::-1]  # the order asked for, not the file's
    with h5py.File(roots["hdf5"] / COLLECTION / "FeatureData" / FEATURE / "feature.hdf5", "r") as f:
        expected = np.stack([f[events[c]["video"]][events[c]["span"][0] : events[c]["span"][1]].mean(0)
                             for c in captions])
    for root in roots.values():
        got = planted_event_features(root, COLLECTION, FEATURE, captions)
        assert got.dtype == np.float32 and np.array_equal(got, expected)


def test_both_layouts_write_the_same_planted_types(tmp_path):
    a = make_tiny_benchmark(tmp_path / "h", "hdf5", seed=4)
    b = make_tiny_benchmark(tmp_path / "b", "bigfile", seed=4)
    assert read_planted_types(a, COLLECTION) == read_planted_types(b, COLLECTION)


@pytest.mark.parametrize(
    ("field", "value"),
    [("n_train_videos", 0), ("captions_per_video", (3, 2)), ("video_length", (0, 5)),
     ("polysemous_fraction", 1.5), ("frame_noise", -1.0), ("event_slot_fill", (0.0, 1.0)),
     ("polysemous_group_size", (1, 3))],
)
def test_spec_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(TINY_SPEC, **{field: value})


def test_spec_rejects_type_fractions_over_one():
    with pytest.raises(ValueError, match="polysemous_fraction \\+ underdetermined_fraction"):
        dataclasses.replace(TINY_SPEC, polysemous_fraction=0.6, underdetermined_fraction=0.6)


def test_generator_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="feature_layout"):
        generate_embedded_benchmark(tmp_path, feature_layout="npz")
    with pytest.raises(ValueError, match="seed"):
        generate_embedded_benchmark(tmp_path, seed=-1)
    with pytest.raises(TypeError, match="spec"):
        generate_embedded_benchmark(tmp_path, spec={"n_train_videos": 3})


@pytest.mark.parametrize(("read", "name"), [(read_planted_types, "planted_types.json"),
                                            (read_planted_events, "planted_events.json")])
def test_read_planted_errors(tmp_path, read, name):
    with pytest.raises(FileNotFoundError, match=name):
        read(tmp_path, "missing")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / name).write_text('{"a#enc#0": "vague"}')
    with pytest.raises(ValueError, match=name):
        read(tmp_path, "c")
