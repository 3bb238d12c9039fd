"""Multi-process training of the Holmes reference model (``torchrun``, gloo on CPU, 127.0.0.1 only).

* One training step of two processes (uneven shards: 3 + 2 videos of a global batch of 5) gives every
  parameter the gradient of the one-process step on the whole batch, float64, in both stages: the two runs
  optimise the same objective (with the same random negatives, which every rank draws from the objective's
  own generator).
* A two-process :class:`~reference_models.engine.Trainer` run interrupted after its first epoch and resumed
  ends bit for bit where the uninterrupted run ends (every rank's generator states are in ``last.pt``).
* The command line of two processes started as ``torchrun`` starts its workers (``torch.multiprocessing``
  with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR=127.0.0.1``, ``MASTER_PORT``): ``train``
  finishes, writes one run folder, ``--resume`` restores it on both ranks, and its test SumR is that of the
  one-process run up to the noise of the micro test split; a folder locked by another run stops both ranks at
  once with one error line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import socket
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from reference_models.engine import (
    DistributedRun,
    RunLock,
    Trainer,
    UserError,
    load_checkpoint,
    process_group_from_environment,
    shard_bounds,
)
from reference_models.engine.distributed import ProcessGroupError, launched_ranks
from reference_models.holmes.cli import main
from reference_models.holmes.data import load_split, make_train_loader
from reference_models.holmes.objective import DistributedHolmesObjective
from reference_models.holmes.task import HolmesTask
from tests.process_helpers import run_processes
from tests.reference.data_helpers import COLLECTION, make_micro_benchmark
from tests.reference.run_helpers import FEATURE, micro_config, train_args

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")

WORLD = 2
#: Wall-clock limit of the two ranks' whole programme (about a minute on two idle cores).
RANKS_LIMIT_S = 900


def _splits(root: Path) -> dict:
    return {s: load_split(root, COLLECTION, FEATURE, s, n_clips=4, n_frames=8) for s in ("train", "val")}


def _as_double(batch):
    return dataclasses.replace(batch, **{f.name: getattr(batch, f.name).double() for f in dataclasses.fields(batch)
                                         if isinstance(getattr(batch, f.name), torch.Tensor)
                                         and getattr(batch, f.name).is_floating_point()})


def _step_gradients(root: Path, run: DistributedRun | None) -> dict[str, list]:
    """Per epoch (stage 1, stage 2): the loss and every parameter's gradient of one float64 training step on the
    first global batch of 5 videos, in one process (``run=None``) or as ``run``'s rank (DDP-averaged)."""
    config = micro_config(videos_per_batch=5).replace(model={"dropout": 0.0})
    split = _splits(root)
    task = HolmesTask(config, split["train"], split["val"])
    if run is not None:
        task.use_distributed(run)
    torch.manual_seed(0)
    model = task.build_model().double()
    objective = DistributedHolmesObjective(config, config.model.hidden_size)  # the same negatives in both runs
    train_model = model
    if run is not None:
        train_model = torch.nn.parallel.DistributedDataParallel(model)
    loader = task.train_loader(seed=0)
    loader.set_epoch(0)
    batch = _as_double(next(iter(loader)))
    out: dict[str, list] = {"loss": [], "grads": []}
    for epoch in (0, 1):  # random negatives; then hard negatives and L_intra
        objective.set_epoch(epoch)
        model.zero_grad(set_to_none=True)
        terms = task.training_step(train_model, objective, batch, torch.device("cpu"))
        terms.total.backward()
        out["loss"].append(float(terms.total.detach()))
        out["grads"].append({n: p.grad.clone() for n, p in model.named_parameters()})
    return out


def _weights(path: Path) -> dict[str, torch.Tensor]:
    state = load_checkpoint(path)
    return {**{f"model.{k}": v for k, v in state["model"].items()},
            **{f"objective.{k}": v for k, v in state["objective"].items() if isinstance(v, torch.Tensor)}}


#: The command-line runs of the ranks: (name, extra flags); "busy" trains into a folder another run holds.
CLI_RUNS = (("train", ()), ("resume", ("--resume",)), ("busy", ()))


