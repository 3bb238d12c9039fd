"""``serve``: the search as a small HTTP service and a page, on Flask.

Why Flask: the service is for local use (bound to 127.0.0.1 unless ``--host`` says otherwise); Flask is a
small, well-kept WSGI framework with no async layer to reason about, and the app is plain WSGI, so any WSGI
server runs it unchanged. :mod:`reference_models.videos.serving` runs it in gunicorn worker processes that share
the loaded model (``serve``'s default on the CPU where gunicorn is installed) or in one process with Werkzeug's
threaded server. In each process the model runs in one thread only (:class:`QueryBatcher`), so concurrent
requests never share the model.

Routes:

``POST /search``
    ``{"query": str, "k": int (default 5), "risk": float in (0, 1) (default 0.2)}`` -> the JSON of the
    ``search`` command (``{"answers": [ ... ]}``, one answer).
``GET /health``
    ``{"status": "ok", "videos": ..., "mode": "zero-shot" or "holmes-...", "calibrated": ..., "batching": ...}``.
``GET /videos/<id>/thumbnail?t=<seconds>``
    A JPEG keyframe of the video at ``t`` (the page asks for the middle of the matched moment), decoded from
    the gallery's own video file on demand and cached; ``<id>`` must be a video of the gallery.
``GET /``
    The page: a query box, the ranked videos with the thumbnail of their best moment, its span and score, and
    for the query the probability that the right video is among those shown (as a percentage, or "not
    calibrated"), the decision, and the query's type in words with one line on what it means. Everything it
    loads is served here.

Bad input gets a 4xx with ``{"error": "<one line>"}``: an empty or whitespace query, a query longer than
:data:`MAX_QUERY_CHARS`, ``k`` outside ``[1, videos]``, a risk outside (0, 1), a body that is not a JSON
object, an unknown video id or time; the service answers the next request as before.
"""

from __future__ import annotations

import io
import math
import os
import queue
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reference_models.videos.answers import Answer, Answerer
from reference_models.videos.gallery import GalleryFiles

__all__ = ["MAX_QUERY_CHARS", "QueryBatcher", "Thumbnails", "RequestError", "create_app", "check_search_request",
           "gallery_thumbnails"]

#: The longest query accepted (characters); CLIP's context keeps 77 tokens of it anyway.
MAX_QUERY_CHARS = 1000
_PAGE_FILES = {"page.js": "text/javascript", "page.css": "text/css"}
_STATIC = Path(__file__).resolve().parent / "static"


