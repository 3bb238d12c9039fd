"""Every Python code block of README.md and of the guide pages runs as written.

Blocks are ```` ```python ```` fences in Markdown and ``.. code-block:: python`` (or ``.. code::
python``) directives in reStructuredText. The blocks of one document run in order in one namespace, as a
reader would paste them, in a fresh temporary working directory per document. A block whose first line
is ``# not runnable: <reason>`` is skipped; the reason is shown with the code, so readers see it too.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide"
NOT_RUNNABLE = "# not runnable:"

# README blocks that do not run yet, keyed by a fragment of their code, with the reason (none today).
# Each entry is a strict xfail, so the test fails once the block runs and the entry must then be removed.
README_KNOWN_FAILURES: dict[str, str] = {}


@dataclass(frozen=True)
class CodeBlock:
    path: Path
    line: int  # 1-based line of the block's first code line in the file
    code: str

    @property
    def label(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w+-]*)\s*$")
_DIRECTIVE = re.compile(r"^(?P<indent> *)\.\. (?:code-block|code|sourcecode)::\s*(?P<lang>\S+)\s*$")


def markdown_blocks(path: Path) -> list[CodeBlock]:
    """The ```` ```python ```` fences of a Markdown file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match or not match["lang"]:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith("```"):
            end += 1
        if match["lang"].lower() in ("python", "py", "python3"):
            blocks.append(CodeBlock(path, i + 2, textwrap.dedent("\n".join(lines[i + 1 : end]))))
        i = end + 1
    return blocks


def rst_blocks(path: Path) -> list[CodeBlock]:
    """The ``.. code-block:: python`` directives of a reStructuredText file (options skipped)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        match = _DIRECTIVE.match(lines[i])
        i += 1
        if not match or match["lang"].lower() not in ("python", "py", "python3"):
            continue
        indent = len(match["indent"])
        while i < len(lines) and lines[i].strip().startswith(":") and lines[i].strip():  # directive options
            i += 1
        start = i
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            i += 1
        body = lines[start:i]
        while body and not body[0].strip():
            body, start = body[1:], start + 1
        blocks.append(CodeBlock(path, start + 1, textwrap.dedent("\n".join(body)).rstrip() + "\n"))
    return blocks


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted(GUIDE.glob("*.rst"))]


def blocks_of(path: Path) -> list[CodeBlock]:
    return markdown_blocks(path) if path.suffix == ".md" else rst_blocks(path)


def _params():
    params = []
    for path in documents():
        for index, block in enumerate(blocks_of(path)):
            marks = []
            if path.name == "README.md":
                for fragment, reason in README_KNOWN_FAILURES.items():
                    if fragment in block.code:
                        marks.append(pytest.mark.xfail(strict=True, reason=f"README: {reason}"))
            params.append(pytest.param(path, index, id=block.label, marks=marks))
    return params


def _run(block: CodeBlock, namespace: dict) -> None:
    if block.code.lstrip().startswith(NOT_RUNNABLE):
        return
    # pad so that tracebacks point at the line in the document
    source = "\n" * (block.line - 1) + block.code
    exec(compile(source, str(block.path), "exec"), namespace)


_STATE: dict[Path, tuple[int, dict, Path]] = {}


@pytest.mark.parametrize(("path", "index"), _params())
def test_code_block_runs(path: Path, index: int, tmp_path_factory, monkeypatch):
    blocks = blocks_of(path)
    done, namespace, workdir = _STATE.get(path, (0, None, None))
    if namespace is None or done != index:  # (re)build the state the earlier blocks of the page leave
        workdir = tmp_path_factory.mktemp(path.stem)
        monkeypatch.chdir(workdir)
        namespace = {"__name__": f"docs_block_{path.stem}"}
        for earlier in blocks[:index]:
            try:
                _run(earlier, namespace)
            except Exception:  # noqa: BLE001 - reported by that block's own test
                pass
    monkeypatch.chdir(workdir)
    _STATE[path] = (index + 1, namespace, workdir)
    _run(blocks[index], namespace)


def test_not_runnable_blocks_give_a_reason():
    for path in documents():
        for block in blocks_of(path):
            first = block.code.lstrip().splitlines()[0] if block.code.strip() else ""
            if first.startswith(NOT_RUNNABLE):
                assert first[len(NOT_RUNNABLE):].strip(), f"{block.label}: '{NOT_RUNNABLE}' needs a reason"


def test_every_guide_page_is_scanned():
    """The extractor finds the blocks it should (guards against a silently empty parametrisation)."""
    found = {path.name: len(blocks_of(path)) for path in documents()}
    assert found["README.md"] >= 2
    assert found["drop_in.rst"] >= 3
