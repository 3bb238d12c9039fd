"""The end of a multi-process run is bounded: a rank whose peer left early, or never arrives, stops with one
line within the run's timeout instead of waiting forever (gloo on CPU, 127.0.0.1 only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from reference_models.engine import distributed as engine_distributed
from reference_models.engine.distributed import ProcessGroupError, process_group_from_environment
from tests.process_helpers import free_port, run_processes

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")

TIMEOUT_S = 4.0


def _rank(rank: int, port: int, out: str, peer: str) -> None:
    """Rank 0 ends the run normally; rank 1 ``exits`` at once without a teardown, or ``stalls`` past the timeout."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    engine_distributed.TEARDOWN_GRACE_S = 2.0
    with process_group_from_environment("cpu", timeout_s=TIMEOUT_S) as run:
        run.barrier()  # both ranks are in the group
        if rank == 1 and peer == "exits":
            os._exit(0)
        if rank == 1:
            time.sleep(TIMEOUT_S + 4.0)
        start = time.monotonic()
        try:
            run.close()
            message = None
        except ProcessGroupError as exc:
            message = str(exc)
        seconds = time.monotonic() - start
    Path(out, f"rank{rank}.json").write_text(json.dumps({"message": message, "seconds": seconds}))


@pytest.mark.parametrize("peer", ["exits", "stalls"])
def test_a_rank_whose_peer_is_gone_stops_with_one_line_within_the_timeout(tmp_path, peer):
    run_processes(_rank, (free_port(), str(tmp_path), peer), nprocs=2, limit_s=60)
    got = json.loads((tmp_path / "rank0.json").read_text())
    assert got["message"] is not None, "the end of the run did not notice the missing rank"
    assert got["message"].startswith("rank 0: the ranks did not all reach the end of the run within 4 s"), got
    assert "\n" not in got["message"]
    if peer == "stalls":  # gloo's monitored barrier names the rank that did not arrive
        assert "Ranks 1 failed to pass monitoredBarrier" in got["message"], got
    # the meeting waits at most the timeout, the teardown at most its grace time
    assert got["seconds"] < TIMEOUT_S + engine_distributed.TEARDOWN_GRACE_S + 5, got
    if peer == "stalls":  # the late rank finds rank 0 gone and says so too, at once
        late = json.loads((tmp_path / "rank1.json").read_text())
        assert late["message"].startswith("rank 1: the ranks did not all reach the end of the run"), late
        assert late["seconds"] < TIMEOUT_S + engine_distributed.TEARDOWN_GRACE_S + 5, late


def test_both_ranks_end_a_normal_run_without_a_message(tmp_path):
    run_processes(_normal_rank, (free_port(), str(tmp_path)), nprocs=2, limit_s=60)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.done", "rank1.done"]


def _normal_rank(rank: int, port: int, out: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    with process_group_from_environment("cpu", timeout_s=30) as run:
        run.barrier()
    assert not dist.is_initialized()
    Path(out, f"rank{rank}.done").write_text("")


def test_a_teardown_that_does_not_return_is_left_behind_with_one_line_and_the_process_exits():
    """The watchdog itself: a destruction that blocks (here a sleep standing in for gloo's native wait) is
    left behind after the grace time with one warning line, and :func:`exit_process` does not wait for it."""
    script = textwrap.dedent("""
        import time
        import torch.distributed as dist
        from reference_models.engine import distributed as d
        dist.destroy_process_group = lambda: time.sleep(120)
        start = time.monotonic()
        d._destroy_process_group_bounded(1, 1.0)
        print(f"returned after {time.monotonic() - start:.1f} s", flush=True)
        d.exit_process(3)
    """)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 3, done.stderr
    assert time.monotonic() - start < 30
    assert done.stderr.strip().splitlines() == [
        "warning: rank 1: the process group's teardown did not finish within 1 s; leaving it behind"]
    assert float(done.stdout.split()[2]) < 5
