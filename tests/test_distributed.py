"""The distributed contract, in two CPU processes (gloo, ``torch.multiprocessing``).

Each rank holds a slice of a global batch (its videos and their captions), gathers the video
embeddings with :func:`evidential_prvr.distributed.gather_with_grad`, scores its queries against every
video and calls the ``distributed=True`` loss. Contract: on every rank the loss equals the single-process
loss of the whole batch, and the gradient of each rank's query, frame and clip embeddings divided by the
world size equals their single-process gradient (float64, 1e-6), for the release and paper presets, in
both stages (random triplet negatives in the first, a draw among the hardest in the second), with even
(4 + 4 videos) and uneven (5 + 3) slices. One process group runs every case (a few seconds).
"""

from __future__ import annotations

import datetime
import os
import tempfile
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import evidential_prvr as ep
from evidential_prvr.distributed import gather_sizes, gather_with_grad, is_distributed, rank_offset
from tests.process_helpers import free_port, run_processes

WORLD = 2
TIMEOUT_S = 120
CAPTIONS = (1, 3, 2, 2, 1, 2, 2, 1)  # captions of each of the 8 videos (several per video, uneven)
SPLITS = {"even": (4, 4), "uneven": (5, 3)}
CASES = [(preset, stage, split) for preset in ("release", "paper") for stage in (1, 2) for split in SPLITS]
TOL = 1e-6


def _case_key(preset: str, stage: int, split: str) -> str:
    return f"{preset}-stage{stage}-{split}"


def _batch(seed: int) -> dict[str, torch.Tensor]:
    """The global batch: 8 videos with 6 frames and 5 clips, their captions, float64."""
    gen = torch.Generator().manual_seed(seed)
    videos, dim = len(CAPTIONS), 8
    # a shared offset makes the cosines positive, so the release's min-max over the padded caption block
    # (its zero slots) depends on the batch's most captions per video, the global one under DDP
    return {
        "query": torch.randn(sum(CAPTIONS), dim, generator=gen, dtype=torch.float64) + 1.0,
        "frame": torch.randn(videos, 6, dim, generator=gen, dtype=torch.float64),
        "clip": torch.randn(videos, 5, dim, generator=gen, dtype=torch.float64) + 1.0,
        "video": torch.repeat_interleave(torch.arange(videos), torch.tensor(CAPTIONS)),
    }


def _criterion(preset: str, stage: int, distributed: bool) -> ep.HolmesCriterion:
    criterion = ep.HolmesCriterion.from_preset(preset, "tvr", distributed=distributed)
    criterion.set_epoch(0 if stage == 1 else max(criterion.warmup_stage_epochs, criterion.hard_negative_epoch))
    assert criterion.stage == stage and criterion.hard_negatives == (stage == 2)
    return criterion


def _loss(criterion, query, frame_all, clip_all, clip_own, video, seed):
    """The training step of a lineage model: scores of the queries against every video of the batch."""
    frame_sim, clip_sim = ep.max_similarity(query, frame_all), ep.max_similarity(query, clip_all)
    frame_logits = ep.max_similarity(query, frame_all, normalize=False)
    clip_logits = ep.max_similarity(query, clip_all, normalize=False)
    return criterion(frame_sim, clip_sim, video, query_emb=query, clip_emb=clip_own, frame_logits=frame_logits,
                     clip_logits=clip_logits, generator=torch.Generator().manual_seed(seed))


def _parts_loss(query, frame_all, video, seed, distributed):
    """Each in-batch module alone (no criterion): their sum, and the identification's query types."""
    frame_sim = ep.max_similarity(query, frame_all)
    logits = ep.max_similarity(query, frame_all, normalize=False)
    gen = torch.Generator().manual_seed(seed)
    kw = {"distributed": distributed}
    total = ep.BaseRetrievalLoss.from_preset("release", "tvr", use_hard_negatives=True, **kw)(
        frame_sim, frame_sim, query, video, frame_logits=logits, clip_logits=logits, generator=gen)
    total = total + ep.EvidentialRetrievalLoss.from_preset("release", "tvr", **kw)(frame_sim, logits, video)
    total = total + ep.TripletRankingLoss.from_preset("paper", "tvr", **kw)(frame_sim, video, gen)
    total = total + ep.InfoNCELoss.from_preset("paper", "tvr", **kw)(logits, video)
    total = total + ep.QueryDiversityLoss.from_preset("release", "tvr", **kw)(query, video)
    types = ep.UncertaintyGuidedIdentifier.from_preset("paper", "tvr", **kw)(frame_sim, logits, video).query_type
    return total, types


