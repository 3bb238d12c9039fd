"""Open the built documentation in a headless Chromium and check what a reader sees.

Usage (after ``python -m sphinx ... -b html docs docs/_build/html``)::

    python .ci/check_docs_browser.py docs/_build/html

The pages are served on 127.0.0.1 (an ephemeral port, no other host) and opened with Selenium in Chromium
(Debian's ``chromium`` and ``chromium-driver``). On every page it checks that

* every piece of math was typeset by MathJax (no ``\\(...\\)`` or ``\\[...\\]`` left as raw TeX), and that
  MathJax came from the site itself (``_static/mathjax``), not from a CDN;
* no code block is cut: a block wider than its column can be scrolled (``overflow-x`` is ``auto`` or
  ``scroll``), and the text column is at least 600 CSS pixels wide in a 1280-pixel window.

Exits 1 with one line per failure. Without Chromium or its driver it says so and exits 0 only when
``--allow-missing`` is given (a developer's machine); CI installs both.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import sys
import threading
from pathlib import Path

PAGES = (  # the pages with the most math and the longest code blocks
    "index.html",
    "guide/flexible_ot.html",
    "guide/reference_model.html",
    "api/functional.html",
    "api/inter_video.html",
    "api/probabilistic.html",
    "equation_map.html",
)
MIN_COLUMN_PX = 600

_PAGE_STATE = """
const done = window.MathJax && MathJax.startup ? MathJax.startup.promise : Promise.resolve();
const callback = arguments[arguments.length - 1];
done.then(() => {
  const raw = [...document.querySelectorAll('span.math, div.math')]
    .filter(e => !e.querySelector('mjx-container'))
    .map(e => e.textContent.trim().slice(0, 60));
  const scripts = [...document.querySelectorAll('script[src]')].map(s => s.src).filter(s => /mathjax/i.test(s));
  const cut = [...document.querySelectorAll('div.highlight pre')]
    .filter(p => p.scrollWidth > p.clientWidth + 1)
    .filter(p => !['auto', 'scroll'].includes(getComputedStyle(p).overflowX)
                 && !['auto', 'scroll'].includes(getComputedStyle(p.parentElement).overflowX))
    .map(p => p.textContent.trim().split('\\n')[0].slice(0, 60));
  const article = document.querySelector('article') || document.querySelector('div.body') || document.body;
  callback({raw: raw, scripts: scripts, cut: cut, column: article.getBoundingClientRect().width,
            hasMath: document.querySelectorAll('span.math, div.math').length});
}).catch(e => callback({error: String(e)}));
"""


def _serve(root: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


def _driver():  # type: ignore[no-untyped-def]
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900",
                 "--disable-dev-shm-usage"):
        options.add_argument(flag)
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary:
        options.binary_location = binary
    driver_path = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    return driver


def check(root: Path, pages: tuple[str, ...]) -> list[str]:
    """The failures found on ``pages`` of the site built in ``root``."""
    failures: list[str] = []
    server, base = _serve(root)
    driver = _driver()
    try:
        for page in pages:
            if not (root / page).is_file():
                failures.append(f"{page}: not built")
                continue
            driver.get(base + page)
            state = driver.execute_async_script(_PAGE_STATE)
            if "error" in state:
                failures.append(f"{page}: MathJax failed: {state['error']}")
                continue
            failures += [f"{page}: math left as raw TeX: {text!r}" for text in state["raw"]]
            failures += [f"{page}: MathJax loaded from outside the site: {src}" for src in state["scripts"]
                         if not src.startswith(base)]
            if state["hasMath"] and not state["scripts"]:
                failures.append(f"{page}: has math but loads no MathJax")
            failures += [f"{page}: code block cut at the column: {first!r}" for first in state["cut"]]
            if state["column"] < MIN_COLUMN_PX:
                failures.append(f"{page}: text column {state['column']:.0f} px wide (< {MIN_COLUMN_PX})")
            print(f"{page}: {state['hasMath']} math element(s) typeset, column {state['column']:.0f} px, "
                  f"{len(state['cut'])} cut code block(s)")
    finally:
        driver.quit()
        server.shutdown()
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path, help="the built site (sphinx -b html's output folder)")
    parser.add_argument("--allow-missing", action="store_true", help="exit 0 when Chromium is not installed")
    args = parser.parse_args(argv)
    if not (shutil.which("chromium") or shutil.which("chromium-browser")) or not shutil.which("chromedriver"):
        print("check_docs_browser: chromium and chromium-driver are not installed", file=sys.stderr)
        return 0 if args.allow_missing else 1
    failures = check(args.html, PAGES)
    for failure in failures:
        print(f"check_docs_browser: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
