"""Documentation pages whose content comes from, or points into, the code."""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TEST_REFERENCE = re.compile(r"``(tests/[\w/]+\.py)::(\w+)``")


def _test_references() -> list[tuple[str, str]]:
    return sorted(set(TEST_REFERENCE.findall((DOCS / "equation_map.rst").read_text(encoding="utf-8"))))


def test_equation_map_cites_tests():
    assert len(_test_references()) >= 50


@pytest.mark.parametrize(("path", "name"), _test_references())
def test_every_test_the_equation_map_cites_exists(path, name):
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    functions = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert name in functions, f"{path} has no test {name}"


def test_presets_tables_show_every_field_of_every_preset():
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import presets_table
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    from evidential_prvr.presets import HolmesSettings, holmes_settings

    text = presets_table.render_presets_rst()
    sections = [f.name for f in dataclasses.fields(HolmesSettings) if f.name not in ("preset", "dataset")]
    assert sorted(presets_table.SECTIONS) == sorted(sections)
    settings = holmes_settings("release", "activitynet")
    for section in sections:
        for field in dataclasses.fields(getattr(settings, section)):
            assert f"   * - ``{field.name}``" in text
    assert presets_table.format_value(settings.inter.tau) in text  # 0.04, the ActivityNet temperature
    assert presets_table.format_value(settings.optimizer.lr) in text
