"""Tests of the intra-video evidential loss on hand-built cases and against a NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings

from evidential_prvr import FlexibleOT, IntraVideoEvidentialLoss
from evidential_prvr import functional as F
from tests.strategies.transport import masked_similarity_batches
from tests.test_flexible_ot import reference_fot


def reference_l_u(alpha: np.ndarray, y: np.ndarray) -> float:
    """Holmes Eq. 17 for one row, written out."""
    s = alpha.sum()
    return float(np.sum((y - alpha / s) ** 2 + alpha * (s - alpha) / (s**2 * (s + 1))))


def reference_loss(
    sim, qmask, cmask, tau, scaling="outside", mode="fot", epsilon=0.1, normalize="minmax", marginals="release",
    minmax_over="block",
):
    """L_intra from its definition: per valid query over its video's valid clips."""
    per_video = []
    for k in range(sim.shape[0]):
        q_idx, c_idx = np.flatnonzero(qmask[k]), np.flatnonzero(cmask[k])
        if len(q_idx) == 0:
            continue
        s = sim[k][np.ix_(q_idx, c_idx)]
        if normalize == "minmax":
            scope = sim[k] if minmax_over == "block" else s
            s = (s - scope.min()) / (scope.max() - scope.min() + 1e-8)
        if mode == "softmax":
            e = np.exp((s - s.max(axis=1, keepdims=True)) / epsilon)
            target = e / e.sum(axis=1, keepdims=True)
        else:
            quantile = 0.3 if mode == "fot" else None
            plan, _ = reference_fot(sim[k], qmask[k], cmask[k], epsilon, quantile, normalize, marginals, minmax_over)
            rows = plan[np.ix_(q_idx, c_idx)]
            target = rows / rows.sum(axis=1, keepdims=True)
        evidence = np.exp(np.tanh(s) / tau) if scaling == "outside" else np.exp(np.tanh(s / tau))
        alpha = evidence + 1.0
        per_video.append(np.mean([reference_l_u(alpha[i], target[i]) for i in range(len(q_idx))]))
    return float(np.mean(per_video)) if per_video else 0.0


def converged_loss(mode="fot", tau=0.08, scaling="outside", normalize="minmax", marginals="release",
                   minmax_over="block"):
    fot = FlexibleOT(n_iters=50000, tol=1e-12, normalize=normalize, marginals=marginals, minmax_over=minmax_over)
    return IntraVideoEvidentialLoss(fot, tau=tau, tanh_scaling=scaling, assignment=mode)


def test_hand_built_case():
    # one video, 2 queries, 3 clips: query 0 matches clip 0, query 1 matches clip 2
    sim = torch.tensor([[[0.9, 0.1, 0.0], [0.0, 0.2, 0.8]]], dtype=torch.float64)
    details = converged_loss().details(sim)
    expected = reference_loss(sim.numpy(), np.ones((1, 2), bool), np.ones((1, 3), bool), 0.08)
    assert float(details.loss) == pytest.approx(expected, abs=1e-9)
    # the labels put most mass on the matching clip of each query
    assert int(details.target[0, 0].argmax()) == 0 and int(details.target[0, 1].argmax()) == 2
    # evidence of the normalised similarity: alpha = exp(tanh(x)/tau) + 1 with x in [0, 1]
    x = (sim - sim.min()) / (sim.max() - sim.min() + 1e-8)
    torch.testing.assert_close(details.alpha, torch.exp(torch.tanh(x) / 0.08) + 1)


@pytest.mark.parametrize("mode", ["fot", "ot", "softmax"])
@pytest.mark.parametrize("minmax_over", ["block", "valid"])
@settings(max_examples=10)
@given(batch=masked_similarity_batches())
def test_matches_reference_with_masks(mode, minmax_over, batch):
    sim, qmask, cmask = batch
    loss = converged_loss(mode=mode, tau=0.06, minmax_over=minmax_over)(sim, qmask, cmask)
    expected = reference_loss(sim.numpy(), qmask.numpy(), cmask.numpy(), 0.06, mode=mode, minmax_over=minmax_over)
    assert float(loss) == pytest.approx(expected, abs=1e-7)


@settings(max_examples=8)
@given(batch=masked_similarity_batches(scale=0.5))
def test_matches_reference_paper_settings(batch):
    sim, qmask, cmask = batch
    loss = converged_loss(tau=0.1, scaling="inside", normalize=None, marginals="uniform")(sim, qmask, cmask)
    expected = reference_loss(
        sim.numpy(), qmask.numpy(), cmask.numpy(), 0.1, "inside", normalize=None, marginals="uniform"
    )
    assert float(loss) == pytest.approx(expected, abs=1e-7)


def test_padded_clips_are_not_classes():
    gen = torch.Generator().manual_seed(0)
    sim = torch.rand(1, 3, 4, generator=gen, dtype=torch.float64)
    padded = torch.cat([sim, torch.full((1, 3, 2), 5.0, dtype=torch.float64)], dim=2)
    cmask = torch.tensor([[True] * 4 + [False] * 2])
    loss_fn = converged_loss(minmax_over="valid")  # padded clips hold garbage: keep them out of the range
    torch.testing.assert_close(loss_fn(padded, None, cmask), loss_fn(sim))


