"""The Examples sections of the retrieval-time uncertainty API run as written."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "evidential_prvr._risk_coverage",
    "evidential_prvr.functional._gallery",
    "evidential_prvr.functional._query_types",
    "evidential_prvr.functional._selective",
    "evidential_prvr.uncertainty",
]


@pytest.mark.parametrize("name", MODULES)
def test_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
