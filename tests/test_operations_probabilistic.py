"""The Gaussian, DAB and HUD operations through the shared harness (:mod:`tests.operation_tester`); the
coverage of every public operation is checked in ``tests/test_operations.py``."""

from __future__ import annotations

import torch

from evidential_prvr import functional as F
from evidential_prvr import probabilistic as P

from .operation_tester import FLOAT, OperationTester, bad, uniform

LEARNED = "learned layers: no public function computes what the module does"


def _gaussian(*shape: int, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Means in ``[-1, 1)`` and log-variances in ``[-2, 1)`` of one shape."""
    return uniform(*shape, dtype=dtype, seed=seed), uniform(*shape, dtype=dtype, seed=seed + 100, low=-2.0, high=1.0)


def _pairs(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Three source and five target Gaussians of dimension 4."""
    return *_gaussian(3, 4, dtype=dtype), *_gaussian(5, 4, dtype=dtype, seed=1)


def _broadcast_pairs(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """``[3, 1, 4]`` source and ``[1, 5, 4]`` target Gaussians: every pair by broadcasting."""
    return *_gaussian(3, 1, 4, dtype=dtype), *_gaussian(1, 5, 4, dtype=dtype, seed=1)


def _costs(dtype: torch.dtype) -> torch.Tensor:
    """Square ``[4, 4]`` non-negative costs, the positives on the diagonal."""
    return uniform(4, 4, dtype=dtype, low=0.0, high=3.0)


def _pair_of_similarities(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Holistic and atomistic similarities ``[4, 4]``."""
    return uniform(4, 4, dtype=dtype), uniform(4, 4, dtype=dtype, seed=1)


def _gaussian_outputs(*shape: int, prefix: str = "") -> dict[str, tuple[tuple[int, ...], str]]:
    """The outputs of a :class:`~evidential_prvr.probabilistic.DiagonalGaussian` of ``shape`` (under ``prefix``)."""
    return {f"{prefix}mu": (shape, FLOAT), f"{prefix}logvar": (shape, FLOAT)}


def _moving(bridge: torch.nn.Module) -> torch.nn.Module:
    """A bridge that moves: its drift's last layer starts at zero (a new bridge lands where it starts)."""
    last = bridge.drift[-1]
    with torch.no_grad():
        last.weight.copy_(0.1 * uniform(*last.weight.shape, dtype=last.weight.dtype, seed=9))
    return bridge


# --- Gaussian embeddings: divergences and sampling (DAB Key Design 3, HUD Eq. 3) --------------------------------------
class TestPairwiseGaussianKL(OperationTester):
    function = staticmethod(F.pairwise_gaussian_kl)
    outputs = {"": ((3, 5), FLOAT)}
    differentiable = (0, 1, 2, 3)
    module_equals_function_skip = "DABAlignment computes its cost with it (its own tests check the cost)"

    def inputs(self, dtype):
        return _pairs(dtype)

    def bad_cases(self):
        s_mu, s_lv, t_mu, t_lv = _pairs(torch.float32)
        return [bad("target_mu", r"the same embedding dimension D, got shapes \(3, 4\) and \(5, 3\)", s_mu, s_lv,
                    t_mu[:, :3], t_lv[:, :3]),
                bad("source_logvar", r"must have the same shape, got \(3, 4\) and \(2, 4\)", s_mu, s_lv[:2], t_mu, t_lv),
                bad("target_logvar", "target_logvar must be finite, got NaN or Inf", s_mu, s_lv, t_mu, t_lv.log())]


class TestPrepareKLSources(OperationTester):
    function = staticmethod(F.prepare_kl_sources)
    outputs = {"features": ((3, 8), FLOAT), "row": ((3,), FLOAT), "shift": ((1, 4), FLOAT)}
    differentiable = (0, 1)
    module_equals_function_skip = "a function only: a gallery of video Gaussians is prepared once with it"

    def grad_output(self, out):
        # the centre is the sources' detached mean: a numerical Jacobian moves it, the analytic one holds it; the
        # divergences the prepared sources give do not depend on it, so gradcheck differentiates those
        t_mu, t_lv = _gaussian(5, 4, dtype=out.features.dtype, seed=1)
        return F.pairwise_gaussian_kl_prepared(out, t_mu, t_lv)

    def inputs(self, dtype):
        return _gaussian(3, 4, dtype=dtype)

    def bad_cases(self):
        mu, logvar = _gaussian(3, 4, dtype=torch.float32)
        return [bad("source_mu", r"source_mu must be a 2-D tensor, got shape \(4,\)", mu[0], logvar[0]),
                bad("source_mu", r"must not be empty .* got shape \(0, 4\)", mu[:0], logvar[:0])]


class TestPairwiseGaussianKLPrepared(OperationTester):
    function = staticmethod(F.pairwise_gaussian_kl_prepared)
    outputs = {"": ((3, 5), FLOAT)}
    differentiable = (1, 2)
    module_equals_function_skip = "a function only: the gallery search of a DAB model scores queries with it"

    def inputs(self, dtype):
        s_mu, s_lv, t_mu, t_lv = _pairs(dtype)
        return F.prepare_kl_sources(s_mu, s_lv), t_mu, t_lv

    def bad_cases(self):
        sources, t_mu, t_lv = self.inputs(torch.float32)
        return [bad("sources", "sources must be a KLSources .* got tuple", tuple(sources), t_mu, t_lv),
                bad("target_mu", r"the sources' dimension D = 4, got shape \(5, 3\)", sources, t_mu[:, :3], t_lv[:, :3])]


class TestPairwiseWasserstein2(OperationTester):
    function = staticmethod(F.pairwise_wasserstein2)
    settings = {"squared": False}
    outputs = {"": ((3, 5), FLOAT)}
    differentiable = (0, 1, 2, 3)
    module_equals_function_skip = "a function only: DAB's W2 ablation uses it as the cost"

    def inputs(self, dtype):
        return _pairs(dtype)

    def bad_cases(self):
        s_mu, s_lv, t_mu, t_lv = _pairs(torch.float32)
        return [bad("squared", "squared must be a bool, got int", s_mu, s_lv, t_mu, t_lv, squared=1),
                bad("target_mu", r"target_mu must be a 2-D tensor, got shape \(1, 5, 4\)", s_mu, s_lv, t_mu[None],
                    t_lv[None])]


class TestPairedGaussianKL(OperationTester):
    function = staticmethod(F.paired_gaussian_kl)
    outputs = {"": ((3, 5), FLOAT)}
    differentiable = (0, 1, 2, 3)
    module_equals_function_skip = "a function only: the conditioned bridge's cost is one KL per pair"

    def inputs(self, dtype):
        return _broadcast_pairs(dtype)

    def bad_cases(self):
        s_mu, s_lv, t_mu, t_lv = _broadcast_pairs(torch.float32)
        return [bad("source", r"shapes must broadcast against each other, got \(3, 1, 4\) and \(2, 5, 4\)", s_mu, s_lv,
                    t_mu.expand(2, 5, 4), t_lv.expand(2, 5, 4)),
                bad("source_mu", "source_mu must be finite, got NaN or Inf", s_mu / 0.0, s_lv, t_mu, t_lv,
                    validate_args=True)]


class TestPairedWasserstein2(OperationTester):
    function = staticmethod(F.paired_wasserstein2)
    settings = {"squared": False}
    outputs = {"": ((3, 5), FLOAT)}
    differentiable = (0, 1, 2, 3)
    module_equals_function_skip = "a function only: DAB's W2 ablation of a per-pair cost"

    def inputs(self, dtype):
        return _broadcast_pairs(dtype)

    def bad_cases(self):
        s_mu, s_lv, t_mu, t_lv = _broadcast_pairs(torch.float32)
        return [bad("source_mu", r"\[\.\.\., D\] with the same embedding dimension D, got shapes \(3, 1, 4\) and "
                    r"\(1, 5, 3\)", s_mu, s_lv, t_mu[..., :3], t_lv[..., :3]),
                bad("squared", "squared must be a bool, got str", s_mu, s_lv, t_mu, t_lv, squared="yes")]


class TestKLMargin(OperationTester):
    function = staticmethod(F.kl_margin)
    outputs = {"": ((4,), FLOAT)}
    module_equals_function_skip = "SelectiveConfidence(kind='kl_margin') reads it (the selective_confidence entry)"

    def inputs(self, dtype):
        return (uniform(4, 5, dtype=dtype, low=0.0, high=3.0),)

    def bad_cases(self):
        cost = uniform(4, 5, dtype=torch.float32)
        return [bad("cost", r"at least 2 columns \(candidates\) per query, got shape \(4, 1\)", cost[:, :1]),
                bad("cost", "cost must be finite, got NaN or Inf", cost / 0.0, validate_args=True)]


class TestReparameterisedSample(OperationTester):
    function = staticmethod(F.reparameterised_sample)
    settings = {"n": 2}
    outputs = {"": ((3, 2, 4), FLOAT)}
    differentiable = (0, 1)
    float64_skip = "the noise is drawn in the inputs' dtype: a float32 draw is not the float64 draw rounded"
    module_equals_function_skip = "DiagonalGaussian.sample and the HUD modules draw with it"

    def per_call(self):
        return {"generator": torch.Generator().manual_seed(0)}

    def inputs(self, dtype):
        return _gaussian(3, 4, dtype=dtype)

    def bad_cases(self):
        mu, logvar = _gaussian(3, 4, dtype=torch.float32)
        return [bad("n", "n must be >= 1, got 0", mu, logvar, n=0),
                bad("logvar", r"mu and logvar must have the same shape, got \(3, 4\) and \(3, 2\)", mu, logvar[:, :2])]


# --- DAB: PAC loss, bridge and heads (DAB Key Design 1-3) -------------------------------------------------------------
class TestPACLoss(OperationTester):
    function = staticmethod(F.pac_loss)
    module = P.ProbabilisticAlignmentContrastiveLoss
    settings = {"tau": 2.0}
    outputs = {"": ((), FLOAT)}

    def inputs(self, dtype):
        return (_costs(dtype),)

    def bad_cases(self):
        cost = _costs(torch.float32)
        return [bad("cost", r"square \[B, B\] matrix \(positives on the diagonal\), got shape \(4, 3\)", cost[:, :3]),
                bad("tau", "tau must be a finite number > 0, got 0.0", cost, tau=0.0)]


class TestSinusoidalTimeEmbedding(OperationTester):
    function = staticmethod(F.sinusoidal_time_embedding)
    settings = {"dim": 7}
    outputs = {"": ((3, 7), FLOAT)}
    module_equals_function_skip = "the bridges embed their steps with it (DistributionBridge's entry)"

    def inputs(self, dtype):
        return (torch.tensor([0.0, 3.0, 17.0], dtype=dtype),)

    def bad_cases(self):
        steps = torch.tensor([0.0, 3.0])
        return [bad("dim", "dim must be >= 1, got 0", steps, dim=0),
                bad("timesteps", r"timesteps must be a 1-D tensor, got shape \(1, 2\)", steps[None]),
                bad("max_period", "max_period must be a finite number > 0, got -1.0", steps, max_period=-1.0)]


class TestBridgeStepSizes(OperationTester):
    function = staticmethod(F.bridge_step_sizes)
    settings = {"step_range": (0.1, 0.5)}
    outputs = {"": list}
    gradcheck_skip = "plain numbers"
    float64_skip = "no tensor input"
    half_precision_skip = "no tensor input"
    module_equals_function_skip = "the bridges take their step sizes from it (DistributionBridge's entry)"

    def inputs(self, dtype):
        return (4,)

    def bad_cases(self):
        return [bad("n_steps", "n_steps must be >= 1, got 0", 0),
                bad("step_range", r"step_range must satisfy chi_min <= chi_max, got \(0.6, 0.2\)", 3,
                    step_range=(0.6, 0.2)),
                bad("step_range[1]", r"step_range\[1\] must lie in \(0.0, 1.0\], got 1.5", 3, step_range=(0.2, 1.5))]


class TestBoundedContraction(OperationTester):
    function = staticmethod(F.bounded_contraction)
    settings = {"rate": 0.5}
    outputs = {"0": ((3, 5, 4), FLOAT), "1": ((3, 5, 4), FLOAT)}
    differentiable = (0, 1, 2, 3, 4, 5)
    module_equals_function_skip = "ConditionedDistributionBridge holds its updates to it (that module's entry)"

    def inputs(self, dtype):
        updated = _gaussian(3, 1, 4, dtype=dtype, seed=2)
        return *updated, *_gaussian(3, 1, 4, dtype=dtype, seed=3), *_gaussian(1, 5, 4, dtype=dtype, seed=4)

    def bad_cases(self):
        mu, logvar, previous_mu, previous_logvar, target_mu, target_logvar = self.inputs(torch.float32)
        return [bad("rate", r"rate must lie in \(0.0, 1.0\], got 0.0", *self.inputs(torch.float32), rate=0.0),
                bad("target_mu", r"must broadcast to one shape, got mu \(3, 1, 4\), previous_mu \(3, 1, 4\), "
                    r"target_mu \(2, 5, 4\)", mu, logvar, previous_mu, previous_logvar, target_mu.expand(2, 5, 4),
                    target_logvar.expand(2, 5, 4))]


class TestBridgeDistillationLoss(OperationTester):
    function = staticmethod(F.bridge_distillation_loss)
    module = P.BridgeDistillationLoss
    outputs = {"": ((), FLOAT)}
    differentiable = (0, 1, 2, 3)

    def module_forward(self, module, student_mu, student_logvar, teacher_mu, teacher_logvar):
        # a new bridge lands where it starts (its drift's last layer is zero), so the student lands on student_*
        student = P.DistributionBridge(4, n_steps=1)
        return module(student, student_mu, student_logvar, teacher_mu, teacher_logvar)

    def inputs(self, dtype):
        return *_gaussian(3, 4, dtype=dtype), *_gaussian(3, 4, dtype=dtype, seed=1)

    def bad_cases(self):
        s_mu, s_lv, t_mu, t_lv = self.inputs(torch.float32)
        return [bad("teacher_mu", r"student_mu and teacher_mu must have the same shape, got \(3, 4\) and \(2, 4\)",
                    s_mu, s_lv, t_mu[:2], t_lv[:2]),
                bad("teacher_logvar", "teacher_logvar must be finite, got NaN or Inf", s_mu, s_lv, t_mu, t_lv / 0.0,
                    validate_args=True)]


class TestCombineVideoLogVariances(OperationTester):
    function = staticmethod(F.combine_video_log_variances)
    outputs = {"": ((3, 4), FLOAT)}
    differentiable = (0, 1)
    module_equals_function_skip = "TokenUncertaintyHead combines its log-variance with it (that module's entry)"

    def inputs(self, dtype):
        return uniform(3, 4, dtype=dtype), uniform(3, 4, dtype=dtype, seed=1)

    def bad_cases(self):
        base, token = self.inputs(torch.float32)
        return [bad("token_logvar", r"must have the same shape, got \(3, 4\) and \(3, 2\)", base, token[:, :2]),
                bad("base_logvar", "base_logvar must have a floating-point dtype, got torch.int64", base.long(), token)]


class TestGaussianEmbeddingHead(OperationTester):
    module = P.GaussianEmbeddingHead
    settings = {"dim_in": 8, "dim_out": 4, "logvar_weight_init": "pytorch"}
    outputs = _gaussian_outputs(3, 4)
    module_equals_function_skip = LEARNED

    def inputs(self, dtype):
        return (uniform(3, 8, dtype=dtype),)

    def bad_cases(self):
        x = uniform(3, 8, dtype=torch.float32)
        return [bad("x", r"x must have last dimension 8, got shape \(3, 5\)", x[:, :5]),
                bad("dim_in", "dim_in must be >= 1, got 0", x, dim_in=0),
                bad("logvar_bounds", r"logvar_bounds must be finite with low < high, got \(2.0, -6.0\)", x,
                    logvar_bounds=(2.0, -6.0))]


class TestTokenUncertaintyHead(OperationTester):
    module = P.TokenUncertaintyHead
    settings = {"dim_in": 8, "dim_out": 4, "logvar_weight_init": "pytorch"}
    outputs = {"": ((2, 4), FLOAT)}
    differentiable = (0, 1)
    module_equals_function_skip = LEARNED

    def inputs(self, dtype):
        mask = torch.tensor([[True, True, False], [True, True, True]])
        return uniform(2, 3, 8, dtype=dtype), uniform(2, 4, dtype=dtype, seed=1), mask

    def bad_cases(self):
        tokens, base, mask = self.inputs(torch.float32)
        return [bad("base_logvar", r"base_logvar must have shape \(2, 4\) \(\[B, dim_out\]\), got \(2, 3\)", tokens,
                    base[:, :3], mask),
                bad("mask", "mask must be a bool tensor .* got torch.int64", tokens, base, mask.long())]


class TestDistributionBridge(OperationTester):
    module = P.DistributionBridge
    settings = {"dim": 4, "n_steps": 2, "hidden_dim": 8, "time_dim": 6}
    outputs = _gaussian_outputs(3, 4)
    differentiable = (0, 1)
    module_equals_function_skip = LEARNED

    def inputs(self, dtype):
        return _gaussian(3, 4, dtype=dtype)

    def build(self, dtype=torch.float32, **settings):
        return _moving(super().build(dtype, **settings))

    def bad_cases(self):
        mu, logvar = _gaussian(3, 4, dtype=torch.float32)
        return [bad("mu", r"mu must have last dimension 4, got shape \(3, 3\)", mu[:, :3], logvar[:, :3]),
                bad("n_steps", "n_steps must be >= 1, got 0", mu, logvar, n_steps=0),
                bad("input_mu", "input_mu must be finite, got NaN or Inf", mu / 0.0, logvar)]


class TestConditionedDistributionBridge(OperationTester):
    module = P.ConditionedDistributionBridge
    settings = {"dim": 4, "n_steps": 2, "hidden_dim": 8, "time_dim": 6, "contraction": 0.5}
    outputs = _gaussian_outputs(3, 5, 4)
    differentiable = (0, 1, 2, 3)
    module_equals_function_skip = LEARNED

    def build(self, dtype=torch.float32, **settings):
        return _moving(super().build(dtype, **settings))

    def inputs(self, dtype):
        return *_gaussian(3, 1, 4, dtype=dtype), *_gaussian(1, 5, 4, dtype=dtype, seed=1)

    def bad_cases(self):
        mu, logvar, target_mu, target_logvar = self.inputs(torch.float32)
        return [bad("target_mu", r"mu \(3, 1, 4\) and target_mu \(2, 5, 4\) must broadcast", mu, logvar,
                    target_mu.expand(2, 5, 4), target_logvar.expand(2, 5, 4)),
                bad("contraction", r"contraction must lie in \(0.0, 1.0\], got 1.5", mu, logvar, target_mu,
                    target_logvar, contraction=1.5)]


class TestDABAlignment(OperationTester):
    module = P.DABAlignment
    settings = {"dim_in": 8, "dim": 4, "tau": 2.0, "n_steps": 2, "logvar_weight_init": "pytorch"}
    outputs = {"loss": ((), FLOAT), "cost": ((3, 3), FLOAT), **_gaussian_outputs(3, 4, prefix="gaussians.text."),
               **_gaussian_outputs(3, 4, prefix="gaussians.bridged_text."),
               **_gaussian_outputs(3, 4, prefix="gaussians.video.")}
    differentiable = (0, 1)
    module_equals_function_skip = ("heads, a bridge and pac_loss: tests/test_dab.py checks the loss and cost "
                                   "against its parts")

    def inputs(self, dtype):
        mask = torch.tensor([[True, True], [True, False], [False, True]])
        return uniform(3, 8, dtype=dtype), uniform(3, 2, 8, dtype=dtype, seed=1), mask

    def bad_cases(self):
        text, tokens, mask = self.inputs(torch.float32)
        return [bad("video_tokens", r"the same batch size B .* got shapes \(3, 8\) and \(2, 2, 8\)", text, tokens[:2],
                    mask[:2]),
                bad("video_mask", r"every row of video_mask needs at least one valid .* rows \[0, 1, 2\] have none", text,
                    tokens, mask & False)]


# --- HUD: similarity, losses, composition and the objective (HUD Eq. 1-15) -------------------------------------------
class TestBiasedMaxSimilarity(OperationTester):
    function = staticmethod(F.biased_max_similarity)
    module = P.BiasedMaxSimilarity
    settings = {"token_matching": "max"}
    module_settings = {"num_tokens": 3, "token_matching": "max"}
    outputs = {"": ((2, 5), FLOAT)}
    differentiable = (0, 1, 2)

    def module_forward(self, module, composed_tokens, target_tokens, bias):
        with torch.no_grad():
            module.bias.copy_(bias)
        return module(composed_tokens, target_tokens)

    def inputs(self, dtype):
        return uniform(2, 3, 4, dtype=dtype), uniform(5, 2, 4, dtype=dtype, seed=1), uniform(3, dtype=dtype, seed=2)

    def bad_cases(self):
        composed, target, bias = self.inputs(torch.float32)
        return [bad("bias", r"bias must have K=3 entries \(one per composed token\), got shape \(2,\)", composed,
                    target, bias[:2]),
                bad("token_matching", r"as many target tokens as composed tokens, got shapes \(2, 3, 4\) and "
                    r"\(5, 2, 4\)", composed, target, bias, token_matching="paired")]


class TestBatchClassificationLoss(OperationTester):
    function = staticmethod(F.batch_classification_loss)
    module = P.BatchClassificationLoss
    settings = {"tau": 0.5}
    outputs = {"": ((), FLOAT)}
    differentiable = (0, 1)

    def inputs(self, dtype):
        return _pair_of_similarities(dtype)

    def bad_cases(self):
        holistic, atomistic = _pair_of_similarities(torch.float32)
        return [bad("atomistic_sim", r"must have the same shape, got \(4, 4\) and \(3, 3\)", holistic, atomistic[:3, :3]),
                bad("tau", "tau must be a finite number > 0, got -0.1", holistic, atomistic, tau=-0.1)]


class TestHolisticAtomisticConsistencyLoss(OperationTester):
    function = staticmethod(F.holistic_atomistic_consistency_loss)
    module = P.HolisticAtomisticConsistencyLoss
    settings = {"tau": 0.5}
    outputs = {"": ((), FLOAT)}
    differentiable = (0, 1)

    def inputs(self, dtype):
        return _pair_of_similarities(dtype)

    def bad_cases(self):
        holistic, atomistic = _pair_of_similarities(torch.float32)
        return [bad("holistic_sim", r"square \[B, B\] matrix .* got shape \(4, 3\)", holistic[:, :3], atomistic),
                bad("atomistic_sim", "atomistic_sim must be finite, got NaN or Inf", holistic, atomistic / 0.0)]


class TestProbabilisticTextEmbedding(OperationTester):
    module = P.ProbabilisticTextEmbedding
    settings = {"dim": 8}
    outputs = _gaussian_outputs(2, 8)
    differentiable = (0, 1)
    module_equals_function_skip = LEARNED

    def inputs(self, dtype):
        mask = torch.tensor([[True, False, True], [True, True, True]])
        return uniform(2, 8, dtype=dtype), uniform(2, 3, 8, dtype=dtype, seed=1), mask

    def bad_cases(self):
        text, reference, mask = self.inputs(torch.float32)
        return [bad("reference_tokens", r"reference_tokens must have batch size 2 like text, got shape \(1, 3, 8\)",
                    text, reference[:1], mask[:1]),
                bad("num_heads", "num_heads must divide dim, got dim=8, num_heads=3", text, reference, mask,
                    num_heads=3)]


class TestComposeByWeights(OperationTester):
    module = P.ComposeByWeights
    settings = {"dim": 8}
    outputs = {"": ((2, 3, 8), FLOAT)}
    differentiable = (0, 1)
    module_equals_function_skip = LEARNED

    def inputs(self, dtype):
        return uniform(2, 8, dtype=dtype), uniform(2, 3, 8, dtype=dtype, seed=1)

    def bad_cases(self):
        reference, text = self.inputs(torch.float32)
        return [bad("reference", r"reference must have shape \[B, D\] or the shape of text, got reference \(1, 8\)",
                    reference[:1], text),
                bad("text", r"text must have last dimension 8, got shape \(2, 3, 5\)", reference, text[..., :5])]


class TestQueryTokenAttention(OperationTester):
    module = P.QueryTokenAttention
    settings = {"dim": 8, "num_queries": 2}
    outputs = {"": ((2, 2, 8), FLOAT)}
    differentiable = (1, 3)
    module_equals_function_skip = LEARNED

    def inputs(self, dtype):
        text_mask = torch.tensor([[True, True, False], [True, True, True]])
        return None, uniform(2, 3, 8, dtype=dtype), text_mask, uniform(2, 4, 8, dtype=dtype, seed=1)

    def bad_cases(self):
        _, text, text_mask, visual = self.inputs(torch.float32)
        return [bad("visual", r"visual must have batch size 2, got shape \(1, 4, 8\)", None, text, text_mask,
                    visual[:1]),
                bad("num_heads", "num_heads must divide dim, got dim=8, num_heads=3", None, text, text_mask, visual,
                    num_heads=3)]


class TestHUDObjective(OperationTester):
    module = P.HUDObjective
    settings = {"dim": 4, "holistic_dim": 3, "num_reference_tokens": 2, "num_samples": 2}
    outputs = {"total": ((), FLOAT), "rank": ((), FLOAT), "consistency": ((), FLOAT),
               "holistic_similarity": ((3, 3), FLOAT), "atomistic_similarity": ((3, 3), FLOAT),
               "query.holistic": ((3, 3, 3), FLOAT), "query.atomistic": ((3, 4, 3), FLOAT),
               **_gaussian_outputs(3, 3, prefix="query.text."), **_gaussian_outputs(3, 2, 4, prefix="query.detail."),
               "targets.holistic": ((3, 1, 3), FLOAT), "targets.atomistic": ((3, 2, 3), FLOAT)}
    differentiable = (0, 1, 2)
    float64_skip = TestReparameterisedSample.float64_skip
    module_equals_function_skip = ("learned layers around biased_max_similarity and the two HUD losses: "
                                   "tests/test_hud_objective.py checks the loss and similarities against loops")

    def per_call(self):
        return {"generator": torch.Generator().manual_seed(0)}  # the samples of Eq. 3 and 7

    def inputs(self, dtype):
        text_mask = torch.tensor([[True, True, False], [True, True, True], [True, False, True]])
        return (uniform(3, 2, 4, dtype=dtype), uniform(3, 3, 4, dtype=dtype, seed=1), uniform(3, 2, 4, dtype=dtype, seed=2),
                None, text_mask)

    def bad_cases(self):
        reference, text, target, _, text_mask = self.inputs(torch.float32)
        return [bad("target_tokens", r"target_tokens must have batch size 3 like reference_tokens .* got shape "
                    r"\(2, 2, 4\)", reference, text, target[:2]),
                bad("kappa", "kappa must be a number >= 0, got -1.0", reference, text, target, kappa=-1.0),
                bad("text_mask", r"text_mask must have shape \(3, 3\) \(\[B, T\]\), got \(3, 2\)", reference, text, target, None,
                    text_mask[:, :2])]
