"""The ``release`` presets against an independent statement of the official release's rules
(tests/release_rules.py), on padded batches (videos with fewer captions than the batch maximum) and on
exact ties at the row maximum."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from evidential_prvr import EvidentialRetrievalLoss, HolmesCriterion, IntraVideoEvidentialLoss, build_intra_video_batch
from tests.release_rules import release_inter_loss, release_intra_loss


@st.composite
def padded_batches(draw):
    """A flat batch whose videos have 1-5 captions each (so most are padded), float64 embeddings."""
    n_videos = draw(st.integers(2, 5))
    counts = draw(st.lists(st.integers(1, 5), min_size=n_videos, max_size=n_videos))
    n_clips = draw(st.sampled_from([4, 8, 32]))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    query_video = torch.cat([torch.full((c,), v) for v, c in enumerate(counts)])
    order = torch.randperm(query_video.numel(), generator=gen)  # captions need not be grouped
    dim = 16
    # a shared direction makes every cosine positive, as in a trained model: then the padded slots'
    # cosine 0 widens the release's min-max range
    shared = draw(st.sampled_from([0.0, 1.0, 3.0])) * torch.ones(dim, dtype=torch.float64)
    query_emb = torch.randn(query_video.numel(), dim, generator=gen, dtype=torch.float64) + shared
    clip_emb = torch.randn(n_videos, n_clips, dim, generator=gen, dtype=torch.float64) + shared
    return query_emb[order], query_video[order], clip_emb


@pytest.mark.parametrize("dataset", ["tvr", "activitynet"])
@settings(max_examples=12, deadline=None)
@given(batch=padded_batches())
def test_intra_video_loss_matches_the_release_on_padded_batches(dataset, batch):
    query_emb, query_video, clip_emb = batch
    loss_fn = IntraVideoEvidentialLoss.from_preset("release", dataset)
    groups = build_intra_video_batch(query_emb, query_video, clip_emb)
    details = loss_fn.details(groups.sim, groups.query_mask, groups.clip_mask)
    expected, labels = release_intra_loss(query_emb.numpy(), query_video.numpy(), clip_emb.numpy(), loss_fn.tau)
    assert float(details.loss) == pytest.approx(expected, abs=1e-6, rel=0)
    for video, video_labels in enumerate(labels):
        n = video_labels.shape[0]
        np.testing.assert_allclose(details.target[video, :n].numpy(), video_labels, atol=1e-6, rtol=0)


def test_the_valid_only_rule_differs_from_the_release_on_padded_videos():
    gen = torch.Generator().manual_seed(0)
    query_video = torch.tensor([0, 0, 0, 0, 1])  # video 1 has one caption and three padded slots
    shared = torch.ones(16, dtype=torch.float64)  # all cosines positive: the padded 0 widens the range
    query_emb = 0.3 * torch.randn(5, 16, generator=gen, dtype=torch.float64) + shared
    clip_emb = 0.3 * torch.randn(2, 8, 16, generator=gen, dtype=torch.float64) + shared
    groups = build_intra_video_batch(query_emb, query_video, clip_emb)
    release = IntraVideoEvidentialLoss.from_preset("release", "tvr")
    valid_only = IntraVideoEvidentialLoss.from_preset("release", "tvr", fot=release.fot.__class__.from_preset(
        "release", "tvr", minmax_over="valid"))
    expected, _ = release_intra_loss(query_emb.numpy(), query_video.numpy(), clip_emb.numpy(), 0.06)
    assert float(release(groups.sim, groups.query_mask)) == pytest.approx(expected, abs=1e-7)
    assert abs(float(valid_only(groups.sim, groups.query_mask)) - expected) > 1e-4


@st.composite
def tied_scores(draw):
    """Scores [Q, V] on a coarse grid, so that exact ties at the row maximum are frequent."""
    n_videos = draw(st.integers(2, 6))
    n_queries = draw(st.integers(n_videos, 12))
    values = draw(st.lists(st.sampled_from([-0.2, 0.1, 0.3, 0.5, 0.7]), min_size=2 * n_queries * n_videos,
                           max_size=2 * n_queries * n_videos))
    grid = torch.tensor(values, dtype=torch.float64).view(2, n_queries, n_videos)
    labels = torch.tensor(draw(st.lists(st.integers(0, n_videos - 1), min_size=n_queries, max_size=n_queries)))
    # Two rows that are permutations of each other (but not equal) have the same Dirichlet strength in exact
    # arithmetic, and which of the two rounded sums is larger depends on the summation order of the kernel
    # (vector width, alignment): a threshold tie between them is decided by rounding, in the release as here.
    for branch in grid:
        ordered = branch.sort(dim=1).values
        same_values = (ordered.unsqueeze(0) == ordered.unsqueeze(1)).all(-1)
        same_rows = (branch.unsqueeze(0) == branch.unsqueeze(1)).all(-1)
        assume(not bool((same_values & ~same_rows).any()))
    return grid[0], grid[1], labels


@pytest.mark.parametrize("dataset", ["tvr", "activitynet", "charades"])
@pytest.mark.parametrize("calibrate", [False, True])
@settings(max_examples=25, deadline=None)
@given(scores=tied_scores())
def test_inter_video_loss_matches_the_release_with_ties(dataset, calibrate, scores):
    frame_sim, clip_sim, labels = scores
    loss_fn = EvidentialRetrievalLoss.from_preset("release", dataset, calibrate=calibrate)
    expected = release_inter_loss(frame_sim.numpy(), clip_sim.numpy(), labels.numpy(), loss_fn.tau, calibrate)
    assert float(loss_fn(frame_sim, clip_sim, labels)) == pytest.approx(expected, abs=1e-9, rel=1e-9)


def test_the_tie_rule_decides_the_correctly_matched_set():
    # query 0 ties at the maximum between its positive (1) and video 0: matched under the paper's rule,
    # not under the release's argmax (first index)
    sim = torch.tensor([[0.6, 0.6, 0.1], [0.9, 0.2, 0.1], [0.2, 0.3, 0.8]], dtype=torch.float64)
    labels = torch.tensor([1, 0, 2])
    release = EvidentialRetrievalLoss.from_preset("release", "tvr").identifier()
    paper_rule = EvidentialRetrievalLoss.from_preset("release", "tvr", matched="any_positive").identifier()
    assert release(sim, sim, labels).frame.correctly_matched.tolist() == [False, True, True]
    assert paper_rule(sim, sim, labels).frame.correctly_matched.tolist() == [True, True, True]


def test_criterion_parts_match_the_release_in_the_second_stage():
    gen = torch.Generator().manual_seed(3)
    query_video = [0, 0, 0, 1, 1, 2, 3, 3]  # the release's text_labels: a list of ints
    n_videos, dim = 4, 16
    query_emb = torch.randn(8, dim, generator=gen, dtype=torch.float64)
    clip_emb = torch.randn(n_videos, 32, dim, generator=gen, dtype=torch.float64)
    frame_sim = torch.rand(8, n_videos, generator=gen, dtype=torch.float64)
    clip_sim = torch.rand(8, n_videos, generator=gen, dtype=torch.float64)
    criterion = HolmesCriterion.from_preset("release", "cha")
    criterion.set_epoch(criterion.warmup_stage_epochs)
    details = criterion.details(frame_sim, clip_sim, query_video, query_emb=query_emb, clip_emb=clip_emb)
    labels = np.array(query_video)
    inter = release_inter_loss(frame_sim.numpy(), clip_sim.numpy(), labels, 0.08, True)
    intra, _ = release_intra_loss(query_emb.numpy(), labels, clip_emb.numpy(), 0.08)
    assert float(details.inter) == pytest.approx(inter, abs=1e-9)
    assert float(details.intra) == pytest.approx(intra, abs=1e-6)
    total = details.base + 0.06 * details.inter + 9e-4 * details.intra
    assert float(details.loss) == pytest.approx(float(total), abs=1e-12)
