"""Regression of the move of the Holmes trainer onto the shared engine, on any processor.

``tests/data/engine_regression.npz`` holds, for two ablations, the trained weights (every floating tensor
of the model's and the objective's state, float32), the per-epoch training loss and the per-epoch
validation SumR (recorded for reading; a count of ranks can flip at a near-tie, so it is not compared) of
two-epoch runs on the micro benchmark (seed 3, one thread, torch 2.13.0). They were
written by today's engine on one x86-64 processor, in the same session where that run still reproduced,
bit for bit, the SHA-256 fingerprints the trainer *before* the move had recorded (commit e4b604a, its own
loop): ``29582ed0d825…`` (full) and ``6e3d1a8b8f94…`` (dab).

Other processors round differently, and a training trajectory carries the difference on. Measured on this
project's machine under ``MKL_CBWR=COMPATIBLE`` and ``ATEN_CPU_CAPABILITY=default``: the losses move by at
most 4.3e-7 of their value and the weights by at most 2.7e-6 of their norm (relative Euclidean distance over
all of them); a learning rate changed by 0.1 % moves them by 2.1e-5 to 4.5e-5 and 1.1e-5 to 1.4e-5. The
tolerances below sit between the two.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from reference_models.engine import Trainer
from reference_models.holmes.data import load_split
from reference_models.holmes.task import HolmesTask
from tests.reference.data_helpers import COLLECTION, make_micro_benchmark
from tests.reference.run_helpers import FEATURE, micro_config

RECORDED = Path(__file__).resolve().parents[1] / "data" / "engine_regression.npz"
#: Relative tolerance of each epoch's loss, and of the weights' Euclidean distance to the recorded ones.
LOSS_RTOL = 4e-6
WEIGHTS_RTOL = 6e-6


def trained_run(root, out, ablation: str) -> dict[str, np.ndarray]:
    """Train the micro config with ``ablation`` for two epochs (seed 3, one thread): its weights (keyed
    ``<ablation>/<0 model | 1 objective>.<name>``), ``<ablation>/losses`` and ``<ablation>/sumrs``."""
    splits = {s: load_split(root, COLLECTION, FEATURE, s, n_clips=4, n_frames=8) for s in ("train", "val")}
    config = micro_config(epochs=2, videos_per_batch=3).with_ablation(ablation)
    if ablation == "dab":  # recorded with the heads' start of that time: PyTorch's random log-variance weights
        config = config.replace(dab={"logvar_weight_init": "pytorch"})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer = Trainer(HolmesTask(config, splits["train"], splits["val"]), out, seed=3, show_progress=False)
        result = trainer.fit()
    finally:
        torch.set_num_threads(threads)
    found = {f"{ablation}/{i}.{name}": tensor.detach().cpu().numpy().copy()
             for i, state in enumerate((trainer.model.state_dict(), trainer.objective.state_dict()))
             for name, tensor in state.items() if tensor.is_floating_point()}
    found[f"{ablation}/losses"] = np.array([record["loss/total"] for record in result.history])
    found[f"{ablation}/sumrs"] = np.array([record["val/SumR"] for record in result.history])
    return found


def weights_distance(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray], ablation: str) -> float:
    """``||w - w_recorded|| / ||w_recorded||`` over every recorded weight of ``ablation``, in float64."""
    names = sorted(k for k in expected if k.startswith(f"{ablation}/") and not k.endswith(("/losses", "/sumrs")))
    assert sorted(k for k in actual if not k.endswith(("/losses", "/sumrs"))) == names
    got = np.concatenate([actual[k].astype(np.float64).ravel() for k in names])
    want = np.concatenate([expected[k].astype(np.float64).ravel() for k in names])
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


@pytest.fixture(scope="module")
def micro_root(tmp_path_factory):
    return make_micro_benchmark(tmp_path_factory.mktemp("micro"))


@pytest.mark.parametrize("ablation", ["full", "dab"])
def test_training_through_the_engine_matches_the_trainer_before_the_move(micro_root, tmp_path, ablation):
    expected = dict(np.load(RECORDED))
    actual = trained_run(micro_root, tmp_path, ablation)
    np.testing.assert_allclose(actual[f"{ablation}/losses"], expected[f"{ablation}/losses"], rtol=LOSS_RTOL, atol=0)
    assert weights_distance(actual, expected, ablation) <= WEIGHTS_RTOL
