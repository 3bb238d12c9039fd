"""Every public function of ``evidential_prvr.functional`` returns finite values (and finite gradients
where it is differentiable) on valid input across extreme regimes: huge and tiny similarities, tiny
temperatures and regularisations, half precision, ties and masks.

``test_outputs_are_finite`` checks the values, ``test_gradients_are_finite`` the gradients of the
differentiable functions; a failing example is reported as ``Draw(seed, scale, dtype)`` and replays with
``CHECKS[name](Draw(seed, scale, dtype))``.

The default Hypothesis profile runs a few dozen examples per function; the ``long`` profile (see
``benchmarks/property_soak.py``) runs at least 10,000 per function.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from evidential_prvr import functional as F
from evidential_prvr.presets import holmes_settings
from evidential_prvr.uncertainty import CONFIDENCES, QueryTypeThresholds

# +inf (or -inf for the consistency) switches a test of the three-fold rule off: a documented value, not an overflow
_DISABLED = {"uncertainty": math.inf, "consistency": -math.inf, "aleatoric": math.inf, "runner_up": math.inf}


def _finite(value) -> bool:
    if isinstance(value, QueryTypeThresholds):
        return all(math.isfinite(v) or v == _DISABLED[name] for name, v in value.to_dict().items())
    if isinstance(value, torch.Tensor):
        return bool(torch.isfinite(value).all()) if value.is_floating_point() else True
    if isinstance(value, np.ndarray):
        return bool(np.isfinite(value).all())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    if isinstance(value, Gradients):
        return True  # judged by test_gradients_are_finite
    if isinstance(value, (float, int)):
        return bool(np.isfinite(value))
    if hasattr(value, "__dataclass_fields__"):
        # the median of xi over an empty candidate set is undefined: documented NaN, not a result
        undefined = {"entropy_threshold"} if "initial_query_type" in value.__dataclass_fields__ else set()
        return all(_finite(getattr(value, name)) for name in value.__dataclass_fields__ if name not in undefined)
    return True  # strings, None


@dataclass(frozen=True)
class Gradients:
    """Whether every gradient of a check was finite.

    Not a plain bool: a bool is an int, which ``_finite`` would read as a finite number whatever its value.
    """

    finite: bool


def _grads_finite(loss: torch.Tensor, *leaves: torch.Tensor) -> Gradients:
    grads = torch.autograd.grad(loss.sum(), leaves, allow_unused=True)
    return Gradients(all(g is None or bool(torch.isfinite(g).all()) for g in grads))


def _verdicts(value) -> list[Gradients]:
    if isinstance(value, Gradients):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for item in value for v in _verdicts(item)]
    return []


class Draw:
    """Random tensors from one seed, in an extreme regime chosen by Hypothesis."""

    def __init__(self, seed: int, scale: float, dtype: torch.dtype) -> None:
        self.gen = torch.Generator().manual_seed(seed)
        self.seed, self.scale, self.dtype = seed, scale, dtype

    def __repr__(self) -> str:  # a failing example replays with CHECKS[name](Draw(seed, scale, dtype))
        return f"Draw({self.seed}, {self.scale}, {self.dtype})"

    def int(self, low: int, high: int) -> int:
        return int(torch.randint(low, high + 1, (1,), generator=self.gen))

    def sim(self, *shape: int, grad: bool = False) -> torch.Tensor:
        x = ((torch.rand(*shape, generator=self.gen, dtype=torch.float64) * 2 - 1) * self.scale)
        if self.int(0, 1):  # coarse grid: ties
            x = x.round()
        return x.to(self.dtype).requires_grad_(grad)

    def labels(self, queries: int, videos: int) -> torch.Tensor:
        return torch.randint(0, videos, (queries,), generator=self.gen)

    def alpha(self, *shape: int) -> torch.Tensor:
        log_e = torch.rand(*shape, generator=self.gen, dtype=torch.float64) * 60 - 30  # evidence e^-30 .. e^30
        return (1 + log_e.exp()).to(self.dtype if self.dtype != torch.float16 else torch.float32)

    def mask(self, *shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=self.gen) < 0.7

    def gaussian(self, n: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
        mu = torch.randn(n, d, generator=self.gen, dtype=torch.float64) * min(self.scale, 10.0)
        logvar = torch.rand(n, d, generator=self.gen, dtype=torch.float64) * 8 - 6
        return mu, logvar


@st.composite
def draws(draw) -> Draw:
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.sampled_from([1e-4, 1.0, 3.0, 50.0, 1e3]))
    dtype = draw(st.sampled_from([torch.float64, torch.float32, torch.float16, torch.bfloat16]))
    return Draw(seed, scale, dtype)


def _preset(d: Draw) -> dict:
    settings = holmes_settings("release" if d.int(0, 1) else "paper", ("tvr", "activitynet", "charades")[d.int(0, 2)])
    i = settings.inter
    return dict(beta=i.beta, tau=i.tau, tanh_scaling=i.tanh_scaling, entropy_median=i.entropy_median,
                matched=i.matched, fusion=("uncertainty_dominant", "confidence_dominant", "frame", "clip")[d.int(0, 3)])


def _pair(d: Draw, grad=False):
    q, v = d.int(1, 12), d.int(1, 8)
    return d.sim(q, v, grad=grad), d.sim(q, v, grad=grad), d.labels(q, v)


def _transport(d: Draw, grad=False):
    b, mq, mc = d.int(1, 4), d.int(1, 6), d.int(1, 12)
    sim = d.sim(b, mq, mc, grad=grad)
    qmask, cmask = d.mask(b, mq), d.mask(b, mc)
    cmask[:, 0] = True
    return sim, qmask, cmask


def _fot_settings(d: Draw) -> dict:
    return dict(epsilon=(1e-3, 0.01, 0.1, 1.0)[d.int(0, 3)], dustbin_quantile=(0.1, 0.3, 0.9)[d.int(0, 2)],
                normalize=("minmax", None)[d.int(0, 1)], minmax_over=("block", "valid")[d.int(0, 1)],
                marginals=("release", "uniform")[d.int(0, 1)])


def check_evidence(d):
    sim = d.sim(5, 7)
    return F.evidence(sim, (0.01, 0.05, 0.1, 1.0)[d.int(0, 3)], ("inside", "outside")[d.int(0, 1)])


def check_marginal_problem(d):
    b, n, m = d.int(1, 3), d.int(1, 6), d.int(1, 6)
    a = torch.rand(b, n, generator=d.gen, dtype=torch.float64) * d.mask(b, n)
    w = torch.rand(b, m, generator=d.gen, dtype=torch.float64) * d.mask(b, m)
    a[:, 0] += 0.1
    w[:, 0] += 0.1
    return d.sim(b, n, m, grad=True), a / a.sum(1, keepdim=True), w / w.sum(1, keepdim=True)


def check_sinkhorn(d):
    scores, a, b = check_marginal_problem(d)
    plan = F.sinkhorn(scores, a, b, (1e-3, 0.05, 1.0)[d.int(0, 2)], n_iters=30)
    return plan, _grads_finite((plan * scores.detach()).sum(), scores)


def check_flexible_ot(d):
    sim, qmask, cmask = _transport(d, grad=True)
    out = F.flexible_ot(sim, qmask, cmask, **_fot_settings(d), grad="autodiff", n_iters=20, return_dustbin_value=True)
    return out, _grads_finite(out.plan.sum() + out.dustbin.sum(), sim)


def check_intra(d):
    sim, qmask, cmask = _transport(d, grad=True)
    settings = _fot_settings(d)
    loss = F.intra_video_loss(sim, qmask, cmask, **settings, tau=(0.01, 0.06, 0.5)[d.int(0, 2)],
                              tanh_scaling=("inside", "outside")[d.int(0, 1)],
                              assignment=("fot", "ot", "softmax")[d.int(0, 2)])
    return loss, _grads_finite(loss, sim)


def check_inter(d):
    frame, clip, labels = _pair(d, grad=True)
    loss = F.inter_video_loss(frame, clip, labels, **_preset(d), calibrate=bool(d.int(0, 1)))
    return loss, _grads_finite(loss, frame, clip)


def check_base(d):
    frame, clip, labels = _pair(d, grad=True)
    emb = d.sim(labels.numel(), 6, grad=True)
    loss = F.base_retrieval_loss(frame, clip, emb, labels, frame_logits=frame * 10, hard_negative_topk=d.int(1, 3))
    return loss, _grads_finite(loss, frame, clip, emb)


def check_base_details(d):
    frame, clip, labels = _pair(d)
    return F.base_retrieval_loss_details(frame, clip, d.sim(labels.numel(), 6), labels, hard_negative_topk=d.int(1, 3))


def check_triplet(d):
    frame, _, labels = _pair(d, grad=True)
    loss = F.triplet_ranking_loss(frame, labels, hard_negative_topk=(None, 2)[d.int(0, 1)])
    return loss, _grads_finite(loss, frame)


def check_info_nce(d):
    frame, _, labels = _pair(d, grad=True)
    loss = F.info_nce_loss(frame * 30, labels, video_to_text=("release", "paper")[d.int(0, 1)])
    return loss, _grads_finite(loss, frame)


def check_diversity(d):
    q = d.int(1, 10)
    emb = d.sim(q, 5, grad=True)
    loss = F.query_diversity_loss(emb, d.labels(q, 3), lam=(0.0, 0.5, 1.0)[d.int(0, 2)])
    return loss, _grads_finite(loss, emb)


def check_gaussian(name):
    def run(d):
        n, m, dim = d.int(1, 6), d.int(2 if name == "kl_margin" else 1, 6), d.int(1, 16)
        (smu, slv), (tmu, tlv) = d.gaussian(n, dim), d.gaussian(m, dim)
        if name == "kl_margin":
            return F.kl_margin(F.pairwise_gaussian_kl(smu, slv, tmu, tlv))
        if name == "prepare_kl_sources":
            return F.prepare_kl_sources(smu, slv)
        if name == "pairwise_gaussian_kl_prepared":
            return F.pairwise_gaussian_kl_prepared(F.prepare_kl_sources(smu, slv), tmu, tlv)
        if name == "reparameterised_sample":
            return F.reparameterised_sample(smu, slv, d.int(1, 4), generator=d.gen)
        if name.startswith("paired_"):  # every source against every target, by broadcasting
            return getattr(F, name)(smu[:, None], slv[:, None], tmu[None], tlv[None])
        return getattr(F, name)(smu, slv, tmu, tlv)
    return run


def check_contraction(d):
    n, dim = d.int(1, 6), d.int(1, 16)
    parts = [t.to(d.dtype).requires_grad_() for _ in range(3) for t in d.gaussian(n, dim)]
    if d.int(0, 1):  # a state already at its target
        parts[2:4] = [parts[4].detach().clone().requires_grad_(), parts[5].detach().clone().requires_grad_()]
    mu, logvar = F.bounded_contraction(*parts, rate=(0.05, 0.8, 1.0)[d.int(0, 2)])
    return mu, logvar, _grads_finite(mu.sum() + logvar.sum(), *parts)


def check_pac(d):
    b = d.int(1, 8)
    cost = (torch.rand(b, b, generator=d.gen, dtype=torch.float64) * d.scale).requires_grad_()
    loss = F.pac_loss(cost, (1e-3, 1.0, 64.0)[d.int(0, 2)])
    return loss, _grads_finite(loss, cost)


def check_bridge_distillation(d):
    n, dim = d.int(1, 6), d.int(1, 16)
    parts = [t.to(d.dtype).requires_grad_() for _ in range(2) for t in d.gaussian(n, dim)]
    loss = F.bridge_distillation_loss(*parts)
    return loss, _grads_finite(loss, *parts)


def check_hud_loss(name):
    # The KL terms' gradient grows like |sim| / tau^2 (HUD Eq. 13-14): for raw scores of 1000 at tau = 0.01 it
    # is ~2e5, beyond float16's range, and an infinite float16 gradient is then the correctly rounded value.
    # Gradients must be finite wherever the float64 gradient fits the input's dtype.
    def run(d):
        b = d.int(1, 8)
        h, a = d.sim(b, b, grad=True), d.sim(b, b, grad=True)
        tau = (0.01, 0.1, 1.0)[d.int(0, 2)]
        loss = getattr(F, name)(h, a, tau)
        h64, a64 = (x.detach().double().requires_grad_() for x in (h, a))
        exact = torch.autograd.grad(getattr(F, name)(h64, a64, tau), (h64, a64))
        if max(float(g.abs().max()) for g in exact) > torch.finfo(h.dtype).max / 2:
            return loss
        return loss, _grads_finite(loss, h, a)
    return run


def check_biased(d):
    k = d.int(1, 4)
    composed, target = d.sim(d.int(1, 4), k, 6, grad=True), d.sim(d.int(1, 4), k, 6)
    out = F.biased_max_similarity(composed, target, torch.zeros(k), token_matching=("max", "paired")[d.int(0, 1)])
    return out, _grads_finite(out, composed)


def check_max_similarity(d):
    q, v, m = d.int(1, 4), d.int(1, 4), d.int(1, 6)
    query, video = d.sim(q, 8, grad=True), d.sim(v, m, 8, grad=True)
    mask = d.mask(v, m)
    mask[:, 0] = True  # every video keeps a valid token
    out = F.max_similarity(query, video, mask, chunk_size=d.int(1, 4))
    return out, _grads_finite(out, query, video)


def check_identify(d):
    frame, clip, labels = _pair(d)
    return F.identify(frame, clip, labels, **_preset(d))


def check_calibrated(d):
    frame, clip, labels = _pair(d)
    return F.calibrated_target(frame, clip, labels, torch.randint(0, 3, labels.shape, generator=d.gen))


def _gallery(d: Draw, grad=False, target=None):
    """A gallery opinion of random scores: k from 1 to beyond the gallery size (or None), optional ranking,
    per-query scale and target, both evidence forms, small chunks."""
    q, v = d.int(1, 12), d.int(1, 8)
    frame, clip = d.sim(q, v, grad=grad), d.sim(q, v, grad=grad)
    ranking = d.sim(q, v, grad=grad) if d.int(0, 1) else None
    scale = None
    if d.int(0, 1):  # lambda_i from e^-5 to e^5: tau_i = tau / lambda_i from 150 tau down to tau / 150
        scale = (torch.rand(q, generator=d.gen, dtype=torch.float64) * 10 - 5).exp().to(d.dtype)
    if target is None:
        target = bool(d.int(0, 1))
    op = F.gallery_opinion(
        frame, clip, k=(None, *range(1, v + 3))[d.int(0, v + 2)], ranking=ranking, query_scale=scale,
        target=d.labels(q, v) if target else None, tau=(0.01, 0.05, 0.1, 1.0)[d.int(0, 3)],
        tanh_scaling=("inside", "outside")[d.int(0, 1)], query_chunk=d.int(1, 5),
    )
    return op, [x for x in (frame, clip, ranking) if x is not None]


def _opinion_sum(op) -> torch.Tensor:
    total = op.candidate_scores.sum() + op.fused_belief.sum() + op.conflict.sum()
    for branch in (op.frame, op.clip, op.fused):
        for name in ("uncertainty", "aleatoric", "top_belief", "consistency", "runner_up_consistency",
                     "label_consistency"):
            value = getattr(branch, name)
            if value is not None:
                total = total + value.sum()
    return total


def check_gallery_opinion(d):
    op, leaves = _gallery(d, grad=True)
    return op, _grads_finite(_opinion_sum(op), *leaves)


def _thresholds(d: Draw, op) -> QueryTypeThresholds:
    """Random thresholds: a quantile of each feature, or the value that switches the test off."""
    fused = op.fused
    def pick(x, disabled):
        return disabled if d.int(0, 2) == 0 else float(x.double().quantile(float(torch.rand(1, generator=d.gen))))
    return QueryTypeThresholds(pick(fused.uncertainty, math.inf), pick(fused.consistency, -math.inf),
                               pick(fused.aleatoric, math.inf), pick(fused.runner_up_consistency, math.inf))


def check_identify_query_types(d):
    op, _ = _gallery(d)
    th, fused = _thresholds(d, op), op.fused
    runner_up = fused.runner_up_consistency if th.runner_up != math.inf or d.int(0, 1) else None
    return F.identify_query_types(fused.uncertainty, fused.consistency, fused.aleatoric, th, runner_up=runner_up)


def check_fit_query_thresholds(d):
    op, _ = _gallery(d, target=True)
    fused = op.fused
    criterion = (dict(query_types=torch.randint(0, 3, (op.num_queries,), generator=d.gen)) if d.int(0, 1)
                 else dict(correct=op.correct))
    th = F.fit_query_thresholds(fused.uncertainty, fused.consistency, fused.aleatoric,
                                runner_up=fused.runner_up_consistency if d.int(0, 1) else None,
                                grid=d.int(2, 33), **criterion)
    return th, F.identify_query_types(fused.uncertainty, fused.consistency, fused.aleatoric, th,
                                      runner_up=fused.runner_up_consistency)


def check_batch_rule(d):
    op, _ = _gallery(d, target=True)
    return F.batch_rule_query_types(op, beta=(0.0, 0.3, 1.0)[d.int(0, 2)],
                                    entropy_median=("candidates", "batch")[d.int(0, 1)])


def check_macro_f1(d):
    q = d.int(1, 20)
    actual = torch.randint(0, 3, (q,), generator=d.gen)
    predicted = actual.clone() if d.int(0, 2) == 0 else torch.randint(0, 3, (q,), generator=d.gen)
    return F.macro_f1(predicted, actual)


def check_selective_confidence(d):
    op, leaves = _gallery(d, grad=True)
    kinds = [k for k in CONFIDENCES if k != "kl_margin" and (k != "margin" or op.k >= 2)]
    confidence = F.selective_confidence(op, kinds[d.int(0, len(kinds) - 1)])
    score_gradients = _grads_finite(confidence, *leaves)
    v = d.int(2, 8)
    cost = (torch.rand(op.num_queries, v, generator=d.gen, dtype=torch.float64) * d.scale).round().to(
        d.alpha(1, 1).dtype).requires_grad_()  # rounded: ties between the two lowest costs
    kl = F.selective_confidence(op, "kl_margin", kl_cost=cost)
    return confidence, kl, score_gradients, _grads_finite(kl, cost)


CHECKS: dict[str, Callable[[Draw], object]] = {
    "max_similarity": check_max_similarity,
    "evidence": check_evidence,
    "opinion": lambda d: F.opinion(d.alpha(4, 6)),
    "expected_entropy": lambda d: F.expected_entropy(d.alpha(4, 6)),
    "label_consistency": lambda d: F.label_consistency(*[x for x in _pair(d)][::2]),
    "positive_mask": lambda d: F.positive_mask(d.labels(5, 4), 4, 5),
    "normalized_target": lambda d: F.normalized_target(d.mask(5, 4), torch.float32),
    "correctly_matched": lambda d: F.correctly_matched(d.sim(5, 4), F.positive_mask(d.labels(5, 4), 4, 5),
                                                       ("any_positive", "argmax")[d.int(0, 1)]),
    "ds_combine": lambda d: F.ds_combine(d.alpha(3, 5), d.alpha(3, 5)),
    "dempster_shafer_fusion": lambda d: F.dempster_shafer_fusion(d.alpha(3, 5), d.alpha(3, 5)),
    "ds_conflict": lambda d: F.ds_conflict(d.alpha(3, 5), d.alpha(3, 5)),
    "dirichlet_mse_loss": lambda d: F.dirichlet_mse_loss(d.alpha(3, 5), torch.softmax(d.sim(3, 5).float(), -1).to(
        d.alpha(1, 1).dtype)),
    "identify": check_identify,
    "fuse_query_types": lambda d: F.fuse_query_types(torch.randint(0, 3, (6,), generator=d.gen),
                                                     torch.randint(0, 3, (6,), generator=d.gen), "uncertainty_dominant"),
    "ema_thresholds": lambda d: F.ema_thresholds(d.sim(2, 2).sigmoid(), d.sim(2, 2).sigmoid(),
                                                 torch.tensor(bool(d.int(0, 1))), torch.tensor(bool(d.int(0, 1))),
                                                 0.9),
    "calibrated_target": check_calibrated,
    "inter_video_loss": check_inter,
    "inter_video_loss_details": lambda d: F.inter_video_loss_details(*_pair(d), **_preset(d),
                                                                     calibrate=bool(d.int(0, 1))),
    "sinkhorn": check_sinkhorn,
    "select_sinkhorn_method": lambda d: F.select_sinkhorn_method(d.sim(2, 3, 4), (1e-3, 0.1)[d.int(0, 1)]),
    "scaling_range_bound": lambda d: F.scaling_range_bound(d.dtype),
    "flexible_ot": check_flexible_ot,
    "intra_video_loss": check_intra,
    "intra_video_loss_details": lambda d: F.intra_video_loss_details(
        *_transport(d), **_fot_settings(d)),
    "triplet_ranking_loss": check_triplet,
    "info_nce_loss": check_info_nce,
    "query_diversity_loss": check_diversity,
    "base_retrieval_loss": check_base,
    "base_retrieval_loss_details": check_base_details,
    "pairwise_gaussian_kl": check_gaussian("pairwise_gaussian_kl"),
    "prepare_kl_sources": check_gaussian("prepare_kl_sources"),
    "pairwise_gaussian_kl_prepared": check_gaussian("pairwise_gaussian_kl_prepared"),
    "pairwise_wasserstein2": check_gaussian("pairwise_wasserstein2"),
    "paired_gaussian_kl": check_gaussian("paired_gaussian_kl"),
    "paired_wasserstein2": check_gaussian("paired_wasserstein2"),
    "kl_margin": check_gaussian("kl_margin"),
    "reparameterised_sample": check_gaussian("reparameterised_sample"),
    "pac_loss": check_pac,
    "sinusoidal_time_embedding": lambda d: F.sinusoidal_time_embedding(torch.arange(d.int(1, 50)), 2 * d.int(1, 64)),
    "bridge_step_sizes": lambda d: F.bridge_step_sizes(d.int(1, 64)),
    "bounded_contraction": check_contraction,
    "bridge_distillation_loss": check_bridge_distillation,
    "combine_video_log_variances": lambda d: F.combine_video_log_variances(*d.gaussian(3, 4)),
    "biased_max_similarity": check_biased,
    "batch_classification_loss": check_hud_loss("batch_classification_loss"),
    "holistic_atomistic_consistency_loss": check_hud_loss("holistic_atomistic_consistency_loss"),
    "gallery_opinion": check_gallery_opinion,
    "identify_query_types": check_identify_query_types,
    "fit_query_thresholds": check_fit_query_thresholds,
    "batch_rule_query_types": check_batch_rule,
    "macro_f1": check_macro_f1,
    "selective_confidence": check_selective_confidence,
}


#: The checks that also differentiate (their result holds a :class:`Gradients`).
DIFFERENTIABLE = ("max_similarity", "sinkhorn", "flexible_ot", "intra_video_loss", "inter_video_loss", "triplet_ranking_loss",
                  "info_nce_loss", "query_diversity_loss", "base_retrieval_loss", "pac_loss", "bounded_contraction",
                  "bridge_distillation_loss",
                  "biased_max_similarity",
                  "batch_classification_loss", "holistic_atomistic_consistency_loss", "gallery_opinion",
                  "selective_confidence")


def test_every_public_function_is_covered():
    assert set(CHECKS) == set(F.__all__)


def test_the_differentiable_checks_are_the_ones_that_differentiate():
    returns_gradients = {name for name, check in CHECKS.items() if _verdicts(check(Draw(0, 1.0, torch.float64)))}
    assert returns_gradients == set(DIFFERENTIABLE)


@pytest.mark.parametrize("name", sorted(CHECKS))
@given(d=draws())
def test_outputs_are_finite(name, d):
    assert _finite(CHECKS[name](d)), name


@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
@given(d=draws())
def test_gradients_are_finite(name, d):
    verdicts = _verdicts(CHECKS[name](d))
    assume(verdicts)  # none: the true gradient is beyond the dtype's range (check_hud_loss)
    assert all(v.finite for v in verdicts), name


# Inputs on which these checks once found non-finite gradients (fixed: half the scaling-path range when
# differentiating; half-precision-aware min-max and L2-normalisation epsilons). Kept as fixed examples.
FOUND_NONFINITE_GRADIENTS = [
    ("sinkhorn", 10, 3.0, torch.float32),
    ("sinkhorn", 584637, 50.0, torch.float32),
    ("flexible_ot", 29, 3.0, torch.float64),
    ("flexible_ot", 97878, 3.0, torch.float32),
    ("intra_video_loss", 510509, 0.0001, torch.float16),
    ("query_diversity_loss", 8, 0.0001, torch.float16),
    ("base_retrieval_loss", 29, 1.0, torch.float16),
    ("base_retrieval_loss", 2714, 1.0, torch.float16),
]


@pytest.mark.parametrize(("name", "seed", "scale", "dtype"), FOUND_NONFINITE_GRADIENTS)
def test_inputs_that_once_gave_non_finite_gradients(name, seed, scale, dtype):
    assert all(v.finite for v in _verdicts(CHECKS[name](Draw(seed, scale, dtype))))


def test_the_hud_consistency_gradient_beyond_float16_is_finite_in_float32():
    """The soak's float16 example with an infinite gradient: the true gradient (float64) is beyond float16's
    range, so the overflow is the value's, and the same scores in float32 give finite gradients."""
    d = Draw(734906, 1000.0, torch.float16)
    b = d.int(1, 8)
    h, a = d.sim(b, b), d.sim(b, b)
    tau = (0.01, 0.1, 1.0)[d.int(0, 2)]
    h64, a64 = (x.double().requires_grad_() for x in (h, a))
    exact = torch.autograd.grad(F.holistic_atomistic_consistency_loss(h64, a64, tau), (h64, a64))
    assert max(float(g.abs().max()) for g in exact) > torch.finfo(torch.float16).max
    h32, a32 = (x.float().requires_grad_() for x in (h, a))
    loss = F.holistic_atomistic_consistency_loss(h32, a32, tau)
    assert _grads_finite(loss, h32, a32).finite
