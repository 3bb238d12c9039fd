"""Streamed gallery search and FAISS candidates against brute force over the full query × video × token tensor."""

from __future__ import annotations

import dataclasses
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from evidential_prvr import GalleryUncertainty
from evidential_prvr import _gallery_search as search_module
from evidential_prvr.metrics import ranks_of_ground_truth, recall_at_k
from evidential_prvr.search import (
    ClipIndex,
    IndexSpec,
    SearchResult,
    SearchScoring,
    gallery_search,
    rerank_candidates,
)

faiss = pytest.importorskip("faiss")  # the [faiss] extra; CI installs it (.ci/run)


def _gallery(videos=23, clips=5, frames=7, dim=6, queries=9, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    c = torch.randn(videos, clips, dim, generator=gen, dtype=dtype)
    f = torch.randn(videos, frames, dim, generator=gen, dtype=dtype)
    mask = torch.rand(videos, frames, generator=gen) < 0.7
    mask[:, 0] = True
    q = torch.randn(queries, dim, generator=gen, dtype=dtype)
    target = torch.randint(0, videos, (queries,), generator=gen)
    return q, c, f, mask, target


def _brute(q, c, f=None, mask=None, fw=0.3, cw=0.7, fill=None):
    """Full [Q, V, M] tensors: an independent reference (einsum over every query, video and token)."""
    qn = torch.nn.functional.normalize(q, dim=-1)
    clip = torch.einsum("qd,vmd->qvm", qn, torch.nn.functional.normalize(c, dim=-1)).amax(-1)
    if f is None:
        return clip, None, clip
    dots = torch.einsum("qd,vmd->qvm", qn, torch.nn.functional.normalize(f, dim=-1))
    dots = dots.masked_fill(~mask.unsqueeze(0), torch.finfo(dots.dtype).min if fill is None else fill)
    frame = dots.amax(-1)
    return clip, frame, fw * frame + cw * clip


@pytest.mark.parametrize(("query_chunk", "video_chunk"), [(1, 1), (4, 5), (9, 23), (1000, 7), (2, 1000)])
def test_streamed_search_equals_brute_force_for_any_blocks(query_chunk, video_chunk):
    q, c, f, mask, target = _gallery()
    clip, frame, score = _brute(q, c, f, mask, fill=-0.5)
    res = gallery_search(q, c, f, mask, k=8, scoring=SearchScoring(clip_weight=0.7, frame_weight=0.3,
                                                                    padded_frame_score=-0.5),
                         target=target, query_chunk=query_chunk, video_chunk=video_chunk)
    top = score.topk(8, dim=1)
    assert torch.equal(res.indices, top.indices)
    torch.testing.assert_close(res.scores, top.values, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(res.clip_scores, clip.gather(1, top.indices), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(res.frame_scores, frame.gather(1, top.indices), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(res.target_scores, score.gather(1, target[:, None])[:, 0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(res.target_frame_scores, frame.gather(1, target[:, None])[:, 0])
    assert res.num_videos == 23 and res.k == 8 and res.num_queries == 9


@pytest.mark.parametrize("sub_block", [1, 7, 40])
def test_products_taken_a_few_videos_at_a_time_equal_brute_force(monkeypatch, sub_block):
    """The products of a block are taken in sub-blocks of videos (a handful of scores here, to cut blocks
    at every video, across a video's tokens and mid-block): the same top-k, masks included."""
    monkeypatch.setattr(search_module, "_SUB_BLOCK_SCORES", sub_block)
    q, c, f, mask, target = _gallery()
    clip, frame, score = _brute(q, c, f, mask)
    res = gallery_search(q, c, f, mask, k=8, scoring=SearchScoring(clip_weight=0.7, frame_weight=0.3), target=target,
                         query_chunk=4, video_chunk=9)
    top = score.topk(8, dim=1)
    assert torch.equal(res.indices, top.indices)
    torch.testing.assert_close(res.scores, top.values, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(res.frame_scores, frame.gather(1, top.indices), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(res.target_scores, score.gather(1, target[:, None])[:, 0], rtol=1e-12, atol=1e-12)


def test_chunk_sizes_give_the_same_ranking_to_float32_rounding():
    q, c, f, mask, target = _gallery(dtype=torch.float32, videos=40, queries=13)
    runs = [gallery_search(q, c, f, mask, k=12, target=target, query_chunk=qc, video_chunk=vc)
            for qc, vc in ((13, 40), (5, 7), (1, 3))]
    for other in runs[1:]:
        assert torch.equal(other.indices, runs[0].indices)
        torch.testing.assert_close(other.scores, runs[0].scores, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(other.target_scores, runs[0].target_scores, rtol=1e-6, atol=1e-6)


def test_recall_and_ranks_match_the_full_matrix_with_ties():
    # Entries of +-1 in 16 dimensions: every norm is 4 and every score a multiple of 1/16, exact in any
    # arithmetic, so that duplicated videos (and many others) tie whatever kernel multiplies them.
    q, c, _, _, target = _gallery(videos=12, queries=30, dim=16, seed=3)
    q, c = q.sign(), c.sign()
    c = torch.cat([c, c[:4]])  # videos 12..15 duplicate 0..3: exact ties, which count against the model
    target = torch.cat([target[:10], torch.arange(4).repeat(5)])
    _, _, score = _brute(q, c)
    for k in (6, 16, 40):
        res = gallery_search(q, c, k=k, target=target, video_chunk=5)
        ks = (1, 2, 5) if k == 6 else (1, 5, 10, 15)
        assert res.recall_at_k(ks) == recall_at_k(score, target, ks=ks)
        full = ranks_of_ground_truth(score, target)
        ranks = res.target_ranks()
        resolved = ranks >= 1
        assert torch.equal(ranks[resolved], full[resolved]) and bool((full[~resolved] >= k).all())
    with pytest.raises(ValueError, match="k > 10"):
        gallery_search(q, c, k=10, target=target).recall_at_k((1, 10))
    with pytest.raises(ValueError, match="target="):
        gallery_search(q, c, k=3).target_ranks()


@settings(max_examples=25, deadline=None)
@given(videos=st.integers(1, 15), clips=st.integers(1, 4), queries=st.integers(1, 6), k=st.integers(1, 20),
       query_chunk=st.integers(1, 7), video_chunk=st.integers(1, 17), seed=st.integers(0, 2**16))
def test_property_streamed_top_k_is_the_brute_force_top_k(videos, clips, queries, k, query_chunk, video_chunk, seed):
    q, c, _, _, target = _gallery(videos=videos, clips=clips, queries=queries, seed=seed)
    _, _, score = _brute(q, c)
    res = gallery_search(q, c, k=k, target=target, query_chunk=query_chunk, video_chunk=video_chunk)
    top = score.topk(min(k, videos), dim=1)
    torch.testing.assert_close(res.scores, top.values, rtol=1e-12, atol=1e-12)
    assert torch.equal(res.indices, top.indices)
    if k > 1 or videos == 1:
        assert torch.equal(res.target_ranks() == 1, ranks_of_ground_truth(score, target) == 1)


@pytest.mark.parametrize(("k", "tanh_scaling"), [(5, "inside"), (1, "outside"), (None, "inside")])
def test_search_opinion_equals_the_opinion_of_the_full_matrices(k, tanh_scaling):
    q, c, f, mask, target = _gallery(videos=17, queries=11, seed=5)
    clip, frame, score = _brute(q, c, f, mask)
    scale = torch.rand(11, dtype=torch.float64) + 0.5
    module = GalleryUncertainty(k=k, tau=0.2, tanh_scaling=tanh_scaling, query_chunk=4)
    full = module(frame, clip, ranking=score, query_scale=scale, target=target)
    res = gallery_search(q, c, f, mask, k=17 if k is None else max(k, 2),
                         scoring=SearchScoring(clip_weight=0.7, frame_weight=0.3), target=target, video_chunk=4)
    streamed = module.search_opinion(res, query_scale=scale)
    assert torch.equal(streamed.candidates, full.candidates) and torch.equal(streamed.correct, full.correct)
    for name in ("candidate_scores", "fused_belief", "conflict"):
        torch.testing.assert_close(getattr(streamed, name), getattr(full, name))
    for branch in ("frame", "clip", "fused"):
        for field in ("uncertainty", "aleatoric", "top_belief", "consistency", "runner_up_consistency",
                      "label_consistency"):
            torch.testing.assert_close(getattr(getattr(streamed, branch), field), getattr(getattr(full, branch), field))


def test_search_opinion_refuses_a_too_short_search():
    q, c, _, _, target = _gallery()
    with pytest.raises(ValueError, match="k >= 10"):
        GalleryUncertainty(k=10).search_opinion(gallery_search(q, c, k=4))
    with pytest.raises(ValueError, match="k >= 2"):
        GalleryUncertainty(k=1).search_opinion(gallery_search(q, c, k=1, target=target))
    with pytest.raises(ValueError, match="k >= 23"):
        GalleryUncertainty(k=None).search_opinion(gallery_search(q, c, k=4))
    with pytest.raises(TypeError, match="SearchResult"):
        GalleryUncertainty(k=3).search_opinion(torch.zeros(2, 2))


def test_flat_index_gives_exactly_the_exact_ranking():
    q, c, f, mask, target = _gallery(dtype=torch.float32, videos=60, clips=6, dim=16, queries=20, seed=7)
    index = ClipIndex(c, "flat")
    exact = gallery_search(q, c, k=10, target=target)
    approx = index.search(q, k=10, target=target)
    assert torch.equal(approx.indices, exact.indices)
    torch.testing.assert_close(approx.scores, exact.scores)
    assert approx.recall_at_k((1, 5)) == exact.recall_at_k((1, 5))
    clip, _, _ = _brute(q, c)
    assert torch.equal(index.candidates(q, 25), clip.topk(25, dim=1).indices)
    # frames too: the exact ranking once every video is a candidate
    exact_f = gallery_search(q, c, f, mask, k=10, target=target)
    approx_f = index.search(q, k=10, num_candidates=60, frames=f, frame_mask=mask, target=target)
    assert torch.equal(approx_f.indices, exact_f.indices)
    torch.testing.assert_close(approx_f.frame_scores, exact_f.frame_scores)
    torch.testing.assert_close(approx_f.target_scores, exact_f.target_scores)


@pytest.mark.parametrize("spec", ["ivf:nlist=8,nprobe=8", "hnsw:m=8,ef_search=200"])
def test_ivf_and_hnsw_searched_exhaustively_equal_exact(spec):
    q, c, _, _, target = _gallery(dtype=torch.float32, videos=50, clips=4, dim=8, queries=12, seed=2)
    approx = ClipIndex(c, spec).search(q, k=6, num_candidates=12, target=target)
    exact = gallery_search(q, c, k=6, target=target)
    assert torch.equal(approx.indices, exact.indices)
    assert approx.recall_at_k((1, 5)) == exact.recall_at_k((1, 5))


def test_ivfpq_keeps_compressed_codes_and_reranks_exactly():
    """Product-quantised codes only choose candidates: with every cell probed and every video a candidate, the
    ranking and scores are the exact ones; with fewer candidates, the returned scores are still exact."""
    q, c, _, _, target = _gallery(dtype=torch.float32, videos=60, clips=4, dim=8, queries=12, seed=5)
    index = ClipIndex(c, "ivfpq:nlist=4,nprobe=4,pq_m=4")
    assert index.index.code_size == 2  # 4 sub-quantisers of 4 bits: 2 bytes per clip instead of 32
    exact = gallery_search(q, c, k=6, target=target)
    every = index.search(q, k=6, num_candidates=60, target=target)
    assert torch.equal(every.indices, exact.indices)
    torch.testing.assert_close(every.scores, exact.scores)
    few = index.search(q, k=3, num_candidates=5)
    clip, _, _ = _brute(q, c)
    torch.testing.assert_close(few.scores, clip.gather(1, few.indices))
    with pytest.raises(ValueError, match="pq_m must divide the embedding dimension 8, got 3"):
        ClipIndex(c, "ivfpq:nlist=4,pq_m=3")


def test_ivf_with_few_probes_pads_missing_candidates():
    q, c, _, _, _ = _gallery(dtype=torch.float32, videos=200, clips=2, dim=8, queries=5, seed=4)
    index = ClipIndex(c, "ivf:nlist=50,nprobe=1,train_size=400")
    cand = index.candidates(q, 150)
    assert cand.shape == (5, 150) and bool((cand == -1).any())
    for row in cand:
        real = row[row >= 0]
        assert real.unique().numel() == real.numel() and bool((row[real.numel():] == -1).all())
    res = rerank_candidates(q, cand, c, k=150)
    assert torch.equal(res.indices == -1, res.scores == float("-inf"))
    with pytest.raises(ValueError, match="nprobe"):
        GalleryUncertainty(k=150).search_opinion(res)


def test_index_spec_parsing_and_errors():
    assert IndexSpec.parse("flat") == IndexSpec()
    assert IndexSpec.parse("hnsw:m=16,ef_search=128") == IndexSpec(kind="hnsw", m=16, ef_search=128)
    with pytest.raises(ValueError, match="index type must be one of 'flat', 'ivf', 'ivfpq', 'hnsw'"):
        IndexSpec.parse("pq")
    with pytest.raises(ValueError, match="key=value"):
        IndexSpec.parse("ivf:probes=3")
    with pytest.raises(ValueError, match="nprobe must be an integer"):
        IndexSpec.parse("ivf:nprobe=x")
    with pytest.raises(ValueError, match="nlist must be >= 1"):
        IndexSpec.parse("ivf:nlist=0")


def test_missing_faiss_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(ImportError, match=r"evidential-prvr\[faiss\]"):
        ClipIndex(torch.randn(3, 2, 4), "flat")


def test_bad_inputs_are_named():
    q, c, f, mask, target = _gallery(dtype=torch.float32)
    with pytest.raises(ValueError, match=r"clips must be \[23, 5, 6\] for these queries"):
        gallery_search(q, c[..., :4])
    with pytest.raises(ValueError, match="frames must be"):
        gallery_search(q, c, f[:3])
    with pytest.raises(ValueError, match="frame_mask was given without frames"):
        gallery_search(q, c, frame_mask=mask)
    with pytest.raises(ValueError, match="target must hold indices"):
        gallery_search(q, c, target=target + 100)
    with pytest.raises(ValueError, match="queries must be finite"):
        gallery_search(q * float("nan"), c, validate_args=True)
    with pytest.raises(ValueError, match=r"candidates must be \[num_queries, C\]"):
        rerank_candidates(q, torch.zeros(2, 3, dtype=torch.long), c)
    with pytest.raises(ValueError, match="candidates must hold video indices"):
        rerank_candidates(q, torch.full((9, 2), 99), c, validate_args=True)
    index = ClipIndex(c, "flat")
    with pytest.raises(ValueError, match=r"queries must be \[num_queries >= 1, 6\]"):
        index.candidates(q[:, :3], 4)
    with pytest.raises(ValueError, match="num_candidates must be >= k = 5"):
        index.search(q, k=5, num_candidates=3)
    with pytest.raises(TypeError, match="spec must be a str or an IndexSpec"):
        ClipIndex(c, 3)
    assert isinstance(index.search(q, k=2), SearchResult) and "flat" in repr(index)


# --- SearchScoring: the one Eq. 1-2 settings object of the three searches --------------------------------------
def _plain_scores(q, c, f, mask, *, clip_weight, frame_weight, fill, normalize):
    """``[Q, V]`` clip, frame and ranking scores in plain torch, independent of the library: each (query, token)
    similarity as an element-wise product summed over d (divided by both norms for a cosine), the max over a
    video's positions (padded frames scored ``fill``), then the weighted sum of Eq. 2."""
    def similarity(tokens):
        dots = (q[:, None, None, :] * tokens[None]).sum(-1)  # [Q, V, M]
        if normalize:
            dots = dots / (q.norm(dim=-1)[:, None, None] * tokens.norm(dim=-1)[None])
        return dots

    clip = similarity(c).max(dim=-1).values
    frame_sim = similarity(f)
    padded = torch.full_like(frame_sim, torch.finfo(frame_sim.dtype).min if fill is None else fill)
    frame = torch.where(mask[None], frame_sim, padded).max(dim=-1).values
    return clip, frame, frame_weight * frame + clip_weight * clip


_SCORINGS = [
    dict(),
    dict(clip_weight=0.7, frame_weight=0.3),
    dict(clip_weight=0.25, frame_weight=0.75, padded_frame_score=-0.5),
    dict(clip_weight=0.6, frame_weight=0.4, padded_frame_score=0.9),  # a padded frame beats most real ones
    dict(clip_weight=1, frame_weight=2, normalize=False),  # ints, and dot products
]


@pytest.mark.parametrize("settings", _SCORINGS, ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()) or "defaults")
def test_gallery_search_and_rerank_with_a_scoring_equal_plain_torch(settings):
    q, c, f, mask, target = _gallery(seed=11)
    scoring = SearchScoring(**settings)
    full = {**dict(clip_weight=0.5, frame_weight=0.5, padded_frame_score=None, normalize=True), **settings}
    clip, frame, score = _plain_scores(q, c, f, mask, clip_weight=full["clip_weight"],
                                       frame_weight=full["frame_weight"], fill=full["padded_frame_score"],
                                       normalize=full["normalize"])
    top = score.topk(8, dim=1)
    searched = gallery_search(q, c, f, mask, k=8, scoring=scoring, target=target, query_chunk=4, video_chunk=5)
    cand = torch.stack([torch.randperm(23, generator=torch.Generator().manual_seed(i))[:10] for i in range(9)])
    reranked = rerank_candidates(q, cand, c, f, mask, k=6, scoring=scoring, target=target)
    cand_top = score.gather(1, cand).topk(6, dim=1)
    for res, indices, values in ((searched, top.indices, top.values),
                                 (reranked, cand.gather(1, cand_top.indices), cand_top.values)):
        assert torch.equal(res.indices, indices)
        torch.testing.assert_close(res.scores, values, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(res.clip_scores, clip.gather(1, indices), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(res.frame_scores, frame.gather(1, indices), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(res.target_scores, score.gather(1, target[:, None])[:, 0], rtol=1e-12, atol=1e-12)
    if not settings:  # None is the defaults, bit for bit
        for fn, args in ((gallery_search, (q, c, f, mask)), (rerank_candidates, (q, cand, c, f, mask))):
            a, b = fn(*args, k=6, target=target), fn(*args, k=6, scoring=None, target=target)
            assert torch.equal(a.indices, b.indices) and torch.equal(a.scores, b.scores)
            assert torch.equal(a.target_scores, b.target_scores)


@pytest.mark.parametrize("settings", _SCORINGS[:4], ids=["defaults", "weights", "fill", "high-fill"])
def test_clip_index_search_with_a_scoring_equals_plain_torch(settings):
    q, c, f, mask, target = _gallery(seed=12, dtype=torch.float32, videos=30, clips=4, dim=8, queries=7)
    full = {**dict(clip_weight=0.5, frame_weight=0.5, padded_frame_score=None), **settings}
    clip, frame, score = _plain_scores(q.double(), c.double(), f.double(), mask, clip_weight=full["clip_weight"],
                                       frame_weight=full["frame_weight"], fill=full["padded_frame_score"],
                                       normalize=True)
    # every video a candidate: the index's result is the full ranking
    res = ClipIndex(c, "flat").search(q, k=5, num_candidates=30, frames=f, frame_mask=mask,
                                      scoring=SearchScoring(**settings), target=target)
    top = score.topk(5, dim=1)
    assert torch.equal(res.indices, top.indices)
    torch.testing.assert_close(res.scores.double(), top.values, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(res.frame_scores.double(), frame.gather(1, top.indices), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(res.target_scores.double(), score.gather(1, target[:, None])[:, 0], rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("clip_weight", "0.5", "clip_weight must be a float, got str"),
    ("clip_weight", True, "clip_weight must be a float, got bool"),
    ("frame_weight", None, "frame_weight must be a float, got NoneType"),
    ("padded_frame_score", "low", "padded_frame_score must be a float or None, got str"),
    ("padded_frame_score", False, "padded_frame_score must be a float or None, got bool"),
    ("normalize", 1, "normalize must be a bool, got int"),
])
def test_search_scoring_refuses_a_bad_value_naming_the_field(field, value, message):
    with pytest.raises(TypeError, match=f"^{message}$"):
        SearchScoring(**{field: value})


def test_search_scoring_is_frozen_keyword_only_and_typed():
    scoring = SearchScoring()
    assert (scoring.clip_weight, scoring.frame_weight, scoring.padded_frame_score, scoring.normalize) == (
        0.5, 0.5, None, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        scoring.clip_weight = 0.7  # type: ignore[misc]
    with pytest.raises(TypeError):
        SearchScoring(0.7, 0.3)  # type: ignore[misc]
    assert SearchScoring(clip_weight=0.7, frame_weight=0.3) == SearchScoring(frame_weight=0.3, clip_weight=0.7)
    hints = {f.name: f.type for f in dataclasses.fields(SearchScoring)}
    assert hints == {"clip_weight": "float", "frame_weight": "float", "padded_frame_score": "float | None",
                     "normalize": "bool"}


def test_searches_take_only_a_search_scoring():
    q, c, f, mask, _ = _gallery(dtype=torch.float32)
    cand = torch.zeros(9, 2, dtype=torch.long)
    index = ClipIndex(c, "flat")
    calls = [lambda **kw: gallery_search(q, c, f, mask, **kw), lambda **kw: rerank_candidates(q, cand, c, f, **kw),
             lambda **kw: index.search(q, k=2, frames=f, **kw)]
    for call in calls:
        with pytest.raises(TypeError, match="scoring must be a SearchScoring or None, got dict"):
            call(scoring={"clip_weight": 0.7})
        for old in ("clip_weight", "frame_weight", "padded_frame_score", "normalize"):  # 3.0: the keywords are gone
            with pytest.raises(TypeError, match=f"unexpected keyword argument '{old}'"):
                call(**{old: 0.5})


def test_clip_index_search_refuses_dot_product_scoring():
    q, c, _, _, _ = _gallery(dtype=torch.float32)
    with pytest.raises(ValueError, match=r"scoring\.normalize=True"):
        ClipIndex(c, "flat").search(q, k=2, scoring=SearchScoring(normalize=False))


@pytest.mark.parametrize("spec", ["flat", "ivf:nlist=6,nprobe=3", "ivfpq:nlist=4,nprobe=2,pq_m=4", "hnsw:m=8,ef_search=16"])
def test_a_saved_index_loads_to_the_same_top_k(tmp_path, spec):
    pytest.importorskip("faiss")
    g = torch.Generator().manual_seed(3)
    clips, queries = torch.randn(60, 4, 16, generator=g), torch.randn(9, 16, generator=g)
    index = ClipIndex(clips, spec)
    index.save(tmp_path / "gallery.index")
    loaded = ClipIndex.load(tmp_path / "gallery.index")
    assert loaded.spec == index.spec and torch.equal(loaded.clips, clips)
    before, after = index.search(queries, k=5, num_candidates=10), loaded.search(queries, k=5, num_candidates=10)
    assert torch.equal(after.indices, before.indices) and torch.equal(after.scores, before.scores)
    assert torch.equal(loaded.candidates(queries, 7), index.candidates(queries, 7))
    assert [p.name for p in tmp_path.iterdir()] == ["gallery.index"]  # no temporary file left


def test_a_save_that_fails_keeps_the_previous_file(tmp_path, monkeypatch):
    pytest.importorskip("faiss")
    clips = torch.randn(10, 2, 8, generator=torch.Generator().manual_seed(0))
    ClipIndex(clips, "flat").save(tmp_path / "g.index")
    before = (tmp_path / "g.index").read_bytes()

    def broken_save(obj, file):
        file.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        ClipIndex(clips * 2, "flat").save(tmp_path / "g.index")
    assert (tmp_path / "g.index").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["g.index"]


def test_loading_something_else_is_refused_naming_the_file(tmp_path):
    pytest.importorskip("faiss")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "model.pt")
    with pytest.raises(ValueError, match=r"model\.pt is not a saved ClipIndex"):
        ClipIndex.load(tmp_path / "model.pt")
    (tmp_path / "noise.index").write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match=r"noise\.index is not a saved ClipIndex"):
        ClipIndex.load(tmp_path / "noise.index")
    with pytest.raises(FileNotFoundError):
        ClipIndex.load(tmp_path / "missing.index")
