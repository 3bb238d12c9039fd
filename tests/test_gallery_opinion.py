"""Gallery opinions (Holmes Eq. 3-5, 7, 9, 16 over the top-k candidates) against NumPy/scipy references."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy import special

from evidential_prvr.functional import (
    ds_combine,
    evidence,
    expected_entropy,
    gallery_opinion,
    opinion,
)
from evidential_prvr.metrics import recall_at_k
from tests.strategies.selective import gallery_scores


def np_branch(s: np.ndarray, tau: float, scaling: str, lam: float):
    """Evidence, alpha, u, belief and xi of one query's candidate scores (explicit sums, scipy digamma)."""
    tau_i = tau / lam
    e = np.exp(np.tanh(s / tau_i)) if scaling == "inside" else np.exp(np.tanh(s) / tau_i)
    alpha = e + 1.0
    strength = alpha.sum()
    xi = sum(a / strength * (special.digamma(strength + 1) - special.digamma(a + 1)) for a in alpha)
    return e, alpha, len(s) / strength, e / strength, xi


def np_ds_fusion(bf, uf, bc, uc):
    """Eq. 16 as printed: normalised by 1 - conflict, then mapped back to a Dirichlet (S = K / u)."""
    k = len(bf)
    conflict = sum(bf[i] * bc[j] for i in range(k) for j in range(k) if i != j)
    b = (bf * bc + bf * uc + bc * uf) / (1 - conflict)
    u = uf * uc / (1 - conflict)
    strength = k / u
    return b * strength + 1.0, conflict


def np_gallery(frame, clip, ranking, target, k, tau, scaling, lam):
    out = []
    for i in range(frame.shape[0]):
        kk = frame.shape[1] if k is None else min(k, frame.shape[1])
        idx = np.argsort(-ranking[i], kind="stable")[:kk]
        ef, af, uf, bf, xf = np_branch(frame[i, idx], tau, scaling, lam[i])
        ec, ac, uc, bc, xc = np_branch(clip[i, idx], tau, scaling, lam[i])
        alpha_o, conflict = np_ds_fusion(bf, uf, bc, uc)
        so = alpha_o.sum()
        xo = sum(a / so * (special.digamma(so + 1) - special.digamma(a + 1)) for a in alpha_o)
        out.append(dict(
            idx=idx, uf=uf, uc=uc, xf=xf, xc=xc, bf=bf[0], bc=bc[0], uo=kk / so, bo=(alpha_o - 1) / so, xo=xo,
            conflict=conflict, cf=max(0.0, frame[i, idx[0]]), cc=max(0.0, clip[i, idx[0]]),
            co=max(0.0, ranking[i, idx[0]]), lf=max(0.0, frame[i, target[i]]), lc=max(0.0, clip[i, target[i]]),
            lo=max(0.0, ranking[i, target[i]]), correct=bool(np.sum(ranking[i] >= ranking[i, target[i]]) == 1),
        ))
    return out


@pytest.mark.parametrize("scaling,tau", [("inside", 0.1), ("outside", 0.3), ("outside", 0.05)])
@given(problem=gallery_scores(), k=st.sampled_from([1, 3, 5, None]), scaled=st.booleans(),
       chunk=st.integers(1, 4))
