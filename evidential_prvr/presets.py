"""One registry of every preset constant: Holmes's (the paper's and the official release's, per data set), HUD's and
DAB's.

Every ``from_preset(preset, dataset=None, *args, **overrides)`` of the package and the reference model's
``--config tvr|activitynet|charades`` read :func:`holmes_settings` (HUD's
:meth:`HUDObjective.from_preset <evidential_prvr.PresetModule.from_preset>` reads :func:`hud_settings`, the DAB
modules' read :func:`dab_settings`), so each number lives here once.

``preset="release"``
    The official Holmes code (``lijun2005/ICML26-Holmes``, ``src/Configs``): a ``dataset`` is required.
``preset="paper"``
    Holmes (ICML 2026) as printed. Without a ``dataset`` only the method's own constants are known
    (the ``inter``, ``transport`` and ``intra`` sections; the others are ``None``). With a ``dataset``
    the settings the paper leaves to its code ("all remaining settings follow HLFormer", App. A.1:
    loss weights, margins, learning rate, dropout, ...) are filled in from the release, and the values
    the paper does state override them (e.g. the ActivityNet query length of 64, App. A.1).

Data set names are ``"tvr"``, ``"activitynet"`` and ``"charades"``; the release's short names
``"act"`` and ``"cha"`` are accepted as aliases (:func:`canonical_dataset`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from evidential_prvr._checks import check_choice
from evidential_prvr._settings import BaseLossSettings, InterVideoSettings, IntraVideoSettings, TransportSettings
from evidential_prvr.choices import DAB_DATASETS, DAB_PRESETS, HUD_DATASETS, HUD_PRESETS, PRESETS, LogVarWeightInit

__all__ = [
    "PRESETS",
    "DATASETS",
    "DATASET_ALIASES",
    "canonical_dataset",
    "CAPTIONS_PER_VIDEO",
    "closest_dataset",
    "InterVideoSettings",
    "TransportSettings",
    "IntraVideoSettings",
    "BaseLossSettings",
    "LossWeights",
    "ScheduleSettings",
    "OptimizerSettings",
    "ModelSettings",
    "HolmesSettings",
    "holmes_settings",
    "HUD_PRESETS",
    "HUD_DATASETS",
    "HUDSettings",
    "hud_settings",
    "DAB_PRESETS",
    "DAB_DATASETS",
    "DABSettings",
    "dab_settings",
]


DATASETS = ("tvr", "activitynet", "charades")
"""Canonical data set names."""

DATASET_ALIASES = {"tvr": "tvr", "activitynet": "activitynet", "act": "activitynet", "charades": "charades",
                   "cha": "charades"}
"""Accepted data set names (the release's ``-d tvr|act|cha`` included) and their canonical form."""


def canonical_dataset(dataset: str) -> str:
    """The canonical name of ``dataset`` (``"act"`` → ``"activitynet"``, ``"cha"`` → ``"charades"``).

    Examples
    --------
    >>> from evidential_prvr.presets import canonical_dataset
    >>> canonical_dataset("act"), canonical_dataset("charades")
    ('activitynet', 'charades')

    References
    ----------
    The official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs``): ``-d tvr|act|cha``.
    """
    if not isinstance(dataset, str) or dataset not in DATASET_ALIASES:
        names = ", ".join(repr(d) for d in DATASET_ALIASES)
        raise ValueError(
            f"dataset must be one of {names}; got {dataset!r}. For a data set of your own, pass dataset=None "
            f"(the TVR settings) or the registered data set closest to yours, e.g. "
            f"dataset=evidential_prvr.presets.closest_dataset(captions_per_video)"
        )
    return DATASET_ALIASES[dataset]


CAPTIONS_PER_VIDEO = {"tvr": 5.0, "activitynet": 3.7, "charades": 2.4}
"""Mean captions (moments) per video of each registered data set, as Holmes §4.1 ("Datasets") states
them: TVR five descriptions per clip, ActivityNet Captions 3.7 moments per video, Charades-STA 16,128
sentences over 6,670 videos (2.4)."""


def closest_dataset(captions_per_video: float) -> str:
    """The registered data set whose mean captions per video is nearest to ``captions_per_video``.

    A way to take the Holmes settings for a data set of one's own: the release tunes its temperatures,
    margins and loss weights per data set, and the number of captions per video is what shapes a PRVR
    batch (how many positives and polysemous queries it holds). With :data:`CAPTIONS_PER_VIDEO` (TVR 5,
    ActivityNet 3.7, Charades 2.4) the boundaries are the midpoints: below 3.05 Charades, from 3.05 up
    to 4.35 ActivityNet, from 4.35 TVR (a tie goes to the data set with more captions). Without this
    choice, ``dataset=None`` takes the TVR settings.

    Parameters
    ----------
    captions_per_video : float
        Training captions divided by training videos of your data set (> 0).

    Returns
    -------
    str
        A canonical data set name for ``from_preset(..., dataset=...)``.

    Examples
    --------
    >>> from evidential_prvr.presets import closest_dataset
    >>> closest_dataset(4.0), closest_dataset(2.0), closest_dataset(20.0)
    ('activitynet', 'charades', 'tvr')

    References
    ----------
    Holmes (ICML 2026), §4.1 "Datasets".
    """
    if isinstance(captions_per_video, bool) or not isinstance(captions_per_video, (int, float)):
        raise TypeError(f"captions_per_video must be a number, got {type(captions_per_video).__name__}")
    if not (0 < captions_per_video < float("inf")):
        raise ValueError(f"captions_per_video must be a finite number > 0, got {captions_per_video}")
    return min(CAPTIONS_PER_VIDEO, key=lambda d: (abs(CAPTIONS_PER_VIDEO[d] - captions_per_video),
                                                   -CAPTIONS_PER_VIDEO[d]))


@dataclass(frozen=True)
class LossWeights:
    """Weights of Holmes Eq. 21-22: ``[nce_clip, nce_frame, div, intra, inter]`` (the release's
    ``loss_factor``; the triplet terms have weight 1).

    Examples
    --------
    >>> from evidential_prvr.presets import holmes_settings
    >>> holmes_settings("release", "tvr").weights.inter
    0.2

    References
    ----------
    Holmes (ICML 2026), Eq. 21-22; the official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs``).
    """

    nce_clip: float
    nce_frame: float
    div: float
    intra: float
    inter: float


@dataclass(frozen=True)
class ScheduleSettings:
    """Run length and the two-stage schedule (Holmes §3.4, §4.2).

    Attributes
    ----------
    epochs : int
        Training epochs.
    warmup_stage_epochs : int
        Epochs of the first stage (L_inter without calibration, no L_intra).
    hard_negative_epoch : int
        First epoch (0-based) with hard triplet negatives.
    early_stop_patience : int
        Training stops once this many consecutive epochs brought no better validation SumR. The
        release stops when its counter *exceeds* ``max_es_cnt``, i.e. after ``max_es_cnt + 1``
        such epochs; that is the value stored here.

    Examples
    --------
    >>> from evidential_prvr.presets import holmes_settings
    >>> holmes_settings("paper", "tvr").schedule.warmup_stage_epochs
    20

    References
    ----------
    Holmes (ICML 2026), §3.4 and §4.2; the official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs``).
    """

    epochs: int = 100
    warmup_stage_epochs: int = 20
    hard_negative_epoch: int = 20
    early_stop_patience: int = 21


@dataclass(frozen=True)
class OptimizerSettings:
    """Optimiser of the release (BertAdam) and its schedule.

    Attributes
    ----------
    lr : float
        Peak learning rate.
    warmup_proportion : float
        Fraction of all steps with a linear warm-up (then linear decay to 0).
    weight_decay : float
        Decoupled weight decay (not on biases and the input LayerNorms).
    max_grad_norm : float
        Gradient clipping norm, applied to each parameter tensor separately.
    eps : float
        Adam ε (1e-6, BERT).
    betas : tuple of float
        Adam's β1, β2.
    videos_per_batch : int
        Videos per training batch (each with all of its captions).

    Examples
    --------
    >>> from evidential_prvr.presets import holmes_settings
    >>> holmes_settings("release", "activitynet").optimizer.lr
    0.00025

    References
    ----------
    Holmes (ICML 2026), App. A.1; the official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs``).
    """

    lr: float
    warmup_proportion: float = 0.01
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    eps: float = 1e-6
    betas: tuple[float, float] = (0.9, 0.999)
    videos_per_batch: int = 128


@dataclass(frozen=True)
class ModelSettings:
    """Architecture constants of the GMMFormer-style model (Holmes §3.1, §4.2, App. A.1, B.6).

    Attributes
    ----------
    hidden_size, num_heads : int
        Latent size d = 384 and attention heads.
    dropout : float
        Dropout of every layer (the release's ``drop`` and ``input_drop``, equal in all its configs).
    width_temperature : float
        Softmax temperature of the width-fusion weights (the release's ``sft_factor``).
    max_query_len : int
        Caption length N_q in tokens.
    n_clips, n_frames : int
        M_c = 32 clips and M_f = 128 frames.
    position_table : int
        Rows of the video branches' learned position tables (the release's ``max_ctx_l``).
    widths : tuple of float
        Gaussian widths of the parallel attention blocks; ``inf`` is global attention.
    frame_weight, clip_weight : float
        α_f, α_c of Eq. 2.
    initializer_range : float
        Standard deviation of the normal weight initialisation.
    ffn_multiplier, query_ffn_multiplier : int
        Feed-forward size (× ``hidden_size``) of every Gaussian attention block and of the query encoder's
        block.

    Examples
    --------
    >>> from evidential_prvr.presets import holmes_settings
    >>> holmes_settings("paper", "activitynet").model.max_query_len
    64

    References
    ----------
    Holmes (ICML 2026), §3.1, §4.2, App. A.1 and B.6; the official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs``).
    """

    dropout: float
    width_temperature: float
    max_query_len: int = 30
    hidden_size: int = 384
    num_heads: int = 4
    n_clips: int = 32
    n_frames: int = 128
    position_table: int = 128
    widths: tuple[float, ...] = (math.inf, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
    frame_weight: float = 0.4
    clip_weight: float = 0.6
    initializer_range: float = 0.02
    ffn_multiplier: int = 4
    query_ffn_multiplier: int = 4


@dataclass(frozen=True)
class HolmesSettings:
    """All constants of one (preset, data set); sections a paper preset cannot supply are ``None``.

    Examples
    --------
    >>> from evidential_prvr.presets import holmes_settings
    >>> settings = holmes_settings("release", "cha")
    >>> settings.dataset, settings.intra.tau
    ('charades', 0.08)

    References
    ----------
    Holmes (ICML 2026); the official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs``).
    """

    preset: str
    dataset: str | None
    inter: InterVideoSettings
    transport: TransportSettings
    intra: IntraVideoSettings
    base: BaseLossSettings | None = None
    weights: LossWeights | None = None
    schedule: ScheduleSettings | None = None
    optimizer: OptimizerSettings | None = None
    model: ModelSettings | None = None

    def require(self, section: str, user: str) -> Any:
        """The section ``section``, or a ``ValueError`` telling ``user`` to name a data set."""
        value = getattr(self, section)
        if value is None:
            raise ValueError(
                f"{user}: the Holmes paper gives no {section} settings of its own; pass dataset='tvr', "
                f"'activitynet' or 'charades' to take them from the release, as the paper does (App. A.1)"
            )
        return value


# --- the release (src/Configs/{tvr,act,cha}.py) ---------------------------------------------------------
# Every value is written out here: a default of a function or a module never reaches a preset.
_RELEASE_INTER_TAU = {"tvr": 0.05, "activitynet": 0.04, "charades": 0.08}
_RELEASE_INTRA_TAU = {"tvr": 0.06, "activitynet": 0.08, "charades": 0.08}
_RELEASE_TRANSPORT = TransportSettings(epsilon=0.1, n_iters=50, dustbin_quantile=0.3, normalize="minmax",
                                       minmax_over="block", marginals="release", grad="detach", tol=None, method="auto")
_RELEASE_BASE = {
    "tvr": BaseLossSettings(margin=0.1, div_delta=0.15, hard_negative_topk=20, video_negative="hardest",
                            nce_video_to_text="release", div_alpha=32.0, div_lambda=1.0),
    "activitynet": BaseLossSettings(margin=0.2, div_delta=0.2, hard_negative_topk=20, video_negative="hardest",
                                    nce_video_to_text="release", div_alpha=32.0, div_lambda=1.0),
    "charades": BaseLossSettings(margin=0.2, div_delta=0.2, hard_negative_topk=20, video_negative="hardest",
                                 nce_video_to_text="release", div_alpha=32.0, div_lambda=1.0),
}
_RELEASE_WEIGHTS = {
    "tvr": LossWeights(nce_clip=0.05, nce_frame=0.04, div=8e-5, intra=0.8, inter=0.2),
    "activitynet": LossWeights(nce_clip=0.02, nce_frame=0.04, div=0.003, intra=1e-4, inter=0.06),
    "charades": LossWeights(nce_clip=0.02, nce_frame=0.04, div=0.003, intra=9e-4, inter=0.06),
}
_RELEASE_SCHEDULE = {  # max_es_cnt 20 / 10 / 20, stop when exceeded
    "tvr": ScheduleSettings(early_stop_patience=21),
    "activitynet": ScheduleSettings(early_stop_patience=11),
    "charades": ScheduleSettings(early_stop_patience=21),
}
_RELEASE_OPTIMIZER = {
    "tvr": OptimizerSettings(lr=3e-4),
    "activitynet": OptimizerSettings(lr=2.5e-4),
    "charades": OptimizerSettings(lr=2e-4),
}
_RELEASE_MODEL = {
    "tvr": ModelSettings(dropout=0.2, width_temperature=0.09),
    "activitynet": ModelSettings(dropout=0.31, width_temperature=0.6),
    "charades": ModelSettings(dropout=0.25, width_temperature=0.6),
}


def _release_inter(dataset: str) -> InterVideoSettings:
    return InterVideoSettings(beta=0.3, tau=_RELEASE_INTER_TAU[dataset], tanh_scaling="outside", entropy_median="batch",
                              matched="argmax", fusion="uncertainty_dominant", gamma=0.2, calibrate=True,
                              calibration_set="refined", terms=("frame", "clip", "fused"))


# --- the paper as printed ---------------------------------------------------------------------------------
_PAPER_INTER = InterVideoSettings(beta=0.3, tau=0.1, tanh_scaling="inside", entropy_median="candidates",
                                  matched="any_positive", fusion="uncertainty_dominant", gamma=0.2, calibrate=True,
                                  calibration_set="refined", terms=("frame", "clip", "fused"))
# ε and the normalisation are not in the paper: raw similarities, the release's ε, uniform marginals (App. B.5).
_PAPER_TRANSPORT = TransportSettings(epsilon=0.1, n_iters=50, dustbin_quantile=0.3, normalize=None, minmax_over="valid",
                                     marginals="uniform", grad="detach", tol=None, method="auto")
_PAPER_INTRA = IntraVideoSettings(tau=0.1, tanh_scaling="inside", assignment="fot")
_PAPER_QUERY_LEN = {"tvr": 30, "activitynet": 64, "charades": 30}  # App. A.1


def holmes_settings(preset: str, dataset: str | None = None) -> HolmesSettings:
    """The constants of ``preset`` for ``dataset``.

    Parameters
    ----------
    preset : {"paper", "release"}
        Which source (see the module documentation).
    dataset : {"tvr", "activitynet", "charades", "act", "cha"}, optional
        Required for ``"release"``; optional for ``"paper"``.

    Returns
    -------
    HolmesSettings
        Frozen dataclasses; change a value with :func:`dataclasses.replace`.

    Examples
    --------
    >>> from evidential_prvr.presets import holmes_settings
    >>> holmes_settings("release", "tvr").inter.tau, holmes_settings("paper").inter.tau
    (0.05, 0.1)
    >>> holmes_settings("paper").weights is None  # the paper leaves the loss weights to its code
    True

    References
    ----------
    Holmes (ICML 2026), §3.2-3.4, §4.2 and App. A.1; the official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs``).
    """
    check_choice(preset, "preset", PRESETS)
    if dataset is None:
        if preset == "release":
            raise ValueError("dataset is required for the 'release' preset: 'tvr', 'activitynet' or 'charades'")
        return HolmesSettings("paper", None, _PAPER_INTER, _PAPER_TRANSPORT, _PAPER_INTRA)
    name = canonical_dataset(dataset)
    if preset == "release":
        return HolmesSettings(
            preset="release",
            dataset=name,
            inter=_release_inter(name),
            transport=_RELEASE_TRANSPORT,
            intra=IntraVideoSettings(tau=_RELEASE_INTRA_TAU[name], tanh_scaling="outside", assignment="fot"),
            base=_RELEASE_BASE[name],
            weights=_RELEASE_WEIGHTS[name],
            schedule=_RELEASE_SCHEDULE[name],
            optimizer=_RELEASE_OPTIMIZER[name],
            model=_RELEASE_MODEL[name],
        )
    release = holmes_settings("release", name)
    assert release.schedule is not None and release.model is not None  # the release preset of a dataset has both
    return dataclasses.replace(
        release,
        preset="paper",
        inter=_PAPER_INTER,
        transport=_PAPER_TRANSPORT,
        intra=_PAPER_INTRA,
        schedule=dataclasses.replace(release.schedule, epochs=100, warmup_stage_epochs=20),  # §4.2
        model=dataclasses.replace(release.model, max_query_len=_PAPER_QUERY_LEN[name]),
    )


def module_settings(preset: str, dataset: str | None) -> HolmesSettings:
    """The settings every module's ``from_preset`` reads: :func:`holmes_settings` with ``dataset=None``
    taken as ``"tvr"`` (the documented default for a data set of one's own).

    Examples
    --------
    >>> from evidential_prvr.presets import module_settings
    >>> module_settings("release", None).dataset
    'tvr'

    References
    ----------
    The official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs/tvr.py``).
    """
    return holmes_settings(preset, "tvr" if dataset is None else dataset)


# --- HUD (composed video retrieval) ----------------------------------------------------------------------


@dataclass(frozen=True)
class HUDSettings:
    """HUD's hyperparameters of one preset: what :meth:`HUDObjective.from_preset
    <evidential_prvr.PresetModule.from_preset>` sets (the backbone's sizes are the caller's).

    Attributes
    ----------
    num_samples : int
        :math:`U`, the samples of the textual Gaussian (Eq. 3); 8 on WebVid-CoVR (FashionIQ's 6 is a composed
        image retrieval setting, not registered).
    tau : float
        Temperature of Eq. 12-13.
    kappa : float
        Weight of :math:`\\mathcal{L}_{H\\leftrightarrow A}` (Eq. 15).

    Examples
    --------
    >>> from evidential_prvr.presets import hud_settings
    >>> hud_settings("paper")
    HUDSettings(num_samples=8, tau=0.1, kappa=0.5)

    References
    ----------
    HUD: "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval", Eq. 3, 12-15 and
    its implementation details.
    """

    num_samples: int
    tau: float
    kappa: float


_HUD_PAPER = HUDSettings(num_samples=8, tau=0.1, kappa=0.5)


def hud_settings(preset: str, dataset: str | None = None) -> HUDSettings:
    """HUD's constants of ``preset`` for ``dataset``.

    Parameters
    ----------
    preset : {"paper"}
        HUD as printed (:data:`~evidential_prvr.choices.HUD_PRESETS`).
    dataset : {"webvid-covr"}, optional
        ``None`` takes the WebVid-CoVR settings (:data:`~evidential_prvr.choices.HUD_DATASETS`).

    Returns
    -------
    HUDSettings
        Frozen; change a value with :func:`dataclasses.replace`.

    Examples
    --------
    >>> from evidential_prvr.presets import hud_settings
    >>> hud_settings("paper", "webvid-covr") == hud_settings("paper")
    True

    References
    ----------
    HUD: "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval", its implementation
    details.
    """
    check_choice(preset, "preset", HUD_PRESETS)
    if dataset is not None:
        check_choice(dataset, "dataset", HUD_DATASETS)
    return _HUD_PAPER


# --- DAB (text-to-video retrieval) ------------------------------------------------------------------------


@dataclass(frozen=True)
class DABSettings:
    """DAB's constants of one preset: what the ``from_preset`` of its modules set
    (:class:`~evidential_prvr.probabilistic.GaussianEmbeddingHead`,
    :class:`~evidential_prvr.probabilistic.TokenUncertaintyHead`,
    :class:`~evidential_prvr.probabilistic.DistributionBridge`,
    :class:`~evidential_prvr.probabilistic.ConditionedDistributionBridge`), and the training recipe the paper
    states, for a caller's own training loop (the reference model's regime is its own,
    :mod:`reference_models.dab.config`). The sizes are the caller's, and the paper gives no PAC temperature.

    Attributes
    ----------
    logvar_init : float
        The log-variance heads' bias at the start (-2.0: low initial uncertainty).
    logvar_bounds : tuple of float
        The clip of every log-variance, ``(-6.0, 2.0)``.
    logvar_weight_init : {"zero", "small", "pytorch"}
        The start of the log-variance layers' weights (the paper is silent; ``zero``, the identity start: every
        input starts with the bias's variance, so the cost starts as a squared distance of the means;
        :data:`~evidential_prvr.choices.LOGVAR_WEIGHT_INITS`, ``pytorch`` the start before version 3.0).
    n_steps, total_steps : int
        The truncated bridge steps :math:`T' = 32` of :math:`N = 1000` diffusion steps.
    step_range : tuple of float
        The linear step-size schedule :math:`\\chi_t \\in [0.2, 0.6]`.
    contraction : float
        The contraction rate of the bridge's updates (at most 0.8).
    weight_decay, encoder_lr, head_lr, warmup_ratio : float
        AdamW's weight decay (0.02), the learning rates of the CLIP encoders (1e-6) and of the probabilistic and
        bridge modules (1e-4), and the linear warm-up's share of training (10 %).
    batch_size, epochs : int
        32 and 10.

    Examples
    --------
    >>> from evidential_prvr.presets import dab_settings
    >>> dab_settings("paper").n_steps, dab_settings("paper").step_range
    (32, (0.2, 0.6))

    References
    ----------
    DAB: "Distribution Alignment Bridge" (ECCV 2026), Key Designs 1-2 and its implementation details.
    """

    logvar_init: float
    logvar_bounds: tuple[float, float]
    logvar_weight_init: LogVarWeightInit
    n_steps: int
    total_steps: int
    step_range: tuple[float, float]
    contraction: float
    weight_decay: float
    encoder_lr: float
    head_lr: float
    warmup_ratio: float
    batch_size: int
    epochs: int


_DAB_PAPER = DABSettings(logvar_init=-2.0, logvar_bounds=(-6.0, 2.0), logvar_weight_init="zero", n_steps=32,
                         total_steps=1000, step_range=(0.2, 0.6), contraction=0.8, weight_decay=0.02, encoder_lr=1e-6,
                         head_lr=1e-4, warmup_ratio=0.1, batch_size=32, epochs=10)


def dab_settings(preset: str, dataset: str | None = None) -> DABSettings:
    """DAB's constants of ``preset`` for ``dataset``.

    Parameters
    ----------
    preset : {"paper"}
        DAB as described (:data:`~evidential_prvr.choices.DAB_PRESETS`).
    dataset : {"msr-vtt", "msvd", "vatex"}, optional
        The paper trains all three with one setting, so every data set (and ``None``) gives the same values.

    Returns
    -------
    DABSettings
        Frozen; change a value with :func:`dataclasses.replace`.

    Examples
    --------
    >>> from evidential_prvr.presets import dab_settings
    >>> dab_settings("paper", "vatex") == dab_settings("paper")
    True

    References
    ----------
    DAB: "Distribution Alignment Bridge" (ECCV 2026), its implementation details.
    """
    check_choice(preset, "preset", DAB_PRESETS)
    if dataset is not None:
        check_choice(dataset, "dataset", DAB_DATASETS)
    return _DAB_PAPER
