"""The CPU thread count of the commands: as given, from OMP_NUM_THREADS, else the cores less those others keep busy now."""

from __future__ import annotations

import pytest
import torch

from reference_models.engine import cli, threads
from reference_models.engine.threads import choose_cpu_threads, use_cpu_threads


@pytest.fixture
def machine(monkeypatch):
    """A machine whose cores this process may use and whose busy cores (other processes, now) the test sets."""
    state = {"cores": 2, "busy": 0.0}
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: set(range(state["cores"])))
    monkeypatch.setattr(threads, "busy_cores", lambda cores: state["busy"])
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    return state


@pytest.mark.parametrize(("cores", "busy", "expected"), [
    (2, 0.0, 2),    # idle: every core
    (2, 2.0, 1),    # one other two-thread job: one thread, never zero
    (2, 1.9, 1),
    (8, 3.0, 5),    # cores less the others' use
    (8, 2.6, 5),    # rounded to whole cores
    (8, 2.4, 6),
    (1, 0.0, 1),    # one core in the affinity mask (taskset, a container's CPU set)
])
def test_cores_less_the_others_use(machine, cores, busy, expected):
    machine.update(cores=cores, busy=busy)
    choice = choose_cpu_threads()
    assert choice.threads == expected
    assert choice.fewer_for_load == (expected < cores)
    assert f"{cores} core(s)" in choice.reason


def test_a_load_average_left_by_a_job_that_is_over_takes_nothing(machine, monkeypatch):
    # right after an install in the same command line: the one-minute average still counts it, the cores are idle
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (1.04, 0.5, 0.2), raising=False)
    machine.update(cores=2, busy=0.02)
    choice = choose_cpu_threads()
    assert choice.threads == 2 and not choice.fewer_for_load


def _fake_proc_stat(monkeypatch, busy_ticks, total_ticks, own_cpu_s):
    """``/proc/stat`` and this process's CPU time read twice by ``busy_cores``: before and after the window."""
    times = iter(zip(busy_ticks, total_ticks))
    own = iter(own_cpu_s)
    monkeypatch.setattr(threads, "_core_times", lambda cores: next(times))
    monkeypatch.setattr(threads, "_own_cpu_s", lambda: next(own))
    monkeypatch.setattr(threads.time, "sleep", lambda s: None)


def test_busy_cores_leaves_out_this_process(monkeypatch):
    # two cores, 100 ticks each over 0.5 s: 150 busy ticks are 1.5 cores, of which this process used 0.4 s = 0.8
    _fake_proc_stat(monkeypatch, busy_ticks=(1000.0, 1150.0), total_ticks=(5000.0, 5200.0), own_cpu_s=(3.0, 3.4))
    assert threads.busy_cores({0, 1}, window_s=0.5) == pytest.approx(0.7)
    _fake_proc_stat(monkeypatch, busy_ticks=(0.0, 10.0), total_ticks=(0.0, 200.0), own_cpu_s=(0.0, 0.5))
    assert threads.busy_cores({0, 1}, window_s=0.5) == 0.0  # never below zero (ticks and rusage round apart)
    _fake_proc_stat(monkeypatch, busy_ticks=(0.0, 10.0), total_ticks=(100.0, 100.0), own_cpu_s=(0.0, 0.0))
    assert threads.busy_cores({0, 1}, window_s=0.5) is None  # no ticks passed: nothing measured


def test_busy_cores_reads_the_machine():
    cores = threads._allowed_cores()
    busy = threads.busy_cores(cores, window_s=0.05)
    assert busy is not None and 0.0 <= busy <= len(cores)
    assert threads.busy_cores({10**6}, window_s=0.0) is None  # no such core: nothing to measure


def test_at_most_caps_the_choice_not_the_user(machine, monkeypatch):
    machine.update(cores=16, busy=0.0)
    assert choose_cpu_threads(at_most=2).threads == 2
    assert not choose_cpu_threads(at_most=2).fewer_for_load
    assert choose_cpu_threads(5, at_most=2).threads == 5  # --threads is taken as given
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    assert choose_cpu_threads(at_most=2).threads == 7


def test_flag_then_environment_win_over_the_load(machine, monkeypatch):
    machine.update(cores=2, busy=2.0)
    assert choose_cpu_threads(3).threads == 3
    assert choose_cpu_threads(3).reason == "3 thread(s) as given"
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert choose_cpu_threads().threads == 4
    assert choose_cpu_threads(environ={"OMP_NUM_THREADS": "1"}).threads == 1
    for unusable in ("", "0", "two", "-1"):  # not a positive integer: the machine decides
        assert choose_cpu_threads(environ={"OMP_NUM_THREADS": unusable}).threads == 1


def test_no_proc_stat_uses_the_cores(machine):
    machine.update(cores=4, busy=None)
    assert choose_cpu_threads().threads == 4
    assert "use unknown" in choose_cpu_threads().reason


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_counts_name_the_argument(bad):
    with pytest.raises(ValueError, match="requested must be a positive int"):
        choose_cpu_threads(bad)
    with pytest.raises(ValueError, match="at_most must be a positive int"):
        choose_cpu_threads(None, at_most=bad)


def test_use_sets_torch_and_commands_apply_it(machine, monkeypatch, capsys):
    before = torch.get_num_threads()
    try:
        machine.update(cores=2, busy=2.0)
        assert use_cpu_threads().threads == 1
        assert torch.get_num_threads() == 1
        parser = cli.OneLineParser()
        cli.add_device_arguments(parser)
        seen = []
        assert cli.run_main(lambda a: seen.append(torch.get_num_threads()) or 0,
                            parser.parse_args(["--device", "cpu"])) == 0
        assert seen == [1]
        assert "note: 1 thread(s): 2 core(s) available, 2.00 kept busy by other processes" in capsys.readouterr().err
        machine.update(busy=0.0)
        cli.run_main(lambda a: seen.append(torch.get_num_threads()) or 0, parser.parse_args(["--device", "cpu"]))
        cli.run_main(lambda a: seen.append(torch.get_num_threads()) or 0,
                     parser.parse_args(["--device", "cpu", "--threads", "3"]))
        assert seen == [1, 2, 3]
        assert capsys.readouterr().err == ""  # nothing said when the load took nothing away
    finally:
        torch.set_num_threads(before)
