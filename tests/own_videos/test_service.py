"""Own videos, the service: every bad input gets a 4xx and one line and the next good query is answered; queries
batched across concurrent requests answer as one by one; a bounded load; the serve command stops by itself;
the page in headless Chromium, zero-shot and with a trained checkpoint, from the keyboard: the expected video
first, the calibrated percentage beside the decision, the query type in words, and "not calibrated" where the
gallery has no held-out captions."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

av = pytest.importorskip("av", reason="the video extra (av) is not installed")
open_clip = pytest.importorskip("open_clip", reason="the video extra (open_clip_torch) is not installed")
flask = pytest.importorskip("flask", reason="the video extra (flask) is not installed")

from werkzeug.serving import make_server  # noqa: E402

from reference_models.videos.answers import Answerer  # noqa: E402
from reference_models.videos.generated import GENERIC_CAPTIONS  # noqa: E402
from reference_models.videos.service import QueryBatcher, create_app, gallery_thumbnails  # noqa: E402
from tests.own_videos.helpers import cli_env, held_out_captions  # noqa: E402


@contextlib.contextmanager
def _serving(answerer: Answerer) -> Iterator[dict[str, Any]]:
    """The app of ``answerer`` on a free loopback port in a thread, stopped at the end."""
    batcher = QueryBatcher(answerer, window_s=0.005)
    app = create_app(batcher, gallery_thumbnails(answerer.gallery))
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {"port": server.server_port, "batcher": batcher, "searcher": answerer}
    finally:
        server.shutdown()
        thread.join(timeout=10)
        batcher.close()


@pytest.fixture(scope="module")
def service(gallery: dict[str, Path]) -> Iterator[dict[str, Any]]:
    """The zero-shot service of the calibrated gallery, for the module's tests."""
    with _serving(Answerer(gallery["root"])) as served:
        yield served


