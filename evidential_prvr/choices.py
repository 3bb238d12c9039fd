"""The choice parameters of the package: each a ``Literal`` type and the tuple of its values.

The ``Literal`` annotates every parameter (and settings field) of that choice, so a type checker reports a
value outside it (a misspelt ``video_negative="hardset"``) where the call is written; the tuple is what the
run-time check accepts. Both are defined here once.

Examples
--------
>>> from evidential_prvr.choices import REDUCTIONS, Reduction
>>> REDUCTIONS
('mean', 'sum', 'none')
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "Preset", "PRESETS", "DatasetName", "HUDPreset", "HUD_PRESETS", "HUDDatasetName", "HUD_DATASETS",
    "DABPreset", "DAB_PRESETS", "DABDatasetName", "DAB_DATASETS", "LogVarWeightInit", "LOGVAR_WEIGHT_INITS",
    "Reduction", "REDUCTIONS", "TanhScaling", "TANH_SCALINGS", "MatchRule", "MATCH_RULES", "EntropyMedian",
    "ENTROPY_MEDIANS", "Fusion", "FUSIONS", "CalibrationSet", "CALIBRATION_SETS", "InterTerm", "INTER_TERMS",
    "IntraAssignment", "INTRA_ASSIGNMENTS", "VideoNegative", "VIDEO_NEGATIVES", "NCEVideoToText",
    "NCE_VIDEO_TO_TEXT", "Confidence", "CONFIDENCES", "IdentificationRule", "IDENTIFICATION_RULES",
    "FOTMarginals", "FOT_MARGINALS", "FOTNormalization", "FOT_NORMALIZATIONS", "MinmaxScope", "MINMAX_SCOPES",
    "SinkhornMethod", "SINKHORN_METHODS", "SinkhornGrad", "SINKHORN_GRADS",
]

Preset = Literal["paper", "release"]
PRESETS: tuple[Preset, ...] = get_args(Preset)
"""Preset names of the Holmes modules' ``from_preset`` (HUD's are :data:`HUD_PRESETS`)."""

DatasetName = Literal["tvr", "activitynet", "charades", "act", "cha"]
"""The data set names of the presets (the release's ``-d tvr|act|cha`` included), as a type; their
canonical forms are :data:`~evidential_prvr.presets.DATASETS`."""

HUDPreset = Literal["paper"]
HUD_PRESETS: tuple[HUDPreset, ...] = get_args(HUDPreset)
"""Preset names of :meth:`HUDObjective.from_preset <evidential_prvr.PresetModule.from_preset>`
(:func:`evidential_prvr.presets.hud_settings`)."""

HUDDatasetName = Literal["webvid-covr"]
"""The data set names of HUD's presets, as a type."""
HUD_DATASETS: tuple[HUDDatasetName, ...] = get_args(HUDDatasetName)
"""The data set names of HUD's presets (its composed video retrieval settings, WebVid-CoVR)."""

DABPreset = Literal["paper"]
DAB_PRESETS: tuple[DABPreset, ...] = get_args(DABPreset)
"""Preset names of the DAB modules' ``from_preset`` (:func:`evidential_prvr.presets.dab_settings`)."""

DABDatasetName = Literal["msr-vtt", "msvd", "vatex"]
"""The data set names of DAB's presets, as a type."""
DAB_DATASETS: tuple[DABDatasetName, ...] = get_args(DABDatasetName)
"""The data set names of DAB's presets (its text-to-video benchmarks; the paper uses one setting for all three)."""

LogVarWeightInit = Literal["zero", "small", "pytorch"]
LOGVAR_WEIGHT_INITS: tuple[LogVarWeightInit, ...] = get_args(LogVarWeightInit)
"""How the weights of DAB's log-variance layers start.

``zero`` (every log-variance starts at the bias, the same
for every input, so the cost starts as a squared distance of the means: the identity start), ``small`` (PyTorch's
default draw scaled by :data:`~evidential_prvr.probabilistic.SMALL_LOGVAR_WEIGHT_SCALE`: near-identity, with
symmetry broken) or ``pytorch`` (PyTorch's default draw; the heads' start before version 3.0, which gives every
input its own random per-dimension metric at step 0)."""

Reduction = Literal["mean", "sum", "none"]
REDUCTIONS: tuple[Reduction, ...] = get_args(Reduction)
"""Reductions over rows accepted by the losses of this package."""

TanhScaling = Literal["inside", "outside"]
TANH_SCALINGS: tuple[TanhScaling, ...] = get_args(TanhScaling)
"""Where the temperature of Holmes Eq. 3 is applied, ``"inside"`` (paper) or ``"outside"`` (release)."""

MatchRule = Literal["any_positive", "argmax"]
MATCH_RULES: tuple[MatchRule, ...] = get_args(MatchRule)
"""Rules for the correctly matched set of Holmes Eq. 11 (see
:func:`~evidential_prvr.functional.correctly_matched`)."""

EntropyMedian = Literal["candidates", "batch"]
ENTROPY_MEDIANS: tuple[EntropyMedian, ...] = get_args(EntropyMedian)
"""Median rules of Holmes Eq. 12, ``"candidates"`` (paper) or ``"batch"`` (release)."""

Fusion = Literal["uncertainty_dominant", "confidence_dominant", "frame", "clip"]
FUSIONS: tuple[Fusion, ...] = get_args(Fusion)
"""Partition fusion rules, Holmes Eq. 14 and the Table 3 alternatives (rows 5-7)."""

CalibrationSet = Literal["refined", "initial"]
CALIBRATION_SETS: tuple[CalibrationSet, ...] = get_args(CalibrationSet)
"""Which polysemous set gets calibrated labels, S^o_n (Eq. 15) or the initial S̃_n (Table 3 row 9)."""

InterTerm = Literal["frame", "clip", "fused"]
INTER_TERMS: tuple[InterTerm, ...] = get_args(InterTerm)
"""The three L_U terms of Holmes Eq. 18 (frame, clip and Dempster-Shafer fused opinions)."""

IntraAssignment = Literal["fot", "ot", "softmax"]
INTRA_ASSIGNMENTS: tuple[IntraAssignment, ...] = get_args(IntraAssignment)
"""Soft labels of the intra-video loss (Holmes Table 3, the default and rows 11-12)."""

VideoNegative = Literal["hardest", "pool"]
VIDEO_NEGATIVES: tuple[VideoNegative, ...] = get_args(VideoNegative)
"""Video→text hard-negative rules of :func:`~evidential_prvr.functional.triplet_ranking_loss`."""

NCEVideoToText = Literal["release", "paper"]
NCE_VIDEO_TO_TEXT: tuple[NCEVideoToText, ...] = get_args(NCEVideoToText)
"""Video→text forms of :func:`~evidential_prvr.functional.info_nce_loss`."""

Confidence = Literal["neg_u", "top_belief", "margin", "neg_xi", "max_score", "kl_margin"]
CONFIDENCES: tuple[Confidence, ...] = get_args(Confidence)
"""Names of the confidence scores of :func:`~evidential_prvr.functional.selective_confidence`."""

IdentificationRule = Literal["thresholds", "batch"]
IDENTIFICATION_RULES: tuple[IdentificationRule, ...] = get_args(IdentificationRule)
"""``"thresholds"``: fixed (or fitted) :class:`~evidential_prvr.uncertainty.QueryTypeThresholds`; ``"batch"``:
Holmes Eq. 10-14 per call."""

FOTMarginals = Literal["release", "uniform"]
FOT_MARGINALS: tuple[FOTMarginals, ...] = get_args(FOTMarginals)
"""Row-marginal schemes of :func:`~evidential_prvr.functional.flexible_ot`."""

FOTNormalization = Literal["minmax"] | None
FOT_NORMALIZATIONS: tuple[FOTNormalization, ...] = ("minmax", None)
"""Similarity normalisations of :func:`~evidential_prvr.functional.flexible_ot` (``None``: none)."""

MinmaxScope = Literal["block", "valid"]
MINMAX_SCOPES: tuple[MinmaxScope, ...] = get_args(MinmaxScope)
"""The entries the min-max normalisation reads, the whole padded block (release) or the valid ones."""

SinkhornMethod = Literal["auto", "log", "scaling"]
SINKHORN_METHODS: tuple[SinkhornMethod, ...] = get_args(SinkhornMethod)
"""Iteration schemes of :func:`~evidential_prvr.functional.sinkhorn`."""

SinkhornGrad = Literal["detach", "autodiff"]
SINKHORN_GRADS: tuple[SinkhornGrad, ...] = get_args(SinkhornGrad)
"""Gradient modes of :func:`~evidential_prvr.functional.sinkhorn`: stop-gradient plan, or backpropagation
through the iterations."""