def _leaves(batch: dict[str, torch.Tensor], queries: slice, videos: slice) -> dict[str, torch.Tensor]:
    return {name: batch[name][part].clone().requires_grad_(True)
            for name, part in (("query", queries), ("frame", videos), ("clip", videos))}


def _single_process(preset: str, stage: int, seed: int) -> dict[str, torch.Tensor]:
    batch = _batch(seed)
    leaves = _leaves(batch, slice(None), slice(None))
    loss = _loss(_criterion(preset, stage, False), leaves["query"], leaves["frame"], leaves["clip"], leaves["clip"],
                 batch["video"], seed)
    loss.backward()
    return {"loss": loss.detach(), **{name: t.grad for name, t in leaves.items()}}


def _single_parts(seed: int) -> dict[str, torch.Tensor]:
    batch = _batch(seed)
    leaves = _leaves(batch, slice(None), slice(None))
    loss, types = _parts_loss(leaves["query"], leaves["frame"], batch["video"], seed, False)
    loss.backward()
    return {"loss": loss.detach(), "types": types, "query": leaves["query"].grad, "frame": leaves["frame"].grad}


def _rank_parts(seed: int, rank: int) -> dict[str, torch.Tensor]:
    batch = _batch(seed)
    queries, videos = _rank_slices("uneven", rank)
    leaves = _leaves(batch, queries, videos)
    loss, types = _parts_loss(leaves["query"], gather_with_grad(leaves["frame"]), batch["video"][queries], seed, True)
    loss.backward()
    return {"loss": loss.detach(), "types": types, "query": leaves["query"].grad, "frame": leaves["frame"].grad}


def _rank_slices(split: str, rank: int) -> tuple[slice, slice]:
    sizes = SPLITS[split]
    first = rank_offset(sizes, rank)
    videos = slice(first, first + sizes[rank])
    first_query = sum(CAPTIONS[:videos.start])
    return slice(first_query, first_query + sum(CAPTIONS[videos])), videos


def _on_rank(preset: str, stage: int, split: str, seed: int, rank: int) -> dict[str, torch.Tensor]:
    batch = _batch(seed)
    queries, videos = _rank_slices(split, rank)
    leaves = _leaves(batch, queries, videos)
    frame_all, clip_all = gather_with_grad(leaves["frame"]), gather_with_grad(leaves["clip"])
    loss = _loss(_criterion(preset, stage, True), leaves["query"], frame_all, clip_all, leaves["clip"],
                 batch["video"][queries], seed)
    loss.backward()
    return {"loss": loss.detach(), **{name: t.grad for name, t in leaves.items()}}


