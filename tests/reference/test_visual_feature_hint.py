"""A mistyped ``--visual-feature`` names the feature folders that exist and the closest one."""

from __future__ import annotations

import pytest

from reference_models.holmes.data import DataValidationError, validate_data_root
from tests.reference.data_helpers import COLLECTION, TINY_SPEC, make_tiny_benchmark

FEATURE = TINY_SPEC.visual_feature


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    return {"hdf5": make_tiny_benchmark(tmp_path_factory.mktemp("pristine_hdf5"), "hdf5")}


def test_a_wrong_visual_feature_lists_the_existing_ones_and_the_closest(copy_of):
    root, _ = copy_of("hdf5")
    with pytest.raises(DataValidationError) as info:
        validate_data_root(root, COLLECTION, FEATURE + "_wrong")
    message = str(info.value)
    assert "missing visual features" in message and "\n" not in message
    assert f"feature folders under FeatureData/: {FEATURE}" in message
    assert f"did you mean --visual-feature {FEATURE}?" in message


def test_progress_bars_stay_silent_off_a_terminal(capsys):
    from reference_models.engine.reporting import progress

    pytest.importorskip("tqdm")
    bar = progress(range(3), True, "epoch 0")
    assert list(bar) == [0, 1, 2]
    assert getattr(bar, "disable", True)  # pytest's captured stderr is no terminal
    assert capsys.readouterr().err == ""
    assert progress(range(3), False, "x") == range(3)  # --no-progress: the iterable itself
