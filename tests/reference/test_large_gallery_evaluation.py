"""Evaluation of the reference model without the [Q, V] matrices: streamed exact and FAISS equal the default."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from evidential_prvr.search import IndexSpec
from reference_models.holmes.config import preset
from reference_models.holmes.data import generate_embedded_benchmark, load_split, read_planted_types
from reference_models.holmes.evaluate import evaluate_retrieval, parse_index
from reference_models.holmes.factory import build_model
from reference_models.holmes.objective import HolmesObjective
from reference_models.holmes.scoring import exact_top_k, score_matrix
from reference_models.holmes.selective import fit_retrieval_uncertainty
from tests.reference.data_helpers import COLLECTION, TINY_SPEC

pytest.importorskip("faiss")  # the [faiss] extra; CI installs it (.ci/run)

FEATURE = "synthetic"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("gallery")
    spec = dataclasses.replace(TINY_SPEC, n_test_videos=31, n_val_videos=9)
    generate_embedded_benchmark(root, COLLECTION, seed=1, spec=spec)
    # block sizes that do not divide the 31 videos or the queries
    cfg = preset("embedded").replace(
        model={"hidden_size": 16, "num_heads": 2, "widths": [None, 1.0], "ffn_multiplier": 1},
        optim={"eval_video_batch": 7, "eval_query_batch": 16, "score_chunk": 5},
    )
    splits = {s: load_split(root, COLLECTION, FEATURE, s, n_clips=4, n_frames=8) for s in ("val", "test")}
    torch.manual_seed(0)
    test = splits["test"]
    model = build_model(cfg, test.visual_dim, test.text_dim, test.n_clips, test.n_frames).eval()
    objective = HolmesObjective(cfg, cfg.model.hidden_size)
    planted = read_planted_types(root, COLLECTION)
    uncertainty = fit_retrieval_uncertainty(model, objective, splits["val"], cfg, planted_types=planted)
    return cfg, model, objective, test, planted, uncertainty


def _evaluate(setup, **kwargs):
    cfg, model, objective, test, planted, uncertainty = setup
    return evaluate_retrieval(model, test, cfg, planted_types=planted, identifier=objective.identifier(),
                              uncertainty=uncertainty, **kwargs).to_dict()


SAME = ("recall", "per_type_r1", "selective", "gallery_identification")


def test_streamed_exact_evaluation_equals_the_full_matrices(setup):
    full = _evaluate(setup)
    streamed = _evaluate(setup, index="exact")
    for key in SAME:
        assert streamed[key] == full[key], key
    assert streamed["identification"] is None and streamed["search"]["index"] == "exact"
    assert full["search"] is None
    blocks = _evaluate(setup, index="exact", identify_chunk=6)
    assert blocks["identification"] == _evaluate(setup, identify_chunk=6)["identification"]


def test_flat_faiss_evaluation_with_every_video_a_candidate_equals_exact(setup):
    full = _evaluate(setup)
    flat = _evaluate(setup, index="faiss:flat", num_candidates=1000)
    for key in ("recall", "per_type_r1"):
        assert flat[key] == full[key], key
    assert flat["search"]["num_candidates"] == 1000 and flat["search"]["index_build_seconds"] >= 0


def test_search_gallery_scores_are_those_of_score_matrix(setup):
    cfg, model, _, test, _, _ = setup
    gen = torch.Generator().manual_seed(0)
    feats = torch.randn(31, 4, test.visual_dim, generator=gen)
    videos = model.encode_videos(feats, torch.randn(31, 8, test.visual_dim, generator=gen),
                                 torch.rand(31, 8, generator=gen) < 0.8)
    queries = torch.randn(13, cfg.model.hidden_size, generator=gen)
    sims = score_matrix(model, videos, queries, query_chunk=5, video_chunk=7)
    res = exact_top_k(model, videos, queries, k=31, query_chunk=5, video_chunk=7, target=torch.arange(13))
    # Two code paths with other matrix shapes: equal to float32 rounding, not bit for bit (other GEMM blocks).
    tol = {"rtol": 0.0, "atol": 64 * torch.finfo(torch.float32).eps * float(sims.score.abs().max())}
    torch.testing.assert_close(res.scores, sims.score.sort(dim=1, descending=True).values, **tol)
    torch.testing.assert_close(res.scores, sims.score.gather(1, res.indices), **tol)  # the indices go with them
    torch.testing.assert_close(res.target_scores, sims.score.diagonal(), **tol)
    torch.testing.assert_close(res.frame_scores, sims.frame.gather(1, res.indices), **tol)


def test_parse_index():
    assert parse_index("exact") == ("exact", None)
    assert parse_index("faiss")[1].kind == "flat"
    assert parse_index("faiss:ivf:nprobe=4")[1].nprobe == 4
    assert parse_index("faiss:ivfpq:nprobe=4,pq_m=8")[1] == IndexSpec(kind="ivfpq", nprobe=4, pq_m=8)
    with pytest.raises(ValueError, match="'exact', 'faiss' or 'faiss:TYPE'"):
        parse_index("annoy")
    with pytest.raises(ValueError, match="index type must be one of"):
        parse_index("faiss:lsh")
