"""Tests of the inter-video evidential loss L_inter (Holmes Eq. 15-18)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy import special, stats

from evidential_prvr import EvidentialRetrievalLoss, InterVideoLossDetails, QueryType
from evidential_prvr.functional import dirichlet_mse_loss, ds_combine, evidence
from tests.strategies.evidential import similarity_batches
from tests.test_identification import HAND_BUILT, HAND_TYPES

P, N, U = int(QueryType.PRECISE), int(QueryType.POLYSEMOUS), int(QueryType.UNDERDETERMINED)


def _scipy_l_u(alpha: np.ndarray, y: np.ndarray) -> np.ndarray:
    out = []
    for a, t in zip(alpha, y):
        d = stats.dirichlet(a)
        out.append(((t - d.mean()) ** 2 + d.var()).sum())
    return np.asarray(out)


def _reference_loss(frame, clip, target, types, gamma, tau, scaling, calibrated_type=N):
    """Eq. 15-18 per query with NumPy/scipy: DS fusion written from the belief/uncertainty form of Eq. 16."""
    f, c = frame.numpy(), clip.numpy()
    b, k = f.shape

    def alpha_of(s):
        return (np.exp(np.tanh(s / tau)) if scaling == "inside" else np.exp(np.tanh(s) / tau)) + 1.0

    af, ac = alpha_of(f), alpha_of(c)
    sf, sc = af.sum(1, keepdims=True), ac.sum(1, keepdims=True)
    bf, bc, uf, uc = (af - 1) / sf, (ac - 1) / sc, k / sf, k / sc
    delta = bf.sum(1, keepdims=True) * bc.sum(1, keepdims=True) - (bf * bc).sum(1, keepdims=True)
    bo = (bf * bc + bf * uc + bc * uf) / (1 - delta)
    uo = uf * uc / (1 - delta)
    ao = bo * (k / uo) + 1
    y = np.eye(k)[target.numpy()]
    soft = 0.5 * (special.softmax(f, axis=1) + special.softmax(c, axis=1))
    y_hat = np.where((np.asarray(types) == calibrated_type)[:, None], (1 - gamma) * y + gamma * soft, y)
    return (_scipy_l_u(af, y_hat) + _scipy_l_u(ac, y_hat) + _scipy_l_u(ao, y_hat)).mean(), y_hat


@pytest.mark.parametrize("name,dataset", [("paper", None), ("release", "tvr"), ("release", "charades")])
def test_hand_built_batch_against_reference(name, dataset):
    loss_fn = EvidentialRetrievalLoss.from_preset(name, dataset=dataset)
    clip = HAND_BUILT.clone()
    target = torch.arange(4)
    details = loss_fn.details(HAND_BUILT, clip, target)
    assert isinstance(details, InterVideoLossDetails)
    assert details.identification.query_type.tolist() == HAND_TYPES
    tau = 0.1 if name == "paper" else {"tvr": 0.05, "charades": 0.08}[dataset]
    scaling = "inside" if name == "paper" else "outside"
    ref, y_hat = _reference_loss(HAND_BUILT, clip, target, HAND_TYPES, 0.2, tau, scaling)
    assert details.loss.item() == pytest.approx(ref, rel=1e-8)
    np.testing.assert_allclose(details.target.numpy(), y_hat, rtol=1e-10)
    assert not np.allclose(y_hat[1], np.eye(4)[1])  # the polysemous query really got a soft label


@given(similarity_batches(min_cols=2, max_rows=8, max_cols=6), st.sampled_from(["inside", "outside"]))
def test_random_batches_against_reference(batch, scaling):
    frame, clip, target = batch
    loss_fn = EvidentialRetrievalLoss(tau=0.2, tanh_scaling=scaling, gamma=0.3)
    details = loss_fn.details(frame, clip, target)
    ref, y_hat = _reference_loss(frame, clip, target, details.identification.query_type.numpy(), 0.3, 0.2, scaling)
    assert details.loss.item() == pytest.approx(ref, rel=1e-7)
    np.testing.assert_allclose(details.target.numpy(), y_hat, rtol=1e-10, atol=1e-14)


def test_module_equals_functional_and_terms():
    frame = torch.randn(6, 5, dtype=torch.float64).tanh()
    clip = torch.randn(6, 5, dtype=torch.float64).tanh()
    target = torch.tensor([0, 1, 2, 3, 4, 0])
    details = EvidentialRetrievalLoss(calibrate=False).details(frame, clip, target)
    af, ac = evidence(frame) + 1, evidence(clip) + 1
    y = torch.eye(5, dtype=torch.float64)[target]
    terms = [dirichlet_mse_loss(a, y) for a in (af, ac, ds_combine(af, ac))]
    torch.testing.assert_close(details.frame_loss, terms[0])
    torch.testing.assert_close(details.clip_loss, terms[1])
    torch.testing.assert_close(details.fused_loss, terms[2])
    torch.testing.assert_close(details.loss, sum(terms))
    torch.testing.assert_close(details.fused_alpha, ds_combine(af, ac))
    torch.testing.assert_close(details.target, y)


def test_calibration_options():
    frame = HAND_BUILT
    clip = HAND_BUILT.clone()
    target = torch.arange(4)
    warm = EvidentialRetrievalLoss(calibrate=False).details(frame, clip, target)
    assert torch.equal(warm.target, torch.eye(4, dtype=torch.float64))
    assert warm.identification is not None  # still reported by details
    no_gamma = EvidentialRetrievalLoss(gamma=0.0)(frame, clip, target)
    torch.testing.assert_close(no_gamma, warm.loss)
    initial = EvidentialRetrievalLoss(calibration_set="initial").details(frame, clip, target)
    init_types = initial.identification.initial_query_type.tolist()
    assert init_types == [P, P, N, U]
    ref, y_hat = _reference_loss(frame, clip, target, init_types, 0.2, 0.1, "inside")
    np.testing.assert_allclose(initial.target.numpy(), y_hat, rtol=1e-10)
    assert initial.loss.item() == pytest.approx(ref, rel=1e-8)


def test_reductions():
    frame, clip = torch.randn(5, 4), torch.randn(5, 4)
    target = torch.tensor([0, 1, 2, 3, 0])
    none = EvidentialRetrievalLoss(reduction="none")(frame, clip, target)
    assert none.shape == (5,)
    torch.testing.assert_close(EvidentialRetrievalLoss(reduction="sum")(frame, clip, target), none.sum())
    torch.testing.assert_close(EvidentialRetrievalLoss()(frame, clip, target), none.mean())


def test_multi_hot_target_equals_index_target_without_duplicates():
    frame, clip = torch.randn(5, 4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    target = torch.tensor([0, 1, 2, 3, 0])
    loss_fn = EvidentialRetrievalLoss()
    torch.testing.assert_close(loss_fn(frame, clip, target), loss_fn(frame, clip, torch.eye(4)[target]))
    multi = torch.eye(4)[target]
    multi[0, 2] = 1
    details = loss_fn.details(frame, clip, multi)
    if details.identification.query_type[0] != N:
        np.testing.assert_allclose(details.target[0].numpy(), [0.5, 0, 0.5, 0])


@pytest.mark.parametrize("scaling", ["inside", "outside"])
def test_gradcheck_warm_up(scaling):
    # with calibration the label depends on the (detached) similarities, so finite differences would
    # see a term autograd deliberately drops; the warm-up loss is a plain differentiable function
    torch.manual_seed(0)
    frame = torch.randn(5, 4, dtype=torch.float64).tanh().requires_grad_()
    clip = torch.randn(5, 4, dtype=torch.float64).tanh().requires_grad_()
    target = torch.tensor([0, 1, 2, 3, 0])
    loss_fn = EvidentialRetrievalLoss(tau=0.5, tanh_scaling=scaling, calibrate=False)
    assert torch.autograd.gradcheck(lambda f, c: loss_fn(f, c, target), (frame, clip))


def test_calibrated_gradient_treats_label_as_constant():
    frame = HAND_BUILT.clone().requires_grad_()
    clip = HAND_BUILT.flip(0).clone().requires_grad_()
    details = EvidentialRetrievalLoss().details(frame, clip, torch.arange(4))
    details.loss.backward()
    f2, c2 = HAND_BUILT.clone().requires_grad_(), HAND_BUILT.flip(0).clone().requires_grad_()
    af, ac = evidence(f2) + 1, evidence(c2) + 1
    y_hat = details.target
    ref = sum(dirichlet_mse_loss(a, y_hat) for a in (af, ac, ds_combine(af, ac)))
    ref.backward()
    torch.testing.assert_close(frame.grad, f2.grad)
    torch.testing.assert_close(clip.grad, c2.grad)


def test_targets_are_detached():
    frame = torch.randn(4, 4, requires_grad=True)
    details = EvidentialRetrievalLoss().details(frame, frame.detach().clone(), torch.arange(4))
    assert not details.target.requires_grad and details.frame_alpha.requires_grad


@pytest.mark.parametrize("preset", [("paper", None), ("release", "activitynet")])
def test_survives_extremes(preset):
    loss_fn = EvidentialRetrievalLoss.from_preset(*preset)
    cases = [
        (torch.randn(6, 1) * 1e3, torch.zeros(6, dtype=torch.long)),  # K = 1, huge similarities
        (torch.full((6, 5), 0.4), torch.arange(6) % 5),  # all-equal similarities
        (torch.randn(6, 5) * 1e3, torch.arange(6) % 5),
    ]
    for sim, target in cases:
        s = sim.clone().requires_grad_()
        loss = loss_fn(s, sim.clone(), target)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(s.grad).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_and_autocast(dtype):
    loss_fn = EvidentialRetrievalLoss.from_preset("release", dataset="activitynet")  # τ = 0.04: e^25
    base = torch.randn(8, 6).tanh()
    frame = base.to(dtype).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(frame, base.to(dtype), torch.arange(8) % 6)
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss) and torch.isfinite(frame.grad).all()


def test_device(device):
    frame = torch.randn(6, 4, device=device, requires_grad=True)
    loss = EvidentialRetrievalLoss()(frame, torch.randn(6, 4, device=device), torch.arange(6, device=device) % 4)
    loss.backward()
    assert loss.device.type == device.type and frame.grad.device.type == device.type


def test_presets_and_overrides():
    paper = EvidentialRetrievalLoss.from_preset("paper")
    assert (paper.gamma, paper.tau, paper.tanh_scaling, paper.entropy_median, paper.matched) == (
        0.2, 0.1, "inside", "candidates", "any_positive")
    release = EvidentialRetrievalLoss.from_preset("release", dataset="activitynet", calibrate=False)
    assert (release.tau, release.tanh_scaling, release.entropy_median, release.matched) == (
        0.04, "outside", "batch", "argmax")
    assert release.calibrate is False and release.fusion == "uncertainty_dominant"
    identifier = release.identifier()
    assert (identifier.tau, identifier.matched, identifier.entropy_median) == (0.04, "argmax", "batch")
    assert EvidentialRetrievalLoss.from_preset("release", "act").tau == 0.04
    assert EvidentialRetrievalLoss.from_preset("paper", "activitynet").tau == 0.1
    with pytest.raises(TypeError, match="'gama'"):
        EvidentialRetrievalLoss.from_preset("release", "tvr", gama=0.3)


def test_errors():
    loss_fn = EvidentialRetrievalLoss()
    with pytest.raises(ValueError, match="frame_sim and clip_sim"):
        loss_fn(torch.randn(3, 4), torch.randn(4, 4), torch.arange(3))
    with pytest.raises(ValueError, match="query_video"):
        loss_fn(torch.randn(3, 4), torch.randn(3, 4), torch.arange(4))
    with pytest.raises(ValueError, match="frame_sim"):
        loss_fn(torch.full((3, 4), float("inf")), torch.randn(3, 4), torch.arange(3))
    with pytest.raises(ValueError, match="frame_sim"):
        loss_fn(torch.empty(0, 4), torch.empty(0, 4), torch.empty(0, dtype=torch.long))
