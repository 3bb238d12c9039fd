"""Own videos, ``index`` under ``torchrun`` (two processes, gloo on 127.0.0.1, each command bounded in time): the
gallery of two processes is the one-process gallery bit for bit (features, frame times, entries, captions, the
zero-shot search index), the report lists every process's problems; a process killed mid-run (SIGKILL after its
first part) stops the run, and the same command again encodes only what no part holds and ends with the same
gallery; the shares are a partition balanced by size."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

av = pytest.importorskip("av", reason="the video extra (av) is not installed")
open_clip = pytest.importorskip("open_clip", reason="the video extra (open_clip_torch) is not installed")

import h5py  # noqa: E402
import torch  # noqa: E402

from reference_models.videos.gallery import part_catalogue, read_gallery  # noqa: E402
from reference_models.videos.generated import write_generated_collection  # noqa: E402
from reference_models.videos.sharding import balanced_shares  # noqa: E402
from tests.own_videos.helpers import ROOT, cli_env, videos_cli  # noqa: E402
from tests.process_helpers import free_port  # noqa: E402

#: Wall-clock limit of one torchrun command (a few seconds on two idle cores).
TORCHRUN_LIMIT_S = 180
FEATURE = "clip_prvr-tiny"


def _index_args(world: Path, out: Path) -> list[str]:
    return ["index", "--videos", str(world / "videos"), "--captions", str(world / "captions.csv"), "--out", str(out),
            "--model", "prvr-tiny", "--fps", "2", "--workers", "0", "--part-videos", "2", "--no-progress",
            "--threads", "1"]


def _torchrun(target: list[str], args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    """``torchrun --nproc_per_node 2 TARGET ARGS`` on 127.0.0.1 (one thread per process)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
               "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *target, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=TORCHRUN_LIMIT_S, cwd=ROOT,
                          env={**cli_env(), "OMP_NUM_THREADS": "1", **env})


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """12 generated videos with captions, an empty and a broken file, indexed by one process."""
    base = tmp_path_factory.mktemp("sharded")
    world = write_generated_collection(base / "world", n_videos=12, events_per_video=2, event_seconds=1.0, fps=8,
                                       size=48, seed=4).videos_dir.parent
    (world / "videos" / "empty.mp4").write_bytes(b"")
    (world / "videos" / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(3000))
    run = videos_cli(*_index_args(world, base / "one"))
    assert run.returncode == 0, run.stderr
    return {"world": world, "root": base / "one"}


def _assert_same_gallery(got: Path, want: Path) -> None:
    """The galleries hold the same videos, features, times, captions and zero-shot search index, bit for bit."""
    features = Path("videos") / "FeatureData" / FEATURE
    with h5py.File(got / features / "feature.hdf5", "r") as a, h5py.File(want / features / "feature.hdf5", "r") as b:
        assert sorted(a) == sorted(b) and len(a) == 12
        for vid in b:
            assert a[vid].dtype == b[vid].dtype and np.array_equal(a[vid][()], b[vid][()]), vid
    for name in (features / "frame_times.json", Path("videos.json"), Path("captions.json"),
                 Path("videos") / "TextData" / "videostrain.caption.txt"):
        assert (got / name).read_text() == (want / name).read_text(), name
    index_a, index_b = (torch.load(root / "search" / "zero-shot" / "index.pt", weights_only=True) for root in (got, want))
    assert index_a["video_ids"] == index_b["video_ids"] and index_a["digests"] == index_b["digests"]
    assert index_a["rows"].keys() == index_b["rows"].keys()
    assert all(torch.equal(index_a["rows"][k], index_b["rows"][k]) for k in index_b["rows"])
    assert index_a["calibration"] == index_b["calibration"]
    # the parts hold the gallery's videos, each once
    assert set(part_catalogue(got / "parts")) == set(read_gallery(got).encoded_videos().values())
    assert not list((got / "parts").glob(".*.tmp"))