class RequestError(ValueError):
    """A request the service refuses: its HTTP status and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def check_search_request(body: Any, num_videos: int) -> tuple[str, int, float]:
    """``(query, k, risk)`` of a ``POST /search`` body, or :class:`RequestError` (400) naming the field."""
    if not isinstance(body, dict):
        raise RequestError(400, f"the body must be a JSON object with a query, got {type(body).__name__}")
    unknown = sorted(set(body) - {"query", "k", "risk"})
    if unknown:
        raise RequestError(400, f"unknown field(s) {', '.join(map(repr, unknown))}; expected query, k, risk")
    query = body.get("query")
    if not isinstance(query, str) or not query.strip():
        raise RequestError(400, f"query must be a non-empty string, got {query!r}"[:200])
    if len(query) > MAX_QUERY_CHARS:
        raise RequestError(400, f"query is {len(query)} characters long; at most {MAX_QUERY_CHARS}")
    k = body.get("k", 5)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= num_videos:
        raise RequestError(400, f"k must be an integer in [1, {num_videos}] (the gallery's videos), got {k!r}")
    risk = body.get("risk", 0.2)
    if isinstance(risk, bool) or not isinstance(risk, (int, float)) or not 0.0 < float(risk) < 1.0:
        raise RequestError(400, f"risk must be a number in (0, 1), got {risk!r}")
    return query.strip(), k, float(risk)


@dataclass
class _Pending:
    query: str
    k: int
    risk: float
    done: threading.Event = field(default_factory=threading.Event)
    answer: Answer | None = None
    error: BaseException | None = None


class QueryBatcher:
    """Answers queries from many threads with one model thread, batching queries that arrive together.

    A request waits at most ``window_s`` seconds for others; the queries then waiting (at most ``max_batch``)
    are answered by one :meth:`Answerer.answer` call per ``(k, risk)``, which encodes them together and
    shares one pass over the gallery. ``window_s=0`` batches only the queries already waiting.
    """

    def __init__(self, answerer: Answerer, *, window_s: float = 0.0, max_batch: int = 64) -> None:
        if not (window_s >= 0.0 and math.isfinite(window_s)):
            raise ValueError(f"window_s must be a finite number >= 0, got {window_s!r}")
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch!r}")
        self.answerer, self.window_s, self.max_batch = answerer, window_s, max_batch
        self._queue: queue.Queue[_Pending | None] = queue.Queue()
        self.batches = 0
        self.answered = 0
        self._thread = threading.Thread(target=self._run, name="video-search", daemon=True)
        self._thread.start()

    def answer(self, query: str, k: int, risk: float, timeout: float = 60.0) -> Answer:
        """The answer to one query (blocks until the model thread has answered it)."""
        pending = _Pending(query, k, risk)
        self._queue.put(pending)
        if not pending.done.wait(timeout):
            raise TimeoutError(f"no answer within {timeout:g} s")
        if pending.error is not None:
            raise pending.error
        assert pending.answer is not None
        return pending.answer

    def close(self) -> None:
        """Stop the model thread (after the queries already waiting)."""
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _collect(self, first: _Pending) -> tuple[list[_Pending], bool]:
        batch, deadline = [first], time.monotonic() + self.window_s
        while len(batch) < self.max_batch:
            wait = deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    def _run(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            if first is None:
                return
            batch, stop = self._collect(first)
            groups: dict[tuple[int, float], list[_Pending]] = {}
            for item in batch:
                groups.setdefault((item.k, item.risk), []).append(item)
            for (k, risk), items in groups.items():
                try:
                    answers = self.answerer.answer([p.query for p in items], k=k, risk=risk)
                except BaseException as exc:  # handed to each waiting request, never lost in this thread
                    for p in items:
                        p.error = exc
                        p.done.set()
                    continue
                for p, a in zip(items, answers):
                    p.answer = a
                    p.done.set()
                self.batches += 1
                self.answered += len(items)


class Thumbnails:
    """JPEG keyframes of the gallery's videos, decoded on demand with PyAV and kept in a bounded cache.

    Parameters
    ----------
    folder : path
        The ``--videos`` folder that ``index`` read (recorded in ``gallery.json``).
    files : dict
        Video id -> file name in ``folder`` (recorded by ``index``); only these files are ever read.
    durations : dict
        Video id -> duration in seconds.
    size : int
        Longest side of a thumbnail in pixels.
    capacity : int
        Thumbnails kept in memory.
    """

    def __init__(self, folder: str | Path, files: dict[str, str], durations: dict[str, float], *, size: int = 192,
                 capacity: int = 512) -> None:
        self.folder = Path(folder)
        self.files, self.durations = dict(files), dict(durations)
        self.size, self.capacity = size, capacity
        self._cache: OrderedDict[tuple[str, float], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, video_id: str, t: float) -> bytes:
        """The JPEG of ``video_id`` at ``t`` seconds (rounded to 0.1 s), or :class:`RequestError` (404/400)."""
        if video_id not in self.files:
            raise RequestError(404, f"no video {video_id!r} in this gallery"[:200])
        duration = self.durations.get(video_id, 0.0)
        if not (math.isfinite(t) and 0.0 <= t <= max(duration, 0.0) + 1e-6):
            raise RequestError(400, f"t must be a time in [0, {duration:g}] seconds for {video_id!r}, got {t!r}")
        key = (video_id, round(t, 1))
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        data = self._render(self.folder / self.files[video_id], key[1])
        with self._lock:
            self._cache[key] = data
            while len(self._cache) > self.capacity:
                self._cache.popitem(last=False)
        return data

    def _render(self, path: Path, t: float) -> bytes:
        import av

        try:
            with av.open(str(path)) as container:
                stream = container.streams.video[0]
                if stream.time_base is not None:
                    container.seek(int(t / float(stream.time_base)), stream=stream, backward=True, any_frame=False)
                chosen = None
                for frame in container.decode(stream):
                    chosen = frame
                    if frame.time is None or frame.time + 1e-6 >= t:
                        break
        except (av.FFmpegError, OSError, IndexError) as exc:
            raise RequestError(404, f"the video file of this id cannot be read now ({type(exc).__name__})") from None
        if chosen is None:
            raise RequestError(404, "the video file of this id has no frame at that time")
        image = chosen.to_image()
        image.thumbnail((self.size, self.size))
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=85)
        return buffer.getvalue()


def gallery_thumbnails(gallery: GalleryFiles) -> Thumbnails:
    """The :class:`Thumbnails` of a gallery, from what ``index`` recorded (folder, files, durations)."""
    from reference_models import engine

    times = engine.read_json_file(gallery.collection.feature_dir / "frame_times.json", "--gallery")
    folder = gallery.record["videos_folder"]
    files = {vid: entry["file"] for vid, entry in times.items() if "file" in entry}
    return Thumbnails(folder, files, {vid: float(entry["duration"]) for vid, entry in times.items()})


def create_app(batcher: QueryBatcher, thumbnails: Thumbnails, *, workers: int = 1) -> Any:
    """The Flask app of the service (see the module documentation); ``workers``: the processes serving it, for
    ``GET /health`` (:mod:`reference_models.videos.serving`)."""
    from flask import Flask, Response, jsonify, request
    from werkzeug.exceptions import HTTPException

    answerer = batcher.answerer
    app = Flask("video-search", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = 64 * 1024  # a query is at most 1,000 characters
    app.json.sort_keys = False  # type: ignore[attr-defined]
    started = time.time()

    def error(status: int, message: str) -> Any:
        return jsonify({"error": " ".join(str(message).split())}), status

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Any:
        return error(exc.code or 500, exc.description or exc.name)

    @app.errorhandler(RequestError)
    def request_error(exc: RequestError) -> Any:
        return error(exc.status, str(exc))

    @app.get("/")
    def page() -> Any:
        return Response((_STATIC / "index.html").read_bytes(), mimetype="text/html")

    @app.get("/static/<name>")
    def static_file(name: str) -> Any:
        if name not in _PAGE_FILES:  # a fixed list: no path from the request reaches the file system
            raise RequestError(404, f"no file {name!r}"[:200])
        return Response((_STATIC / name).read_bytes(), mimetype=_PAGE_FILES[name])

    @app.get("/health")
    def health() -> Any:
        return jsonify({"status": "ok", "videos": answerer.num_videos, "mode": answerer.mode,
                        "calibrated": answerer.calibrated, "uptime_s": round(time.time() - started, 1),
                        "batching": {"window_ms": 1e3 * batcher.window_s, "batches": batcher.batches,
                                     "answered": batcher.answered},
                        "server": {"workers": workers, "process": os.getpid()}})

    @app.post("/search")
    def search() -> Any:
        body = request.get_json(silent=True)
        if body is None:
            raise RequestError(400, "the body must be JSON (Content-Type: application/json), e.g. "
                                    '{"query": "a dog catches a frisbee", "k": 5, "risk": 0.2}')
        query, k, risk = check_search_request(body, answerer.num_videos)
        return jsonify({"answers": [batcher.answer(query, k, risk).to_dict()]})

    @app.get("/videos/<video_id>/thumbnail")
    def thumbnail(video_id: str) -> Any:
        try:
            t = float(request.args.get("t", "0"))
        except ValueError:
            raise RequestError(400, f"t must be a number of seconds, got {request.args.get('t')!r}"[:200]) from None
        data = thumbnails.get(video_id, t)
        response = Response(data, mimetype="image/jpeg")
        response.headers["Cache-Control"] = "max-age=3600"
        return response

    return app