def test_videos_without_queries_do_not_count():
    gen = torch.Generator().manual_seed(1)
    sim = torch.rand(2, 3, 4, generator=gen, dtype=torch.float64)
    qmask = torch.tensor([[True, True, False], [False, False, False]])
    loss_fn = converged_loss()
    torch.testing.assert_close(loss_fn(sim, qmask), loss_fn(sim[:1, :2]))
    assert float(loss_fn(sim, torch.zeros(2, 3, dtype=torch.bool))) == 0.0


def test_ablation_modes_give_different_labels():
    gen = torch.Generator().manual_seed(2)
    sim = torch.rand(2, 3, 8, generator=gen, dtype=torch.float64)
    targets = {m: converged_loss(mode=m).details(sim).target for m in ("fot", "ot", "softmax")}
    for t in targets.values():
        torch.testing.assert_close(t.sum(2), torch.ones(2, 3, dtype=torch.float64))
    assert not torch.allclose(targets["fot"], targets["ot"], atol=1e-3)
    assert not torch.allclose(targets["ot"], targets["softmax"], atol=1e-3)
    assert converged_loss(mode="softmax").details(sim).transport is None


def test_gradient_flows_through_the_evidence_only():
    # the label is frozen: the gradient equals finite differences of the loss with a fixed label
    gen = torch.Generator().manual_seed(3)
    sim = torch.rand(1, 2, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    loss_fn = IntraVideoEvidentialLoss(FlexibleOT(normalize=None), tau=0.5)
    details = loss_fn.details(sim)
    details.loss.backward()
    target = details.target.numpy()[0]

    def frozen(x):
        alpha = np.exp(np.tanh(x) / 0.5) + 1
        return np.mean([reference_l_u(alpha[i], target[i]) for i in range(2)])

    x0, h = sim.detach().numpy()[0], 1e-6
    numeric = np.zeros_like(x0)
    for idx in np.ndindex(x0.shape):
        up, down = x0.copy(), x0.copy()
        up[idx] += h
        down[idx] -= h
        numeric[idx] = (frozen(up) - frozen(down)) / (2 * h)
    np.testing.assert_allclose(sim.grad.numpy()[0], numeric, atol=1e-7)
    assert not details.target.requires_grad


def test_presets():
    tvr = IntraVideoEvidentialLoss.from_preset("release", dataset="tvr")
    assert (tvr.tau, tvr.tanh_scaling, tvr.assignment, tvr.fot.normalize) == (0.06, "outside", "fot", "minmax")
    for dataset in ("activitynet", "charades"):
        assert IntraVideoEvidentialLoss.from_preset("release", dataset=dataset).tau == 0.08
    paper = IntraVideoEvidentialLoss.from_preset("paper")
    assert (paper.tau, paper.tanh_scaling, paper.fot.marginals) == (0.1, "inside", "uniform")
    assert IntraVideoEvidentialLoss.from_preset("release", "tvr", assignment="ot").assignment == "ot"
    assert IntraVideoEvidentialLoss.from_preset("release", "cha", tau=0.2).tau == 0.2
    with pytest.raises(TypeError, match="'temperature'"):
        IntraVideoEvidentialLoss.from_preset("release", "tvr", temperature=0.2)


def test_bad_arguments():
    with pytest.raises(ValueError, match="clip_mask"):
        IntraVideoEvidentialLoss()(torch.rand(1, 2, 3), None, torch.zeros(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="epsilon"):
        F.intra_video_loss(torch.rand(1, 2, 3), epsilon=0.0)
    with pytest.raises(ValueError, match="dustbin_quantile"):  # checked even where the assignment ignores it
        F.intra_video_loss(torch.rand(1, 2, 3), assignment="ot", dustbin_quantile=1.5)
    with pytest.raises(ValueError, match="assignment='fot' needs a dustbin"):
        F.intra_video_loss(torch.rand(1, 2, 3), dustbin_quantile=None)
    with pytest.raises(TypeError, match="grad"):  # the label is always detached: there is no grad to choose
        F.intra_video_loss(torch.rand(1, 2, 3), grad="autodiff")


def test_the_transport_keywords_are_flexible_ots():
    """The functional takes the transport's keyword arguments of :func:`flexible_ot` (but ``grad``): the default is
    the release's, and a changed transport changes the label."""
    sim = torch.rand(2, 3, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    default = F.intra_video_loss_details(sim)
    assert torch.equal(default.target, F.flexible_ot(sim).assignment)
    sharper = F.intra_video_loss_details(sim, epsilon=0.02)
    assert not torch.allclose(default.target, sharper.target)
    expected = F.flexible_ot(sim, epsilon=0.02).assignment
    assert torch.allclose(sharper.target, expected, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_and_extreme_inputs(dtype):
    sim = ((torch.rand(3, 4, 8) * 2 - 1) * 1e3).to(dtype).requires_grad_(True)
    for preset in ("release", "paper"):
        loss = IntraVideoEvidentialLoss.from_preset(preset, "tvr")(sim)
        loss.backward()
        assert loss.dtype == torch.float32 and bool(torch.isfinite(loss))
        assert bool(torch.isfinite(sim.grad).all())


def test_device(device):
    sim = torch.rand(2, 3, 4, device=device, requires_grad=True)
    loss = IntraVideoEvidentialLoss.from_preset("release", "tvr")(sim)
    loss.backward()
    assert loss.device.type == device.type and sim.grad is not None
