"""The checks of the Holmes hyperparameters and the registry's section dataclasses.

Each ``check_*_options`` function checks the keyword arguments that a function of
:mod:`evidential_prvr.functional`, its module and a section of :func:`evidential_prvr.presets.holmes_settings`
share, so that every layer reports a bad value with one message naming it: the function at every call, the
module in its ``__init__``, the section when it is built (e.g. from a reference-model config).

The sections hold no defaults: each preset of :mod:`evidential_prvr.presets` writes its numbers out, so a
changed default of a function or a module cannot move a preset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evidential_prvr._checks import check_choice, check_in_range, check_positive, check_positive_int
from evidential_prvr.choices import (
    CALIBRATION_SETS,
    ENTROPY_MEDIANS,
    FOT_MARGINALS,
    FOT_NORMALIZATIONS,
    FUSIONS,
    INTER_TERMS,
    INTRA_ASSIGNMENTS,
    MATCH_RULES,
    MINMAX_SCOPES,
    NCE_VIDEO_TO_TEXT,
    SINKHORN_GRADS,
    SINKHORN_METHODS,
    TANH_SCALINGS,
    VIDEO_NEGATIVES,
    CalibrationSet,
    EntropyMedian,
    FOTMarginals,
    FOTNormalization,
    Fusion,
    InterTerm,
    IntraAssignment,
    MatchRule,
    MinmaxScope,
    NCEVideoToText,
    SinkhornGrad,
    SinkhornMethod,
    TanhScaling,
    VideoNegative,
)

__all__ = [
    "TransportSettings",
    "InterVideoSettings",
    "IntraVideoSettings",
    "BaseLossSettings",
]


def check_transport_options(*, epsilon: float, n_iters: int, dustbin_quantile: float | None,
                            normalize: FOTNormalization, minmax_over: MinmaxScope, marginals: FOTMarginals,
                            grad: SinkhornGrad, tol: float | None, method: SinkhornMethod) -> None:
    """The checks of the flexible transport's hyperparameters (:func:`~evidential_prvr.functional.flexible_ot`)."""
    check_positive(epsilon, "epsilon")
    check_positive_int(n_iters, "n_iters")
    if dustbin_quantile is not None:
        check_in_range(dustbin_quantile, "dustbin_quantile", 0.0, 1.0, low_inclusive=False, high_inclusive=False)
    check_choice(normalize, "normalize", FOT_NORMALIZATIONS)
    check_choice(minmax_over, "minmax_over", MINMAX_SCOPES)
    check_choice(marginals, "marginals", FOT_MARGINALS)
    if tol is not None:
        check_positive(tol, "tol")
    check_choice(grad, "grad", SINKHORN_GRADS)
    check_choice(method, "method", SINKHORN_METHODS)


def check_identification_options(*, beta: float, tau: float, tanh_scaling: TanhScaling,
                                 entropy_median: EntropyMedian, matched: MatchRule, fusion: Fusion) -> None:
    """The checks of the identification's hyperparameters (:func:`~evidential_prvr.functional.identify`)."""
    check_in_range(beta, "beta", 0.0, 1.0)
    check_positive(tau, "tau")
    check_choice(tanh_scaling, "tanh_scaling", TANH_SCALINGS)
    check_choice(entropy_median, "entropy_median", ENTROPY_MEDIANS)
    check_choice(matched, "matched", MATCH_RULES)
    check_choice(fusion, "fusion", FUSIONS)


def check_terms(terms: object) -> tuple[InterTerm, ...]:
    """Validate a non-empty selection of :data:`INTER_TERMS` without repeats; return it as a tuple."""
    if isinstance(terms, str) or not isinstance(terms, Sequence) or len(terms) == 0:
        raise ValueError(f"terms must be a non-empty sequence drawn from {INTER_TERMS}, got {terms!r}")
    for term in terms:
        check_choice(term, "terms", INTER_TERMS)
    if len(set(terms)) != len(terms):
        raise ValueError(f"terms must not repeat an entry, got {tuple(terms)}")
    return tuple(terms)