def test_matches_numpy_reference(scaling, tau, problem, k, scaled, chunk):
    frame, clip, ranking, target = problem
    lam = torch.linspace(0.5, 1.5, frame.shape[0], dtype=torch.float64) if scaled else None
    op = gallery_opinion(frame, clip, k=k, ranking=ranking, query_scale=lam, target=target, tau=tau,
                         tanh_scaling=scaling, query_chunk=chunk)
    ref = np_gallery(frame.numpy(), clip.numpy(), ranking.numpy(), target.numpy(), k, tau, scaling,
                     np.ones(frame.shape[0]) if lam is None else lam.numpy())
    np.testing.assert_array_equal(op.candidates.numpy(), np.stack([r["idx"] for r in ref]))
    expected_scores = np.take_along_axis(ranking.numpy(), op.candidates.numpy(), 1)
    np.testing.assert_allclose(op.candidate_scores.numpy(), expected_scores)
    checks = {
        "uf": op.frame.uncertainty, "uc": op.clip.uncertainty, "uo": op.fused.uncertainty,
        "xf": op.frame.aleatoric, "xc": op.clip.aleatoric, "xo": op.fused.aleatoric,
        "bf": op.frame.top_belief, "bc": op.clip.top_belief, "conflict": op.conflict,
        "cf": op.frame.consistency, "cc": op.clip.consistency, "co": op.fused.consistency,
        "lf": op.frame.label_consistency, "lc": op.clip.label_consistency, "lo": op.fused.label_consistency,
    }
    for name, ours in checks.items():
        np.testing.assert_allclose(ours.numpy(), [r[name] for r in ref], rtol=1e-9, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(op.fused_belief.numpy(), np.stack([r["bo"] for r in ref]), rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(op.correct.numpy(), [r["correct"] for r in ref])


@given(problem=gallery_scores(max_videos=8))
def test_full_gallery_agrees_with_the_library_equations(problem):
    """k = V: every quantity equals the library's own Eq. 3-5, 9 and 16 functions on the full rows."""
    frame, clip, ranking, target = problem
    op = gallery_opinion(frame, clip, k=None, ranking=ranking, tau=0.2, tanh_scaling="outside")
    order = op.candidates
    af = evidence(frame.gather(1, order), 0.2, "outside") + 1
    ac = evidence(clip.gather(1, order), 0.2, "outside") + 1
    ao = ds_combine(af, ac)
    torch.testing.assert_close(op.frame.uncertainty, opinion(af).uncertainty)
    torch.testing.assert_close(op.clip.aleatoric, expected_entropy(ac))
    torch.testing.assert_close(op.fused.uncertainty, opinion(ao).uncertainty)
    torch.testing.assert_close(op.fused_belief, opinion(ao).belief)
    torch.testing.assert_close(op.fused.aleatoric, expected_entropy(ao))


def test_correct_flags_agree_with_recall_at_1():
    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 4, (50, 7), generator=gen).double()  # many ties, which count against the model
    target = torch.randint(0, 7, (50,), generator=gen)
    op = gallery_opinion(scores, scores, ranking=scores, target=target, k=3)
    assert 100.0 * float(op.correct.double().mean()) == pytest.approx(recall_at_k(scores, target, ks=(1,))["R@1"])


def test_default_ranking_is_the_branch_mean_and_k_is_capped():
    frame = torch.tensor([[0.1, 0.9, 0.3]])
    clip = torch.tensor([[0.7, 0.0, 0.2]])  # means 0.4, 0.45, 0.25
    op = gallery_opinion(frame, clip, k=10)
    assert op.k == 3 and op.candidates.tolist() == [[1, 0, 2]]
    assert op.candidate_scores[0].tolist() == pytest.approx([0.45, 0.4, 0.25])
    assert op.fused.consistency.tolist() == pytest.approx([0.45])


def test_top_k_opinion_does_not_depend_on_the_gallery_size():
    """Adding background videos that stay out of the top-k leaves the opinion unchanged; with k = V u drifts."""
    gen = torch.Generator().manual_seed(1)
    top = torch.tensor([[0.7, 0.6, 0.2, 0.1, 0.05]])
    small = gallery_opinion(top, top, k=5, tau=0.1)
    full_u = []
    for extra in (0, 100, 1000, 10000):
        background = -0.3 + 0.05 * torch.rand(1, extra, generator=gen)
        scores = torch.cat([top, background], 1)
        big = gallery_opinion(scores, scores, k=5, tau=0.1)
        torch.testing.assert_close(big.fused.uncertainty, small.fused.uncertainty)
        torch.testing.assert_close(big.fused.aleatoric, small.fused.aleatoric)
        full_u.append(float(gallery_opinion(scores, scores, k=None, tau=0.1).frame.uncertainty))
    # K = V: u -> 1 / (1 + mean background evidence) whatever the top scores (the documented limit)
    e_bg = float(torch.exp(torch.tanh(torch.tensor(-0.275) / 0.1)))
    assert full_u[-1] == pytest.approx(1 / (1 + e_bg), rel=0.01)
    assert abs(full_u[-1] - 1 / (1 + e_bg)) < abs(full_u[0] - 1 / (1 + e_bg))


def test_query_scale_is_an_inverse_temperature():
    s = torch.tensor([[0.5, 0.1, -0.2], [0.3, 0.2, 0.1]], dtype=torch.float64)
    lam = torch.tensor([2.0, 0.5], dtype=torch.float64)
    for scaling in ("inside", "outside"):
        scaled = gallery_opinion(s, s, k=3, query_scale=lam, tau=0.2, tanh_scaling=scaling)
        for i, tau_i in enumerate((0.1, 0.4)):
            row = gallery_opinion(s[i : i + 1], s[i : i + 1], k=3, tau=tau_i, tanh_scaling=scaling)
            torch.testing.assert_close(scaled.frame.uncertainty[i : i + 1], row.frame.uncertainty)
            torch.testing.assert_close(scaled.fused.aleatoric[i : i + 1], row.fused.aleatoric)
    ones = gallery_opinion(s, s, query_scale=torch.ones(2, dtype=torch.float64), tau=0.2)
    torch.testing.assert_close(ones.fused.uncertainty, gallery_opinion(s, s, tau=0.2).fused.uncertainty)


def test_gradcheck_float64():
    gen = torch.Generator().manual_seed(3)
    frame = torch.rand(3, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    clip = torch.rand(3, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    ranking = torch.rand(3, 5, generator=gen, dtype=torch.float64)  # fixed candidate sets

    def outputs(f, c):
        op = gallery_opinion(f, c, k=3, ranking=ranking, tau=0.3, tanh_scaling="outside")
        return (op.fused.uncertainty, op.fused.aleatoric, op.fused.top_belief, op.frame.aleatoric, op.conflict)

    assert torch.autograd.gradcheck(outputs, (frame, clip))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_are_computed_in_float32(dtype, device):
    s = torch.tensor([[0.9, -0.9, 0.1, 0.0]], dtype=dtype, device=device)
    op = gallery_opinion(s, s, k=3, tau=0.04, tanh_scaling="outside")  # e^25 overflows float16
    assert op.fused.uncertainty.dtype == torch.float32 and op.fused.uncertainty.device.type == device.type
    for x in (op.fused.uncertainty, op.fused.aleatoric, op.fused_belief, op.conflict, op.frame.top_belief):
        assert torch.isfinite(x).all()


@given(problem=gallery_scores(scale=1e3), tau=st.sampled_from([1e-3, 0.01, 0.05]))
def test_extreme_scores_stay_finite(problem, tau):
    frame, clip, ranking, target = problem
    for dtype in (torch.float32, torch.float64):
        op = gallery_opinion(frame.to(dtype), clip.to(dtype), ranking=ranking.to(dtype), k=20, tau=tau,
                             tanh_scaling="outside", target=target)
        for x in (op.fused.uncertainty, op.fused.aleatoric, op.fused_belief, op.conflict, op.clip.aleatoric):
            assert torch.isfinite(x).all()
        assert (op.fused.uncertainty >= 0).all() and (op.fused.uncertainty <= 1).all()


def test_device_and_dtype_follow_the_inputs(device):
    s = torch.rand(4, 6, device=device)
    op = gallery_opinion(s, s, k=2, target=torch.zeros(4, dtype=torch.long, device=device))
    assert op.candidates.device.type == device.type and op.candidates.dtype == torch.int64
    assert op.fused.uncertainty.dtype == torch.float32 and op.correct.dtype == torch.bool


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(frame_scores=torch.rand(3)), ValueError, "frame_scores"),
        (dict(frame_scores=torch.ones(2, 3, dtype=torch.long)), TypeError, "frame_scores"),
        (dict(clip_scores=torch.rand(2, 4)), ValueError, "clip_scores"),
        (dict(frame_scores=torch.rand(0, 3), clip_scores=torch.rand(0, 3)), ValueError, "frame_scores"),
        (dict(ranking=torch.rand(3, 3)), ValueError, "ranking"),
        (dict(query_scale=torch.ones(3)), ValueError, "query_scale"),
        (dict(query_scale=torch.tensor([1.0, -1.0])), ValueError, "query_scale must be > 0"),
        (dict(target=torch.tensor([0.0, 1.0])), TypeError, "target"),
        (dict(target=torch.tensor([0, 3])), ValueError, "target"),
        (dict(target=torch.tensor([0])), ValueError, "target"),
        (dict(k=0), ValueError, "k"),
        (dict(tau=0.0), ValueError, "tau"),
        (dict(tanh_scaling="middle"), ValueError, "tanh_scaling"),
        (dict(query_chunk=0), ValueError, "query_chunk"),
        (dict(frame_scores=torch.tensor([[float("nan"), 0.0, 0.1]] * 2)), ValueError, "frame_scores must be finite"),
        (dict(clip_scores=torch.rand(2, 3, device="meta")), ValueError, "frame_scores and clip_scores"),
        (dict(target=torch.zeros(2, dtype=torch.long, device="meta")), ValueError, "frame_scores and target"),
    ],
)
def test_bad_input_names_the_argument(kwargs, error, match):
    args = dict(frame_scores=torch.rand(2, 3), clip_scores=torch.rand(2, 3))
    args.update(kwargs)
    frame, clip = args.pop("frame_scores"), args.pop("clip_scores")
    with pytest.raises(error, match=match):
        gallery_opinion(frame, clip, **args)


def test_value_checks_follow_validate_args():
    s = torch.tensor([[float("nan"), 0.0, 0.1]])
    with pytest.raises(ValueError, match="finite"):
        gallery_opinion(s, s, validate_args=True)
    op = gallery_opinion(s, s, validate_args=False)
    assert op.fused.uncertainty.shape == (1,) and torch.isnan(op.fused.uncertainty).all()  # unchecked: NaN flows
