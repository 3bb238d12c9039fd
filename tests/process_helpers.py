"""Multi-process tests that cannot hang: workers joined with a wall-clock limit, loopback ports."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch.multiprocessing as mp


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_processes(worker: Callable[..., None], args: tuple[Any, ...], nprocs: int, limit_s: float) -> None:
    """``worker(rank, *args)`` in ``nprocs`` spawned processes, joined within ``limit_s`` seconds.

    A worker's exception fails the test with its traceback (``torch.multiprocessing``'s error); a worker
    still running at the limit fails it with the ranks that did not finish, and every worker is killed:
    the suite never waits on a stuck process.
    """
    context = mp.start_processes(worker, args=args, nprocs=nprocs, join=False, start_method="spawn")
    deadline = time.monotonic() + limit_s
    try:
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                alive = [rank for rank, process in enumerate(context.processes) if process.is_alive()]
                pytest.fail(f"rank(s) {alive} of {nprocs} processes still running after the {limit_s:g} s limit "
                            f"(a hang: the processes were killed)")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
        for process in context.processes:
            process.join(10)