def test_two_processes_index_the_one_process_gallery_bit_for_bit(one_process: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "two"
    run = _torchrun(["-m", "reference_models.videos"], _index_args(one_process["world"], out))
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("indexed 12 videos: 12 encoded by 2 processes") == 1, run.stdout  # rank 0 alone reports
    _assert_same_gallery(out, one_process["root"])
    report = json.loads((out / "index_report.json").read_text())
    single = json.loads((one_process["root"] / "index_report.json").read_text())
    processes = report["processes"]
    assert [p["rank"] for p in processes] == [0, 1] and all(p["device"] == "cpu" for p in processes)
    assert sum(p["encoded"] for p in processes) == 12 and sum(p["videos"] for p in processes) == 14
    assert all(p["videos"] >= 6 for p in processes)  # the shares are balanced: 14 files, 2 of them empty or broken
    assert sum(p["frames"] for p in processes) == report["frames"] == single["frames"]
    assert sum(p["digests_read"] for p in processes) == 14
    # every process's problems, each with its rank, are the one process's problems
    assert sorted((p["kind"], p["video"]) for p in report["problems"]) == sorted(
        (p["kind"], p["video"]) for p in single["problems"]) == [("empty_file", "empty"), ("unreadable", "broken")]
    assert all(p["rank"] in (0, 1) for p in report["problems"])
    assert sum(p["problems"] for p in processes) == 2
    assert sum(line.startswith("problem: ") for line in run.stderr.splitlines()) == 2


def test_a_killed_process_stops_the_run_and_the_same_command_completes_it(one_process: dict[str, Path],
                                                                         tmp_path: Path) -> None:
    out = tmp_path / "killed"
    killed = _torchrun([str(ROOT / "tests" / "own_videos" / "index_until_killed.py")],
                       _index_args(one_process["world"], out), KILLED_RANK="1")
    assert killed.returncode != 0 and "SIGKILL" in killed.stderr, killed.stderr[-3000:]
    written = set(part_catalogue(out / "parts"))
    assert written and not (out / "index_report.json").exists()  # parts written, the gallery not assembled
    again = _torchrun(["-m", "reference_models.videos"], _index_args(one_process["world"], out))
    assert again.returncode == 0, again.stderr[-3000:]
    report = json.loads((out / "index_report.json").read_text())
    # only what no part held was encoded; the rest was kept from the killed run
    assert 0 < len(report["encoded"]) < 12 and len(report["encoded"]) + len(written) == 12
    _assert_same_gallery(out, one_process["root"])


def test_each_process_takes_its_own_device_and_one_process_is_the_plain_run() -> None:
    from reference_models import engine

    with pytest.raises(engine.UserError, match="each process uses cuda:LOCAL_RANK; pass --device cuda"):
        engine.rank_device("cuda:1", 0)
    assert engine.rank_device("cpu", 3) == torch.device("cpu")
    one = engine.DistributedRun()  # one process: every collective is the value itself
    assert one.broadcast_object({"a": 1}) == {"a": 1} and one.on_every_rank(lambda: 5) == 5


@given(st.dictionaries(st.text(min_size=1, max_size=4), st.integers(0, 10**9), max_size=40), st.integers(1, 6))
def test_the_shares_are_a_balanced_partition_that_every_rank_computes_alike(sizes: dict[str, int], world: int) -> None:
    shares = balanced_shares(sizes, world)
    assert len(shares) == world and all(share == sorted(share) for share in shares)
    assert sorted(v for share in shares for v in share) == sorted(sizes)  # every video once
    assert balanced_shares(dict(reversed(list(sizes.items()))), world) == shares  # not the order given
    loads = [sum(sizes[v] for v in share) for share in shares]
    if sizes:  # list scheduling's bound: the largest share exceeds the smallest by at most the largest video
        assert max(loads) - min(loads) <= max(sizes.values())


def test_the_shares_refuse_what_is_not_a_partition() -> None:
    with pytest.raises(ValueError, match="world_size must be an int >= 1, got 0"):
        balanced_shares({"a": 1}, 0)
    with pytest.raises(ValueError, match="sizes must be >= 0, got -1 for 'a'"):
        balanced_shares({"a": -1}, 2)
    assert balanced_shares({}, 3) == [[], [], []]