def _rank_main(rank: int, ports: list[int], root: str, out: str) -> None:
    """One rank of a two-process run, started by ``torch.multiprocessing`` with the environment ``torchrun``
    gives its workers: the engine's checks, then the command line (``train``, ``--resume``, a busy folder)."""
    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(ports[0]))
    with process_group_from_environment("cpu", timeout_s=60) as run:
        steps = _step_gradients(Path(root), run)
        if rank == 0:
            torch.save(steps, Path(out) / "steps.pt")
        split = _splits(Path(root))
        config = micro_config(epochs=2, videos_per_batch=5)  # dropout 0.1: each rank's generators matter
        options = {"seed": 1, "show_progress": False, "distributed": run}
        Trainer(HolmesTask(config, split["train"], split["val"]), Path(out) / "full", **options).fit()
        Trainer(HolmesTask(config, split["train"], split["val"]), Path(out) / "part", **options).fit(stop_after_epoch=0)
        Trainer(HolmesTask(config, split["train"], split["val"]), Path(out) / "part", **options).fit(resume=True)
    runs = {}
    for (name, extra), port in zip(CLI_RUNS, ports[1:]):
        os.environ["MASTER_PORT"] = str(port)
        folder = Path(out) / ("busy" if name == "busy" else "cli")
        start = time.perf_counter()
        with contextlib.redirect_stderr(io.StringIO()) as err:
            rc = main(train_args(Path(root), folder, Path(out) / "config.json", "--dist-timeout", 60, *extra))
        results = folder / "results.json"
        runs[name] = {"rc": rc, "stderr": err.getvalue(), "seconds": time.perf_counter() - start,
                      "results": json.loads(results.read_text()) if rank == 0 and results.exists() else None}
    (Path(out) / f"cli_rank{rank}.json").write_text(json.dumps(runs))


@pytest.fixture(scope="module")
def micro_root(tmp_path_factory) -> Path:
    return make_micro_benchmark(tmp_path_factory.mktemp("micro"))


@pytest.fixture(scope="module")
def ranks_output(micro_root, tmp_path_factory) -> Path:
    """The folder the two ranks of :func:`_rank_main` wrote (the "busy" folder locked by this process)."""
    out = tmp_path_factory.mktemp("ranks")
    micro_config(epochs=2).to_json(out / "config.json")
    (out / "busy").mkdir()
    with contextlib.ExitStack() as sockets:
        ports = []
        for _ in range(1 + len(CLI_RUNS)):
            sock = sockets.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
    with RunLock(out / "busy"):
        run_processes(_rank_main, (ports, str(micro_root), str(out)), nprocs=WORLD, limit_s=RANKS_LIMIT_S)
    return out


def _cli(out: Path, rank: int, name: str) -> dict:
    return json.loads((out / f"cli_rank{rank}.json").read_text())[name]


def test_one_step_of_two_processes_has_the_gradient_of_one_process(micro_root, ranks_output):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = _step_gradients(micro_root, None)
    finally:
        torch.set_num_threads(threads)
    spread = torch.load(ranks_output / "steps.pt", weights_only=True)
    assert spread["loss"] == pytest.approx(single["loss"], rel=1e-12, abs=0)
    for stage, (got, want) in enumerate(zip(spread["grads"], single["grads"]), start=1):
        assert got.keys() == want.keys()
        worst = max(float((got[n] - want[n]).abs().max()) for n in want)
        scale = max(float(want[n].abs().max()) for n in want)
        assert scale > 0 and worst <= 1e-10 * max(scale, 1.0), (stage, worst, scale)


def test_two_process_run_resumes_bit_for_bit(ranks_output):
    full, part = ranks_output / "full", ranks_output / "part"
    assert {p.name for p in full.iterdir()} >= {"last.pt", "best.pt", "train.log"}
    want, got = _weights(full / "last.pt"), _weights(part / "last.pt")
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want)
    state, resumed = load_checkpoint(full / "last.pt"), load_checkpoint(part / "last.pt")
    assert _same_history(state, resumed)
    assert len(state["rank_rng"]) == WORLD
    assert not torch.equal(state["rank_rng"][0]["torch"], state["rank_rng"][1]["torch"])  # each rank its dropout
    assert state["epoch"] == resumed["epoch"] == 1


def _same_history(a: dict, b: dict) -> bool:
    strip = [{k: v for k, v in r.items() if k != "train_seconds"} for r in a["history"]]
    return strip == [{k: v for k, v in r.items() if k != "train_seconds"} for r in b["history"]]


