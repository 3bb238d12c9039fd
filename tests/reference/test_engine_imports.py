"""The engine's modules import one another without a cycle, each at the top of its file.

The import graph is read from the source (every ``import`` statement, at module level or inside a function)
and must have no cycle; each module must import in a fresh interpreter on its own.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "reference_models" / "engine"
PACKAGE = "reference_models.engine"
MODULES = sorted(p.stem for p in ENGINE.glob("*.py") if p.stem != "__init__")


def engine_imports(path: Path) -> set[str]:
    """The engine modules (file stems) that ``path`` imports, anywhere in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith(PACKAGE + "."):
                stem = name[len(PACKAGE) + 1:].split(".")[0]
                if stem in MODULES:
                    found.add(stem)
    return found - {path.stem}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` as a list of nodes (first repeated at the end), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def test_find_cycle_finds_the_cycle_it_is_given():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_engine_import_graph_has_no_cycle():
    graph = {stem: engine_imports(ENGINE / f"{stem}.py") for stem in MODULES}
    assert {"trainer", "task", "seed_grid", "cli"} <= set(graph)
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph) or [])}"


def test_engine_imports_engine_modules_at_module_level_only():
    inside: list[str] = []
    for stem in MODULES:
        tree = ast.parse((ENGINE / f"{stem}.py").read_text(encoding="utf-8"))
        for func in ast.walk(tree):
            if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(func):
                    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE):
                        inside.append(f"{stem}.{func.name}: from {node.module} import ...")
    assert inside == []


@pytest.mark.parametrize("stem", MODULES)
def test_each_engine_module_imports_alone_in_a_fresh_interpreter(stem):
    done = subprocess.run([sys.executable, "-c", f"import {PACKAGE}.{stem}"], capture_output=True, text=True,
                          timeout=120, cwd=ENGINE.parents[1])
    assert done.returncode == 0, done.stderr