def _warnings_of_plain_losses() -> int:
    """How many per-rank warnings three calls of losses built without ``distributed=True`` raise."""
    sim = torch.tensor([[0.9, 0.2], [0.3, 0.8]], dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        base = ep.BaseRetrievalLoss.from_preset("release", "tvr")
        base(sim, sim, torch.eye(2, dtype=torch.float64), torch.tensor([0, 1]))
        base(sim, sim, torch.eye(2, dtype=torch.float64), torch.tensor([0, 1]))
        ep.EvidentialRetrievalLoss.from_preset("release", "tvr")(sim, sim, torch.tensor([0, 1]))
    return sum("distributed=True" in str(w.message) for w in caught)


def _worker(rank: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    try:
        results: dict[str, object] = {"warnings": torch.tensor(_warnings_of_plain_losses())}
        uneven = torch.full((rank + 2, 3), float(rank))
        results["gathered"] = gather_with_grad(uneven)
        results["gathered_dim1"] = gather_with_grad(uneven.t().contiguous(), dim=1)
        results["sizes"] = torch.tensor(gather_sizes(rank + 2))
        for seed, (preset, stage, split) in enumerate(CASES):
            results[_case_key(preset, stage, split)] = _on_rank(preset, stage, split, seed, rank)
        results["parts"] = _rank_parts(len(CASES), rank)
        torch.save(results, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def run_ranks() -> list[dict]:
    """Every case run once in one 2-process gloo group; each rank's results, loaded in this process."""
    with tempfile.TemporaryDirectory() as out:
        run_processes(_worker, (free_port(), out), nprocs=WORLD, limit_s=TIMEOUT_S)
        return [torch.load(Path(out) / f"rank{rank}.pt", weights_only=True) for rank in range(WORLD)]


@pytest.fixture(scope="module")
def rank_results():
    return run_ranks()


def max_differences(rank_results) -> dict[str, dict[str, float]]:
    """Per case, the largest |rank loss - single loss| and |rank gradient / world - single gradient|."""
    found = {}
    for seed, (preset, stage, split) in enumerate(CASES):
        key = _case_key(preset, stage, split)
        single = _single_process(preset, stage, seed)
        diffs = {"loss": 0.0, "query": 0.0, "frame": 0.0, "clip": 0.0}
        for rank, results in enumerate(rank_results):
            got = results[key]
            queries, videos = _rank_slices(split, rank)
            diffs["loss"] = max(diffs["loss"], float((got["loss"] - single["loss"]).abs()))
            for name, part in (("query", queries), ("frame", videos), ("clip", videos)):
                diffs[name] = max(diffs[name], float((got[name] / WORLD - single[name][part]).abs().max()))
        found[key] = diffs
    return found


@pytest.mark.parametrize(("preset", "stage", "split"), CASES, ids=[_case_key(*c) for c in CASES])
def test_every_rank_returns_the_single_process_loss_and_world_times_its_gradient(rank_results, preset, stage, split):
    diffs = max_differences(rank_results)[_case_key(preset, stage, split)]
    assert max(diffs.values()) < TOL, diffs


def test_each_in_batch_module_alone_keeps_the_contract(rank_results):
    """BaseRetrievalLoss, EvidentialRetrievalLoss, TripletRankingLoss, InfoNCELoss and QueryDiversityLoss
    called directly (uneven slices), and the identification of the global batch."""
    single = _single_parts(len(CASES))
    for rank, results in enumerate(rank_results):
        got = results["parts"]
        queries, videos = _rank_slices("uneven", rank)
        assert float((got["loss"] - single["loss"]).abs()) < TOL
        assert torch.equal(got["types"], single["types"])
        assert float((got["query"] / WORLD - single["query"][queries]).abs().max()) < TOL
        assert float((got["frame"] / WORLD - single["frame"][videos]).abs().max()) < TOL


def test_the_cases_are_not_trivial(rank_results):
    """Nonzero gradients in every input, and stage 2 includes L_intra (a different loss than stage 1)."""
    for key in map(lambda c: _case_key(*c), CASES):
        for name in ("query", "frame", "clip"):
            assert float(rank_results[0][key][name].abs().max()) > 1e-4, (key, name)
    assert not torch.equal(rank_results[0]["release-stage1-even"]["loss"],
                           rank_results[0]["release-stage2-even"]["loss"])


def test_losses_without_distributed_warn_once_under_a_process_group(rank_results):
    assert [int(r["warnings"]) for r in rank_results] == [1, 1]


def test_gather_with_grad_concatenates_uneven_slices_in_rank_order(rank_results):
    expected = torch.cat([torch.zeros(2, 3), torch.ones(3, 3)])
    for results in rank_results:
        assert torch.equal(results["gathered"], expected)
        assert torch.equal(results["gathered_dim1"], expected.t())
        assert results["sizes"].tolist() == [2, 3]


def test_distributed_losses_in_one_process_are_the_plain_losses():
    """``distributed=True`` without a process group: the single-process loss, no warning, no gather."""
    assert not is_distributed()
    batch = _batch(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for stage in (1, 2):
            plain = _loss(_criterion("release", stage, False), batch["query"], batch["frame"], batch["clip"],
                          batch["clip"], batch["video"], 0)
            spread = _loss(_criterion("release", stage, True), batch["query"], batch["frame"], batch["clip"],
                           batch["clip"], batch["video"], 0)
            assert torch.equal(plain, spread)
    assert gather_with_grad(batch["frame"], dim=1) is batch["frame"]
    assert rank_offset([5, 3], rank=1) == 5


def test_parts_must_agree_with_the_criterion_on_distributed():
    base = ep.BaseRetrievalLoss.from_preset("release", "tvr")
    with pytest.raises(ValueError, match="distributed"):
        ep.HolmesCriterion(base, distributed=True)
    with pytest.raises(ValueError, match="rank must be in"):
        rank_offset([5, 3], rank=2)


if __name__ == "__main__":  # print the measured differences: python -m tests.test_distributed
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for case, diff in max_differences(run_ranks()).items():
        print(case, {k: f"{v:.2e}" for k, v in diff.items()})
