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


_DIRECTIVE = re.compile(r"^\.\. (?:currentmodule|module|automodule)::\s*(\S+)|^\.\. auto(?:class|function|data)::\s*(\S+)",
                        re.MULTILINE)


def _api_entries() -> list[str]:
    """Every ``autoclass`` / ``autofunction`` / ``autodata`` entry of the API pages, duplicates kept."""
    entries = []
    for page in sorted((DOCS / "api").glob("*.rst")):
        module = None
        for match in _DIRECTIVE.finditer(page.read_text(encoding="utf-8")):
            if match[1]:
                module = match[1]
            elif "." in match[2] and match[2].split(".")[0] in ("evidential_prvr", "reference_models"):
                entries.append(match[2])
            else:
                entries.append(f"{module}.{match[2]}")
    return entries


def _documented_names() -> set[str]:
    """Fully qualified names of the ``autoclass`` / ``autofunction`` / ``autodata`` entries of the API pages."""
    return set(_api_entries())


def test_every_public_name_has_an_api_entry():
    import evidential_prvr
    from evidential_prvr import functional, metrics, presets, probabilistic, search, uncertainty

    documented = _documented_names()
    missing = []
    for module in (evidential_prvr, functional, metrics, presets, probabilistic, search, uncertainty):
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, type(evidential_prvr)):  # submodules have their own pages
                continue
            if module is uncertainty and getattr(evidential_prvr, name, None) is obj:
                path = f"evidential_prvr.{name}"  # re-exported by the package: documented on its public path
            elif module is evidential_prvr and getattr(functional, name, None) is obj:
                path = f"evidential_prvr.functional.{name}"  # a function: documented on its functional path
            else:
                path = f"{module.__name__}.{name}"
            if path not in documented:
                missing.append(path)
    assert not missing, f"not on any docs/api page: {missing}"


def test_no_class_or_function_has_two_api_entries():
    import importlib
    import inspect

    seen: dict[int, str] = {}
    twice = []
    for entry in _api_entries():
        module_name, _, name = entry.rpartition(".")
        try:
            obj = getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError):  # a class member such as Class.method, or not importable here
            continue
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if id(obj) in seen:
            twice.append(f"{entry} (also {seen[id(obj)]})")
        seen[id(obj)] = entry
    assert not twice, f"documented twice: {twice}"
