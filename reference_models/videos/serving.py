"""How ``serve`` serves the app of :mod:`reference_models.videos.service`: one process, or worker processes.

:func:`serve_one_process`
    Werkzeug's threaded server in this process: every request has a thread, and one model thread
    (:class:`~reference_models.videos.service.QueryBatcher`) answers the queries waiting together, with all of
    the process's CPU threads. Runs wherever Python does.
:func:`serve_worker_processes`
    `gunicorn <https://gunicorn.org>`_ (Linux and macOS) with ``workers`` processes forked from this one after the
    answerer is loaded (``preload_app``): the model and the saved search index are loaded once, and the
    workers share their memory read-only (copy-on-write pages that nobody writes). Each worker takes
    ``worker_threads`` requests at once (gunicorn's ``gthread`` workers) and batches their queries with a model
    thread of its own, on its share of the CPU threads.

GNU OpenMP, which torch's CPU kernels use, cannot start a team of threads in a process forked after the parent
ran one: :func:`serve_worker_processes` therefore needs an answerer loaded with one torch thread
(``torch.set_num_threads(1)`` before it is created, as ``serve`` does), and gives each worker its own count
after the fork.

Both stop on Ctrl-C, or by themselves after ``stop_after`` requests (scripted trials, the tests).

``serve`` uses worker processes by default on the CPU where gunicorn is installed (one per CPU thread, one thread
each): at 10,000 videos on two cores they held more load than the one process (``benchmarks/serve_load.py``;
``docs/guide/larger_collections.rst``), since each has its own interpreter lock for the Python work of its requests
while the other's model computes. On a GPU the one process serves (a GPU's runtime cannot be used in a process
forked after it started), and so it does where gunicorn is not installed (Windows).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import torch

from reference_models import engine
from reference_models.videos.answers import Answerer
from reference_models.videos.service import QueryBatcher, Thumbnails, create_app

__all__ = ["serve_one_process", "serve_worker_processes", "gunicorn_available"]


def gunicorn_available() -> bool:
    """Whether gunicorn can be imported here (it runs on Linux and macOS, not on Windows)."""
    try:
        import gunicorn  # noqa: F401
    except ImportError:
        return False
    return True


def serve_one_process(answerer: Answerer, thumbnails: Thumbnails, *, host: str = "127.0.0.1", port: int = 8000,
                      window_s: float = 0.0, max_batch: int = 64, stop_after: int | None = None,
                      announce: Callable[[int], None] | None = None) -> None:
    """Serve in this process with Werkzeug's threaded server until Ctrl-C or ``stop_after`` requests.

    ``announce`` is called with the port (the one chosen when ``port`` is 0) once the socket listens.
    """
    from werkzeug.serving import make_server

    batcher = QueryBatcher(answerer, window_s=window_s, max_batch=max_batch)
    app = create_app(batcher, thumbnails)
    try:
        server = make_server(host, port, app, threaded=True)
    except OSError as exc:
        batcher.close()
        raise engine.UserError(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc})") from None
    if stop_after:
        served = {"n": 0}

        @app.after_request
        def count(response: Any) -> Any:
            served["n"] += 1
            if served["n"] >= stop_after:
                threading.Thread(target=server.shutdown, daemon=True).start()
            return response

    if announce is not None:
        announce(server.server_port)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        batcher.close()


class _WorkerApp:
    """The WSGI app of one gunicorn worker: loaded (preloaded) in the parent, started in each worker after the
    fork, so that the model thread of :class:`QueryBatcher` and the torch threads belong to the worker."""

    def __init__(self, answerer: Answerer, thumbnails: Thumbnails, *, window_s: float, max_batch: int,
                 torch_threads: int, stop_after: int | None, workers: int) -> None:
        self.answerer, self.thumbnails = answerer, thumbnails
        self.window_s, self.max_batch, self.torch_threads = window_s, max_batch, torch_threads
        self.stop_after, self.workers = stop_after, workers
        self.served: Any = multiprocessing.Value("q", 0) if stop_after else None  # shared by the workers
        self.app: Any = None

    def start(self) -> None:
        """In a worker, right after the fork: its torch threads, its model thread, its Flask app."""
        torch.set_num_threads(self.torch_threads)
        self.app = create_app(QueryBatcher(self.answerer, window_s=self.window_s, max_batch=self.max_batch),
                              self.thumbnails, workers=self.workers)
        if self.served is not None:
            self.app.after_request(self._count)

    def _count(self, response: Any) -> Any:
        with self.served.get_lock():
            self.served.value += 1
            last = self.served.value == self.stop_after
        if last:  # gunicorn's master stops gracefully on SIGTERM: the workers finish the requests in hand
            os.kill(os.getppid(), signal.SIGTERM)
        return response

    def __call__(self, environ: Any, start_response: Any) -> Any:
        return self.app(environ, start_response)


def serve_worker_processes(answerer: Answerer, thumbnails: Thumbnails, *, workers: int, host: str = "127.0.0.1",
                           port: int = 8000, worker_threads: int = 16, torch_threads: int = 1,
                           window_s: float = 0.0, max_batch: int = 64, stop_after: int | None = None,
                           announce: Callable[[int], None] | None = None) -> None:
    """Serve with gunicorn's ``workers`` processes until Ctrl-C or ``stop_after`` requests (see the module
    documentation); each worker uses ``torch_threads`` CPU threads and takes ``worker_threads`` requests at once."""
    if not gunicorn_available():
        raise engine.UserError("--workers above 1 needs gunicorn (Linux or macOS): pip install gunicorn, or serve "
                               "in one process with --workers 1")
    from gunicorn.app.base import BaseApplication

    if workers < 1 or worker_threads < 1 or torch_threads < 1:
        raise ValueError(f"workers, worker_threads and torch_threads must be >= 1, got {workers}, {worker_threads}, "
                         f"{torch_threads}")
    app = _WorkerApp(answerer, thumbnails, window_s=window_s, max_batch=max_batch, torch_threads=torch_threads,
                     stop_after=stop_after, workers=workers)

    def when_ready(server: Any) -> None:
        if announce is not None:
            announce(server.LISTENERS[0].sock.getsockname()[1])

    options: dict[str, Any] = {
        "bind": f"[{host}]:{port}" if ":" in host else f"{host}:{port}", "workers": workers,
        "worker_class": "gthread", "threads": worker_threads, "preload_app": True, "timeout": 300,
        "graceful_timeout": 30, "loglevel": "warning", "accesslog": None, "when_ready": when_ready,
        "post_fork": lambda server, worker: app.start(), "proc_name": "prvr-videos-serve"}

    class Service(BaseApplication):
        def load_config(self) -> None:
            for key, value in options.items():
                self.cfg.set(key, value)
            if "control_socket_disable" in self.cfg.settings:  # gunicorn >= 25.1: no socket under $HOME
                self.cfg.set("control_socket_disable", True)

        def load(self) -> Any:
            return app

    try:
        Service().run()
    except SystemExit as exc:  # gunicorn's master ends with sys.exit: 0 after a stop
        if exc.code not in (0, None):
            raise engine.UserError(f"--host {host} --port {port}: gunicorn stopped with status {exc.code} (its "
                                   "lines above say why)") from None
