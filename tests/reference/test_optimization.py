"""The release's optimisation: BertStyleAdam, its weight-decay groups, the learning-rate schedule and clipping."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from reference_models.engine import Trainer, bert_warmup_linear, build_scheduler, clip_gradients
from reference_models.holmes.bert_adam import BertStyleAdam
from reference_models.holmes.config import preset
from reference_models.holmes.data import load_split
from reference_models.holmes.model import HolmesModel
from reference_models.holmes.optimization import build_optimizer, decay_groups
from reference_models.holmes.task import HolmesTask
from tests.reference.data_helpers import COLLECTION, make_tiny_benchmark
from tests.reference.test_model import small_config


def numpy_bert_adam(p0, grads, factors, lr, wd, betas=(0.9, 0.999), eps=1e-6, max_norm=1.0):
    """The BertAdam rule written out: per-tensor clip, no bias correction, decay added before the lr multiply."""
    p, m, v = p0.astype(np.float64), np.zeros_like(p0, np.float64), np.zeros_like(p0, np.float64)
    path = []
    for g, f in zip(grads, factors):
        g = g.astype(np.float64)
        g = g * min(1.0, max_norm / (np.linalg.norm(g) + 1e-6))
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        p = p - lr * f * (m / (np.sqrt(v) + eps) + wd * p)
        path.append(p.copy())
    return path


def test_first_updates_match_the_bert_adam_rule():
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal((4, 3)).astype(np.float32)
    # the first gradient's norm exceeds the clip norm, the others do not
    grads = [rng.standard_normal((4, 3)).astype(np.float32) * s for s in (3.0, 0.1, 0.2, 0.05, 0.3)]
    total, warmup, lr, wd = 10, 0.3, 1e-2, 0.01
    factors = [bert_warmup_linear(t, total, warmup) for t in range(len(grads))]
    assert factors == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0, 0.6 / 0.7])

    param = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = BertStyleAdam([{"params": [param], "weight_decay": wd}], lr=lr)
    sched = build_scheduler(opt, total_steps=total, warmup_ratio=warmup, schedule="bert_warmup_linear")
    expected = numpy_bert_adam(p0, grads, factors, lr, wd)
    for t, g in enumerate(grads):
        param.grad = torch.from_numpy(g.copy())
        opt.step()
        sched.step()
        np.testing.assert_allclose(param.detach().numpy(), expected[t], rtol=1e-5, atol=1e-7)
        if t == 0:  # the first update has learning rate 0: nothing moves, but the moments are updated
            np.testing.assert_array_equal(param.detach().numpy(), p0)
    assert opt.state[param]["step"] == len(grads)
    # no bias correction: the second update is (1 - b1) / sqrt(1 - b2) ≈ 3.2 times larger than bias-corrected Adam's
    param2 = torch.nn.Parameter(torch.zeros(1))
    opt2 = BertStyleAdam([param2], lr=1.0, weight_decay=0.0, max_grad_norm=0.0)
    param2.grad = torch.ones(1)
    opt2.step()
    assert float(param2.detach()) == pytest.approx(-0.1 / (np.sqrt(0.001) + 1e-6))


def test_bert_warmup_linear_values():
    assert bert_warmup_linear(0, 100, 0.01) == 0.0
    assert bert_warmup_linear(1, 100, 0.01) == pytest.approx(0.99 / 0.99)
    assert bert_warmup_linear(50, 100, 0.01) == pytest.approx(0.5 / 0.99)
    assert bert_warmup_linear(100, 100, 0.01) == 0.0
    assert bert_warmup_linear(120, 100, 0.01) == 0.0
    # 40 steps (8 epochs of 5): warm-up ends before step 1, which has almost the full learning rate
    assert bert_warmup_linear(1, 40, 0.01) == pytest.approx((1 / 40 - 1) / (0.01 - 1))
    with pytest.raises(ValueError, match="warmup_proportion"):
        bert_warmup_linear(0, 10, 1.0)
    with pytest.raises(ValueError, match="total_steps"):
        bert_warmup_linear(0, 0, 0.01)


def test_release_weight_decay_groups_follow_the_release_names():
    """Undecayed: every bias and the LayerNorms named ``LayerNorm`` in the release (input projections and
    positional embeddings); the norms inside the attention blocks are decayed."""
    model = HolmesModel(small_config())
    decay, skip = decay_groups([model], "embedding_norms")
    names = {id(p): n for n, p in model.named_parameters()}
    skipped = {names[id(p)] for p in skip}
    assert {n for n in skipped if not n.endswith("bias")} == {
        f"{branch}.{part}.weight"
        for branch in ("clip_branch", "frame_branch", "text_encoder")
        for part in ("projection.net.0", "position.norm")
    }
    assert {n for n in names.values() if n.endswith("bias")} <= skipped
    decayed = {names[id(p)] for p in decay}
    assert "clip_branch.layers.0.blocks.0.norm1.weight" in decayed
    assert "clip_branch.layers.0.weights.cross.norm2.weight" in decayed
    assert len(decay) + len(skip) == len(list(model.parameters()))
    _, all_norms = decay_groups([model], "all_norms")
    assert "clip_branch.layers.0.blocks.0.norm1.weight" in {names[id(p)] for p in all_norms}


def test_build_optimizer_kinds_and_errors():
    model = torch.nn.Linear(3, 2)
    assert isinstance(build_optimizer([model], 1e-3, 0.01, optimizer="bert_adam"), BertStyleAdam)
    assert isinstance(build_optimizer([model], 1e-3, 0.01), torch.optim.AdamW)
    with pytest.raises(ValueError, match="optimizer"):
        build_optimizer([model], 1e-3, 0.01, optimizer="sgd")
    with pytest.raises(ValueError, match="no_decay"):
        decay_groups([model], "everything")
    with pytest.raises(ValueError, match="lr"):
        BertStyleAdam(model.parameters(), lr=0.0)
    with pytest.raises(ValueError, match="betas"):
        BertStyleAdam(model.parameters(), lr=1e-3, betas=(0.9, 1.0))


def test_clip_gradients_per_parameter_and_global():
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    a.grad, b.grad = torch.tensor([3.0, 4.0]), torch.tensor([0.3, 0.4])
    before = clip_gradients([a, b], 1.0, "per_parameter")
    assert torch.allclose(before, torch.tensor(25.25).sqrt())
    assert torch.allclose(a.grad.norm(), torch.tensor(1.0)) and torch.allclose(b.grad.norm(), torch.tensor(0.5))
    a.grad, b.grad = torch.tensor([3.0, 4.0]), torch.tensor([0.3, 0.4])
    before = clip_gradients([a, b], 1.0, "global")
    assert torch.allclose(before, torch.tensor(25.25).sqrt())
    total = torch.sqrt(a.grad.norm() ** 2 + b.grad.norm() ** 2)
    assert torch.allclose(total, torch.tensor(1.0), atol=1e-5)
    with pytest.raises(ValueError, match="mode"):
        clip_gradients([a], 1.0, "none")


def test_per_parameter_clipping_then_step_equals_bert_adam_clipping_inside():
    grads = [torch.tensor([3.0, 4.0]), torch.tensor([0.3, 0.4])]
    inside = [torch.nn.Parameter(torch.ones(2)) for _ in grads]
    outside = [torch.nn.Parameter(torch.ones(2)) for _ in grads]
    for p, q, g in zip(inside, outside, grads):
        p.grad, q.grad = g.clone(), g.clone()
    BertStyleAdam(inside, lr=0.1, max_grad_norm=1.0).step()
    clip_gradients(outside, 1.0, "per_parameter")
    BertStyleAdam(outside, lr=0.1, max_grad_norm=0.0).step()
    for p, q in zip(inside, outside):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_clip_gradients_returns_the_norm_of_all_gradients_together():
    a, b, c = (torch.nn.Parameter(torch.zeros(2)) for _ in range(3))
    assert clip_gradients([a, b], 1.0, "per_parameter").item() == 0.0  # no gradients yet
    a.grad, b.grad = torch.tensor([3.0, 4.0]), torch.tensor([0.0, 12.0])
    assert clip_gradients([a, b, c], 100.0, "per_parameter").item() == pytest.approx(13.0)
    b.grad = torch.tensor([float("nan"), 0.0])
    assert not torch.isfinite(clip_gradients([a, b], 1.0, "per_parameter"))  # what the divergence check reads


@pytest.fixture(scope="module")
def tiny_splits(tmp_path_factory):
    root = make_tiny_benchmark(tmp_path_factory.mktemp("tiny_release"))
    return {s: load_split(root, COLLECTION, "synthetic", s, n_clips=8, n_frames=16) for s in ("train", "val")}


def release_tiny_config():
    return preset("tvr").replace(
        model={"hidden_size": 16, "num_heads": 2},
        optim={"videos_per_batch": 7, "eval_video_batch": 8, "eval_query_batch": 16, "score_chunk": 8},
        schedule={"epochs": 2, "warmup_stage_epochs": 1, "hard_negative_epoch": 1},
    )


def test_release_settings_train_through_the_trainer(tiny_splits, tmp_path, device):
    """The release optimiser through the trainer, with the peak GPU memory of every epoch recorded on CUDA."""
    cfg = release_tiny_config().replace(schedule={"epochs": 1})
    trainer = Trainer(HolmesTask(cfg, tiny_splits["train"], tiny_splits["val"]), tmp_path, seed=1, device=device,
                      show_progress=False)
    # clipped once per step, by the trainer (clip_gradients), not again inside the optimiser
    assert isinstance(trainer.optimizer, BertStyleAdam)
    assert all(group["max_grad_norm"] == 0 for group in trainer.optimizer.param_groups)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    result = trainer.fit()
    assert len(result.history) == 1 and math.isfinite(result.history[0]["loss/total"])
    assert ("peak_gpu_memory_gib" in result.history[0]) == (device.type == "cuda")
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())


def test_bert_style_adam_state_round_trip():
    """Exact resume needs the optimiser's state: a reloaded BertStyleAdam continues bit for bit."""
    torch.manual_seed(0)
    a = torch.nn.Linear(4, 3)
    b = torch.nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    opt_a = build_optimizer([a], 1e-2, 0.01, optimizer="bert_adam", no_decay="embedding_norms", eps=1e-6)
    grads = [torch.randn(3, 4) for _ in range(4)]
    for g in grads[:2]:
        a.weight.grad, a.bias.grad = g, g[:, 0].clone()
        opt_a.step()
    b.load_state_dict(a.state_dict())
    opt_b = build_optimizer([b], 1e-2, 0.01, optimizer="bert_adam", no_decay="embedding_norms", eps=1e-6)
    opt_b.load_state_dict(copy.deepcopy(opt_a.state_dict()))  # as if through torch.save / torch.load
    for g in grads[2:]:
        for model, opt in ((a, opt_a), (b, opt_b)):
            model.weight.grad, model.bias.grad = g.clone(), g[:, 0].clone()
            opt.step()
    assert torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias)


def test_first_release_update_leaves_the_weights_unchanged(tiny_splits, tmp_path):
    cfg = release_tiny_config()
    trainer = Trainer(HolmesTask(cfg, tiny_splits["train"], tiny_splits["val"]), tmp_path, seed=0, show_progress=False)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    batch = next(iter(trainer.loader))
    trainer.objective.set_epoch(0)
    terms = trainer.objective(trainer.model(batch), batch)
    trainer.optimizer.zero_grad()
    terms.total.backward()
    assert trainer.optimizer.param_groups[0]["lr"] == 0.0
    trainer.optimizer.step()
    trainer.scheduler.step()
    for key, value in trainer.model.state_dict().items():
        assert torch.equal(before[key], value), key
    assert trainer.optimizer.param_groups[0]["lr"] > 0
