"""Every public function or module refuses non-finite or mis-shaped input with a ValueError naming the
argument, instead of returning NaN; Dempster-Shafer fusion of huge opinions stays finite."""

from __future__ import annotations

import pytest
import torch

import evidential_prvr as ep
from evidential_prvr import functional as F
from evidential_prvr import probabilistic as P

NAN = float("nan")
INF = float("inf")


def _with(value, shape=(6, 4)):
    x = torch.rand(*shape)
    x[0, 0] = value
    return x


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_base_retrieval_family_refuses_non_finite_scores(bad):
    qv = torch.tensor([0, 0, 1, 2, 3, 3])
    with pytest.raises(ValueError, match="sim must be finite"):
        ep.TripletRankingLoss()(_with(bad), qv)
    with pytest.raises(ValueError, match="sim must be finite"):
        ep.InfoNCELoss()(_with(bad), qv)
    with pytest.raises(ValueError, match="query_emb must be finite"):
        ep.QueryDiversityLoss()(_with(bad, (6, 8)), qv)
    with pytest.raises(ValueError, match="clip_sim must be finite"):
        ep.BaseRetrievalLoss()(torch.rand(6, 4), _with(bad), torch.rand(6, 8), qv)
    with pytest.raises(ValueError, match="clip_logits must be finite"):
        ep.BaseRetrievalLoss()(torch.rand(6, 4), torch.rand(6, 4), torch.rand(6, 8), qv, clip_logits=_with(bad))


def test_base_retrieval_loss_refuses_mismatched_branches():
    qv = torch.tensor([0, 0, 1, 2, 3, 3])
    with pytest.raises(ValueError, match=r"frame_sim and clip_sim must have the same shape \[num_queries, num_videos\], got \(6, 5\) and \(6, 4\)"):
        ep.BaseRetrievalLoss()(torch.rand(6, 5), torch.rand(6, 4), torch.rand(6, 8), qv)
    with pytest.raises(ValueError, match="query_emb must have 6 rows"):
        ep.BaseRetrievalLoss()(torch.rand(6, 4), torch.rand(6, 4), torch.rand(5, 8), qv)


def test_gaussian_heads_refuse_non_finite_and_empty_input():
    head = P.GaussianEmbeddingHead(8, 4)
    with pytest.raises(ValueError, match="x must be finite"):
        head(_with(NAN, (3, 8)))
    with pytest.raises(ValueError, match="x must not be empty"):
        head(torch.rand(0, 8))
    tokens = P.TokenUncertaintyHead(8, 4)
    with pytest.raises(ValueError, match=r"tokens must not be empty .* got shape \(2, 0, 8\)"):
        tokens(torch.rand(2, 0, 8))
    with pytest.raises(ValueError, match="tokens must be finite"):
        tokens(torch.full((2, 3, 8), INF))
    with pytest.raises(ValueError, match="base_logvar must be finite"):
        tokens(torch.rand(2, 3, 8), base_logvar=_with(NAN, (2, 4)))
    assert torch.isnan(P.GaussianEmbeddingHead(8, 4, validate_args=False)(_with(NAN, (3, 8))).mu).any()


def test_dab_losses_refuse_empty_and_non_finite_costs():
    with pytest.raises(ValueError, match="cost must not be empty"):
        P.ProbabilisticAlignmentContrastiveLoss(1.0)(torch.empty(0, 0))
    with pytest.raises(ValueError, match="cost must be finite"):
        F.pac_loss(_with(NAN, (3, 3)), 1.0)
    alignment = P.DABAlignment(8, 4, tau=4.0, n_steps=2)
    with pytest.raises(ValueError, match="text must not be empty"):
        alignment(torch.rand(0, 8), torch.rand(0, 3, 8))
    with pytest.raises(ValueError, match="video_tokens must be finite"):
        alignment(torch.rand(2, 8), torch.full((2, 3, 8), NAN))
    with pytest.raises(ValueError, match="input_mu must be finite"):
        P.DistributionBridge(4, n_steps=2)(_with(NAN, (2, 4)), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="cost must not be empty"):
        F.kl_margin(torch.empty(0, 3))


def test_hud_modules_refuse_non_finite_input():
    embedding = P.ProbabilisticTextEmbedding(8)
    with pytest.raises(ValueError, match="text must be finite"):
        embedding(_with(NAN, (2, 8)), torch.rand(2, 1, 8))
    with pytest.raises(ValueError, match="reference_tokens must not be empty"):
        embedding(torch.rand(2, 8), torch.rand(2, 0, 8))
    with pytest.raises(ValueError, match="reference must be finite"):
        P.ComposeByWeights(8)(_with(INF, (2, 8)), torch.rand(2, 8))
    with pytest.raises(ValueError, match="composed_tokens must be finite"):
        P.BiasedMaxSimilarity(3)(torch.full((2, 3, 8), NAN), torch.rand(2, 3, 8))
    with pytest.raises(ValueError, match="holistic_sim must not be empty"):
        P.BatchClassificationLoss()(torch.empty(0, 0), torch.empty(0, 0))
    with pytest.raises(ValueError, match="atomistic_sim must be finite"):
        P.HolisticAtomisticConsistencyLoss()(torch.rand(3, 3), _with(NAN, (3, 3)))


def test_dempster_shafer_of_huge_float32_opinions_is_finite_or_refused():
    alpha_a = torch.tensor([[1e20, 1.0, 1.0]], dtype=torch.float32)
    alpha_b = torch.tensor([[1e20, 1.0, 1.0]], dtype=torch.float32)
    with pytest.raises(ValueError, match="too large for torch.float32"):
        ep.DempsterShaferFusion()(alpha_a, alpha_b)
    out = ep.DempsterShaferFusion(validate_args=False)(alpha_a, alpha_b)
    for name in ("belief", "uncertainty", "conflict"):
        assert torch.isfinite(getattr(out, name)).all(), name
    assert not torch.isnan(out.alpha).any()
    # the same opinion in float64 gives the exact fused opinion the float32 path kept
    exact = ep.DempsterShaferFusion()(alpha_a.double(), alpha_b.double())
    torch.testing.assert_close(out.belief.double(), exact.belief, rtol=1e-6, atol=1e-30)
    torch.testing.assert_close(out.uncertainty.double(), exact.uncertainty, rtol=1e-5, atol=1e-30)