def check_calibration_options(*, gamma: float, calibrate: bool, calibration_set: CalibrationSet,
                              terms: Sequence[InterTerm]) -> tuple[InterTerm, ...]:
    """The checks of L_inter's hyperparameters besides the identification's
    (:func:`~evidential_prvr.functional.inter_video_loss`); returns ``terms`` as a tuple."""
    check_in_range(gamma, "gamma", 0.0, 1.0)
    if not isinstance(calibrate, bool):
        raise TypeError(f"calibrate must be a bool, got {type(calibrate).__name__}")
    check_choice(calibration_set, "calibration_set", CALIBRATION_SETS)
    return check_terms(terms)


def check_intra_options(*, tau: float, tanh_scaling: TanhScaling, assignment: IntraAssignment) -> None:
    """The checks of L_intra's evidence hyperparameters (:func:`~evidential_prvr.functional.intra_video_loss`)."""
    check_positive(tau, "tau")
    check_choice(tanh_scaling, "tanh_scaling", TANH_SCALINGS)
    check_choice(assignment, "assignment", INTRA_ASSIGNMENTS)


def check_triplet_options(margin: float, hard_negative_topk: int | None, video_negative: VideoNegative,
                           random_negatives: bool = False) -> None:
    """The checks of the triplet loss's hyperparameters; ``random_negatives``: ``hard_negative_topk=None``
    is accepted (the functional's random negatives)."""
    check_positive(margin, "margin")
    if hard_negative_topk is not None or not random_negatives:
        check_positive_int(hard_negative_topk, "hard_negative_topk")
    check_choice(video_negative, "video_negative", VIDEO_NEGATIVES)


def check_diversity_options(alpha: float, delta: float, lam: float,
                             names: tuple[str, str, str] = ("alpha", "delta", "lam")) -> None:
    """The checks of α, δ and λ of the query-diversity loss (Eq. 23), reported under ``names``."""
    check_positive(alpha, names[0])
    check_in_range(delta, names[1], -2.0, 2.0)
    check_in_range(lam, names[2], 0.0, 64.0)


def check_base_options(*, margin: float, hard_negative_topk: int | None, video_negative: VideoNegative,
                       nce_video_to_text: NCEVideoToText, div_alpha: float, div_delta: float, div_lambda: float,
                       random_negatives: bool = False) -> None:
    """The checks of L_base's hyperparameters besides its weights (:func:`~evidential_prvr.functional.base_retrieval_loss`);
    ``random_negatives``: ``hard_negative_topk=None`` is accepted."""
    check_triplet_options(margin, hard_negative_topk, video_negative, random_negatives)
    check_diversity_options(div_alpha, div_delta, div_lambda, ("div_alpha", "div_delta", "div_lambda"))
    check_choice(nce_video_to_text, "nce_video_to_text", NCE_VIDEO_TO_TEXT)


def check_loss_weights(**weights: float) -> None:
    """Each weight (by its name) is a finite number >= 0."""
    for name, value in weights.items():
        check_in_range(value, name, 0.0, float("inf"), high_inclusive=False)


@dataclass(frozen=True, kw_only=True)
class TransportSettings:
    """The ``transport`` section of the registry: the hyperparameters of flexible optimal transport (Holmes §3.3,
    Eq. 19-20, App. B.5), checked when built.

    The keyword arguments of :func:`~evidential_prvr.functional.flexible_ot` and :class:`~evidential_prvr.FlexibleOT`
    (``FlexibleOT(**dataclasses.asdict(section))``); keyword-only, no defaults (a preset writes every value).

    Attributes
    ----------
    epsilon : float
        Entropic regularisation ε > 0 (the release's ``pot_scale``; the paper gives none).
    n_iters : int
        Sinkhorn iterations (maximum when ``tol`` is set).
    dustbin_quantile : float or None
        The dustbin value z is this quantile of the similarities ("bottom 30%"); ``None``: no dustbin
        (plain OT, Eq. 19).
    normalize : {"minmax", None}
        Min-max normalisation of each video's similarities before the transport.
    minmax_over : {"block", "valid"}
        Entries the min and max are taken over: the whole padded ``[Mq, Mc]`` block, padded caption
        slots included (release), or the valid entries only.
    marginals : {"release", "uniform"}
        Row marginals: SuperGlue-style ``1/(Mc+Mq)`` per query and ``Mc/(Mc+Mq)`` for the dustbin
        (release), or uniform (App. B.5).
    grad : {"detach", "autodiff"}
        Stop-gradient plan (both presets) or backpropagation through the iterations.
    tol : float or None
        Early-stopping tolerance on the row marginals (host synchronisations every 10 iterations).
    method : {"auto", "log", "scaling"}
        Sinkhorn iteration scheme.

    Examples
    --------
    >>> from evidential_prvr.presets import holmes_settings
    >>> release = holmes_settings("release", "tvr").transport
    >>> release.epsilon, release.dustbin_quantile, release.marginals
    (0.1, 0.3, 'release')

    References
    ----------
    Holmes (ICML 2026), §3.3, Eq. 19-20 and App. B.5; the official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs``).
    """

    epsilon: float
    n_iters: int
    dustbin_quantile: float | None
    normalize: FOTNormalization
    minmax_over: MinmaxScope
    marginals: FOTMarginals
    grad: SinkhornGrad
    tol: float | None
    method: SinkhornMethod

    def __post_init__(self) -> None:
        check_transport_options(epsilon=self.epsilon, n_iters=self.n_iters, dustbin_quantile=self.dustbin_quantile,
                                normalize=self.normalize, minmax_over=self.minmax_over, marginals=self.marginals,
                                grad=self.grad, tol=self.tol, method=self.method)


