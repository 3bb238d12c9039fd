"""Fixtures shared by the data tests of the reference model."""

from __future__ import annotations

import shutil

import pytest

from tests.reference.data_helpers import COLLECTION


@pytest.fixture
def copy_of(pristine, tmp_path):
    """A fresh writable copy of the pristine data root of a layout: ``(data_root, collection_folder)``.

    ``pristine`` (``{layout: data_root}``) is the module's own fixture: each data test module writes the
    benchmark it needs once.
    """

    def make(layout: str):
        dst = tmp_path / layout
        shutil.copytree(pristine[layout], dst)
        return dst, dst / COLLECTION

    return make
