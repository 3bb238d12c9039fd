"""The retrieval-time operations (gallery opinions, query types, selective confidences) through the shared harness
(:mod:`tests.operation_tester`); the coverage of every public operation is checked in ``tests/test_operations.py``."""

from __future__ import annotations

import torch

import evidential_prvr as ep
from evidential_prvr import functional as F
from evidential_prvr.uncertainty import GalleryOpinion, QueryTypeThresholds

from .operation_tester import FLOAT, OperationTester, bad, uniform

Q, V, K = 5, 7, 3
#: The annotated video of each query.
TARGET = torch.tensor([0, 3, 6, 2, 2])
OPINION_INPUT = "its input is a GalleryOpinion; gallery_opinion's gradient is checked in its own entry"


def _gallery_scores(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Frame and clip scores of ``Q`` queries over a gallery of ``V`` videos."""
    return uniform(Q, V, dtype=dtype), uniform(Q, V, dtype=dtype, seed=1)


def _opinion(dtype: torch.dtype) -> GalleryOpinion:
    """The opinion of the gallery scores over the top ``K``, with the annotated videos."""
    return F.gallery_opinion(*_gallery_scores(dtype), k=K, target=TARGET)


def _features(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Uncertainty, consistency, aleatoric uncertainty and runner-up consistency of 8 queries."""
    return (uniform(8, dtype=dtype, low=0.2, high=0.9), uniform(8, dtype=dtype, seed=1, low=0.0, high=1.0),
            uniform(8, dtype=dtype, seed=2, low=0.5, high=1.5), uniform(8, dtype=dtype, seed=3, low=0.0, high=1.0))


def _branch(prefix: str) -> dict[str, tuple[tuple[int, ...], object]]:
    """The outputs of one :class:`~evidential_prvr.uncertainty.BranchOpinion` computed with a target."""
    return {f"{prefix}.{name}": ((Q,), FLOAT) for name in ("uncertainty", "aleatoric", "top_belief", "consistency",
                                                           "runner_up_consistency", "label_consistency")}


class TestGalleryOpinion(OperationTester):
    function = staticmethod(F.gallery_opinion)
    module = ep.GalleryUncertainty
    settings = {"k": K, "tau": 0.2, "query_chunk": 2}
    outputs = {"candidates": ((Q, K), torch.int64), "candidate_scores": ((Q, K), FLOAT), **_branch("frame"),
               **_branch("clip"), **_branch("fused"), "fused_belief": ((Q, K), FLOAT), "conflict": ((Q,), FLOAT),
               "correct": ((Q,), torch.bool)}
    differentiable = (0, 1)

    def per_call(self):
        return {"target": TARGET}

    def inputs(self, dtype):
        return _gallery_scores(dtype)

    def bad_cases(self):
        frame, clip = _gallery_scores(torch.float32)
        return [bad("clip_scores", r"clip_scores must have the shape of frame_scores \(5, 7\), got \(5, 6\)", frame,
                    clip[:, :6]),
                bad("k", "k must be >= 1, got 0", frame, clip, k=0),
                bad("query_scale", "query_scale must be > 0 everywhere, got min -1.0", frame, clip,
                    query_scale=-torch.ones(Q))]


class TestIdentifyQueryTypes(OperationTester):
    function = staticmethod(F.identify_query_types)
    outputs = {"": ((8,), torch.int64)}
    gradcheck_skip = "a discrete decision"
    module_equals_function_skip = ("GalleryQueryIdentifier applies it to an opinion; the module is checked with the "
                                   "batch rule (batch_rule_query_types' entry) and in tests/test_uncertainty_modules.py")

    def call(self, *inputs, **keywords):
        # the runner-up consistency (a keyword of the function) in the dtype of the other features
        return F.identify_query_types(*inputs, **{"runner_up": _features(inputs[0].dtype)[3], **keywords})

    def inputs(self, dtype):
        u, c, xi, _ = _features(dtype)
        return u, c, xi, QueryTypeThresholds(uncertainty=0.7, consistency=0.3, aleatoric=1.2, runner_up=0.8)

    def bad_cases(self):
        u, c, xi, thresholds = self.inputs(torch.float32)
        return [bad("consistency", r"consistency must have shape \[8\] like uncertainty, got \(7,\)", u, c[:7], xi,
                    thresholds),
                bad("thresholds", "thresholds must be a QueryTypeThresholds, got dict", u, c, xi, {}),
                bad("runner_up", "runner_up is needed", u, c, xi, thresholds, runner_up=None)]


class TestFitQueryThresholds(OperationTester):
    function = staticmethod(F.fit_query_thresholds)
    settings = {"grid": 5}
    outputs = {"uncertainty": float, "consistency": float, "aleatoric": float, "runner_up": float}
    gradcheck_skip = "a search over a grid of thresholds"
    module_equals_function_skip = "GalleryQueryIdentifier.fit applies it (tests/test_uncertainty_modules.py)"

    def per_call(self):
        return {"query_types": torch.tensor([0, 1, 2, 0, 1, 2, 1, 0])}

    def inputs(self, dtype):
        u, c, xi, r = _features(dtype)
        return u, c, xi

    def bad_cases(self):
        u, c, xi = self.inputs(torch.float32)
        return [bad("grid", "grid must be >= 2, got 1", u, c, xi, grid=1),
                bad("query_types", r"query_types must hold codes 0 \(precise\), 1 \(polysemous\) or 2 .* got values in \[3, 3\]", u, c, xi,
                    query_types=torch.full((8,), 3)),
                bad("correct", "needs query_types or correct", u, c, xi, query_types=None)]


class TestBatchRuleQueryTypes(OperationTester):
    function = staticmethod(F.batch_rule_query_types)
    module = ep.GalleryQueryIdentifier
    settings = {"beta": 0.4, "entropy_median": "batch"}
    module_settings = {"rule": "batch", "beta": 0.4, "entropy_median": "batch"}
    outputs = {"": ((Q,), torch.int64)}
    gradcheck_skip = "a discrete decision"

    def inputs(self, dtype):
        return (_opinion(dtype),)

    def bad_cases(self):
        opinion = _opinion(torch.float32)
        without_target = F.gallery_opinion(*_gallery_scores(torch.float32), k=K)
        return [bad("beta", r"beta must lie in \[0.0, 1.0\], got 1.5", opinion, beta=1.5),
                bad("target", "needs an opinion computed with target=", without_target),
                bad("opinion", "opinion must be a GalleryOpinion, got dict", {})]


class TestMacroF1(OperationTester):
    function = staticmethod(F.macro_f1)
    outputs = {"": float}
    gradcheck_skip = "a count of decisions"
    float64_skip = "no floating input"
    half_precision_skip = "no floating input"
    module_equals_function_skip = "a function only: the identification reports use it"

    def inputs(self, dtype):
        return torch.tensor([0, 1, 2, 2, 1, 0]), torch.tensor([0, 1, 1, 2, 2, 0])

    def bad_cases(self):
        predicted, actual = self.inputs(torch.float32)
        return [bad("actual", r"predicted and actual must have the same shape, got \(6,\) and \(5,\)", predicted,
                    actual[:5]),
                bad("predicted", r"predicted must hold type codes in \[0, 3\), got values in \[0, 5\]", predicted + 3 * (predicted == 2), actual),
                bad("num_types", "num_types must be >= 1, got 0", predicted, actual, num_types=0)]


class TestSelectiveConfidence(OperationTester):
    function = staticmethod(F.selective_confidence)
    module = ep.SelectiveConfidence
    settings = {"kind": "neg_xi"}
    outputs = {"": ((Q,), FLOAT)}
    gradcheck_skip = OPINION_INPUT

    def inputs(self, dtype):
        return (_opinion(dtype),)

    def bad_cases(self):
        opinion = _opinion(torch.float32)
        return [bad("kind", "kind must be one of .*; got 'entropy'", opinion, kind="entropy"),
                bad("kl_cost", "kl_cost is only used by kind='kl_margin', got kind='neg_xi'", opinion,
                    kl_cost=torch.ones(Q, V)),
                bad("kl_cost", r"kl_cost must have 5 rows \(one per query\), got \(4, 7\)", opinion, kind="kl_margin",
                    kl_cost=torch.ones(4, V))]