@dataclass(frozen=True, kw_only=True)
class InterVideoSettings:
    """The ``inter`` section of the registry: the hyperparameters of inter-video evidential learning L_inter
    (Holmes §3.2, Eq. 3-18), checked when built.

    The keyword arguments of :func:`~evidential_prvr.functional.inter_video_loss` and
    :class:`~evidential_prvr.EvidentialRetrievalLoss` (``EvidentialRetrievalLoss(**dataclasses.asdict(section))``);
    its first six are those of :func:`~evidential_prvr.functional.identify`. Keyword-only, no defaults.

    Attributes
    ----------
    beta : float
        :math:`\\beta \\in [0, 1]` of Eq. 11.
    tau : float
        Evidence temperature of Eq. 3 (> 0).
    tanh_scaling : {"inside", "outside"}
        Evidence form, see :func:`~evidential_prvr.functional.evidence`.
    entropy_median : {"candidates", "batch"}
        Median rule of Eq. 12: over the precise candidates (paper) or the whole batch (release).
    matched : {"any_positive", "argmax"}
        The correctly matched set of Eq. 11, see :func:`~evidential_prvr.functional.correctly_matched`
        (paper: ``"any_positive"``; release: ``"argmax"``, ties to the first index).
    fusion : {"uncertainty_dominant", "confidence_dominant", "frame", "clip"}
        Partition fusion rule (Eq. 14, Table 3 rows 5-7).
    gamma : float
        Calibration weight γ ∈ [0, 1] of Eq. 15.
    calibrate : bool
        ``False`` is the warm-up stage: every query keeps its plain label (Table 3 row 8).
    calibration_set : {"refined", "initial"}
        Calibrate the fused :math:`S^o_n` (paper) or only the fused initial polysemous set :math:`\\tilde S_n`,
        before the entropy refinement (Table 3 row 9).
    terms : tuple of {"frame", "clip", "fused"}
        The :math:`L_U` terms that enter the loss (Table 3 rows 1-3 keep fewer).

    Examples
    --------
    >>> from evidential_prvr.presets import holmes_settings
    >>> holmes_settings("release", "activitynet").inter.tanh_scaling
    'outside'

    References
    ----------
    Holmes (ICML 2026), §3.2, Eq. 3-18; the official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs``).
    """

    beta: float
    tau: float
    tanh_scaling: TanhScaling
    entropy_median: EntropyMedian
    matched: MatchRule
    fusion: Fusion
    gamma: float
    calibrate: bool
    calibration_set: CalibrationSet
    terms: tuple[InterTerm, ...]

    def __post_init__(self) -> None:
        check_identification_options(beta=self.beta, tau=self.tau, tanh_scaling=self.tanh_scaling,
                                     entropy_median=self.entropy_median, matched=self.matched, fusion=self.fusion)
        terms = check_calibration_options(gamma=self.gamma, calibrate=self.calibrate,
                                          calibration_set=self.calibration_set, terms=self.terms)
        object.__setattr__(self, "terms", terms)


