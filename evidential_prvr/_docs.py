"""Docstring fragments that several public objects share, written once and inserted with :func:`insert_docs`.

A docstring names a fragment by a line holding only ``{name}``; :func:`insert_docs` replaces that line
with the fragment, indented like the line, when the module is imported. ``help()``, the doctests and
the Sphinx pages all read the completed ``__doc__``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import TypeVar

__all__ = ["insert_docs", "finite_check", "FINITE_INPUTS", "SCALAR_LOSS", "VALUE_CHECKS"]

T = TypeVar("T")

FINITE_INPUTS = """\
validate_args : bool, optional
    Check that the inputs are finite (host synchronisations); ``None`` follows
    :func:`evidential_prvr.set_default_validate_args`. Empty inputs are always refused."""
"""``validate_args`` of the DAB and HUD modules."""

VALUE_CHECKS = """\
validate_args : bool, optional
    Value checks (host synchronisations); ``None`` follows :func:`evidential_prvr.set_default_validate_args`."""
"""``validate_args`` of a module whose value checks are those of the function it calls."""

SCALAR_LOSS = """\
Returns
-------
torch.Tensor
    Scalar loss."""
"""The returns of a loss that always reduces to a scalar (DAB's PAC, HUD's L_rank)."""


def finite_check(name: str) -> str:
    """``validate_args`` of a function whose only value check is that the tensor ``name`` is finite."""
    return f"""\
validate_args : bool, optional
    Check that ``{name}`` is finite (a host synchronisation); ``None`` follows
    :func:`evidential_prvr.set_default_validate_args`."""


def insert_docs(**fragments: str) -> Callable[[T], T]:
    """Decorator: replace each line ``{name}`` of the object's docstring by ``fragments[name]``.

    Every fragment given must be used (a misspelt marker fails at import, not silently in the docs).
    Docstrings stripped by ``python -OO`` are left as they are.
    """

    def decorate(obj: T) -> T:
        doc = obj.__doc__
        if doc is None:
            return obj
        used: set[str] = set()
        lines: list[str] = []
        for line in doc.splitlines():
            marker = line.strip()
            name = marker[1:-1] if marker.startswith("{") and marker.endswith("}") else None
            if name in fragments:
                used.add(name)
                indent = line[: len(line) - len(line.lstrip())]
                lines.extend(textwrap.indent(textwrap.dedent(fragments[name]), indent).splitlines())
            else:
                lines.append(line)
        missing = sorted(set(fragments) - used)
        if missing:
            raise ValueError(f"{getattr(obj, '__qualname__', obj)!s}: docstring has no line {{{missing[0]}}}")
        obj.__doc__ = "\n".join(lines) + ("\n" if doc.endswith("\n") else "")
        return obj

    return decorate
