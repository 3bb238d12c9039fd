"""One registry of every Holmes constant: the paper's and the official release's, per data set.

Every ``from_preset(preset, dataset=None, **overrides)`` of the package and the reference model's
``--config tvr|activitynet|charades`` read :func:`holmes_settings`, so each number lives here once.

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

__all__ = [
    "PRESETS",
    "DATASETS",
    "DATASET_ALIASES",
    "canonical_dataset",
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
    "apply_overrides",
]

PRESETS = ("paper", "release")
"""Preset names accepted by every ``from_preset``."""

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
        raise ValueError(f"dataset must be one of {names}; got {dataset!r}")
    return DATASET_ALIASES[dataset]


@dataclass(frozen=True)
class InterVideoSettings:
    """Inter-video evidential learning (Holmes §3.2, Eq. 3-18).

    Attributes
    ----------
    tau : float
        Evidence temperature of Eq. 3.
    tanh_scaling : {"inside", "outside"}
        ``exp(tanh(s / tau))`` (paper) or ``exp(tanh(s) / tau)`` (release).
    entropy_median : {"candidates", "batch"}
        Median of Eq. 12 over the precise candidates (paper) or over the whole batch (release).
    matched : {"any_positive", "argmax"}
        The correctly matched set of Eq. 11: a positive attains the row maximum (paper, ties
        included) or ``argmax == label`` with ties broken towards the first index (release).
    beta : float
        β of Eq. 11.
    gamma : float
        γ of Eq. 15.
    fusion : str
        Partition fusion (Eq. 14: ``"uncertainty_dominant"``).

    Examples
    --------
    >>> from evidential_prvr.presets import holmes_settings
    >>> holmes_settings("release", "activitynet").inter.tanh_scaling
    'outside'

    References
    ----------
    Holmes (ICML 2026), §3.2, Eq. 3-18; the official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs``).
    """

    tau: float
    tanh_scaling: str
    entropy_median: str
    matched: str
    beta: float = 0.3
    gamma: float = 0.2
    fusion: str = "uncertainty_dominant"


@dataclass(frozen=True)
class TransportSettings:
    """Flexible optimal transport (Holmes §3.3, Eq. 19-20, App. B.5).

    Attributes
    ----------
    epsilon : float
        Entropic regularisation ε (the release's ``pot_scale``; the paper gives none).
    n_iters : int
        Sinkhorn iterations.
    dustbin_quantile : float
        The dustbin value z is this quantile of the similarities ("bottom 30%").
    normalize : {"minmax", None}
        Min-max normalisation of each video's similarities before the transport.
    minmax_over : {"block", "valid"}
        Entries the min and max are taken over: the whole padded ``[Mq, Mc]`` block, padded caption
        slots included (release), or the valid entries only.
    marginals : {"release", "uniform"}
        Row marginals: SuperGlue-style ``1/(Mc+Mq)`` per query and ``Mc/(Mc+Mq)`` for the dustbin
        (release), or uniform (App. B.5).
    grad : {"detach", "autodiff"}
        The plan is a stop-gradient label (both).

    Examples
    --------
    >>> from evidential_prvr.presets import holmes_settings
    >>> holmes_settings("release", "tvr").transport.epsilon
    0.1

    References
    ----------
    Holmes (ICML 2026), §3.3, Eq. 19-20 and App. B.5; the official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs``).
    """

    epsilon: float = 0.1
    n_iters: int = 50
    dustbin_quantile: float = 0.3
    normalize: str | None = "minmax"
    minmax_over: str = "block"
    marginals: str = "release"
    grad: str = "detach"


@dataclass(frozen=True)
class IntraVideoSettings:
    """Intra-video evidential learning L_intra (Holmes §3.3).

    Attributes
    ----------
    tau : float
        Evidence temperature of the query-clip evidence.
    tanh_scaling : {"inside", "outside"}
        Evidence form (as in :class:`InterVideoSettings`).
    assignment : {"fot", "ot", "softmax"}
        Soft label: flexible transport (default) or the Table 3 ablations.

    Examples
    --------
    >>> from evidential_prvr.presets import holmes_settings
    >>> holmes_settings("release", "tvr").intra.tau
    0.06

    References
    ----------
    Holmes (ICML 2026), §3.3; the official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs``).
    """

    tau: float
    tanh_scaling: str
    assignment: str = "fot"


@dataclass(frozen=True)
class BaseLossSettings:
    """The basic objectives L_base (Holmes App. B.1, Eq. 22-23).

    Attributes
    ----------
    margin : float
        Triplet margin m.
    hard_negative_topk : int
        Pool of hardest negatives the text→video triplet draws from once hard negatives are on.
    video_negative : {"hardest", "pool"}
        Video→text negative once hard negatives are on.
    nce_video_to_text : {"release", "paper"}
        Video→text InfoNCE form.
    div_alpha, div_delta, div_lambda : float
        α, δ and the focal exponent λ of Eq. 23 (the release's ``neg_factor``).

    Examples
    --------
    >>> from evidential_prvr.presets import holmes_settings
    >>> holmes_settings("release", "tvr").base.margin
    0.1

    References
    ----------
    Holmes (ICML 2026), App. B.1, Eq. 22-23; the official Holmes release (``lijun2005/ICML26-Holmes``, ``src/Configs``).
    """

    margin: float
    div_delta: float
    hard_negative_topk: int = 20
    video_negative: str = "hardest"
    nce_video_to_text: str = "release"
    div_alpha: float = 32.0
    div_lambda: float = 1.0


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
_RELEASE_INTER_TAU = {"tvr": 0.05, "activitynet": 0.04, "charades": 0.08}
_RELEASE_INTRA_TAU = {"tvr": 0.06, "activitynet": 0.08, "charades": 0.08}
_RELEASE_BASE = {
    "tvr": BaseLossSettings(margin=0.1, div_delta=0.15),
    "activitynet": BaseLossSettings(margin=0.2, div_delta=0.2),
    "charades": BaseLossSettings(margin=0.2, div_delta=0.2),
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

# --- the paper as printed ---------------------------------------------------------------------------------
_PAPER_INTER = InterVideoSettings(tau=0.1, tanh_scaling="inside", entropy_median="candidates", matched="any_positive")
# ε and the normalisation are not in the paper: raw similarities, the release's ε, uniform marginals (App. B.5).
_PAPER_TRANSPORT = TransportSettings(normalize=None, minmax_over="valid", marginals="uniform")
_PAPER_INTRA = IntraVideoSettings(tau=0.1, tanh_scaling="inside")
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
        Frozen dataclasses; change a value with :func:`dataclasses.replace` or :func:`apply_overrides`.

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
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(map(repr, PRESETS))}; got {preset!r}")
    if dataset is None:
        if preset == "release":
            raise ValueError("dataset is required for the 'release' preset: 'tvr', 'activitynet' or 'charades'")
        return HolmesSettings("paper", None, _PAPER_INTER, _PAPER_TRANSPORT, _PAPER_INTRA)
    name = canonical_dataset(dataset)
    if preset == "release":
        return HolmesSettings(
            preset="release",
            dataset=name,
            inter=InterVideoSettings(tau=_RELEASE_INTER_TAU[name], tanh_scaling="outside", entropy_median="batch",
                                     matched="argmax"),
            transport=TransportSettings(),
            intra=IntraVideoSettings(tau=_RELEASE_INTRA_TAU[name], tanh_scaling="outside"),
            base=_RELEASE_BASE[name],
            weights=_RELEASE_WEIGHTS[name],
            schedule=_RELEASE_SCHEDULE[name],
            optimizer=_RELEASE_OPTIMIZER[name],
            model=_RELEASE_MODEL[name],
        )
    release = holmes_settings("release", name)
    return dataclasses.replace(
        release,
        preset="paper",
        inter=_PAPER_INTER,
        transport=_PAPER_TRANSPORT,
        intra=_PAPER_INTRA,
        schedule=dataclasses.replace(release.schedule, epochs=100, warmup_stage_epochs=20),  # §4.2
        model=dataclasses.replace(release.model, max_query_len=_PAPER_QUERY_LEN[name]),
    )


def apply_overrides(kwargs: dict[str, Any], overrides: dict[str, Any], owner: str) -> dict[str, Any]:
    """``kwargs`` updated with ``overrides``; an override that is not a parameter raises ``TypeError``.

    Used by every ``from_preset`` so that a misspelt override fails loudly instead of being ignored.

    Examples
    --------
    >>> from evidential_prvr.presets import apply_overrides
    >>> apply_overrides({"tau": 0.1, "beta": 0.3}, {"tau": 0.05}, "EvidentialRetrievalLoss")
    {'tau': 0.05, 'beta': 0.3}

    References
    ----------
    Used by every ``from_preset`` of the package (Holmes, ICML 2026, and its release's presets).
    """
    unknown = sorted(set(overrides) - set(kwargs))
    if unknown:
        raise TypeError(
            f"{owner}.from_preset() got unexpected override(s) {', '.join(map(repr, unknown))}; "
            f"accepted: {', '.join(sorted(kwargs))}"
        )
    return {**kwargs, **overrides}
