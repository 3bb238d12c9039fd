"""Bit-for-bit regression of the move of the Holmes trainer onto the shared engine.

The expected values below were produced by the trainer *before* the move (the ``reference_models.holmes``
of commit e4b604a, with its own loop) with :func:`fingerprint_of_run`, on this project's machine (x86-64 CPU,
one thread, torch 2.13.0). The same two-epoch runs through :class:`reference_models.engine.Trainer` must
give the same weights (SHA-256 of every tensor of ``last.pt``'s model and objective) and the same loss and
validation history, float for float. Other torch versions may use other CPU kernels: the test then skips.
"""

from __future__ import annotations

import hashlib

import pytest
import torch

from reference_models.holmes.data import load_split
from reference_models.holmes.trainer import Trainer
from tests.reference.data_helpers import COLLECTION, make_micro_benchmark
from tests.reference.run_helpers import FEATURE, micro_config

RECORDED_TORCH = "2.13.0"

#: ablation -> (SHA-256 of the trained weights, per-epoch loss/total, per-epoch val/SumR), from before the move.
EXPECTED: dict[str, tuple[str, list[float], list[float]]] = {
    "full": ("29582ed0d825ad9a2cc939cd6e940a62303a5029aed9631c677889af6b7b8fdb",
             [1.4761080741882324, 1.4827359517415364], [320.0, 320.0]),
    "dab": ("6e3d1a8b8f94cc402308cee935ce8d15b502864491b0dde647499046a818bc64",
            [0.5122156143188477, 0.6178481578826904], [300.0, 300.0]),
}


def tensors_digest(*states: dict[str, torch.Tensor]) -> str:
    """SHA-256 over the names, dtypes, shapes and bytes of every tensor of ``states``, in name order."""
    digest = hashlib.sha256()
    for state in states:
        for name in sorted(state):
            tensor = state[name].detach().cpu().contiguous()
            digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
            digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def fingerprint_of_run(root, out, ablation: str) -> tuple[str, list[float], list[float]]:
    """Train the micro config with ``ablation`` for two epochs (seed 3, one thread); return what is compared."""
    splits = {s: load_split(root, COLLECTION, FEATURE, s, n_clips=4, n_frames=8) for s in ("train", "val")}
    config = micro_config(epochs=2, videos_per_batch=3).with_ablation(ablation)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer = Trainer(config, splits["train"], splits["val"], out, seed=3, show_progress=False)
        result = trainer.fit()
    finally:
        torch.set_num_threads(threads)
    losses = [record["loss/total"] for record in result.history]
    sumrs = [record["val/SumR"] for record in result.history]
    return tensors_digest(trainer.model.state_dict(), trainer.objective.state_dict()), losses, sumrs


@pytest.fixture(scope="module")
def micro_root(tmp_path_factory):
    return make_micro_benchmark(tmp_path_factory.mktemp("micro"))


@pytest.mark.parametrize("ablation", ["full", "dab"])
def test_training_through_the_engine_matches_the_trainer_before_the_move(micro_root, tmp_path, ablation):
    if torch.__version__.split("+")[0] != RECORDED_TORCH:
        pytest.skip(f"expected values recorded with torch {RECORDED_TORCH}, this is {torch.__version__}")
    digest, losses, sumrs = fingerprint_of_run(micro_root, tmp_path, ablation)
    expected_digest, expected_losses, expected_sumrs = EXPECTED[ablation]
    assert losses == expected_losses
    assert sumrs == expected_sumrs
    assert digest == expected_digest