@dataclass(frozen=True, kw_only=True)
class IntraVideoSettings:
    """The ``intra`` section of the registry: the evidence hyperparameters of intra-video evidential learning
    L_intra (Holmes §3.3), checked when built; the transport is the ``transport`` section.

    The keyword arguments ``tau``, ``tanh_scaling`` and ``assignment`` of
    :func:`~evidential_prvr.functional.intra_video_loss` and :class:`~evidential_prvr.IntraVideoEvidentialLoss`.
    Keyword-only, no defaults.

    Attributes
    ----------
    tau : float
        Evidence temperature :math:`\\tau_{\\text{intra}} > 0` of the query-clip evidence.
    tanh_scaling : {"outside", "inside"}
        Evidence form, see :func:`~evidential_prvr.functional.evidence` (release: ``"outside"``).
    assignment : {"fot", "ot", "softmax"}
        ``"fot"``: flexible transport with dustbin; ``"ot"``: the same transport without
        dustbin (Table 3 row 12); ``"softmax"``: :math:`\\mathrm{softmax}_j(\\bar s_{ij}/\\varepsilon)`
        over the valid clips with the transport's :math:`\\varepsilon` (Table 3 row 11; the paper does
        not give its temperature).

    Examples
    --------
    >>> from evidential_prvr.presets import IntraVideoSettings
    >>> IntraVideoSettings(tau=0.06, tanh_scaling="outside", assignment="ot")  # Table 3 row 12
    IntraVideoSettings(tau=0.06, tanh_scaling='outside', assignment='ot')

    References
    ----------
    Holmes (ICML 2026), §3.3 and Table 3; the official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs``).
    """

    tau: float
    tanh_scaling: TanhScaling
    assignment: IntraAssignment

    def __post_init__(self) -> None:
        check_intra_options(tau=self.tau, tanh_scaling=self.tanh_scaling, assignment=self.assignment)


@dataclass(frozen=True, kw_only=True)
class BaseLossSettings:
    """The ``base`` section of the registry: the hyperparameters of the basic objectives (Holmes App. B.1,
    Eq. 22-23) besides their weights (the ``weights`` section), checked when built.

    With the weights ``frame_nce_weight``, ``clip_nce_weight`` and ``div_weight`` they are the keyword arguments
    of :func:`~evidential_prvr.functional.base_retrieval_loss` and :class:`~evidential_prvr.BaseRetrievalLoss`.
    Keyword-only, no defaults.

    Attributes
    ----------
    margin : float
        Triplet margin :math:`m > 0` (0.1 TVR, 0.2 ActivityNet/Charades in the release).
    video_negative : {"hardest", "pool"}
        Video→text hard-negative rule once hard negatives are on, see
        :func:`~evidential_prvr.functional.triplet_ranking_loss`.
    nce_video_to_text : {"release", "paper"}
        Video→text InfoNCE form, see :func:`~evidential_prvr.functional.info_nce_loss`.
    div_alpha, div_delta, div_lambda : float
        α, δ and the focal exponent λ of Eq. 23 (the release's ``neg_factor``).
    hard_negative_topk : int
        Pool of hardest negatives the text→video triplet draws from once hard negatives are on.

    Examples
    --------
    >>> from evidential_prvr.presets import BaseLossSettings
    >>> BaseLossSettings(margin=0.2, div_delta=0.2, hard_negative_topk=20, video_negative="random",
    ...                  nce_video_to_text="release", div_alpha=32.0, div_lambda=1.0)
    Traceback (most recent call last):
        ...
    ValueError: video_negative must be one of 'hardest', 'pool'; got 'random'

    References
    ----------
    Holmes (ICML 2026), App. B.1, Eq. 22-23; the official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs``).
    """

    margin: float
    div_delta: float
    hard_negative_topk: int
    video_negative: VideoNegative
    nce_video_to_text: NCEVideoToText
    div_alpha: float
    div_lambda: float

    def __post_init__(self) -> None:
        check_base_options(margin=self.margin, hard_negative_topk=self.hard_negative_topk,
                           video_negative=self.video_negative, nce_video_to_text=self.nce_video_to_text,
                           div_alpha=self.div_alpha, div_delta=self.div_delta, div_lambda=self.div_lambda)
