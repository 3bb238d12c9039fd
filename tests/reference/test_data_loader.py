"""Loading generated data in both feature layouts: splits, batches, shuffling and workers."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from reference_models.holmes.data import (
    PRVRSplit,
    QueryBatch,
    TrainBatch,
    VideoBatch,
    load_split,
    make_query_loader,
    make_train_loader,
    make_video_loader,
)
from reference_models.holmes.data.layout import video_id_of
from tests.reference.data_helpers import COLLECTION, TINY_SPEC, make_tiny_benchmark
from tests.reference.test_data_sampling import loop_pool, loop_sample_frames

FEATURE = TINY_SPEC.visual_feature


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    """The same tiny benchmark (seed 0) written in both layouts."""
    return {
        layout: make_tiny_benchmark(tmp_path_factory.mktemp(layout), layout) for layout in ("hdf5", "bigfile")
    }


def split_of(root, split="train", **kw) -> PRVRSplit:
    return load_split(root, COLLECTION, FEATURE, split, **kw)


def all_videos(split: PRVRSplit) -> VideoBatch:
    return next(iter(make_video_loader(split, batch_size=10_000)))


def all_queries(split: PRVRSplit) -> QueryBatch:
    return next(iter(make_query_loader(split, batch_size=10_000)))


def ref_norm(x):
    return x / (np.linalg.norm(x, axis=-1, keepdims=True) + 1e-5)


@pytest.mark.parametrize("split_name", ["train", "val", "test"])
def test_both_layouts_give_identical_features(roots, split_name):
    a, b = split_of(roots["hdf5"], split_name), split_of(roots["bigfile"], split_name)
    assert a.video_ids == b.video_ids and a.caption_ids == b.caption_ids
    va, vb = all_videos(a), all_videos(b)
    for name in ("clip_feats", "frame_feats", "frame_mask"):
        assert torch.equal(getattr(va, name), getattr(vb, name)), name
    qa, qb = all_queries(a), all_queries(b)
    assert torch.equal(qa.query_feats, qb.query_feats) and torch.equal(qa.video_index, qb.video_index)


def test_split_metadata(roots):
    split = split_of(roots["hdf5"])
    caption_file = roots["hdf5"] / COLLECTION / "TextData" / f"{COLLECTION}train.caption.txt"
    ids = [line.split(" ", 1)[0] for line in caption_file.read_text().splitlines() if line.strip()]
    assert split.caption_ids == ids
    assert split.video_ids == list(dict.fromkeys(video_id_of(c) for c in ids))
    assert split.caption_video_index.dtype == torch.long
    assert [split.video_ids[i] for i in split.caption_video_index.tolist()] == [video_id_of(c) for c in ids]
    assert (split.visual_dim, split.text_dim) == (TINY_SPEC.visual_dim, TINY_SPEC.text_dim)


def test_video_features_match_direct_pooling_of_the_raw_frames(roots):
    split = split_of(roots["hdf5"], n_frames=64)
    videos = all_videos(split)
    lengths = []
    with h5py.File(roots["hdf5"] / COLLECTION / "FeatureData" / FEATURE / "feature.hdf5", "r") as f:
        for i, vid in enumerate(split.video_ids):
            raw = np.asarray(f[vid][...], dtype=np.float32)
            lengths.append(len(raw))
            clips = ref_norm(loop_pool(raw, 32, clamp_last=True))
            frames = ref_norm(loop_sample_frames(raw, 64, clamp_last=True))
            np.testing.assert_allclose(videos.clip_feats[i].numpy(), clips, rtol=1e-5, atol=1e-6)
            k = len(frames)
            assert videos.frame_mask[i].tolist() == [True] * k + [False] * (64 - k)
            np.testing.assert_allclose(videos.frame_feats[i, :k].numpy(), frames, rtol=1e-5, atol=1e-6)
            assert not videos.frame_feats[i, k:].any()
    # The tiny spec must exercise short (< 32), middle and long (> 64) videos.
    assert min(lengths) < 32 and max(lengths) > 64
    assert videos.clip_mask.all() and videos.clip_mask.shape == videos.clip_feats.shape[:2]


def test_query_features_are_cut_normalised_and_point_to_their_video(roots):
    split = split_of(roots["hdf5"], max_query_len=5)
    queries = all_queries(split)
    assert queries.caption_ids == split.caption_ids
    with h5py.File(roots["hdf5"] / COLLECTION / "TextData" / f"roberta_{COLLECTION}_query_feat.hdf5", "r") as f:
        for j, cid in enumerate(split.caption_ids):
            tokens = ref_norm(np.asarray(f[cid][...], dtype=np.float32))[:5]
            k = len(tokens)
            assert queries.query_mask[j].sum().item() == k
            np.testing.assert_allclose(queries.query_feats[j, :k].numpy(), tokens, rtol=1e-5, atol=1e-6)
            assert split.video_ids[int(queries.video_index[j])] == video_id_of(cid)
    assert queries.query_feats.shape[1] <= 5


def test_train_batches_hold_every_video_once_with_all_its_captions(roots):
    split = split_of(roots["bigfile"])
    loader = make_train_loader(split, videos_per_batch=4, seed=3)
    loader.set_epoch(2)
    batches = list(loader)
    assert len(batches) == len(loader) == -(-split.num_videos // 4)
    seen_videos, seen_captions = [], []
    for b in batches:
        assert isinstance(b, TrainBatch)
        v, q = len(b.video_ids), len(b.caption_ids)
        assert b.clip_feats.shape == (v, 32, TINY_SPEC.visual_dim) and b.frame_feats.shape[:2] == (v, 128)
        assert b.query_feats.shape[:2] == b.query_mask.shape == (q, b.query_feats.shape[1])
        assert b.query_video.dtype == torch.long and b.query_video.shape == (q,)
        assert b.clip_mask.all() and b.frame_mask.dtype == torch.bool and b.query_mask.dtype == torch.bool
        for cid, vi in zip(b.caption_ids, b.query_video.tolist()):
            assert video_id_of(cid) == b.video_ids[vi]
        expected = {c for c in split.caption_ids if video_id_of(c) in set(b.video_ids)}
        assert set(b.caption_ids) == expected
        assert b.query_mask.any(dim=1).all() and b.frame_mask.any(dim=1).all()
        seen_videos += b.video_ids
        seen_captions += b.caption_ids
    assert sorted(seen_videos) == sorted(split.video_ids)
    assert sorted(seen_captions) == sorted(split.caption_ids)


def order_of(loader, epoch):
    loader.set_epoch(epoch)
    return [tuple(b.video_ids) for b in loader]


def test_shuffling_is_deterministic_per_seed_and_epoch(roots):
    split = split_of(roots["hdf5"])
    a = make_train_loader(split, videos_per_batch=3, seed=7)
    b = make_train_loader(split_of(roots["hdf5"]), videos_per_batch=3, seed=7)
    assert order_of(a, 0) == order_of(b, 0)
    assert order_of(a, 5) == order_of(b, 5)
    assert order_of(a, 0) != order_of(a, 1)
    assert order_of(a, 0) != order_of(make_train_loader(split, videos_per_batch=3, seed=8), 0)
    # Resuming at an epoch reproduces it regardless of what was iterated before.
    first = order_of(a, 4)
    order_of(a, 9)
    assert order_of(a, 4) == first
    a.set_epoch(4)
    b.set_epoch(4)
    for x, y in zip(a, b):
        assert torch.equal(x.clip_feats, y.clip_feats) and torch.equal(x.query_feats, y.query_feats)


def test_drop_last_and_len(roots):
    split = split_of(roots["hdf5"])
    loader = make_train_loader(split, videos_per_batch=4, drop_last=True)
    assert len(loader) == split.num_videos // 4 == len(list(loader))
    assert all(len(b.video_ids) == 4 for b in loader)


def test_ordered_loaders_cover_the_split_in_order(roots):
    split = split_of(roots["hdf5"], "val")
    videos = list(make_video_loader(split, batch_size=2))
    assert [v for b in videos for v in b.video_ids] == split.video_ids
    queries = list(make_query_loader(split, batch_size=3))
    assert len(queries) == len(make_query_loader(split, batch_size=3)) == -(-split.num_captions // 3)
    assert [c for b in queries for c in b.caption_ids] == split.caption_ids
    assert torch.equal(torch.cat([b.video_index for b in queries]), split.caption_video_index)


def test_worker_processes_give_the_same_batches(roots):
    split = split_of(roots["hdf5"])
    # Touch the files in this process first so that a stale handle would be inherited by the fork.
    split.read_video(0)
    split.read_query(0)
    serial = make_train_loader(split, videos_per_batch=5, seed=1)
    parallel = make_train_loader(split, videos_per_batch=5, seed=1, num_workers=2)
    for x, y in zip(serial, parallel, strict=True):
        assert x.video_ids == y.video_ids and x.caption_ids == y.caption_ids
        assert torch.equal(x.frame_feats, y.frame_feats) and torch.equal(x.query_feats, y.query_feats)
    split.close()


def test_to_returns_a_moved_copy(roots, device):
    batch = next(iter(make_train_loader(split_of(roots["hdf5"]), videos_per_batch=3)))
    moved = batch.to(device)
    assert moved is not batch and moved.clip_feats.device.type == device.type
    assert moved.query_video.device.type == device.type and moved.video_ids == batch.video_ids
    assert moved.clip_mask.device.type == device.type
    video = all_videos(split_of(roots["hdf5"], "test")).to(device)
    query = all_queries(split_of(roots["hdf5"], "test")).to(device, non_blocking=True)
    assert video.frame_feats.device.type == query.video_index.device.type == device.type


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [({"split": "dev"}, ValueError, "split"), ({"max_query_len": 0}, ValueError, "max_query_len"),
     ({"n_clips": 2.5}, TypeError, "n_clips"), ({"boundaries": "x"}, ValueError, "boundaries")],
)
def test_load_split_rejects_bad_arguments(roots, kwargs, exc, match):
    args = {"split": "train", **kwargs}
    split = args.pop("split")
    with pytest.raises(exc, match=match):
        load_split(roots["hdf5"], COLLECTION, FEATURE, split, **args)


def test_loaders_reject_bad_arguments(roots):
    split = split_of(roots["hdf5"])
    with pytest.raises(ValueError, match="videos_per_batch"):
        make_train_loader(split, videos_per_batch=0)
    with pytest.raises(TypeError, match="batch_size"):
        make_video_loader(split, batch_size=2.0)
    with pytest.raises(ValueError, match="epoch"):
        make_train_loader(split).set_epoch(-1)
