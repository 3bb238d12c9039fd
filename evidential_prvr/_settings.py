"""The settings dataclasses of the registry's sections, each checked once when it is built.

:mod:`evidential_prvr.presets` re-exports them and fills them with each preset's numbers; the modules hold
one as their settings; the functions of :mod:`evidential_prvr.functional` build one to check their keywords.
The checks of the values that a function and its settings share live here too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "TransportSettings",
    "IdentificationSettings",
    "InterVideoSettings",
    "IntraVideoSettings",
    "BaseLossSettings",
    "BaseRetrievalSettings",
]


def check_triplet_settings(margin: float, hard_negative_topk: int | None, video_negative: VideoNegative,
                           random_negatives: bool = False) -> None:
    """The checks of the triplet loss's hyperparameters; ``random_negatives``: ``hard_negative_topk=None``
    is accepted (the functional's random negatives)."""
    check_positive(margin, "margin")
    if hard_negative_topk is not None or not random_negatives:
        check_positive_int(hard_negative_topk, "hard_negative_topk")
    check_choice(video_negative, "video_negative", VIDEO_NEGATIVES)


def check_diversity_settings(alpha: float, delta: float, lam: float,
                             names: tuple[str, str, str] = ("alpha", "delta", "lam")) -> None:
    """The checks of α, δ and λ of the query-diversity loss (Eq. 23), reported under ``names``."""
    check_positive(alpha, names[0])
    check_in_range(delta, names[1], -2.0, 2.0)
    check_in_range(lam, names[2], 0.0, 64.0)


def check_terms(terms: object) -> tuple[InterTerm, ...]:
    """Validate a non-empty selection of :data:`INTER_TERMS` without repeats."""
    if isinstance(terms, str) or not isinstance(terms, Sequence) or len(terms) == 0:
        raise ValueError(f"terms must be a non-empty sequence drawn from {INTER_TERMS}, got {terms!r}")
    for term in terms:
        check_choice(term, "terms", INTER_TERMS)
    if len(set(terms)) != len(terms):
        raise ValueError(f"terms must not repeat an entry, got {tuple(terms)}")
    return tuple(terms)


@dataclass(frozen=True, kw_only=True)
class TransportSettings:
    """The hyperparameters of flexible optimal transport (Holmes §3.3, Eq. 19-20, App. B.5), checked once.

    The one schema of :func:`flexible_ot`, :class:`~evidential_prvr.FlexibleOT` and the registry's
    ``transport`` section (:func:`evidential_prvr.presets.holmes_settings`); keyword-only.

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
    >>> from evidential_prvr.presets import TransportSettings, holmes_settings
    >>> holmes_settings("release", "tvr").transport == TransportSettings()  # the release's are the defaults
    True
    >>> TransportSettings(epsilon=0.05, dustbin_quantile=None).marginals
    'release'

    References
    ----------
    Holmes (ICML 2026), §3.3, Eq. 19-20 and App. B.5; the official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs``).
    """

    epsilon: float = 0.1
    n_iters: int = 50
    dustbin_quantile: float | None = 0.3
    normalize: FOTNormalization = "minmax"
    minmax_over: MinmaxScope = "block"
    marginals: FOTMarginals = "release"
    grad: SinkhornGrad = "detach"
    tol: float | None = None
    method: SinkhornMethod = "auto"

    def __post_init__(self) -> None:
        check_positive(self.epsilon, "epsilon")
        check_positive_int(self.n_iters, "n_iters")
        if self.dustbin_quantile is not None:
            check_in_range(self.dustbin_quantile, "dustbin_quantile", 0.0, 1.0, low_inclusive=False,
                           high_inclusive=False)
        check_choice(self.normalize, "normalize", FOT_NORMALIZATIONS)
        check_choice(self.minmax_over, "minmax_over", MINMAX_SCOPES)
        check_choice(self.marginals, "marginals", FOT_MARGINALS)
        if self.tol is not None:
            check_positive(self.tol, "tol")
        check_choice(self.grad, "grad", SINKHORN_GRADS)
        check_choice(self.method, "method", SINKHORN_METHODS)


@dataclass(frozen=True, kw_only=True)
class IdentificationSettings:
    """The hyperparameters of :func:`identify` and :class:`~evidential_prvr.UncertaintyGuidedIdentifier`,
    checked once (see :func:`identify` for their meaning); keyword-only.

    Examples
    --------
    >>> from evidential_prvr.presets import IdentificationSettings
    >>> IdentificationSettings(beta=0.4).tau
    0.1

    References
    ----------
    Holmes (ICML 2026), §3.2, Eq. 10-14.
    """

    beta: float = 0.3
    tau: float = 0.1
    tanh_scaling: TanhScaling = "inside"
    entropy_median: EntropyMedian = "candidates"
    matched: MatchRule = "any_positive"
    fusion: Fusion = "uncertainty_dominant"

    def __post_init__(self) -> None:
        check_in_range(self.beta, "beta", 0.0, 1.0)
        check_positive(self.tau, "tau")
        check_choice(self.tanh_scaling, "tanh_scaling", TANH_SCALINGS)
        check_choice(self.entropy_median, "entropy_median", ENTROPY_MEDIANS)
        check_choice(self.matched, "matched", MATCH_RULES)
        check_choice(self.fusion, "fusion", FUSIONS)


@dataclass(frozen=True, kw_only=True)
class InterVideoSettings(IdentificationSettings):
    """The hyperparameters of inter-video evidential learning L_inter (Holmes §3.2, Eq. 3-18), checked once.

    The one schema of :func:`inter_video_loss`, :class:`~evidential_prvr.EvidentialRetrievalLoss` and the
    registry's ``inter`` section; the identification settings (inherited from ``IdentificationSettings``:
    the fields of :func:`identify`) plus the calibration. Keyword-only.

    Attributes
    ----------
    beta : float
        :math:`\\beta \\in [0, 1]` of Eq. 11 (default 0.3).
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
        ``False`` is the warm-up stage: every query keeps its plain label (Table 3 row 8), and the
        identification runs only when details are asked for.
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

    gamma: float = 0.2
    calibrate: bool = True
    calibration_set: CalibrationSet = "refined"
    terms: tuple[InterTerm, ...] = INTER_TERMS

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in_range(self.gamma, "gamma", 0.0, 1.0)
        if not isinstance(self.calibrate, bool):
            raise TypeError(f"calibrate must be a bool, got {type(self.calibrate).__name__}")
        check_choice(self.calibration_set, "calibration_set", CALIBRATION_SETS)
        object.__setattr__(self, "terms", check_terms(self.terms))


@dataclass(frozen=True, kw_only=True)
class IntraVideoSettings:
    """The evidence settings of intra-video evidential learning L_intra (Holmes §3.3), checked once.

    The one schema of :func:`intra_video_loss`, :class:`~evidential_prvr.IntraVideoEvidentialLoss` and
    the registry's ``intra`` section; the transport has its own (:class:`TransportSettings`).

    Attributes
    ----------
    tau : float
        Evidence temperature :math:`\\tau_{\\text{intra}} > 0` of the query-clip evidence.
    tanh_scaling : {"outside", "inside"}
        Evidence form, see :func:`~evidential_prvr.functional.evidence` (release: ``"outside"``).
    assignment : {"fot", "ot", "softmax"}
        ``"fot"``: flexible transport with dustbin (default); ``"ot"``: the same transport without
        dustbin (Table 3 row 12); ``"softmax"``: :math:`\\mathrm{softmax}_j(\\bar s_{ij}/\\varepsilon)`
        over the valid clips with the transport's :math:`\\varepsilon` (Table 3 row 11; the paper does
        not give its temperature).

    Examples
    --------
    >>> from evidential_prvr.presets import IntraVideoSettings
    >>> IntraVideoSettings(assignment="ot")  # Table 3 row 12
    IntraVideoSettings(tau=0.06, tanh_scaling='outside', assignment='ot')

    References
    ----------
    Holmes (ICML 2026), §3.3 and Table 3; the official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs``).
    """

    tau: float = 0.06
    tanh_scaling: TanhScaling = "outside"
    assignment: IntraAssignment = "fot"

    def __post_init__(self) -> None:
        check_positive(self.tau, "tau")
        check_choice(self.tanh_scaling, "tanh_scaling", TANH_SCALINGS)
        check_choice(self.assignment, "assignment", INTRA_ASSIGNMENTS)


@dataclass(frozen=True, kw_only=True)
class BaseLossSettings:
    """The hyperparameters of the basic objectives (Holmes App. B.1, Eq. 22-23), checked once.

    The registry's ``base`` section; with the three loss weights it is
    :class:`~evidential_prvr.presets.BaseRetrievalSettings`.
    Keyword-only.

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
    >>> BaseLossSettings(video_negative="random")
    Traceback (most recent call last):
        ...
    ValueError: video_negative must be one of 'hardest', 'pool'; got 'random'

    References
    ----------
    Holmes (ICML 2026), App. B.1, Eq. 22-23; the official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs``).
    """

    margin: float = 0.2
    div_delta: float = 0.2
    hard_negative_topk: int = 20
    video_negative: VideoNegative = "hardest"
    nce_video_to_text: NCEVideoToText = "release"
    div_alpha: float = 32.0
    div_lambda: float = 1.0

    def __post_init__(self) -> None:
        check_triplet_settings(self.margin, self.hard_negative_topk, self.video_negative)
        check_diversity_settings(self.div_alpha, self.div_delta, self.div_lambda, ("div_alpha", "div_delta", "div_lambda"))
        check_choice(self.nce_video_to_text, "nce_video_to_text", NCE_VIDEO_TO_TEXT)


@dataclass(frozen=True, kw_only=True)
class BaseRetrievalSettings(BaseLossSettings):
    r"""The hyperparameters of L_base (Holmes Eq. 22 + Eq. 23): :class:`BaseLossSettings` and the weights
    :math:`\lambda_f`, :math:`\lambda_c`, :math:`\lambda_{div}` (>= 0), checked once; keyword-only.

    The one schema of :func:`base_retrieval_loss` and :class:`~evidential_prvr.BaseRetrievalLoss`;
    :meth:`from_sections` builds it from the registry's ``base`` and ``weights`` sections.

    Examples
    --------
    >>> from evidential_prvr.presets import BaseRetrievalSettings, holmes_settings
    >>> s = holmes_settings("release", "tvr")
    >>> BaseRetrievalSettings.from_sections(s.base, s.weights).frame_nce_weight
    0.04

    References
    ----------
    Holmes (ICML 2026), App. B.1, Eq. 22-23.
    """

    frame_nce_weight: float = 0.04
    clip_nce_weight: float = 0.02
    div_weight: float = 0.003

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("frame_nce_weight", "clip_nce_weight", "div_weight"):
            check_in_range(getattr(self, name), name, 0.0, float("inf"), high_inclusive=False)

    @classmethod
    def from_sections(cls, base: BaseLossSettings, weights: object) -> BaseRetrievalSettings:
        """The registry's ``base`` section with the L_base weights of its ``weights`` section
        (:class:`~evidential_prvr.presets.LossWeights`: ``nce_frame``, ``nce_clip``, ``div``)."""
        return cls(**settings_fields(base, BaseLossSettings), frame_nce_weight=weights.nce_frame,  # type: ignore[attr-defined]
                   clip_nce_weight=weights.nce_clip, div_weight=weights.div)  # type: ignore[attr-defined]


def settings_fields(settings: DataclassInstance, schema: DataclassInstance | type[DataclassInstance] | None = None
                    ) -> dict[str, Any]:
    """The field values of a settings dataclass, by name (not copied); with ``schema``, only those of the
    fields of ``schema`` (the part of an extended settings object that a base schema holds)."""
    return {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings if schema is None else schema)}


def check_settings(settings: object, settings_class: type) -> None:
    """Raise ``TypeError`` unless ``settings`` is a ``settings_class`` (the check of every ``from_settings``)."""
    if not isinstance(settings, settings_class):
        name = settings_class.__name__
        article = "an" if name[0] in "AEIOU" else "a"
        raise TypeError(f"settings must be {article} {name}, got {type(settings).__name__}")


def settings_repr(settings: Any) -> str:
    """``name=value, ...`` of every field of a settings dataclass (a module's ``extra_repr``)."""
    return ", ".join(f"{f.name}={getattr(settings, f.name)!r}" for f in dataclasses.fields(settings))
