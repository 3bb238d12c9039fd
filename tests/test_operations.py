"""Every function + module pair of the library through the shared harness (:mod:`tests.operation_tester`):
smoke, bad input, float64 gradcheck, module equals function, half precision, one-graph compile."""

from __future__ import annotations

import torch

import evidential_prvr as ep
from evidential_prvr import functional as F

from .operation_tester import OperationTester


def _random(*shape: int, dtype: torch.dtype, seed: int = 0, low: float = -1.0, high: float = 1.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (low + (high - low) * torch.rand(*shape, generator=generator, dtype=torch.float64)).to(dtype)


#: Six queries over four videos, two or one per video; every video has a query.
QUERY_VIDEO = torch.tensor([0, 0, 1, 2, 2, 3])


class TestEvidence(OperationTester):
    function = staticmethod(F.evidence)
    settings = {"tau": 0.2}

    def inputs(self, dtype):
        return (_random(6, 4, dtype=dtype),)

    def bad_cases(self):
        return [((_random(6, 4, dtype=torch.float32),), {"tau": 0.0}, r"tau must be .*> 0, got 0.0"),
                ((torch.tensor([[float("nan")]]),), {"validate_args": True}, "sim must be finite")]


class TestDempsterShaferFusion(OperationTester):
    function = staticmethod(F.dempster_shafer_fusion)
    module = ep.DempsterShaferFusion
    differentiable = (0, 1)

    def inputs(self, dtype):
        return _random(6, 4, dtype=dtype, low=1.0, high=4.0), _random(6, 4, dtype=dtype, seed=1, low=1.0, high=4.0)

    def bad_cases(self):
        alpha = _random(6, 4, dtype=torch.float32, low=1.0, high=4.0)
        return [((alpha, alpha[:, :3]), {}, "alpha_b"), ((alpha, -alpha), {"validate_args": True}, "alpha_b")]


class TestFlexibleOT(OperationTester):
    function = staticmethod(F.flexible_ot)
    module = ep.FlexibleOT
    settings = {"epsilon": 0.2, "n_iters": 30, "grad": "autodiff"}

    def inputs(self, dtype):
        return (_random(2, 3, 5, dtype=dtype),)

    def grad_output(self, out):
        return out.assignment

    def bad_cases(self):
        sim = _random(2, 3, 5, dtype=torch.float32)
        return [((sim[0],), {}, "sim"), ((sim,), {"epsilon": -1.0}, "epsilon"), ((sim,), {"n_iters": 0}, "n_iters")]


class TestInterVideoLoss(OperationTester):
    function = staticmethod(F.inter_video_loss)
    module = ep.EvidentialRetrievalLoss
    settings = {"gamma": 0.3}
    differentiable = (0, 1)
    graph_break = "the medians of Eq. 11 index a data-dependent number of candidates (an unbacked size)"

    def inputs(self, dtype):
        return _random(6, 4, dtype=dtype), _random(6, 4, dtype=dtype, seed=1), QUERY_VIDEO

    def bad_cases(self):
        frame, clip, _ = self.inputs(torch.float32)
        return [((frame, clip[:5], QUERY_VIDEO), {}, "clip_sim"), ((frame, clip, QUERY_VIDEO[:5]), {}, "query_video"),
                ((frame, clip, QUERY_VIDEO), {"beta": 2.0}, "beta")]


class TestIntraVideoLoss(OperationTester):
    function = staticmethod(F.intra_video_loss)
    module = ep.IntraVideoEvidentialLoss
    settings = {"tau": 0.08, "epsilon": 0.2}
    module_settings = {"tau": 0.08, "fot": ep.FlexibleOT(epsilon=0.2)}
    gradcheck_skip = ("Eq. 20's labels are the plan, detached by definition: a numerical Jacobian moves them, the "
                      "analytic one holds them (evidence and dirichlet_mse_loss are gradchecked on their own)")

    def inputs(self, dtype):
        return (_random(2, 3, 5, dtype=dtype),)

    def bad_cases(self):
        sim = _random(2, 3, 5, dtype=torch.float32)
        return [((sim[0],), {}, "sim"), ((sim,), {"tau": 0.0}, "tau"), ((sim,), {"assignment": "sinkhorn"}, "assignment")]


class TestBaseRetrievalLoss(OperationTester):
    function = staticmethod(F.base_retrieval_loss)
    module = ep.BaseRetrievalLoss
    settings = {"margin": 0.3, "div_weight": 0.01}
    differentiable = (0, 1, 2)
    graph_break = "the random negatives are drawn with a torch.Generator, which Dynamo does not trace"

    def per_call(self):
        return {"generator": torch.Generator().manual_seed(0)}  # the random negatives of L_tri

    def inputs(self, dtype):
        return (_random(6, 4, dtype=dtype), _random(6, 4, dtype=dtype, seed=1), _random(6, 8, dtype=dtype, seed=2),
                QUERY_VIDEO)

    def bad_cases(self):
        frame, clip, emb, _ = self.inputs(torch.float32)
        return [((frame, clip, emb[:5], QUERY_VIDEO), {}, "query_emb"), ((frame, clip, emb, QUERY_VIDEO),
                                                                        {"margin": 0.0}, "margin")]


class TestTripletRankingLoss(OperationTester):
    function = staticmethod(F.triplet_ranking_loss)
    module = ep.TripletRankingLoss
    settings = {"margin": 0.3}
    graph_break = "the random negatives are drawn with a torch.Generator, which Dynamo does not trace"

    def per_call(self):
        return {"generator": torch.Generator().manual_seed(0)}  # the random negatives of L_tri

    def inputs(self, dtype):
        return _random(6, 4, dtype=dtype), QUERY_VIDEO

    def bad_cases(self):
        sim = _random(6, 4, dtype=torch.float32)
        return [((sim, QUERY_VIDEO + 4), {"validate_args": True}, "query_video"),
                ((sim, QUERY_VIDEO), {"margin": -0.1}, "margin")]


class TestInfoNCELoss(OperationTester):
    function = staticmethod(F.info_nce_loss)
    module = ep.InfoNCELoss
    settings = {"video_to_text": "paper"}

    def inputs(self, dtype):
        return _random(6, 4, dtype=dtype), QUERY_VIDEO

    def bad_cases(self):
        sim = _random(6, 4, dtype=torch.float32)
        return [((sim.T, QUERY_VIDEO), {}, "sim"), ((sim, QUERY_VIDEO), {"video_to_text": "both"}, "video_to_text")]


class TestQueryDiversityLoss(OperationTester):
    function = staticmethod(F.query_diversity_loss)
    module = ep.QueryDiversityLoss
    settings = {"alpha": 16.0}

    def inputs(self, dtype):
        return _random(6, 8, dtype=dtype), QUERY_VIDEO

    def bad_cases(self):
        emb = _random(6, 8, dtype=torch.float32)
        return [((emb[:5], QUERY_VIDEO), {}, "query"), ((emb, QUERY_VIDEO), {"lam": -1.0}, r"lam must lie in \[0.0, 64.0\], got -1.0")]


class TestDirichletMSELoss(OperationTester):
    function = staticmethod(F.dirichlet_mse_loss)

    def inputs(self, dtype):
        target = torch.nn.functional.one_hot(QUERY_VIDEO, 4).to(dtype)
        return _random(6, 4, dtype=dtype, low=1.0, high=5.0), target

    def bad_cases(self):
        alpha, target = self.inputs(torch.float32)
        return [((alpha, target[:, :3]), {}, "target"), ((alpha - 2.0, target), {"validate_args": True}, "alpha")]


class TestIdentify(OperationTester):
    function = staticmethod(F.identify)
    module = ep.UncertaintyGuidedIdentifier
    settings = {"beta": 0.4}
    differentiable = ()
    graph_break = "the medians of Eq. 11 index a data-dependent number of candidates (an unbacked size)"

    def inputs(self, dtype):
        return _random(6, 4, dtype=dtype), _random(6, 4, dtype=dtype, seed=1), QUERY_VIDEO

    def bad_cases(self):
        frame, clip, _ = self.inputs(torch.float32)
        return [((frame, clip, QUERY_VIDEO), {"beta": -0.5}, "beta"), ((frame, clip, QUERY_VIDEO),
                                                                      {"fusion": "average"}, "fusion")]
