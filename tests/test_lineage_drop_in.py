"""The library side of the lineage drop-in: the Eq. 1 scoring helper, errors that tell the fix, a visible schedule
and data sets of one's own."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import evidential_prvr as ep
from evidential_prvr import functional as F
from evidential_prvr.presets import CAPTIONS_PER_VIDEO, closest_dataset, holmes_settings


# --- max_similarity (Holmes Eq. 1) ----------------------------------------------------------------------------------
def _brute_force(query, video, mask, normalize=True):
    out = torch.empty(query.shape[0], video.shape[0], dtype=torch.float64)
    for i in range(query.shape[0]):
        for j in range(video.shape[0]):
            best = -float("inf")
            for m in range(video.shape[1]):
                if mask is not None and not bool(mask[j, m]):
                    continue
                q, t = query[i].double(), video[j, m].double()
                value = float(q @ t / (q.norm() * t.norm())) if normalize else float(q @ t)
                best = max(best, value)
            out[i, j] = best
    return out


@settings(max_examples=40, deadline=None)
@given(q=st.integers(1, 5), v=st.integers(1, 5), m=st.integers(1, 6), chunk=st.one_of(st.none(), st.integers(1, 6)),
       normalize=st.booleans(), seed=st.integers(0, 2**16))
def test_max_similarity_matches_a_brute_force_loop(q, v, m, chunk, normalize, seed):
    g = torch.Generator().manual_seed(seed)
    query, video = torch.randn(q, 4, generator=g, dtype=torch.float64), torch.randn(v, m, 4, generator=g,
                                                                                  dtype=torch.float64)
    mask = torch.rand(v, m, generator=g) < 0.6
    mask[torch.arange(v), torch.randint(0, m, (v,), generator=g)] = True
    out = F.max_similarity(query, video, mask, normalize=normalize, chunk_size=chunk)
    torch.testing.assert_close(out, _brute_force(query, video, mask, normalize))
    assert out.shape == (q, v)


def test_padded_tokens_never_win():
    query = torch.tensor([[1.0, 0.0]])
    video = torch.tensor([[[0.0, 1.0], [1.0, 0.0]]])  # the padded token is the exact match
    assert float(ep.max_similarity(query, video, torch.tensor([[True, False]]))) == 0.0
    assert float(ep.max_similarity(query, video)) == 1.0
    assert ep.max_similarity is F.max_similarity


def test_max_similarity_gradcheck():
    g = torch.Generator().manual_seed(0)
    query = torch.randn(3, 5, dtype=torch.float64, generator=g, requires_grad=True)
    video = torch.randn(2, 4, 5, dtype=torch.float64, generator=g, requires_grad=True)
    mask = torch.tensor([[True, True, False, True], [False, True, True, False]])
    assert torch.autograd.gradcheck(lambda a, b: F.max_similarity(a, b, mask, chunk_size=1), (query, video))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_max_similarity_under_autocast_is_finite(dtype):
    query = torch.randn(4, 8, requires_grad=True)
    video = torch.randn(3, 5, 8) * 1e4
    video[0, 1] = 0.0  # a zero (padding-like) token that is valid
    with torch.autocast("cpu", dtype=dtype):
        out = F.max_similarity(query, video)
    out.sum().backward()
    assert out.dtype == torch.float32 and torch.isfinite(out).all() and torch.isfinite(query.grad).all()
    assert (out.abs() <= 1.01).all()


def test_max_similarity_errors_name_the_argument_and_the_shape():
    q, v = torch.randn(3, 4), torch.randn(2, 5, 4)
    with pytest.raises(ValueError, match=r"video_emb must be \[num_videos, num_tokens, d\] = \[2, 5, 4\]"):
        F.max_similarity(q, torch.randn(2, 5, 6))
    with pytest.raises(ValueError, match="video_emb must be a 3-D"):
        F.max_similarity(q, torch.randn(2, 4))
    with pytest.raises(ValueError, match=r"video_mask must have shape \(2, 5\)"):
        F.max_similarity(q, v, torch.ones(5, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"video_mask must mark at least one valid token per video; videos \[1\]"):
        F.max_similarity(q, v, torch.tensor([[True] * 5, [False] * 5]))
    with pytest.raises(TypeError, match="chunk_size"):
        F.max_similarity(q, v, chunk_size=1.5)
    with pytest.raises(TypeError, match="query_emb"):
        F.max_similarity(q.long(), v)


# --- errors that tell the fix ---------------------------------------------------------------------------------------
def _criterion(epoch=25):
    criterion = ep.HolmesCriterion.from_preset("release", "tvr")
    criterion.set_epoch(epoch)
    return criterion


def test_transposed_scores_are_recognised():
    labels = torch.arange(128) // 4  # 128 captions, 32 videos
    sim = torch.rand(32, 128)  # videos × captions
    with pytest.raises(ValueError, match=r"frame_sim must have shape \[num_queries, num_videos\] = \[128, 32\], got "
                                         r"\(32, 128\): it looks transposed .*pass frame_sim\.T"):
        _criterion()(sim, sim, labels, query_emb=torch.randn(128, 8))
    for fn in (lambda s: F.inter_video_loss(s, s, labels), lambda s: F.identify(s, s, labels),
               lambda s: F.triplet_ranking_loss(s, labels)):
        with pytest.raises(ValueError, match="transposed"):
            fn(sim)


def test_a_square_caption_by_caption_matrix_points_to_max_similarity():
    labels = torch.arange(128) // 4
    with pytest.raises(ValueError, match=r"frame_sim is square \(128, 128\).*\[num_queries, num_videos\] = \[128, 32\]"
                                         r".*evidential_prvr\.max_similarity"):
        _criterion()(torch.rand(128, 128), torch.rand(128, 32), labels, query_emb=torch.randn(128, 8))
    # both square, but clip_emb says the batch has 32 videos
    with pytest.raises(ValueError, match=r"square \(128, 128\) while clip_emb holds 32 videos.*max_similarity"):
        _criterion()(torch.rand(128, 128), torch.rand(128, 128), labels, query_emb=torch.randn(128, 8),
                     clip_emb=torch.randn(32, 8, 8))
    with pytest.raises(ValueError, match="max_similarity"):
        F.inter_video_loss(torch.rand(128, 32), torch.rand(128, 128), labels)


def test_every_shape_error_states_the_expected_shape_with_the_numbers():
    labels = torch.tensor([0, 0, 1, 1, 2])
    with pytest.raises(ValueError, match=r"\[num_queries, num_videos\] = \[5, 3\].*got \(4, 3\)"):
        F.inter_video_loss(torch.rand(4, 3), torch.rand(4, 3), labels)
    with pytest.raises(ValueError, match=r"\[num_queries, num_videos\] = \[5, 3\]"):
        F.base_retrieval_loss(torch.rand(5, 3), torch.rand(4, 3), torch.randn(5, 8), labels)
    with pytest.raises(ValueError, match=r"clip_emb must be \[num_videos, Mc, d\] with num_videos = 3"):
        _criterion()(torch.rand(5, 3), torch.rand(5, 3), labels, query_emb=torch.randn(5, 8),
                     clip_emb=torch.randn(4, 8, 8))


def test_what_is_checked_about_swapped_frame_and_clip_scores():
    """Documented: frame_sim and clip_sim in each other's place have one shape and cannot be detected;
    a contradicting clip_emb count is (see test_every_shape_error_states_the_expected_shape_with_the_numbers)."""
    b = dict(query_emb=torch.randn(4, 8), clip_emb=torch.randn(2, 6, 8))
    frame, clip, labels = torch.rand(4, 2), torch.rand(4, 2), [0, 0, 1, 1]
    assert torch.isfinite(_criterion()(clip, frame, labels, **b))
    assert "cannot be detected" in ep.HolmesCriterion.forward.__doc__


# --- the schedule is visible ----------------------------------------------------------------------------------------
def test_stage_changes_are_logged_once_each(caplog):
    criterion = ep.HolmesCriterion.from_preset("release", "tvr", warmup_stage_epochs=2, hard_negative_epoch=3)
    with caplog.at_level(logging.INFO, logger="evidential_prvr"):
        for epoch in (0, 1, 1, 2, 2, 3, 4):
            criterion.set_epoch(epoch)
    lines = [r.getMessage() for r in caplog.records if r.name == "evidential_prvr"]
    assert len(lines) == 3
    assert "epoch 0 is in stage 1" in lines[0] and "stage 2 from epoch 2" in lines[0]
    assert "epoch 2 is in stage 2" in lines[1] and "negatives off" in lines[1]
    assert "epoch 3" in lines[2] and "negatives on" in lines[2]
    details = criterion.details(torch.rand(4, 2), torch.rand(4, 2), [0, 0, 1, 1], query_emb=torch.randn(4, 8),
                                clip_emb=torch.randn(2, 6, 8))
    assert details.stage == 2


def test_schedule_as_an_epoch_count_maps_the_release_switches_in_proportion():
    release = holmes_settings("release", "tvr").schedule
    assert (release.epochs, release.warmup_stage_epochs, release.hard_negative_epoch) == (100, 20, 20)
    for epochs, switch in ((6, 1), (30, 6), (50, 10), (100, 20), (12, 2), (200, 40)):
        criterion = ep.HolmesCriterion.from_preset("release", "tvr", schedule=epochs)
        assert (criterion.warmup_stage_epochs, criterion.hard_negative_epoch) == (switch, switch)
        assert criterion.total_epochs == epochs


def test_schedule_as_a_mapping_sets_the_switches():
    criterion = ep.HolmesCriterion.from_preset("release", "act", schedule={"warmup_stage_epochs": 3,
                                                                           "hard_negative_epoch": 5})
    assert (criterion.warmup_stage_epochs, criterion.hard_negative_epoch) == (3, 5)
    with pytest.raises(TypeError, match="hard_negative_start_epoch"):
        ep.HolmesCriterion.from_preset("release", schedule={"hard_negative_start_epoch": 5})
    with pytest.raises(TypeError, match="once"):
        ep.HolmesCriterion.from_preset("release", schedule={"warmup_stage_epochs": 3}, warmup_stage_epochs=4)
    with pytest.raises(ValueError, match="schedule"):
        ep.HolmesCriterion.from_preset("release", schedule=0)


def test_a_switch_beyond_the_schedule_warns_once():
    with pytest.warns(UserWarning, match=r"stage 2 .* starts at epoch 8 .* beyond a schedule of 6 epochs") as record:
        criterion = ep.HolmesCriterion.from_preset("release", schedule=6, warmup_stage_epochs=8)
        for epoch in range(6):
            criterion.set_epoch(epoch)
    assert len([w for w in record if issubclass(w.category, UserWarning)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ep.HolmesCriterion.from_preset("release", schedule=6)  # the scaled switches fit
    with pytest.warns(UserWarning, match="beyond a schedule of 1 epochs"):
        ep.HolmesCriterion.from_preset("release", schedule=1)


# --- data sets of one's own -----------------------------------------------------------------------------------------
def test_closest_dataset_by_captions_per_video():
    assert CAPTIONS_PER_VIDEO == {"tvr": 5.0, "activitynet": 3.7, "charades": 2.4}  # Holmes §4.1
    assert [closest_dataset(x) for x in (1.0, 2.4, 3.0, 3.1, 3.7, 4.3, 4.4, 5.0, 20)] == [
        "charades", "charades", "charades", "activitynet", "activitynet", "activitynet", "tvr", "tvr", "tvr"]
    assert closest_dataset(4.0) == "activitynet"  # the drop-in test set: 4 captions per video
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="captions_per_video"):
            closest_dataset(bad)
    with pytest.raises(TypeError, match="captions_per_video"):
        closest_dataset("4")


def test_an_unknown_dataset_says_what_to_do():
    with pytest.raises(ValueError, match=r"'tvr', 'activitynet'.*got 'hiddenprvr'.*dataset=None.*closest_dataset"):
        ep.HolmesCriterion.from_preset("release", dataset="hiddenprvr")
    default = ep.HolmesCriterion.from_preset("release")
    assert repr(default) == repr(ep.HolmesCriterion.from_preset("release", "tvr"))
    assert "TVR" in ep.HolmesCriterion.from_preset.__doc__
