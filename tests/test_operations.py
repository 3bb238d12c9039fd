"""Every public operation through the shared harness (:mod:`tests.operation_tester`): Holmes' training operations
here (scores, evidence, fusion, identification, L_inter, transport, L_intra, L_base and the whole criterion),
the Gaussian, DAB and HUD operations in ``test_operations_probabilistic.py``, the retrieval-time ones in
``test_operations_uncertainty.py``. The last test fails while a public function or module has no entry."""

from __future__ import annotations

import torch

import evidential_prvr as ep
from evidential_prvr import functional as F

from . import test_operations_probabilistic, test_operations_uncertainty
from .operation_tester import FLOAT, OperationTester, bad, input_dtype, missing_entries, uniform

#: Six queries over four videos, two or one per video; every video has a query.
QUERY_VIDEO = torch.tensor([0, 0, 1, 2, 2, 3])
Q, V = 6, 4


def _scores(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Frame and clip scores ``[Q, V]`` and the positives of :data:`QUERY_VIDEO`."""
    return uniform(Q, V, dtype=dtype), uniform(Q, V, dtype=dtype, seed=1), QUERY_VIDEO


def _alphas(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Two Dirichlet parameter tensors ``[Q, V]`` in ``[1, 4)``."""
    return uniform(Q, V, dtype=dtype, low=1.0, high=4.0), uniform(Q, V, dtype=dtype, seed=1, low=1.0, high=4.0)


def _groups(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query-clip similarities of two videos ``[2, 3, 5]`` with a padded query and a padded clip."""
    query_mask = torch.tensor([[True, True, True], [True, True, False]])
    clip_mask = torch.tensor([[True, True, True, True, True], [True, True, True, True, False]])
    return uniform(2, 3, 5, dtype=dtype, seed=2), query_mask, clip_mask


def _branch(prefix: str) -> dict[str, tuple[tuple[int, ...], object]]:
    """The outputs of one branch of an :class:`~evidential_prvr.Identification`."""
    return {f"{prefix}.query_type": ((Q,), torch.int64), f"{prefix}.initial_query_type": ((Q,), torch.int64),
            f"{prefix}.epistemic": ((Q,), FLOAT), f"{prefix}.consistency": ((Q,), FLOAT),
            f"{prefix}.aleatoric": ((Q,), FLOAT), f"{prefix}.correctly_matched": ((Q,), torch.bool),
            f"{prefix}.uncertainty_threshold": ((), FLOAT), f"{prefix}.consistency_threshold": ((), FLOAT),
            f"{prefix}.entropy_threshold": ((), FLOAT)}


def _identification(prefix: str = "") -> dict[str, tuple[tuple[int, ...], object]]:
    """The outputs of an :class:`~evidential_prvr.Identification` (under ``prefix``)."""
    return {f"{prefix}query_type": ((Q,), torch.int64), f"{prefix}initial_query_type": ((Q,), torch.int64),
            **_branch(f"{prefix}frame"), **_branch(f"{prefix}clip")}


SCALAR = {"": ((), FLOAT)}


# --- scores, evidence, opinions (Holmes Eq. 1, 3-9) ------------------------------------------------------------------
class TestMaxSimilarity(OperationTester):
    function = staticmethod(F.max_similarity)
    settings = {"chunk_size": 3}
    outputs = {"": ((Q, V), FLOAT)}
    differentiable = (0, 1)
    module_equals_function_skip = "a function only: the modules take its scores"

    def inputs(self, dtype):
        video_mask = torch.tensor([[True, True, True], [True, False, True], [True, True, False], [False, True, True]])
        return uniform(Q, 8, dtype=dtype), uniform(V, 3, 8, dtype=dtype, seed=1), video_mask

    def bad_cases(self):
        query, video, mask = self.inputs(torch.float32)
        return [bad("video_emb", r"\[4, 3, 8\] \(d of query_emb\), got shape \(4, 3, 5\)", query, video[..., :5], mask),
                bad("video_mask", r"at least one valid token per video; videos \[1\] have none", query, video,
                    mask & torch.tensor([True, False, True, True]).unsqueeze(1)),
                bad("chunk_size", "chunk_size must be >= 1, got 0", query, video, mask, chunk_size=0)]


class TestEvidence(OperationTester):
    function = staticmethod(F.evidence)
    settings = {"tau": 0.2}
    outputs = {"": ((Q, V), FLOAT)}
    module_equals_function_skip = "a function only: the losses take its evidence"

    def inputs(self, dtype):
        return (uniform(Q, V, dtype=dtype),)

    def bad_cases(self):
        sim = uniform(Q, V, dtype=torch.float32)
        return [bad("tau", r"tau must be a finite number > 0, got 0.0", sim, tau=0.0),
                bad("tanh_scaling", r"tanh_scaling must be one of 'inside', 'outside'; got 'middle'", sim,
                    tanh_scaling="middle"),
                bad("sim", "sim must be finite, got NaN or Inf", torch.tensor([[float("nan")]]), validate_args=True)]


class TestOpinion(OperationTester):
    function = staticmethod(F.opinion)
    outputs = {"belief": ((Q, V), FLOAT), "uncertainty": ((Q,), FLOAT), "strength": ((Q,), FLOAT)}
    module_equals_function_skip = "a function only: the modules read its opinion"

    def inputs(self, dtype):
        return (_alphas(dtype)[0],)

    def bad_cases(self):
        alpha = _alphas(torch.float32)[0]
        return [bad("alpha", r"alpha must be >= 1 everywhere \(alpha = evidence \+ 1\), got min 0\.", alpha - 1.0,
                    validate_args=True),
                bad("alpha", r"non-empty .* got shape \(0, 4\)", alpha[:0])]


class TestExpectedEntropy(OperationTester):
    function = staticmethod(F.expected_entropy)
    outputs = {"": ((Q,), FLOAT)}
    module_equals_function_skip = "a function only: the modules read its entropy"

    def inputs(self, dtype):
        return (_alphas(dtype)[0],)

    def bad_cases(self):
        alpha = _alphas(torch.float32)[0]
        return [bad("alpha", r"alpha must be > 0 everywhere, got min -", alpha - 4.0, validate_args=True),
                bad("alpha", "alpha must have a floating-point dtype, got torch.int64", alpha.long())]


class TestLabelConsistency(OperationTester):
    function = staticmethod(F.label_consistency)
    outputs = {"": ((Q,), FLOAT)}
    module_equals_function_skip = "a function only: the modules read its consistency"

    def inputs(self, dtype):
        return _scores(dtype)[0], QUERY_VIDEO

    def bad_cases(self):
        sim = _scores(torch.float32)[0]
        return [bad("query_video", r"query_video must have shape \[6\] \(one video index per query\), got \(5,\)",
                    sim, QUERY_VIDEO[:5]),
                bad("sim", r"sim must be a 2-D tensor, got shape \(6,\)", sim[:, 0], QUERY_VIDEO)]


class TestPositiveMask(OperationTester):
    function = staticmethod(F.positive_mask)
    outputs = {"": ((Q, V), torch.bool)}
    gradcheck_skip = "a boolean mask"
    float64_skip = "no floating input"
    half_precision_skip = "no floating input"
    module_equals_function_skip = "a function only: every loss validates its positives with it"

    def inputs(self, dtype):
        return QUERY_VIDEO, V, Q

    def bad_cases(self):
        return [bad("query_video", r"indices must lie in \[0, 4\), got values in \[4, 7\]", QUERY_VIDEO + 4, V, Q),
                bad("query_video", r"must have shape \[6, 4\] \(multi-hot\), got \(6, 3\)", torch.ones(Q, 3), V, Q),
                bad("query_video", "must have an integer dtype, got torch.float32", QUERY_VIDEO.float(), V, Q)]


class TestNormalizedTarget(OperationTester):
    function = staticmethod(F.normalized_target)
    outputs = {"": ((Q, V), FLOAT)}
    gradcheck_skip = "a label made of a boolean mask"
    module_equals_function_skip = "a function only: the losses build their labels with it"

    def inputs(self, dtype):
        multi_hot = F.positive_mask(QUERY_VIDEO, V, Q) | (torch.arange(V) == 3)  # two positives in most rows
        return multi_hot, dtype

    def bad_cases(self):
        mask = F.positive_mask(QUERY_VIDEO, V, Q)
        return [bad("mask", "mask must be a bool tensor .* got torch.int64", mask.long(), torch.float32),
                bad("dtype", "dtype must be a floating-point torch.dtype, got torch.int64", mask, torch.int64)]


class TestCorrectlyMatched(OperationTester):
    function = staticmethod(F.correctly_matched)
    settings = {"rule": "argmax"}
    outputs = {"": ((Q,), torch.bool)}
    gradcheck_skip = "a discrete decision"
    module_equals_function_skip = "a function only: the identification applies it"

    def inputs(self, dtype):
        return _scores(dtype)[0], F.positive_mask(QUERY_VIDEO, V, Q)

    def bad_cases(self):
        sim, mask = self.inputs(torch.float32)
        return [bad("rule", r"rule must be one of 'any_positive', 'argmax'; got 'first'", sim, mask, rule="first"),
                bad("mask", r"mask must have shape \(6, 4\) like sim, got \(6, 3\)", sim, mask[:, :3])]


# --- Dempster-Shafer fusion and the evidential loss (Holmes Eq. 16-17) ------------------------------------------------
class TestDSCombine(OperationTester):
    function = staticmethod(F.ds_combine)
    outputs = {"": ((Q, V), FLOAT)}
    differentiable = (0, 1)
    module_equals_function_skip = "DempsterShaferFusion is the module of dempster_shafer_fusion, whose alpha this is"

    def inputs(self, dtype):
        return _alphas(dtype)

    def bad_cases(self):
        alpha, _ = _alphas(torch.float32)
        return [bad("alpha_b", r"must have the same shape, got \(6, 4\) and \(6, 3\)", alpha, alpha[:, :3]),
                bad("alpha_a", r"too large for torch.float32: .* \(largest inputs 1e\+20 and 1e\+20\)", torch.full((1, 3), 1e20),
                    torch.full((1, 3), 1e20))]


class TestDempsterShaferFusion(OperationTester):
    function = staticmethod(F.dempster_shafer_fusion)
    module = ep.DempsterShaferFusion
    outputs = {"alpha": ((Q, V), FLOAT), "belief": ((Q, V), FLOAT), "uncertainty": ((Q,), FLOAT),
               "conflict": ((Q,), FLOAT)}
    differentiable = (0, 1)

    def inputs(self, dtype):
        return _alphas(dtype)

    def bad_cases(self):
        alpha, _ = _alphas(torch.float32)
        return [bad("alpha_b", r"must have the same shape, got \(6, 4\) and \(6, 3\)", alpha, alpha[:, :3]),
                bad("alpha_b", r"alpha_b must be >= 1 everywhere .* got min -", alpha, -alpha, validate_args=True)]


class TestDSConflict(OperationTester):
    function = staticmethod(F.ds_conflict)
    outputs = {"": ((Q,), FLOAT)}
    differentiable = (0, 1)
    module_equals_function_skip = "DempsterShaferFusion is the module of dempster_shafer_fusion, whose conflict this is"

    def inputs(self, dtype):
        return _alphas(dtype)

    def bad_cases(self):
        alpha, _ = _alphas(torch.float32)
        return [bad("alpha_a", r"alpha_a must have at least 1 dimension .* got a 0-D tensor", torch.tensor(2.0),
                    torch.tensor(2.0)),
                bad("alpha_b", r"alpha_b must be finite, got NaN or Inf", alpha, torch.full_like(alpha, float("inf")),
                    validate_args=True)]


class TestDirichletMSELoss(OperationTester):
    function = staticmethod(F.dirichlet_mse_loss)
    settings = {"reduction": "sum"}
    outputs = SCALAR
    module_equals_function_skip = "a function only: the evidential losses apply it (Eq. 17)"
    compiles = True

    def inputs(self, dtype):
        target = torch.nn.functional.one_hot(QUERY_VIDEO, V).to(dtype)
        return uniform(Q, V, dtype=dtype, low=1.0, high=5.0), target

    def bad_cases(self):
        alpha, target = self.inputs(torch.float32)
        return [bad("target", r"the same shape as alpha \(6, 4\), got \(6, 3\)", alpha, target[:, :3]),
                bad("alpha", r"alpha must be > 0 everywhere, got min -", alpha - 2.0, target, validate_args=True),
                bad("reduction", "reduction must be one of 'mean', 'sum', 'none'; got 'max'", alpha, target, reduction="max")]


# --- identification and L_inter (Holmes Eq. 10-18) --------------------------------------------------------------------
class TestIdentify(OperationTester):
    function = staticmethod(F.identify)
    module = ep.UncertaintyGuidedIdentifier
    settings = {"beta": 0.4, "tau": 0.2}
    outputs = _identification()
    gradcheck_skip = "a discrete decision, detached by definition"

    def inputs(self, dtype):
        return _scores(dtype)

    def bad_cases(self):
        frame, clip, qv = _scores(torch.float32)
        return [bad("beta", r"beta must lie in \[0.0, 1.0\], got -0.5", frame, clip, qv, beta=-0.5),
                bad("fusion", "fusion must be one of .*; got 'average'", frame, clip, qv, fusion="average"),
                bad("clip_sim", r"frame_sim and clip_sim must have the same shape .* got \(6, 4\) and \(6, 3\)",
                    frame, clip[:, :3], qv)]


class TestFuseQueryTypes(OperationTester):
    function = staticmethod(F.fuse_query_types)
    settings = {"fusion": "confidence_dominant"}
    outputs = {"": ((Q,), torch.int64)}
    gradcheck_skip = "a discrete decision"
    float64_skip = "no floating input"
    half_precision_skip = "no floating input"
    module_equals_function_skip = "a function only: the identification applies it"

    def inputs(self, dtype):
        return torch.tensor([0, 1, 2, 0, 1, 2]), torch.tensor([2, 2, 1, 0, 0, 1])

    def bad_cases(self):
        frame, clip = self.inputs(torch.float32)
        return [bad("fusion", "fusion must be one of .*; got 'average'", frame, clip, fusion="average"),
                bad("clip_type", r"the same shape, got \(6,\) and \(5,\)", frame, clip[:5]),
                bad("frame_type", r"must have an integer dtype \(QueryType codes\), got torch.float32", frame.float(), clip)]


class TestEMAThresholds(OperationTester):
    function = staticmethod(F.ema_thresholds)
    settings = {"decay": 0.75}
    outputs = {"": ((2,), FLOAT)}
    differentiable = (0, 1)
    module_equals_function_skip = "UncertaintyGuidedIdentifier(threshold_decay=...) carries its state; its own tests"

    def inputs(self, dtype):
        batch, running = torch.tensor([0.6, 0.4], dtype=dtype), torch.tensor([0.7, 0.3], dtype=dtype)
        return batch, running, torch.tensor(True), torch.tensor(True)

    def bad_cases(self):
        batch, running, observed, seen = self.inputs(torch.float32)
        return [bad("decay", r"decay must lie in \[0.0, 1.0\), got 1.0", batch, running, observed, seen, decay=1.0),
                bad("running", r"running must have the shape of batch \(2,\), got \(3,\)", batch, torch.ones(3),
                    observed, seen),
                bad("observed", "observed and seen must be bool tensors, got torch.int64", batch, running,
                    torch.tensor(1), seen)]


class TestCalibratedTarget(OperationTester):
    function = staticmethod(F.calibrated_target)
    settings = {"gamma": 0.3}
    outputs = {"": ((Q, V), FLOAT)}
    gradcheck_skip = "the calibrated label is a constant target, detached by definition (Eq. 15)"
    module_equals_function_skip = "a function only: EvidentialRetrievalLoss calibrates with it"

    def inputs(self, dtype):
        return *_scores(dtype), torch.tensor([0, 1, 2, 1, 0, 1])

    def bad_cases(self):
        frame, clip, qv, types = self.inputs(torch.float32)
        return [bad("gamma", r"gamma must lie in \[0.0, 1.0\], got 1.5", frame, clip, qv, types, gamma=1.5),
                bad("query_type", r"integer tensor of shape \[6\], got torch.int64 \(5,\)", frame, clip, qv, types[:5]),
                bad("query_type", r"QueryType values 0, 1 or 2, got values in \[3, 5\]", frame, clip, qv, types + 3,
                    validate_args=True)]


class TestInterVideoLoss(OperationTester):
    function = staticmethod(F.inter_video_loss)
    module = ep.EvidentialRetrievalLoss
    settings = {"gamma": 0.3, "tau": 0.2}
    outputs = SCALAR
    differentiable = (0, 1)
    compiles = True

    def inputs(self, dtype):
        return _scores(dtype)

    def bad_cases(self):
        frame, clip, qv = _scores(torch.float32)
        return [bad("clip_sim", r"got \(6, 4\) and \(5, 4\)", frame, clip[:5], qv),
                bad("query_video", r"query_video must hold one entry per row: shape \[6\]", frame, clip, qv[:5]),
                bad("beta", r"beta must lie in \[0.0, 1.0\], got 2.0", frame, clip, qv, beta=2.0),
                bad("frame_sim", r"= \[6, 4\], got \(4, 6\): it looks transposed", frame.T, clip.T, qv)]


class TestInterVideoLossDetails(OperationTester):
    function = staticmethod(F.inter_video_loss_details)
    module = ep.EvidentialRetrievalLoss
    settings = {"gamma": 0.3, "tau": 0.2}
    outputs = {"loss": ((), FLOAT), "frame_loss": ((), FLOAT), "clip_loss": ((), FLOAT),
               "fused_loss": ((), FLOAT), **_identification("identification."), "target": ((Q, V), FLOAT),
               "frame_alpha": ((Q, V), FLOAT), "clip_alpha": ((Q, V), FLOAT), "fused_alpha": ((Q, V), FLOAT)}
    differentiable = (0, 1)

    def module_forward(self, module, *inputs):
        return module.details(*inputs)

    def inputs(self, dtype):
        return _scores(dtype)

    def bad_cases(self):
        frame, clip, qv = _scores(torch.float32)
        return [bad("reduction", "reduction must be one of .*; got 'max'", frame, clip, qv, reduction="max"),
                bad("frame_sim", "frame_sim must be finite, got NaN or Inf", torch.full_like(frame, float("nan")), clip, qv,
                    validate_args=True)]


# --- transport and L_intra (Holmes Eq. 19-20, App. B.5) ---------------------------------------------------------------
class TestSinkhorn(OperationTester):
    function = staticmethod(F.sinkhorn)
    settings = {"epsilon": 0.5, "n_iters": 10}
    outputs = {"": ((2, 3, 4), FLOAT)}
    module_equals_function_skip = "FlexibleOT is the module of the flexible transport built on it"
    compiles = True

    def inputs(self, dtype):
        a = torch.tensor([[1 / 3, 1 / 3, 1 / 3], [0.5, 0.5, 0.0]], dtype=dtype)  # the second problem masks a row
        return uniform(2, 3, 4, dtype=dtype, seed=3), a, torch.full((2, 4), 0.25, dtype=dtype)

    def bad_cases(self):
        scores, a, b = self.inputs(torch.float32)
        return [bad("b", r"b must have shape \(2, 4\) to match scores, got \(2, 3\)", scores, a, b[:, :3]),
                bad("epsilon", "epsilon must be a finite number > 0, got 0.0", scores, a, b, epsilon=0.0),
                bad("a", "the same total mass .* got 2 and 1 in problem 0", scores, 2 * a, b, validate_args=True)]


class TestSelectSinkhornMethod(OperationTester):
    function = staticmethod(F.select_sinkhorn_method)
    settings = {"differentiating": True}
    outputs = {"": str}
    gradcheck_skip = "a choice of scheme"
    module_equals_function_skip = "a function only: FlexibleOT(method='auto') applies it"

    def inputs(self, dtype):
        scores, a, b = TestSinkhorn().inputs(dtype)
        return scores, 0.1, a, b

    def bad_cases(self):
        scores, epsilon, a, b = self.inputs(torch.float32)
        return [bad("epsilon", "epsilon must be a finite number > 0, got -1.0", scores, -1.0, a, b),
                bad("scores", r"scores must be a 3-D tensor, got shape \(3, 4\)", scores[0], epsilon, a, b),
                bad("a", r"a must have shape \(2, 3\) to match scores, got \(2, 2\)", scores, epsilon, a[:, :2], b)]


class TestScalingRangeBound(OperationTester):
    function = staticmethod(F.scaling_range_bound)
    outputs = {"": float}
    gradcheck_skip = "a constant of the dtype"
    float64_skip = "the bound is a property of the dtype: float32's and float64's differ by design"
    module_equals_function_skip = "a function only: select_sinkhorn_method applies it"

    def inputs(self, dtype):
        return (dtype,)

    def bad_cases(self):
        return [bad("dtype", "dtype must be a floating-point torch.dtype, got torch.int64", torch.int64),
                bad("dtype", "dtype must be a floating-point torch.dtype, got str", "float32")]


class TestFlexibleOT(OperationTester):
    function = staticmethod(F.flexible_ot)
    module = ep.FlexibleOT
    settings = {"epsilon": 0.2, "n_iters": 10, "grad": "autodiff"}
    outputs = {"plan": ((2, 3, 5), FLOAT), "dustbin": ((2, 5), FLOAT), "assignment": ((2, 3, 5), FLOAT),
               "similarity": ((2, 3, 5), FLOAT)}
    compiles = True

    def inputs(self, dtype):
        return _groups(dtype)

    def bad_cases(self):
        sim, query_mask, clip_mask = _groups(torch.float32)
        return [bad("sim", r"sim must be a 3-D tensor, got shape \(3, 5\)", sim[0]),
                bad("epsilon", "epsilon must be a finite number > 0, got -1.0", sim, epsilon=-1.0),
                bad("n_iters", "n_iters must be >= 1, got 0", sim, n_iters=0),
                bad("clip_mask", r"clip_mask must have shape \(2, 5\), got \(2, 4\)", sim, query_mask, clip_mask[:, :4])]


class TestIntraVideoLoss(OperationTester):
    function = staticmethod(F.intra_video_loss)
    module = ep.IntraVideoEvidentialLoss
    settings = {"tau": 0.08, "epsilon": 0.2, "n_iters": 10}
    module_settings = {"tau": 0.08, "fot": ep.FlexibleOT(epsilon=0.2, n_iters=10)}
    outputs = SCALAR
    gradcheck_skip = ("Eq. 20's labels are the plan, detached by definition: a numerical Jacobian moves them, the "
                      "analytic one holds them (evidence and dirichlet_mse_loss are gradchecked on their own)")
    compiles = True

    def attributes(self, module):
        # the transport's keywords are the attributes of the module's FlexibleOT (its grad is moot: the label is
        # detached)
        fot = module.fot
        return {"tau": module.tau, "epsilon": fot.epsilon, "n_iters": fot.n_iters,
                "dustbin_quantile": fot.dustbin_quantile, "normalize": fot.normalize, "minmax_over": fot.minmax_over,
                "marginals": fot.marginals, "tol": fot.tol, "method": fot.method}

    def inputs(self, dtype):
        return _groups(dtype)

    def bad_cases(self):
        sim, query_mask, clip_mask = _groups(torch.float32)
        return [bad("sim", r"sim must be a 3-D tensor, got shape \(3, 5\)", sim[0]),
                bad("tau", "tau must be a finite number > 0, got 0.0", sim, tau=0.0),
                bad("assignment", "assignment must be one of 'fot', 'ot', 'softmax'; got 'sinkhorn'", sim,
                    assignment="sinkhorn"),
                bad("query_mask", "query_mask must hold only 0 and 1 .* such as 2", sim, 2 * query_mask.long(),
                    validate_args=True)]


class TestIntraVideoLossDetails(OperationTester):
    function = staticmethod(F.intra_video_loss_details)
    module = ep.IntraVideoEvidentialLoss
    settings = TestIntraVideoLoss.settings
    module_settings = TestIntraVideoLoss.module_settings
    outputs = {"loss": ((), FLOAT), "per_query": ((2, 3), FLOAT), "per_video": ((2,), FLOAT),
               "alpha": ((2, 3, 5), FLOAT), "target": ((2, 3, 5), FLOAT), "transport.plan": ((2, 3, 5), FLOAT),
               "transport.dustbin": ((2, 5), FLOAT), "transport.assignment": ((2, 3, 5), FLOAT),
               "transport.similarity": ((2, 3, 5), FLOAT)}
    gradcheck_skip = TestIntraVideoLoss.gradcheck_skip
    attributes = TestIntraVideoLoss.attributes

    def module_forward(self, module, *inputs):
        return module.details(*inputs)

    def inputs(self, dtype):
        return _groups(dtype)

    def bad_cases(self):
        sim, query_mask, clip_mask = _groups(torch.float32)
        return [bad("reduction", "reduction must be one of .*; got 'max'", sim, reduction="max"),
                bad("marginals", "marginals must be one of .*; got 'balanced'", sim, marginals="balanced")]


# --- L_base (Holmes App. B.1, Eq. 22-23) and the whole objective (Eq. 21) -------------------------------------------
class TestTripletRankingLoss(OperationTester):
    function = staticmethod(F.triplet_ranking_loss)
    module = ep.TripletRankingLoss
    settings = {"margin": 0.3}
    outputs = SCALAR
    compiles = True

    def per_call(self):
        return {"generator": torch.Generator().manual_seed(0)}  # the random negatives of L_tri

    def inputs(self, dtype):
        return _scores(dtype)[0], QUERY_VIDEO

    def bad_cases(self):
        sim = _scores(torch.float32)[0]
        return [bad("query_video", r"indices must lie in \[0, 4\), got values in \[4, 7\]", sim, QUERY_VIDEO + 4,
                    validate_args=True),
                bad("margin", "margin must be a finite number > 0, got -0.1", sim, QUERY_VIDEO, margin=-0.1)]


class TestInfoNCELoss(OperationTester):
    function = staticmethod(F.info_nce_loss)
    module = ep.InfoNCELoss
    settings = {"video_to_text": "paper"}
    outputs = SCALAR
    compiles = True

    def inputs(self, dtype):
        return _scores(dtype)[0], QUERY_VIDEO

    def bad_cases(self):
        sim = _scores(torch.float32)[0]
        return [bad("sim", r"= \[6, 4\], got \(4, 6\): it looks transposed", sim.T, QUERY_VIDEO),
                bad("video_to_text", "video_to_text must be one of 'release', 'paper'; got 'both'", sim, QUERY_VIDEO,
                    video_to_text="both")]


class TestQueryDiversityLoss(OperationTester):
    function = staticmethod(F.query_diversity_loss)
    module = ep.QueryDiversityLoss
    settings = {"alpha": 16.0}
    outputs = SCALAR
    compiles = True

    def inputs(self, dtype):
        return uniform(Q, 8, dtype=dtype), QUERY_VIDEO

    def bad_cases(self):
        emb = uniform(Q, 8, dtype=torch.float32)
        return [bad("query_video", r"query_video must have shape \[5\] to match query_emb, got \(6,\)", emb[:5], QUERY_VIDEO),
                bad("lam", r"lam must lie in \[0.0, 64.0\], got -1.0", emb, QUERY_VIDEO, lam=-1.0)]


class TestBaseRetrievalLoss(OperationTester):
    function = staticmethod(F.base_retrieval_loss)
    module = ep.BaseRetrievalLoss
    settings = {"margin": 0.3, "div_weight": 0.01}
    outputs = SCALAR
    differentiable = (0, 1, 2)
    compiles = True

    def per_call(self):
        return {"generator": torch.Generator().manual_seed(0)}  # the random negatives of L_tri

    def inputs(self, dtype):
        frame, clip, qv = _scores(dtype)
        return frame, clip, uniform(Q, 8, dtype=dtype, seed=2), qv

    def bad_cases(self):
        frame, clip, emb, qv = self.inputs(torch.float32)
        return [bad("query_emb", r"query_emb must have 6 rows .* got shape \(5, 8\)", frame, clip, emb[:5], qv),
                bad("margin", "margin must be a finite number > 0, got 0.0", frame, clip, emb, qv, margin=0.0),
                bad("clip_logits", "clip_logits must be finite, got NaN or Inf", frame, clip, emb, qv,
                    clip_logits=torch.full_like(clip, float("inf")), validate_args=True)]


class TestBaseRetrievalLossDetails(OperationTester):
    function = staticmethod(F.base_retrieval_loss_details)
    module = ep.BaseRetrievalLoss
    settings = TestBaseRetrievalLoss.settings
    outputs = {"loss": ((), FLOAT), "frame_triplet": ((), FLOAT), "clip_triplet": ((), FLOAT),
               "frame_nce": ((), FLOAT), "clip_nce": ((), FLOAT), "diversity": ((), FLOAT)}
    differentiable = (0, 1, 2)
    per_call = TestBaseRetrievalLoss.per_call
    inputs = TestBaseRetrievalLoss.inputs

    def module_forward(self, module, *inputs):
        return module.details(*inputs, **self.per_call())

    def bad_cases(self):
        frame, clip, emb, qv = self.inputs(torch.float32)
        return [bad("reduction", "reduction must be one of .*; got 'max'", frame, clip, emb, qv, reduction="max"),
                bad("clip_sim", r"frame_sim and clip_sim must have the same shape .* got \(6, 4\) and \(6, 3\)", frame,
                    clip[:, :3], emb, qv)]


class TestHolmesCriterion(OperationTester):
    module = ep.HolmesCriterion
    settings = {"inter_weight": 0.3, "intra_weight": 0.7, "warmup_stage_epochs": 0}
    outputs = SCALAR
    differentiable = (0, 1, 3, 4)
    module_equals_function_skip = ("the sum of BaseRetrievalLoss, EvidentialRetrievalLoss and "
                                   "IntraVideoEvidentialLoss: tests/test_criterion.py checks it against its parts")

    def inputs(self, dtype):
        return *_scores(dtype), uniform(Q, 8, dtype=dtype, seed=2), uniform(V, 5, 8, dtype=dtype, seed=3)

    def call(self, *inputs, **keywords):
        frame, clip, qv, query_emb, clip_emb = inputs
        criterion = self.build(input_dtype(inputs), **keywords)
        return criterion(frame, clip, qv, query_emb=query_emb, clip_emb=clip_emb,
                         generator=torch.Generator().manual_seed(0))

    def bad_cases(self):
        frame, clip, qv, query_emb, clip_emb = self.inputs(torch.float32)
        return [bad("inter_weight", r"inter_weight must lie in \[0.0, inf\), got -1.0", frame, clip, qv, query_emb, clip_emb,
                    inter_weight=-1.0),
                bad("frame_sim", r"= \[6, 4\], got \(4, 6\): it looks transposed", frame.T, clip.T, qv, query_emb, clip_emb)]


def test_every_public_function_and_module_has_an_entry():
    """A new public function (``evidential_prvr.functional.__all__``) or module (an ``nn.Module`` exported by the
    package or a public submodule) needs its entry: a class here or in the other ``test_operations_*`` files."""
    entries = [value for namespace in (globals(), vars(test_operations_probabilistic), vars(test_operations_uncertainty))
               for value in namespace.values()
               if isinstance(value, type) and issubclass(value, OperationTester) and value is not OperationTester]
    functions, modules = missing_entries(entries)
    assert functions == [] and modules == [], f"no harness entry for functions {functions} and modules {modules}"
