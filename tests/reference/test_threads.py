"""The CPU thread count of the commands: as given, from OMP_NUM_THREADS, else the cores less the others' load."""

from __future__ import annotations

import math

import pytest
import torch

from reference_models.engine import cli, threads
from reference_models.engine.threads import choose_cpu_threads, own_load, use_cpu_threads


@pytest.fixture
def machine(monkeypatch):
    """A machine whose cores this process may use and whose load average the test sets."""
    state = {"cores": 2, "load": 0.0, "own": 0.0, "busy": 0.0}
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: set(range(state["cores"])))
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (state["load"], 0.0, 0.0))
    monkeypatch.setattr(threads, "own_load", lambda: state["own"])
    monkeypatch.setattr(threads, "busy_cores", lambda cores: state["busy"])
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    return state


@pytest.mark.parametrize(("cores", "load", "own", "expected"), [
    (2, 0.0, 0.0, 2),    # idle: every core
    (2, 2.0, 0.0, 1),    # one other two-thread job: one thread, never zero
    (2, 6.0, 0.0, 1),    # heavily loaded: still one
    (2, 1.3, 1.0, 2),    # the load is this process's own: not counted
    (8, 3.0, 0.0, 5),    # cores less the others' load
    (8, 2.6, 0.0, 5),    # rounded to whole cores
    (8, 2.4, 0.0, 6),
    (1, 0.0, 0.0, 1),    # one core in the affinity mask (taskset, a container's CPU set)
])
def test_cores_less_the_load(machine, cores, load, own, expected):
    machine.update(cores=cores, load=load, own=own)
    choice = choose_cpu_threads()
    assert choice.threads == expected
    assert choice.fewer_for_load == (expected < cores)
    assert f"{cores} core(s)" in choice.reason


def test_a_job_that_just_started_counts_before_the_load_average_sees_it(machine):
    machine.update(cores=2, load=0.1, busy=1.9)  # the one-minute average still near zero, both cores busy now
    assert choose_cpu_threads().threads == 1
    machine.update(cores=2, load=2.0, busy=0.0)  # and the other way round: the larger of the two counts
    assert choose_cpu_threads().threads == 1


def test_busy_cores_reads_the_machine():
    cores = threads._allowed_cores()
    busy = threads.busy_cores(cores, window_s=0.05)
    assert busy is not None and 0.0 <= busy <= len(cores)
    assert threads.busy_cores({10**6}, window_s=0.0) is None  # no such core: nothing to measure


def test_at_most_caps_the_choice_not_the_user(machine, monkeypatch):
    machine.update(cores=16, load=0.0)
    assert choose_cpu_threads(at_most=2).threads == 2
    assert not choose_cpu_threads(at_most=2).fewer_for_load
    assert choose_cpu_threads(5, at_most=2).threads == 5  # --threads is taken as given
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    assert choose_cpu_threads(at_most=2).threads == 7


def test_flag_then_environment_win_over_the_load(machine, monkeypatch):
    machine.update(cores=2, load=9.0)
    assert choose_cpu_threads(3).threads == 3
    assert choose_cpu_threads(3).reason == "3 thread(s) as given"
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert choose_cpu_threads().threads == 4
    assert choose_cpu_threads(environ={"OMP_NUM_THREADS": "1"}).threads == 1
    for unusable in ("", "0", "two", "-1"):  # not a positive integer: the machine decides
        assert choose_cpu_threads(environ={"OMP_NUM_THREADS": unusable}).threads == 1


def test_no_load_average_uses_the_cores(machine, monkeypatch):
    def unavailable():
        raise OSError("no load average")

    monkeypatch.setattr(threads.os, "getloadavg", unavailable)
    machine.update(cores=4, busy=None)
    assert choose_cpu_threads().threads == 4
    assert "load unknown" in choose_cpu_threads().reason
    machine.update(busy=3.0)  # only /proc/stat answers
    assert choose_cpu_threads().threads == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_counts_name_the_argument(bad):
    with pytest.raises(ValueError, match="requested must be a positive int"):
        choose_cpu_threads(bad)
    with pytest.raises(ValueError, match="at_most must be a positive int"):
        choose_cpu_threads(None, at_most=bad)


def test_own_load_follows_the_one_minute_average():
    # a process that kept one thread busy for a minute has 1 - 1/e of a thread in the one-minute average
    assert own_load(cpu_s=60.0, age_s=60.0) == pytest.approx(1 - math.exp(-1))
    assert own_load(cpu_s=600.0, age_s=300.0) == pytest.approx(2 * (1 - math.exp(-5)))  # two threads, long run
    assert own_load(cpu_s=0.0, age_s=10.0) == 0.0
    assert own_load(cpu_s=1.0, age_s=0.0) == 0.0
    assert 0.0 <= own_load() < len(threads.os.sched_getaffinity(0)) + 1  # this process, read from /proc


def test_use_sets_torch_and_commands_apply_it(machine, monkeypatch, capsys):
    before = torch.get_num_threads()
    try:
        machine.update(cores=2, load=2.0)
        assert use_cpu_threads().threads == 1
        assert torch.get_num_threads() == 1
        parser = cli.OneLineParser()
        cli.add_device_arguments(parser)
        seen = []
        assert cli.run_main(lambda a: seen.append(torch.get_num_threads()) or 0,
                            parser.parse_args(["--device", "cpu"])) == 0
        assert seen == [1]
        assert "note: 1 thread(s): 2 core(s) available, load 2.00 from other processes" in capsys.readouterr().err
        machine.update(load=0.0)
        cli.run_main(lambda a: seen.append(torch.get_num_threads()) or 0, parser.parse_args(["--device", "cpu"]))
        cli.run_main(lambda a: seen.append(torch.get_num_threads()) or 0,
                     parser.parse_args(["--device", "cpu", "--threads", "3"]))
        assert seen == [1, 2, 3]
        assert capsys.readouterr().err == ""  # nothing said when the load took nothing away
    finally:
        torch.set_num_threads(before)
