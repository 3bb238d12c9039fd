"""Settings of the text-to-video reference model: backbone, retrieval head (base / DAB / ablations), optimiser.

Every choice the DAB text leaves open has a named field here and a row in ``docs/guide/dab.rst``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from evidential_prvr.choices import LOGVAR_WEIGHT_INITS
from reference_models.engine import check_choice, fingerprint_differences

__all__ = ["VARIANTS", "COSTS", "RANKINGS", "BRIDGE_CONDITIONS", "DISTILL_MODES", "MEAN_INITS", "LOGVAR_WEIGHTS", "TAU_RULES", "POOLINGS", "ENCODERS", "LR_GROUPS", "ENCODER_TRAINING", "PRESETS",
           "ABLATIONS", "DEMO_ABLATIONS", "LOGVAR_GAIN", "BackboneSettings", "HeadSettings", "BridgeSettings", "OptimSettings",
           "T2VConfig", "preset", "ablation_config", "matched_tau"]

#: The retrieval heads. ``base`` is the cosine with the symmetric InfoNCE (CLIP4Clip); ``dab`` the Gaussian
#: heads, bridge, KL ranking and PAC; ``prob`` the same without the bridge; ``bridge`` the bridge on point
#: embeddings with the cosine and InfoNCE (DAB's "w/ Bridge" row); ``bridge-det`` the equal-capacity deterministic
#: control: the base plus DAB's mean layer (``head.gaussian_dim`` wide, started as ``head.mean_init``
#: says) on texts and videos and the same bridge on the text mean, cosine and InfoNCE, so that it has DAB's
#: parameters less the variance layers.
VARIANTS = ("base", "dab", "prob", "bridge", "bridge-det")
#: The cost of the Gaussian variants, DAB's directional KL or the squared 2-Wasserstein distance.
COSTS = ("kl", "w2")
#: How the Gaussian variants rank, by their cost (``cost``, DAB's) or by the squared distance between the
#: (bridged) text mean and the video mean (``mean_distance``; the training loss is PAC over the cost either way).
RANKINGS = ("cost", "mean_distance")
#: The start of the mean layer of DAB's Gaussian head, PyTorch's default (``random``) or the identity with a
#: zero bias (``identity``, so the Gaussian mean starts as the layer-normalised embedding itself, as the identity
#: encoders start the base at the features' cosine; needs ``head.gaussian_dim = backbone.hidden``).
MEAN_INITS = ("random", "identity")
#: The start of the weights of DAB's two log-variance layers (the Gaussian head's and the token uncertainty head's;
#: the library's :data:`~evidential_prvr.choices.LOGVAR_WEIGHT_INITS`): ``zero`` (the identity start, the default:
#: every text and video starts at the bias's variance, so with the identity mean start DAB's cost starts as a
#: scaled squared distance of the layer-normalised embeddings), ``small`` (PyTorch's draw times 1e-3) or ``pytorch``
#: (PyTorch's default draw, the start of every DAB run before version 3.0: a random per-dimension metric per query).
LOGVAR_WEIGHTS = LOGVAR_WEIGHT_INITS
#: How DAB's PAC temperature is set (``head.tau_rule``): ``fixed`` (``head.tau`` as given), ``matched`` (fixed at
#: :func:`matched_tau`, so that DAB's starting inverse temperature on the centred cosine is the base's starting logit
#: scale) or ``learned`` (a parameter that starts at :func:`matched_tau` and trains like the base's logit scale, its
#: inverse temperature capped at the base's cap, :data:`~reference_models.dab.model.MAX_LOGIT_SCALE`).
TAU_RULES = ("fixed", "matched", "learned")
#: What DAB's bridge sees, the text Gaussian alone (``text``, one chain per text, shared by every video) or the
#: text and its target video Gaussian (``video``, one chain per text-video pair, with the contraction bound).
BRIDGE_CONDITIONS = ("text", "video")
#: The bridge that answers a query in DAB's text-only variant, its ``T'``-step chain (``none``, DAB's) or a
#: one-step student distilled from the trained chain after training (``one-step``, DAB's "one-step bridge
#: distillation", named as future work; :mod:`reference_models.dab.distill`).
DISTILL_MODES = ("none", "one-step")
#: The frame pooling, CLIP4Clip's mean of the frame tokens or X-Pool's text-conditioned attention.
POOLINGS = ("mean", "xpool")
#: The feature encoders (text MLP and frame projection), ``mlp`` trained from scratch (the embedded benchmark's),
#: or ``identity``, square linear maps initialised at the identity (the stand-in for frozen, pretrained CLIP
#: encoders: the model starts at the features' own cosine; needs ``hidden`` = the feature sizes).
ENCODERS = ("mlp", "identity")
#: How the two AdamW parameter groups are cut. ``heads`` puts DAB's Gaussian heads and bridge at
#: ``optim.head_lr`` and everything else at ``optim.lr`` (the embedded benchmark's); ``encoders`` puts the
#: feature encoders (the CLIP-encoder stand-in) at ``optim.lr`` and everything else (temporal transformer,
#: pooling, logit scale, Gaussian heads, bridge) at ``optim.head_lr`` (DAB's paper: 1e-6 and 1e-4).
LR_GROUPS = ("heads", "encoders")
#: Whether the feature encoders train (``train``) or are frozen (``frozen``: left out of the optimiser).
ENCODER_TRAINING = ("train", "frozen")


@dataclass(frozen=True)
class BackboneSettings:
    """The CLIP4Clip-style backbone over precomputed features.

    Attributes
    ----------
    hidden : int
        Embedding size of texts and frames.
    temporal_layers : int
        Transformer layers over the frame sequence (CLIP4Clip's ``seqTransf``, residual to the frames); 0 = none.
    heads : int
        Attention heads of the temporal transformer and of X-Pool's pooling.
    pooling : {"mean", "xpool"}
        See :data:`POOLINGS`.
    max_frames : int
        Frames per video (longer videos are sampled uniformly).
    encoder : {"mlp", "identity"}
        See :data:`ENCODERS`. With ``identity`` the position embeddings and the output layers of the temporal
        transformer also start at zero, so the whole backbone starts as the identity on the frame features.
    """

    hidden: int = 256
    temporal_layers: int = 4
    heads: int = 8
    pooling: str = "mean"
    max_frames: int = 12
    encoder: str = "mlp"


@dataclass(frozen=True)
class HeadSettings:
    """The retrieval head: which variant, DAB's Gaussian dimension and the PAC / InfoNCE temperature.

    Attributes
    ----------
    variant : str
        See :data:`VARIANTS`.
    cost : {"kl", "w2"}
        See :data:`COSTS` (Gaussian variants).
    gaussian_dim : int
        Dimension :math:`D` of the Gaussians.
    tau : float
        PAC temperature (DAB: unstated; chosen on the development seed).
    logit_scale : float
        Initial inverse temperature of the cosine variants (learned, capped at 100 as in CLIP).
    ranking : {"cost", "mean_distance"}
        See :data:`RANKINGS` (Gaussian variants).
    mean_init : {"random", "identity"}
        See :data:`MEAN_INITS` (Gaussian variants).
    logvar_weights : {"zero", "small", "pytorch"}
        See :data:`LOGVAR_WEIGHTS` (Gaussian variants).
    tau_rule : {"fixed", "matched", "learned"}
        See :data:`TAU_RULES` (Gaussian variants; ``tau`` is read with ``fixed`` only).
    logvar_gain : float
        The gain of the two log-variance layers (the library's ``logvar_gain`` of
        :class:`~evidential_prvr.probabilistic.GaussianEmbeddingHead` and
        :class:`~evidential_prvr.probabilistic.TokenUncertaintyHead`; Gaussian variants): 1 is DAB's plain linear
        head; :math:`g` moves the log-variances :math:`g` times as far per AdamW update, as a learning rate
        :math:`g` times ``optim.head_lr`` for those layers would (``docs/guide/dab.rst``, "Why the variances do
        not move, and what makes them learn").
    """

    variant: str = "dab"
    cost: str = "kl"
    gaussian_dim: int = 64
    tau: float = 4.0
    logit_scale: float = 20.0
    ranking: str = "cost"
    mean_init: str = "random"
    logvar_weights: str = "zero"
    tau_rule: str = "fixed"
    logvar_gain: float = 1.0

    @property
    def gaussian(self) -> bool:
        """Whether the variant ranks by a cost between Gaussians (``dab``, ``prob``)."""
        return self.variant in ("dab", "prob")


@dataclass(frozen=True)
class BridgeSettings:
    """DAB's distribution bridge (variants ``dab`` and ``bridge``).

    Attributes
    ----------
    n_steps, total_steps : int
        Truncated steps :math:`T'` of a chain of :math:`N` (DAB: 32 of 1000).
    time_dim : int
        Size of the sinusoidal time embedding (DAB: unstated).
    condition : {"text", "video"}
        See :data:`BRIDGE_CONDITIONS`; ``video`` needs ``head.variant = "dab"``.
    contraction : float
        Contraction rate in ``(0, 1]`` of the whole chain toward its target video (``condition = "video"``;
        DAB: "at most 0.8"; :class:`~evidential_prvr.probabilistic.ConditionedDistributionBridge`). 1 = unbounded
        beyond "never farther than it started".
    point_dim : int
        Size of the point embedding the ``bridge`` variant bridges: 0 = ``backbone.hidden`` (the bridge at the
        backbone's width), else a linear projection to this size first (``head.gaussian_dim`` puts the bridge at
        DAB's width).
    distill : {"none", "one-step"}
        See :data:`DISTILL_MODES`; ``one-step`` needs ``head.variant = "dab"`` and ``condition = "text"``.
    distill_epochs : int
        Epochs of the distillation stage over the training captions (``distill = "one-step"``).
    distill_lr : float
        AdamW learning rate of the distillation stage (the student only; weight decay 0).
    """

    n_steps: int = 32
    total_steps: int = 1000
    time_dim: int = 32
    condition: str = "text"
    contraction: float = 0.8
    point_dim: int = 0
    distill: str = "none"
    distill_epochs: int = 30
    distill_lr: float = 1e-3


@dataclass(frozen=True)
class OptimSettings:
    """AdamW with linear warm-up and decay (DAB: weight decay 0.02, 10 % warm-up), two parameter groups.

    Attributes
    ----------
    epochs, batch_size, early_stop_patience : int
        Training length; batch of distinct videos (DAB: 32).
    lr : float
        Learning rate of the first group: the backbone (``groups="heads"``, trained from scratch), or the
        feature encoders only (``groups="encoders"``; DAB's CLIP encoders get 1e-6).
    head_lr : float
        Learning rate of the second group: the Gaussian heads and the bridge (``groups="heads"``), or
        everything but the feature encoders (``groups="encoders"``; DAB: 1e-4).
    weight_decay, warmup_ratio, grad_clip : float
        AdamW decay, warm-up proportion, global gradient-norm bound (0 = none).
    groups : {"heads", "encoders"}
        See :data:`LR_GROUPS`.
    encoders : {"train", "frozen"}
        See :data:`ENCODER_TRAINING`; ``frozen`` needs ``groups="encoders"``.
    """

    epochs: int = 30
    batch_size: int = 32
    early_stop_patience: int = 30
    lr: float = 1e-3
    head_lr: float = 1e-3
    weight_decay: float = 0.02
    warmup_ratio: float = 0.1
    grad_clip: float = 1.0
    groups: str = "heads"
    encoders: str = "train"


@dataclass(frozen=True)
class T2VConfig:
    """Everything a run needs besides the data, the device and the seed; JSON round-trips exactly."""

    backbone: BackboneSettings = field(default_factory=BackboneSettings)
    head: HeadSettings = field(default_factory=HeadSettings)
    bridge: BridgeSettings = field(default_factory=BridgeSettings)
    optim: OptimSettings = field(default_factory=OptimSettings)

    def __post_init__(self) -> None:
        check_choice(self.head.variant, "head.variant", VARIANTS)
        check_choice(self.head.cost, "head.cost", COSTS)
        check_choice(self.head.ranking, "head.ranking", RANKINGS)
        check_choice(self.bridge.condition, "bridge.condition", BRIDGE_CONDITIONS)
        check_choice(self.bridge.distill, "bridge.distill", DISTILL_MODES)
        check_choice(self.head.mean_init, "head.mean_init", MEAN_INITS)
        check_choice(self.head.logvar_weights, "head.logvar_weights", LOGVAR_WEIGHTS)
        check_choice(self.head.tau_rule, "head.tau_rule", TAU_RULES)
        if self.bridge.distill == "one-step" and (self.head.variant != "dab" or self.bridge.condition != "text"):
            raise ValueError(f'bridge.distill = "one-step" distils the text-only bridge of head.variant = "dab", got '
                             f"head.variant {self.head.variant!r} with bridge.condition {self.bridge.condition!r}")
        if ((self.head.gaussian or self.head.variant == "bridge-det") and self.head.mean_init == "identity"
                and self.head.gaussian_dim != self.backbone.hidden):
            raise ValueError(f'head.mean_init = "identity" needs head.gaussian_dim = backbone.hidden '
                             f"({self.backbone.hidden}), got {self.head.gaussian_dim}")
        if self.bridge.condition == "video" and self.head.variant != "dab":
            raise ValueError(f'bridge.condition = "video" needs head.variant = "dab" (the bridge toward a video '
                             f"Gaussian), got {self.head.variant!r}")
        check_choice(self.backbone.pooling, "backbone.pooling", POOLINGS)
        check_choice(self.backbone.encoder, "backbone.encoder", ENCODERS)
        check_choice(self.optim.groups, "optim.groups", LR_GROUPS)
        check_choice(self.optim.encoders, "optim.encoders", ENCODER_TRAINING)
        if self.optim.encoders == "frozen" and self.optim.groups != "encoders":
            raise ValueError('optim.encoders = "frozen" needs optim.groups = "encoders" (the frozen group is the '
                             "feature encoders)")
        for section in (self.backbone, self.head, self.bridge, self.optim):
            for item in dataclasses.fields(section):
                value = getattr(section, item.name)
                name = f"{type(section).__name__}.{item.name}"
                if isinstance(value, str):
                    continue
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise ValueError(f"{name} must be a finite number, got {value!r}")
                minimum = 0 if item.name in ("temporal_layers", "grad_clip", "weight_decay", "warmup_ratio",
                                             "point_dim") else 1
                if item.name in ("lr", "head_lr", "tau", "logit_scale", "contraction", "distill_lr", "logvar_gain"):
                    if value <= 0:
                        raise ValueError(f"{name} must be > 0, got {value!r}")
                elif value < minimum:
                    raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
        if not 0 < self.bridge.contraction <= 1:
            raise ValueError(f"BridgeSettings.contraction must lie in (0, 1], got {self.bridge.contraction!r}")
        if self.bridge.point_dim and self.head.variant != "bridge":
            raise ValueError(f'bridge.point_dim ({self.bridge.point_dim}) is the "bridge" variant\'s projection; '
                             f"head.variant is {self.head.variant!r} (leave point_dim at 0)")
        if self.bridge.n_steps > self.bridge.total_steps:
            raise ValueError(f"BridgeSettings.n_steps ({self.bridge.n_steps}) must be <= total_steps "
                             f"({self.bridge.total_steps})")
        if self.backbone.hidden % self.backbone.heads:
            raise ValueError(f"BackboneSettings.hidden ({self.backbone.hidden}) must be a multiple of heads "
                             f"({self.backbone.heads})")
        if self.backbone.pooling == "xpool" and self.bridge.point_dim % self.backbone.heads:
            raise ValueError(f"BridgeSettings.point_dim ({self.bridge.point_dim}) must be a multiple of "
                             f"backbone.heads ({self.backbone.heads}): X-Pool attends at the bridged width")

    def to_dict(self) -> dict[str, Any]:
        """The settings as nested plain dicts (JSON-able; saved in checkpoints and ``results.json``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> T2VConfig:
        """Inverse of :meth:`~reference_models.dab.config.T2VConfig.to_dict`; ``ValueError``/``TypeError`` naming the section for a bad entry."""
        if not isinstance(data, dict):
            raise TypeError(f"a T2VConfig dict is expected, got {type(data).__name__}")
        sections = {"backbone": BackboneSettings, "head": HeadSettings, "bridge": BridgeSettings,
                    "optim": OptimSettings}
        unknown = set(data) - set(sections)
        if unknown:
            raise ValueError(f"unknown config section(s): {', '.join(sorted(unknown))}")
        built = {}
        for name, kind in sections.items():
            try:
                built[name] = kind(**data.get(name, {}))
            except TypeError as exc:
                raise ValueError(f"config section {name}: {exc}") from None
        return cls(**built)

    def replace(self, **sections: dict[str, Any]) -> T2VConfig:
        """A copy with some fields changed, e.g. ``replace(head={"variant": "base"})``."""
        current = self.to_dict()
        for name, changes in sections.items():
            if name not in current:
                raise ValueError(f"unknown config section {name!r}")
            unknown = set(changes) - set(current[name])
            if unknown:
                raise ValueError(f"unknown field(s) of {name}: {', '.join(sorted(unknown))}")
            current[name] = {**current[name], **changes}
        return T2VConfig.from_dict(current)

    def differences(self, saved: dict[str, Any]) -> list[str]:
        """``["head.tau 4.0 vs 8.0", ...]`` between a saved
        :meth:`~reference_models.dab.config.T2VConfig.to_dict` and this config."""
        return fingerprint_differences(T2VConfig.from_dict(saved).to_dict(), self.to_dict(), sep=".")


#: The named configs, ``embedded`` (the defaults, the demo's and the embedded benchmark's comparison) and
#: ``msrvtt-regime`` (DAB's training on the ``msrvtt-regime`` benchmark, whose features stand for frozen CLIP
#: ones: identity-initialised feature encoders at DAB's encoder learning rate 1e-6, everything else at 1e-4,
#: AdamW weight decay 0.02, 10 % warm-up; DAB's Gaussian at the backbone's width, 256, its mean layer starting at
#: the identity; ``docs/guide/dab.rst``, "DAB at the backbone's width", says why; since version 3.0 the identity start
#: of the log-variance weights and the learned PAC temperature, chosen by the guide's written rule on development
#: seed 100, "The PAC temperature on the base's footing"). The base of a comparison is the
#: same config with ``head.variant = "base"``, so it gets the same backbone treatment.
PRESETS: dict[str, T2VConfig] = {
    "embedded": T2VConfig(),
    "msrvtt-regime": T2VConfig(
        backbone=BackboneSettings(encoder="identity"),
        head=HeadSettings(gaussian_dim=256, mean_init="identity", tau_rule="learned"),
        optim=OptimSettings(epochs=10, early_stop_patience=10, lr=1e-6, head_lr=1e-4, groups="encoders"),
    ),
}
#: ``msrvtt-regime-varied`` trains exactly as ``msrvtt-regime``.
PRESETS["msrvtt-regime-varied"] = PRESETS["msrvtt-regime"]


def preset(name: str) -> T2VConfig:
    """The named config of :data:`PRESETS`; ``ValueError`` naming the choices for an unknown name."""
    check_choice(name, "DAB config preset", tuple(PRESETS))
    return PRESETS[name]


#: The log-variance gain of the comparison method ``dab-logvar-gain`` (``head.logvar_gain``). DAB's learning rate
#: summed over its updates, :math:`10^{-4} \times 28{,}126` with its warm-up and decay over 10 epochs of MSR-VTT's
#: 180,000 training pairs at batch 32, is the farthest AdamW can move a parameter; the ``msrvtt-regime`` presets'
#: 630 updates reach it at 89 times the rate, rounded to 100 (``docs/guide/dab.rst``, "The option: the
#: log-variance gain").
LOGVAR_GAIN = 100.0
#: Every DAB ablation, as its changes to DAB's config (keyword arguments of
#: :meth:`T2VConfig.replace`, applied by :func:`ablation_config`). ``bridge`` is the bridge on point embeddings
#: projected to ``head.gaussian_dim`` (DAB's width; ``point_dim`` -1 stands for it), ``bridge-hidden`` the same
#: at the backbone's width. ``dab-64`` is DAB with the Gaussian at 64 dimensions, a random mean layer and PAC
#: temperature 4 (the ``msrvtt-regime`` preset before it moved to the backbone's width). ``dab-logvar-pytorch`` is
#: DAB with PyTorch's random log-variance weights (its start before version 3.0, :data:`LOGVAR_WEIGHTS`). ``demo --ablations`` trains
#: :data:`DEMO_ABLATIONS`; the comparison tool offers every one as a method (``--methods``), where
#: ``dab-meandist`` and ``dab-onestep`` train nothing of
#: their own: the first ranks the ``dab`` run's checkpoint, the second distils that checkpoint's bridge into one
#: step (:mod:`reference_models.dab.distill`) and answers with it.
ABLATIONS: dict[str, dict[str, dict[str, Any]]] = {
    "dab": {},
    "dab-video": {"bridge": {"condition": "video"}},
    "prob": {"head": {"variant": "prob"}},
    "bridge": {"head": {"variant": "bridge"}, "bridge": {"point_dim": -1}},
    "bridge-hidden": {"head": {"variant": "bridge"}},
    "dab-w2": {"head": {"cost": "w2"}},
    "dab-T8": {"bridge": {"n_steps": 8}},
    "dab-T64": {"bridge": {"n_steps": 64}},
    "dab-meandist": {"head": {"ranking": "mean_distance"}},
    "dab-64": {"head": {"gaussian_dim": 64, "mean_init": "random", "tau": 4.0, "tau_rule": "fixed"}},
    "dab-onestep": {"bridge": {"distill": "one-step"}},
    "dab-meanrandom": {"head": {"mean_init": "random"}},
    "dab-tau16": {"head": {"tau": 16.0, "tau_rule": "fixed"}},
    "dab-tau64": {"head": {"tau": 64.0, "tau_rule": "fixed"}},
    "dab-logvar-pytorch": {"head": {"logvar_weights": "pytorch"}},
    "bridge-det": {"head": {"variant": "bridge-det"}},
    "dab-tau-fixed": {"head": {"tau_rule": "fixed"}},
    "dab-tau-matched": {"head": {"tau_rule": "matched"}},
    "dab-tau-learned": {"head": {"tau_rule": "learned"}},
    "dab-logvar-gain": {"head": {"logvar_gain": LOGVAR_GAIN}},
}
#: The rows ``python -m reference_models.dab demo --ablations`` trains besides the base and DAB.
DEMO_ABLATIONS = ("prob", "bridge-hidden", "dab-w2", "dab-T8", "dab-T64")


def matched_tau(head: HeadSettings) -> float:
    """The PAC temperature at which DAB starts with the base's inverse temperature (``head.tau_rule = "matched"``).

    At the identity start (identity mean layer, zero log-variance weights, identity bridge) every Gaussian has the
    log-variance bias :math:`b` (DAB, Key Design 1: -2), so the KL cost of Key Design 3 is
    :math:`C = \\tfrac12 e^{-b} \\lVert \\mu_v - \\hat\\mu_t \\rVert^2` and, the means being layer-normalised
    embeddings of squared norm :math:`D`, :math:`C = D e^{-b} (1 - \\rho)` with :math:`\\rho` their centred cosine.
    The PAC logits :math:`-C/\\tau` (Key Design 3) then have the inverse temperature :math:`D e^{-b} / \\tau` on
    :math:`\\rho`, against the base's ``logit_scale`` on its cosine; equal when :math:`\\tau = D e^{-b} /`
    ``logit_scale`` (94.6 at :math:`D = 256`, :math:`b = -2`, scale 20; the fixed 4 was an inverse temperature of
    473).

    Parameters
    ----------
    head : HeadSettings
        The head (its ``gaussian_dim`` and ``logit_scale``; :math:`b` is the library's
        :func:`~evidential_prvr.presets.dab_settings` ``logvar_init``, which the model's heads use).

    Returns
    -------
    float
        :math:`\\tau`.
    """
    from evidential_prvr.presets import dab_settings

    return head.gaussian_dim * math.exp(-dab_settings("paper").logvar_init) / head.logit_scale


def ablation_config(config: T2VConfig, name: str) -> T2VConfig:
    """``config`` (DAB's) with the :data:`ABLATIONS` entry ``name`` applied; ``ValueError`` naming the choices."""
    check_choice(name, "DAB ablation", tuple(ABLATIONS))
    changes = {section: dict(fields) for section, fields in ABLATIONS[name].items()}
    if changes.get("bridge", {}).get("point_dim") == -1:
        changes["bridge"]["point_dim"] = config.head.gaussian_dim
    return config.replace(**changes)