def test_rank_shards_make_up_the_one_process_batches(micro_root):
    split = _splits(micro_root)["train"]
    for vpb, world in ((5, 2), (4, 3), (3, 3)):
        one = make_train_loader(split, vpb, seed=2).batch_video_indices(1)
        shards = [make_train_loader(split, vpb, seed=2, rank=r, world_size=world).batch_video_indices(1)
                  for r in range(world)]
        kept = [b for b in one if len(b) >= world]  # a rank needs a video of each batch
        assert all(len(s) == len(kept) for s in shards)
        for i, batch in enumerate(kept):
            assert np.array_equal(np.concatenate([s[i] for s in shards]), batch)
    assert [shard_bounds(5, r, 2) for r in range(2)] == [(0, 3), (3, 5)]


def test_distributed_training_refuses_what_it_cannot_do(micro_root):
    split = _splits(micro_root)
    run = DistributedRun(0, 4, 0, torch.device("cpu"))
    with pytest.raises(UserError, match="dab"):
        HolmesTask(micro_config().with_ablation("dab"), split["train"], split["val"]).use_distributed(run)
    with pytest.raises(UserError, match="videos_per_batch is 3, fewer than the 4 processes"):
        HolmesTask(micro_config(videos_per_batch=3), split["train"], split["val"]).use_distributed(run)


# --- the command line, as torchrun starts it ----------------------------------------------------------------
def test_two_process_command_line_writes_one_run_folder_resumes_and_matches_one_process(micro_root, ranks_output,
                                                                                        tmp_path, capsys):
    out = ranks_output / "cli"
    for rank in range(WORLD):
        assert _cli(ranks_output, rank, "train")["rc"] == 0, _cli(ranks_output, rank, "train")["stderr"][-3000:]
    assert {p.name for p in ranks_output.iterdir()} == {"steps.pt", "full", "part", "busy", "cli", "config.json",
                                                      *(f"cli_rank{r}.json" for r in range(WORLD))}
    assert {p.name for p in out.iterdir()} - {"tensorboard"} == {"best.pt", "last.pt", "config.json",
                                                                "results.json", "train.log"}
    assert "epoch 2" in (out / "train.log").read_text()
    assert _cli(ranks_output, 1, "train")["stderr"] == ""  # rank 1 writes and prints nothing
    assert len(load_checkpoint(out / "last.pt")["rank_rng"]) == WORLD
    two = _cli(ranks_output, 0, "train")["results"]
    assert two["epochs_completed"] == 2

    resumed = [_cli(ranks_output, rank, "resume") for rank in range(WORLD)]
    assert [r["rc"] for r in resumed] == [0, 0], resumed
    assert "resumed from" in resumed[0]["stderr"] and resumed[1]["stderr"] == ""
    assert resumed[0]["results"]["test"]["recall"] == two["test"]["recall"]  # the weights of the first run

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(train_args(micro_root, tmp_path / "one", ranks_output / "config.json")) == 0
    finally:
        torch.set_num_threads(threads)
    capsys.readouterr()
    one = json.loads((tmp_path / "one" / "results.json").read_text())
    # The micro test split has 7 captions: one caption's R@1 is 14.3 points of SumR, R@5..R@100 saturate.
    assert abs(two["test"]["recall"]["SumR"] - one["test"]["recall"]["SumR"]) <= 2 * 100 / 7 + 1e-6
    assert two["best_val_sumr"] >= 200 and one["best_val_sumr"] >= 200


def test_a_folder_in_use_stops_every_rank_at_once_with_one_line(ranks_output):
    busy = [_cli(ranks_output, rank, "busy") for rank in range(WORLD)]
    assert [b["rc"] for b in busy] == [2, 2]
    assert all(b["seconds"] < 30 for b in busy), busy  # not the 60 s timeout
    # (a "note:" line, e.g. that tcmalloc is not installed on this machine, is no error)
    lines = [line for b in busy for line in b["stderr"].splitlines() if line.strip() and not line.startswith("note: ")]
    assert len(lines) == 1 and lines[0].startswith("error: --output-dir") and "is in use by process" in lines[0]
    assert not (ranks_output / "busy" / "last.pt").exists()


def test_the_launcher_environment_names_the_ranks_or_a_single_process():
    assert launched_ranks({}) is None and launched_ranks({"WORLD_SIZE": "1", "RANK": "0"}) is None
    assert launched_ranks({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"}) == (3, 4, 1)
    with pytest.raises(ProcessGroupError, match="start it with torchrun"):
        launched_ranks({"WORLD_SIZE": "2"})
    with pytest.raises(ProcessGroupError, match="do not fit WORLD_SIZE=2"):
        launched_ranks({"WORLD_SIZE": "2", "RANK": "2", "LOCAL_RANK": "0"})
    assert not DistributedRun().is_distributed and DistributedRun().on_writer(lambda: 7) == 7
