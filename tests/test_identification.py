"""Tests of uncertainty-guided identification (Holmes Eq. 10-14) and the partition fusion rules."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given
from scipy import special

from evidential_prvr import Identification, QueryType, UncertaintyGuidedIdentifier
from evidential_prvr.functional import fuse_query_types
from tests.strategies.evidential import similarity_batches

P, N, U = int(QueryType.PRECISE), int(QueryType.POLYSEMOUS), int(QueryType.UNDERDETERMINED)


def _reference_branch(sim: np.ndarray, target: np.ndarray, beta: float, tau: float, scaling: str, rule: str, computed=None):
    """Eq. 3-12 for one branch written out with NumPy loops and scipy's digamma (index targets).

    ``computed`` is the library's :class:`BranchIdentification`: its u, c and ξ must agree with the
    values computed here to 1e-9, and then the decision rules run on the library's values. Rows that
    are permutations of each other have the same ξ mathematically but may differ in the last bit
    between two summation orders; deciding on one set of floats keeps such exact ties from flipping a
    strict ``<`` against the median while the rules themselves are still checked independently.
    """
    e = np.exp(np.tanh(sim / tau)) if scaling == "inside" else np.exp(np.tanh(sim) / tau)
    alpha = e + 1.0
    b, k = sim.shape
    s = alpha.sum(1)
    u = k / s
    c = np.maximum(0.0, sim[np.arange(b), target])
    xi = np.array([sum(alpha[i, j] / s[i] * (special.digamma(s[i] + 1) - special.digamma(alpha[i, j] + 1))
                       for j in range(k)) for i in range(b)])
    if computed is not None:
        for name, ours in (("u", computed.epistemic), ("c", computed.consistency), ("xi", computed.aleatoric)):
            ref = {"u": u, "c": c, "xi": xi}[name]
            np.testing.assert_allclose(ours.numpy(), ref, rtol=1e-9, atol=1e-12, err_msg=name)
        u, c, xi = computed.epistemic.numpy(), computed.consistency.numpy(), computed.aleatoric.numpy()
    tp = [i for i in range(b) if sim[i, target[i]] >= sim[i].max()]
    beta_u = min(max(u[i] for i in tp), 1 - beta) if tp else 1 - beta
    beta_p = max(beta, min(c[i] for i in tp)) if tp else beta
    under = {i for i in range(b) if u[i] > beta_u}
    cand = [i for i in range(b) if i not in under and c[i] >= beta_p]
    if rule == "candidates":
        med = np.median(xi[cand]) if cand else np.nan
        precise = {i for i in cand if xi[i] < med}
    else:
        med = np.sort(xi)[(b - 1) // 2]
        precise = {i for i in cand if not xi[i] > med}
    return np.array([U if i in under else P if i in precise else N for i in range(b)])


@pytest.mark.parametrize("rule", ["candidates", "batch"])
@pytest.mark.parametrize("scaling,tau", [("inside", 0.1), ("outside", 0.3)])
@given(batch=similarity_batches(max_rows=10, max_cols=6))
def test_matches_numpy_reference(rule, scaling, tau, batch):
    frame, clip, target = batch
    ident = UncertaintyGuidedIdentifier(beta=0.3, tau=tau, tanh_scaling=scaling, entropy_median=rule)
    out = ident(frame, clip, target)
    ref_f = _reference_branch(frame.numpy(), target.numpy(), 0.3, tau, scaling, rule, out.frame)
    ref_c = _reference_branch(clip.numpy(), target.numpy(), 0.3, tau, scaling, rule, out.clip)
    np.testing.assert_array_equal(out.frame.query_type.numpy(), ref_f)
    np.testing.assert_array_equal(out.clip.query_type.numpy(), ref_c)
    np.testing.assert_array_equal(out.query_type.numpy(), np.maximum(ref_f, ref_c))
    assert out.query_type.dtype == torch.long
    assert (out.frame.uncertainty_threshold <= 0.7 + 1e-12) and (out.frame.consistency_threshold >= 0.3 - 1e-12)


# Four queries, four videos, positives on the diagonal: q0 precise (one strong positive, the rest weak),
# q1 matched but its evidence is spread evenly over all videos (a high-entropy candidate → polysemous),
# q2 not matched with a weak positive (low consistency → polysemous), q3 almost no evidence anywhere
# (high epistemic uncertainty → under-determined).
HAND_BUILT = torch.tensor(
    [
        [0.9, -0.9, -0.9, -0.9],
        [0.9, 0.95, 0.9, 0.9],
        [0.9, 0.9, 0.2, 0.9],
        [-0.5, -0.9, -0.9, -0.9],
    ],
    dtype=torch.float64,
)
HAND_TYPES = [P, N, N, U]


@pytest.mark.parametrize("rule", ["candidates", "batch"])
def test_hand_built_batch_paper_scaling(rule):
    ident = UncertaintyGuidedIdentifier(entropy_median=rule)
    out = ident(HAND_BUILT, HAND_BUILT.clone(), torch.arange(4))
    assert out.frame.query_type.tolist() == HAND_TYPES
    assert out.query_type.tolist() == HAND_TYPES
    assert out.frame.initial_query_type.tolist() == [P, P, N, U]
    assert out.frame.correctly_matched.tolist() == [True, True, False, False]


@pytest.mark.parametrize("dataset", ["tvr", "activitynet", "charades"])
def test_hand_built_batch_release_presets(dataset):
    ident = UncertaintyGuidedIdentifier.from_preset("release", dataset=dataset)
    out = ident(HAND_BUILT, HAND_BUILT.clone(), torch.arange(4))
    assert out.query_type.tolist() == HAND_TYPES


def test_hand_built_batch_paper_preset_and_multi_hot_target():
    ident = UncertaintyGuidedIdentifier.from_preset("paper")
    # the same video twice: columns 0 and 1 hold identical videos, q1's positives are both
    sim = torch.cat([HAND_BUILT[:, :1], HAND_BUILT], dim=1)
    sim[1, 0] = sim[1, 2]
    target = torch.zeros(4, 5)
    target[0, 0] = target[0, 1] = 1
    target[1, 0] = target[1, 2] = 1
    target[2, 3] = 1
    target[3, 4] = 1
    out = ident(sim, sim.clone(), target)
    assert out.frame.correctly_matched.tolist() == [True, True, False, False]
    assert out.frame.consistency.tolist() == pytest.approx([0.9, 0.95, 0.2, 0.0])


def _median_rule_batch() -> torch.Tensor:
    """Three candidates with increasing spread of evidence, then four low-consistency high-entropy queries."""
    k = 7
    sim = torch.full((7, k), -0.9, dtype=torch.float64)
    sim[:, 0] = 0.9  # every query's best score is video 0
    sim[1, 1:3] = 0.5
    sim[2, 1:5] = 0.6
    sim[3:, 1:] = 0.85  # q3..q6: positive (video 6) is not the arg max and ...
    sim[3:, 6] = 0.0  # ... has zero similarity: low consistency, polysemous
    return sim


def test_median_rules_differ_on_purpose():
    sim = _median_rule_batch()
    target = torch.tensor([0, 0, 0, 6, 6, 6, 6])
    paper = UncertaintyGuidedIdentifier(entropy_median="candidates")(sim, sim.clone(), target)
    release = UncertaintyGuidedIdentifier(entropy_median="batch")(sim, sim.clone(), target)
    # candidates rule: median of the three candidates' ξ is the middle one, only the lowest stays precise
    assert paper.query_type.tolist() == [P, N, N, N, N, N, N]
    # batch rule: the lower median of all seven ξ is above every candidate's ξ, so all three stay precise
    assert release.query_type.tolist() == [P, P, P, N, N, N, N]
    assert paper.frame.initial_query_type.tolist() == [P, P, P, N, N, N, N]


def test_empty_correctly_matched_set_uses_fallback_thresholds():
    sim = torch.tensor([[0.9, 0.1], [0.2, 0.8]], dtype=torch.float64)
    out = UncertaintyGuidedIdentifier(beta=0.25)(sim, sim.clone(), torch.tensor([1, 0]))
    assert not out.frame.correctly_matched.any()
    assert out.frame.uncertainty_threshold.item() == pytest.approx(0.75)
    assert out.frame.consistency_threshold.item() == pytest.approx(0.25)


@pytest.mark.parametrize("fusion", ["uncertainty_dominant", "confidence_dominant", "frame", "clip"])
def test_fusion_rules_against_set_formulas(fusion):
    pairs = list(itertools.product([P, N, U], repeat=2))
    frame_t = torch.tensor([a for a, _ in pairs])
    clip_t = torch.tensor([b for _, b in pairs])
    fused = fuse_query_types(frame_t, clip_t, fusion).tolist()
    for (a, b), got in zip(pairs, fused):
        if fusion == "uncertainty_dominant":  # Eq. 14 written as set membership
            if a == P and b == P:
                want = P
            elif (a, b) in {(N, P), (P, N), (N, N)}:
                want = N
            else:
                assert U in (a, b)
                want = U
        elif fusion == "confidence_dominant":
            want = P if P in (a, b) else N if N in (a, b) else U
        else:
            want = a if fusion == "frame" else b
        assert got == want


@pytest.mark.parametrize("fusion", ["uncertainty_dominant", "confidence_dominant", "frame", "clip"])
def test_identifier_applies_fusion(fusion):
    frame = HAND_BUILT
    clip = HAND_BUILT[[3, 2, 1, 0]][:, [3, 2, 1, 0]].clone()  # reversed queries and videos
    target = torch.arange(4)
    out = UncertaintyGuidedIdentifier(fusion=fusion)(frame, clip, target)
    assert torch.equal(out.query_type, fuse_query_types(out.frame.query_type, out.clip.query_type, fusion))
    assert isinstance(out, Identification)


def test_outputs_are_detached_and_on_device(device):
    sim = HAND_BUILT.to(device).float().requires_grad_()
    out = UncertaintyGuidedIdentifier()(sim, sim.detach().clone(), torch.arange(4, device=device))
    assert out.query_type.device.type == device.type
    assert not out.frame.epistemic.requires_grad and not out.frame.aleatoric.requires_grad


def test_survives_edge_cases():
    ident = UncertaintyGuidedIdentifier()
    one = torch.tensor([[0.3], [0.7]])
    out = ident(one, one.clone(), torch.tensor([0, 0]))  # K = 1
    assert out.query_type.shape == (2,)
    same = torch.full((5, 4), 0.2)
    out = ident(same, same.clone(), torch.tensor([0, 1, 2, 3, 0]))  # all-equal similarities
    assert out.frame.correctly_matched.all()
    big = torch.randn(6, 5) * 1e3
    out = ident(big, big.clone(), torch.arange(5).repeat(2)[:6])
    assert torch.isfinite(out.frame.aleatoric).all()
    half = ident(big.half(), big.bfloat16(), torch.arange(6) % 5)
    assert torch.isfinite(half.frame.epistemic).all()


def test_errors():
    ident = UncertaintyGuidedIdentifier()
    sim = torch.randn(3, 4)
    t = torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match="frame_sim and clip_sim"):
        ident(sim, torch.randn(3, 5), t)
    bad = sim.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="clip_sim"):
        ident(sim, bad, t)
    with pytest.raises(ValueError, match="frame_sim"):
        ident(torch.empty(0, 4), torch.empty(0, 4), torch.empty(0, dtype=torch.long))
    with pytest.raises(ValueError, match="query_video"):
        ident(sim, sim, torch.tensor([0, 1, 9]))


def test_presets():
    paper = UncertaintyGuidedIdentifier.from_preset("paper")
    assert (paper.tau, paper.tanh_scaling, paper.entropy_median, paper.beta, paper.fusion) == (
        0.1, "inside", "candidates", 0.3, "uncertainty_dominant")
    for dataset, tau in [("tvr", 0.05), ("activitynet", 0.04), ("charades", 0.08)]:
        rel = UncertaintyGuidedIdentifier.from_preset("release", dataset=dataset)
        assert (rel.tau, rel.tanh_scaling, rel.entropy_median, rel.beta, rel.fusion) == (
            tau, "outside", "batch", 0.3, "uncertainty_dominant")