def _request(port: int, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, bytes, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read(), response.getheader("Content-Type", "")
    finally:
        conn.close()


def _search(port: int, payload: Any) -> tuple[int, Any]:
    status, data, _ = _request(port, "POST", "/search", json.dumps(payload).encode(),
                               {"Content-Type": "application/json"})
    return status, json.loads(data)


def test_every_bad_input_gets_a_4xx_with_one_line_and_the_service_keeps_answering(service: dict[str, Any]) -> None:
    port, videos = service["port"], service["searcher"].num_videos
    bad_searches = [
        ({"query": ""}, "query must be a non-empty string"),
        ({"query": "   \t "}, "query must be a non-empty string"),
        ({"query": "a" * 10_000}, "query is 10000 characters long; at most 1000"),
        ({"query": "a red circle", "k": 0}, "k must be an integer in [1, 120]"),
        ({"query": "a red circle", "k": videos + 1}, "k must be an integer in [1, 120]"),
        ({"query": "a red circle", "k": "5"}, "k must be an integer"),
        ({"query": "a red circle", "risk": 0}, "risk must be a number in (0, 1)"),
        ({"query": "a red circle", "risk": 1.5}, "risk must be a number in (0, 1)"),
        ({"query": "a red circle", "top": 3}, "unknown field(s) 'top'"),
        (["a red circle"], "the body must be a JSON object"),
    ]
    for payload, message in bad_searches:
        status, body = _search(port, payload)
        assert status == 400, (payload, status, body)
        assert message in body["error"] and "\n" not in body["error"], (payload, body)
    status, data, _ = _request(port, "POST", "/search", b'{"query": "a red', {"Content-Type": "application/json"})
    assert status == 400 and "the body must be JSON" in json.loads(data)["error"]
    for path, expected in [("/videos/no-such-video/thumbnail", 404), ("/videos/..%2F..%2Fetc%2Fpasswd/thumbnail", 404),
                           ("/videos/../../etc/passwd/thumbnail", 404), ("/videos/video0000/thumbnail?t=99", 400),
                           ("/videos/video0000/thumbnail?t=nan", 400), ("/videos/video0000/thumbnail?t=x", 400),
                           ("/static/..%2Fservice.py", 404), ("/static/service.py", 404), ("/nothing", 404)]:
        status, data, kind = _request(port, "GET", path)
        assert status == expected, (path, status, data[:200])
        assert kind.startswith("application/json") and "error" in json.loads(data), (path, data[:200])
    status, data, _ = _request(port, "GET", "/search")
    assert status == 405
    # and it still answers
    status, body = _search(port, {"query": "a blue square moves up", "k": 3, "risk": 0.5})
    assert status == 200 and len(body["answers"][0]["results"]) == 3
    status, data, kind = _request(port, "GET", "/health")
    health = json.loads(data)
    assert status == 200 and health["status"] == "ok" and health["mode"] == "zero-shot" and health["calibrated"]


def test_thumbnails_and_page_are_served_from_the_gallery_and_the_package(service: dict[str, Any]) -> None:
    port = service["port"]
    status, data, kind = _request(port, "GET", "/videos/video0003/thumbnail?t=1.5")
    assert status == 200 and kind == "image/jpeg" and data[:2] == b"\xff\xd8"
    status, page, kind = _request(port, "GET", "/")
    assert status == 200 and kind.startswith("text/html")
    html = page.decode()
    assert "http://" not in html and "https://" not in html  # no external resource
    for name in ("page.js", "page.css"):
        status, _, kind = _request(port, "GET", f"/static/{name}")
        assert status == 200, name


def test_concurrent_queries_are_batched_and_answered_as_one_by_one(service: dict[str, Any]) -> None:
    port, searcher, batcher = service["port"], service["searcher"], service["batcher"]
    queries = [s for _, s in held_out_captions(searcher.root)[:24]]
    alone = {q: [h.video for h in searcher.answer([q], k=5, risk=0.3)[0].results] for q in queries}
    before = (batcher.batches, batcher.answered)
    with ThreadPoolExecutor(max_workers=12) as pool:
        replies = list(pool.map(lambda q: _search(port, {"query": q, "k": 5, "risk": 0.3}), queries * 4))
    assert all(status == 200 for status, _ in replies)
    for q, (_, body) in zip(queries * 4, replies):
        assert [h["video"] for h in body["answers"][0]["results"]] == alone[q]
    batches, answered = batcher.batches - before[0], batcher.answered - before[1]
    assert answered == 96 and batches < answered  # some requests shared a batch


def test_a_bounded_load_has_no_error(service: dict[str, Any]) -> None:
    port = service["port"]
    queries = [s for _, s in held_out_captions(service["searcher"].root)]
    statuses = []
    with ThreadPoolExecutor(max_workers=16) as pool:
        for status, _ in pool.map(lambda i: _search(port, {"query": queries[i % len(queries)], "k": 5}), range(200)):
            statuses.append(status)
    assert statuses == [200] * 200


def test_the_serve_command_binds_loopback_and_stops_after_n_requests(gallery: dict[str, Path]) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "reference_models.videos", "serve", "--gallery",
                             str(gallery["root"]), "--port", "0", "--stop-after", "2", "--threads", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**cli_env(), "OMP_NUM_THREADS": "1"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "(zero-shot) on http://127.0.0.1:" in line, line + (proc.stderr.read() if proc.stderr else "")
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        assert _request(port, "GET", "/health")[0] == 200
        assert _search(port, {"query": "a red circle moves left"})[0] == 200
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _children(pid: int) -> set[int]:
    """The processes ``pid`` started (Linux's /proc)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(c) for c in (task / "children").read_text().split())
    return found


def test_worker_processes_answer_as_one_process_does_and_stop_by_themselves(service: dict[str, Any]) -> None:
    from reference_models.videos.serving import gunicorn_available

    if not gunicorn_available():
        pytest.skip("gunicorn is not installed (it runs on Linux and macOS: pip install gunicorn)")
    searcher = service["searcher"]
    queries = [s for _, s in held_out_captions(searcher.root)[:20]]
    expected = {q: [h.video for h in a.results] for q, a in zip(queries, searcher.answer(queries, k=5, risk=0.3))}
    requests = 2 * len(queries)
    proc = subprocess.Popen([sys.executable, "-m", "reference_models.videos", "serve", "--gallery", str(searcher.root),
                             "--port", "0", "--workers", "2", "--worker-threads", "4", "--threads", "2",
                             "--stop-after", str(requests + 1)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**cli_env(), "OMP_NUM_THREADS": "2"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "(zero-shot) on http://127.0.0.1:" in line and "with 2 worker processes" in line, (
            line + (proc.stderr.read() if proc.stderr else ""))
        port = int(line.split("http://127.0.0.1:", 1)[1].split("/")[0])
        deadline = time.monotonic() + 60  # the socket listens first; then the master forks the workers
        while len(_children(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = _children(proc.pid)
        assert len(workers) == 2  # forked once the model and the index were loaded
        status, data, _ = _request(port, "GET", "/health")
        health = json.loads(data)
        assert status == 200 and health["server"]["workers"] == 2 and health["server"]["process"] in workers
        with ThreadPoolExecutor(max_workers=8) as pool:
            replies = list(pool.map(lambda q: _search(port, {"query": q, "k": 5, "risk": 0.3}), queries * 2))
        for q, (status, body) in zip(queries * 2, replies):
            assert status == 200 and [h["video"] for h in body["answers"][0]["results"]] == expected[q], q
        assert proc.wait(timeout=60) == 0  # it stopped by itself after the last request
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_service_uses_a_worker_per_cpu_thread_where_it_can() -> None:
    import argparse

    from reference_models import engine
    from reference_models.videos.cli import _serve_workers

    def workers(device: str, given: int | None, gunicorn: bool) -> int:
        return _serve_workers(argparse.Namespace(device=device, workers=given), 2, gunicorn)

    assert workers("cpu", None, True) == 2 and workers("cpu", None, False) == 1 and workers("cuda", None, True) == 1
    assert workers("cpu", 1, True) == 1 and workers("cpu", 3, True) == 3
    with pytest.raises(engine.UserError, match="--workers 2 with --device cuda: the worker processes are forked"):
        workers("cuda", 2, True)


def test_worker_processes_need_gunicorn(gallery: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    from reference_models.videos import serving
    from reference_models.videos.cli import main

    monkeypatch.setattr(serving, "gunicorn_available", lambda: False)
    assert main(["serve", "--gallery", str(gallery["root"]), "--workers", "2"]) == 2
    assert "error: --workers 2 needs gunicorn (Linux or macOS)" in capsys.readouterr().err


# --- the page in a real browser -----------------------------------------------------------------------
def _chromium() -> Any:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not binary or not driver_path:
        pytest.skip("Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1000,1100",
                 "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.binary_location = binary
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(60)
    return driver


def _ask(driver: Any, text: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    driver.execute_script("document.body.dataset.state = ''")
    box = driver.find_element(By.ID, "query")
    box.clear()
    box.send_keys(text, Keys.ENTER)  # the keyboard alone
    WebDriverWait(driver, 60).until(lambda d: d.execute_script("return document.body.dataset.state") == "done")


def _open_page(driver: Any, port: int, risk: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"http://127.0.0.1:{port}/")
    box = driver.find_element(By.ID, "query")
    assert driver.switch_to.active_element == box  # the query box has the focus: type at once
    WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "mode").text != "")
    field = driver.find_element(By.ID, "risk")
    field.clear()
    field.send_keys(risk)
    box.click()


def _ranked_right(searcher: Answerer) -> tuple[str, str]:
    """A held-out caption (not a generic one) whose video the search ranks first: what the page must show first."""
    captions = [(cid.split("#")[0], s) for cid, s in held_out_captions(searcher.root) if s not in GENERIC_CAPTIONS]
    answers = searcher.answer([s for _, s in captions], k=5, risk=0.5)
    found = next(((vid, s) for (vid, s), a in zip(captions, answers) if a.results[0].video == vid), None)
    assert found is not None, "no held-out caption ranked first: the search tests report the recall"
    return found


@pytest.mark.timeout(900)  # the trained mode may run the session's training (conftest.trained)
@pytest.mark.parametrize("mode", ["zero-shot", "trained"])
def test_the_page_in_chromium_shows_the_expected_video_first_and_the_calibrated_chance(
        mode: str, service: dict[str, Any], request: pytest.FixtureRequest, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver = _chromium()
    try:
        with contextlib.ExitStack() as stack:
            if mode == "zero-shot":
                served = service
            else:
                checkpoint = request.getfixturevalue("trained")
                served = stack.enter_context(_serving(Answerer(service["searcher"].root, checkpoint=checkpoint)))
            searcher = served["searcher"]
            video, caption = _ranked_right(searcher)
            _open_page(driver, served["port"], "0.5")
            expected_mode = "zero-shot" if mode == "zero-shot" else "trained checkpoint"
            assert expected_mode in driver.find_element(By.ID, "mode").text
            assert "calibrated on held-out captions" in driver.find_element(By.ID, "mode").text
            _ask(driver, caption)
            items = driver.find_elements(By.CSS_SELECTOR, "#results li")
            assert len(items) == 5 and items[0].get_attribute("data-video") == video
            assert "moment" in items[0].text and " s" in items[0].text and "score" in items[0].text
            verdict = driver.find_element(By.ID, "verdict")
            answer = searcher.answer([caption], k=5, risk=0.5)[0]
            shown = f"{round(100 * answer.probability)} % chance that the right video is among these 5"
            if 0.005 <= answer.probability < 0.995:
                assert shown in verdict.text, verdict.text
            assert verdict.text.split(":")[0] == ("Answer" if answer.decision == "answer" else "Rephrase")
            assert float(verdict.get_attribute("data-probability")) == pytest.approx(answer.probability)
            kind = driver.find_element(By.ID, "query-type").text
            assert kind.startswith("Query type: ") and answer.query_type_meaning in kind, kind
            WebDriverWait(driver, 30).until(lambda d: d.execute_script(
                "return [...document.querySelectorAll('#results img')].every(i => i.complete && i.naturalWidth > 0)"))
            if mode == "zero-shot":
                shot = Path(os.environ.get("OWN_VIDEOS_SCREENSHOT", tmp_path / "page.png"))
                driver.save_screenshot(str(shot))
                assert shot.stat().st_size > 10_000
                generic = next(s for _, s in held_out_captions(searcher.root) if s in GENERIC_CAPTIONS)
                _ask(driver, generic)
                assert driver.find_element(By.ID, "verdict").text.split(":")[0] in ("Answer", "Rephrase")
    finally:
        driver.quit()


def test_the_page_of_an_uncalibrated_gallery_says_not_calibrated(uncalibrated: Path) -> None:
    from selenium.webdriver.common.by import By

    driver = _chromium()
    try:
        with _serving(Answerer(uncalibrated)) as served:
            _open_page(driver, served["port"], "0.2")
            assert "not calibrated" in driver.find_element(By.ID, "mode").text
            _ask(driver, "a red circle")
            verdict = driver.find_element(By.ID, "verdict").text
            assert verdict.startswith("Not calibrated:") and "%" not in verdict, verdict
            assert len(driver.find_elements(By.CSS_SELECTOR, "#results li")) == 5
    finally:
        driver.quit()
