"""Every public function and class documents itself with a runnable example and the paper it implements.

The examples run as doctests (``--doctest-modules`` in ``pyproject.toml``); this test checks that they and
the ``References`` section exist, for every name of the public namespaces.
"""

from __future__ import annotations

import inspect

import pytest

import evidential_prvr
from evidential_prvr import functional, metrics, presets, probabilistic, search, uncertainty

NAMESPACES = {
    "evidential_prvr": evidential_prvr,
    "evidential_prvr.functional": functional,
    "evidential_prvr.metrics": metrics,
    "evidential_prvr.probabilistic": probabilistic,
    "evidential_prvr.presets": presets,
    "evidential_prvr.uncertainty": uncertainty,
    "evidential_prvr.search": search,
}
SOURCES = ("Holmes", "DAB", "HUD", "PyTorch", "set_default_validate_args")


def _public_objects():
    seen = set()
    for label, module in NAMESPACES.items():
        for name in module.__all__:
            obj = getattr(module, name)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and id(obj) not in seen:  # re-exports once
                seen.add(id(obj))
                yield pytest.param(obj, id=f"{label}.{name}")


def _section(doc: str, title: str) -> str:
    """The text of a NumPy-style section (empty when absent)."""
    lines = inspect.cleandoc(doc).splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.strip() == title and set(lines[i + 1].strip()) == {"-"}:
            body = []
            for rest in lines[i + 2:]:
                if rest.strip() and set(rest.strip()) == {"-"} and body:
                    body.pop()  # that was the next section's title
                    break
                body.append(rest)
            return "\n".join(body)
    return ""


@pytest.mark.parametrize("obj", list(_public_objects()))
def test_docstring_has_examples_and_references(obj):
    doc = obj.__doc__ or ""
    assert ">>>" in _section(doc, "Examples"), "missing an Examples section with a doctest"
    references = _section(doc, "References")
    assert references.strip(), "missing a References section"
    assert any(source in references for source in SOURCES), "References should name the paper"
