"""Typed configuration of a Holmes reference-model run: model, optimisation, losses, schedule and ablations.

A :class:`HolmesConfig` is everything a training run needs besides the data location, the device and the
seed. It is a tree of plain dataclasses so that it can be written to and read back from JSON exactly
(:meth:`HolmesConfig.to_json` / :meth:`HolmesConfig.from_json`), stored in every checkpoint and compared
on ``--resume``.

Presets (:func:`preset`):

``tvr``, ``activitynet``, ``charades``
    The official Holmes release, read from the one registry of Holmes constants,
    :func:`evidential_prvr.presets.holmes_settings` (:func:`from_registry`): the release's architecture
    (eight Gaussian widths mixed by a cross-attention weight predictor, no attention output projection, a
    feed-forward query encoder, padded frames scoring 0, a second query encoding for L_div and L_intra), its
    optimiser (BertAdam: per-tensor clipping, no bias correction, warm-up/linear decay evaluated before the
    step), dropout, width temperature, loss weights, margins, learning rate, query length, early stopping,
    100 epochs with a 20-epoch first stage and hard negatives from epoch 20, batches of 128 videos.
    :func:`from_registry` with ``source="paper"`` gives the paper's variant of the same data set.
``embedded``
    Tuned for the small embedded benchmark on two CPU cores (hidden size 64, few epochs, short stages).
``clip``
    For the CLIP features that ``prvr-videos index`` writes from your own videos (frame and token widths of the
    encoder, read from the data): the embedded recipe with hidden size 128, CLIP's whole 77-token context
    and 60 epochs.

Every section that the registry has is the registry's own dataclass, under its own field names:
``model`` (:class:`~reference_models.holmes.model.ModelSettings`, the registry's
:class:`evidential_prvr.presets.ModelSettings` with the reference-only architecture switches beside its
fields), ``optim`` (:class:`OptimSettings`, the registry's :class:`evidential_prvr.presets.OptimizerSettings`
with the reference-only optimiser switches), and ``schedule``, ``weights``, ``base``, ``inter``,
``transport`` and ``intra``, which are exactly :class:`~evidential_prvr.presets.ScheduleSettings`,
:class:`~evidential_prvr.presets.LossWeights`, :class:`~evidential_prvr.presets.BaseLossSettings`,
:class:`~evidential_prvr.presets.InterVideoSettings`, :class:`~evidential_prvr.presets.TransportSettings`
and :class:`~evidential_prvr.presets.IntraVideoSettings`. ``ablation`` and ``dab`` are the reference
model's own. Every section is frozen; change one with :meth:`HolmesConfig.replace`.

Configs of release 1.x (a ``loss`` section, ``optim.epochs``, ``optim.warmup_ratio``, ...) are refused
with their unknown names (version 3.0 no longer migrates them); the reference-model guide lists the settings.

Ablations (:data:`ABLATIONS`, :meth:`HolmesConfig.with_ablation`) reproduce every row of the paper's
Table 3, the L_base-only baseline (MIL) and the DAB variant.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args

from evidential_prvr.choices import LOGVAR_WEIGHT_INITS
from evidential_prvr.presets import (
    BaseLossSettings,
    InterVideoSettings,
    IntraVideoSettings,
    LossWeights,
    OptimizerSettings,
    ScheduleSettings,
    TransportSettings,
    canonical_dataset,
    holmes_settings,
)
from evidential_prvr.presets import ModelSettings as RegistryModelSettings
from reference_models.engine import GRAD_CLIP_MODES, LR_SCHEDULES, check_choice
from reference_models.holmes.gaussian_attention import ATTENTION_MASKS, KERNELS
from reference_models.holmes.model import PADDED_FRAMES, ModelSettings
from reference_models.holmes.multi_width import WIDTH_WEIGHTINGS
from reference_models.holmes.optimization import NO_DECAY_RULES, OPTIMIZERS

__all__ = [
    "ModelSettings",
    "OptimSettings",
    "ScheduleSettings",
    "AblationSettings",
    "DABSettings",
    "HolmesConfig",
    "PRESETS",
    "ABLATIONS",
    "preset",
    "from_registry",
]

Method = Literal["holmes", "baseline", "dab"]
InterBranches = Literal["both", "frame", "clip"]
Fusion = Literal["uncertainty_dominant", "confidence_dominant", "frame", "clip"]
Calibration = Literal["full", "none", "initial_polysemous"]
Assignment = Literal["fot", "ot", "softmax"]

_TVR = holmes_settings("release", "tvr")  # the defaults of the loss sections (the release's TVR settings)


@dataclass(frozen=True)
class OptimSettings(OptimizerSettings):
    """The registry's :class:`evidential_prvr.presets.OptimizerSettings` (``lr``, ``warmup_proportion``,
    ``weight_decay``, ``max_grad_norm``, ``eps``, ``betas``, ``videos_per_batch``) and the reference-only
    optimiser and evaluation switches beside them.

    Attributes
    ----------
    optimizer : {"bert_adam", "adamw"}
        :class:`~reference_models.holmes.bert_adam.BertStyleAdam` (release: no bias correction) or
        ``torch.optim.AdamW``.
    lr_schedule : {"bert_warmup_linear", "warmup_linear"}
        Warm-up over ``warmup_proportion`` of all steps then linear decay to 0, evaluated at the step count
        before the update (release: the first update has learning rate 0) or one step ahead (see
        :mod:`reference_models.holmes.optimization`).
    grad_clip_mode : {"per_parameter", "global"}
        Clip each parameter tensor's gradient to norm ``max_grad_norm`` (release) or the global norm.
    no_decay : {"embedding_norms", "all_norms"}
        Parameters without weight decay: biases and the LayerNorms of the input projections and positional
        embeddings (release), or biases and every normalisation layer.
    eval_video_batch, eval_query_batch, score_chunk : int
        Batch sizes of the evaluation's video and query encoding and its blockwise scoring.
    """

    lr: float = 3e-4
    optimizer: str = "bert_adam"
    lr_schedule: str = "bert_warmup_linear"
    grad_clip_mode: str = "per_parameter"
    no_decay: str = "embedding_norms"
    eval_video_batch: int = 256
    eval_query_batch: int = 512
    score_chunk: int = 1024


@dataclass(frozen=True)
class AblationSettings:
    """Switches for every Table 3 row, the MIL baseline and the DAB variant.

    ``method``: ``"holmes"`` (L_base + L_inter + L_intra), ``"baseline"`` (L_base only: MIL) or ``"dab"``
    (L_base with its InfoNCE part replaced by DAB's Gaussian heads + bridge + PAC, no Holmes terms).
    ``inter_branches``: which per-branch L_U terms enter L_inter (rows 1-2 keep one branch; the identifier then
    trusts that branch). ``aggregation``: include the DS-fused term L_U^o (row 3 turns it off).
    ``fusion``: partition fusion (rows 5-7). ``calibration``: ``"full"`` (Eq. 15 on the final polysemous set),
    ``"none"`` (row 8) or ``"initial_polysemous"`` (row 9, S̃_n only). ``intra``: include L_intra (row 10).
    ``assignment``: the intra-video soft label (rows 11-12: softmax, OT; FOT is the default).
    ``threshold_decay``: ``None`` (the paper, the release) sets the identification thresholds β_u, β_p of
    Eq. 11 from each batch alone; a decay in ``[0, 1)`` smooths them across batches by an exponential moving
    average (:func:`evidential_prvr.functional.ema_thresholds`, beyond the paper; the ``ema_thresholds``
    ablation uses 0.9, about the last ten batches).
    """

    method: Method = "holmes"
    inter_branches: InterBranches = "both"
    aggregation: bool = True
    fusion: Fusion = "uncertainty_dominant"
    calibration: Calibration = "full"
    intra: bool = True
    assignment: Assignment = "fot"
    threshold_decay: float | None = None


@dataclass(frozen=True)
class DABSettings:
    """DAB variant: Gaussian embedding dimension, bridge steps, PAC temperature and weight, and the start of the
    heads' log-variance weights (``"zero"``, the identity start; ``"pytorch"``, the start before version 3.0;
    :data:`evidential_prvr.choices.LOGVAR_WEIGHT_INITS`).

    DAB reports no PAC temperature. The KL costs grow linearly with ``embed_dim`` (about 2-3 nats per
    dimension at initialisation with log σ² = -2), so τ = ``embed_dim`` keeps the PAC logits O(1); τ = 1
    saturates the softmax (PAC ≈ 40 on the embedded benchmark) and training stays at chance level.
    """

    embed_dim: int = 64
    n_steps: int = 8
    tau: float = 64.0
    weight: float = 0.05
    logvar_weight_init: str = "zero"


@dataclass(frozen=True)
class HolmesConfig:
    """Everything a run needs besides data location, device and seed. JSON round-trips exactly.

    The sections ``model``, ``optim``, ``schedule``, ``weights``, ``base``, ``inter``, ``transport`` and
    ``intra`` are the registry's dataclasses (see the module documentation); ``ablation`` and ``dab`` are the
    reference model's own switches.
    """

    name: str = "tvr"
    model: ModelSettings = field(default_factory=ModelSettings)
    optim: OptimSettings = field(default_factory=OptimSettings)
    schedule: ScheduleSettings = field(default_factory=ScheduleSettings)
    weights: LossWeights = cast(LossWeights, _TVR.weights)  # a data set's release preset has every section
    base: BaseLossSettings = cast(BaseLossSettings, _TVR.base)
    inter: InterVideoSettings = _TVR.inter
    transport: TransportSettings = _TVR.transport
    intra: IntraVideoSettings = _TVR.intra
    ablation: AblationSettings = field(default_factory=AblationSettings)
    dab: DABSettings = field(default_factory=DABSettings)

    def __post_init__(self) -> None:
        for name, section_type in _SECTION_TYPES.items():
            value = getattr(self, name)
            if type(value) is not section_type:
                kind = section_type.__name__
                raise TypeError(f"config section {name!r} must be {'an' if kind[0] in 'AEIOU' else 'a'} {kind}, "
                                f"got {type(value).__name__}")
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field for any out-of-range or unknown setting.

        The loss sections check themselves (the library's dataclasses); this checks the others.
        """
        a = self.ablation
        for name, kind in (("method", Method), ("inter_branches", InterBranches), ("fusion", Fusion),
                           ("calibration", Calibration), ("assignment", Assignment)):
            check_choice(getattr(a, name), f"ablation.{name}", get_args(kind))
        decay = a.threshold_decay
        if decay is not None and (isinstance(decay, bool) or not isinstance(decay, (int, float))
                                  or not 0 <= decay < 1):
            raise ValueError(f"ablation.threshold_decay must be null (the in-batch thresholds) or a number in [0, 1), "
                             f"got {decay!r}")
        m, o, sch = self.model, self.optim, self.schedule
        for name in ("hidden_size", "num_heads", "num_blocks", "max_query_len", "n_clips", "n_frames"):
            _positive_int(getattr(m, name), f"model.{name}")
        for name, choices in (("kernel", KERNELS), ("width_weighting", WIDTH_WEIGHTINGS),
                              ("attention_mask", ATTENTION_MASKS), ("padded_frames", PADDED_FRAMES)):
            check_choice(getattr(m, name), f"model.{name}", choices)
        for name, choices in (("optimizer", OPTIMIZERS), ("lr_schedule", LR_SCHEDULES),
                              ("grad_clip_mode", GRAD_CLIP_MODES), ("no_decay", NO_DECAY_RULES)):
            check_choice(getattr(o, name), f"optim.{name}", choices)
        for name in ("ffn_multiplier", "query_ffn_multiplier"):
            value = getattr(m, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"model.{name} must be an int >= 0, got {value!r}")
        for name in ("attention_output_projection", "second_query_encoding", "activation_checkpointing"):
            if not isinstance(getattr(m, name), bool):
                raise ValueError(f"model.{name} must be a bool, got {getattr(m, name)!r}")
        if m.position_table is not None:
            _positive_int(m.position_table, "model.position_table")
        for name in ("width_temperature", "initializer_range"):
            if not getattr(m, name) > 0:
                raise ValueError(f"model.{name} must be > 0, got {getattr(m, name)}")
        if not 0 <= m.dropout < 1:
            raise ValueError(f"model.dropout must lie in [0, 1), got {m.dropout}")
        if not isinstance(m.widths, tuple) or not m.widths or any(not w > 0 for w in m.widths):
            raise ValueError(f"model.widths must be a non-empty list of widths > 0 (null: global attention), "
                             f"got {m.widths!r}")
        if not o.eps > 0:
            raise ValueError(f"optim.eps must be > 0, got {o.eps}")
        if not isinstance(o.betas, tuple) or len(o.betas) != 2 or not all(0 <= b < 1 for b in o.betas):
            raise ValueError(f"optim.betas must be two numbers in [0, 1), got {o.betas!r}")
        if o.weight_decay < 0:
            raise ValueError(f"optim.weight_decay must be >= 0, got {o.weight_decay}")
        if m.hidden_size % m.num_heads:
            raise ValueError(
                f"model.hidden_size must be divisible by model.num_heads, got {m.hidden_size} and {m.num_heads}"
            )
        for name in ("videos_per_batch", "eval_video_batch", "eval_query_batch", "score_chunk"):
            _positive_int(getattr(o, name), f"optim.{name}")
        if not o.lr > 0:
            raise ValueError(f"optim.lr must be > 0, got {o.lr}")
        if not 0 <= o.warmup_proportion < 1:
            raise ValueError(f"optim.warmup_proportion must lie in [0, 1), got {o.warmup_proportion}")
        if not o.max_grad_norm > 0:
            raise ValueError(f"optim.max_grad_norm must be > 0, got {o.max_grad_norm}")
        for name in ("epochs", "early_stop_patience"):
            _positive_int(getattr(sch, name), f"schedule.{name}")
        if sch.warmup_stage_epochs < 0 or sch.hard_negative_epoch < 0:
            raise ValueError(f"schedule epochs must be >= 0, got {sch}")
        for f in dataclasses.fields(LossWeights):
            if not getattr(self.weights, f.name) >= 0:
                raise ValueError(f"weights.{f.name} must be >= 0, got {getattr(self.weights, f.name)}")
        _positive_int(self.dab.embed_dim, "dab.embed_dim")
        _positive_int(self.dab.n_steps, "dab.n_steps")
        if not self.dab.tau > 0:
            raise ValueError(f"dab.tau must be > 0, got {self.dab.tau}")
        check_choice(self.dab.logvar_weight_init, "dab.logvar_weight_init", LOGVAR_WEIGHT_INITS)

    # --- (de)serialisation -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Nested plain-Python dictionary (JSON-ready: lists for tuples, ``None`` for a global width)."""
        data = _plain(dataclasses.asdict(self))
        data["model"]["widths"] = [None if math.isinf(w) else w for w in self.model.widths]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HolmesConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError`` (a typo must not pass silently).

        A section may leave fields out (they keep the defaults of :class:`HolmesConfig`). A config of
        release 1.x is refused with its unknown names (3.0 no longer migrates them; the changelog of 2.0.0
        lists the renames).
        """
        if not isinstance(data, dict):
            raise TypeError(f"config must be a dict, got {type(data).__name__}")
        for key, value in data.items():
            if key in _SECTION_TYPES and not isinstance(value, dict):
                raise TypeError(f"config section {key!r} must be a dict, got {type(value).__name__}")
        sections = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - sections
        if unknown:
            raise ValueError(f"unknown config keys {sorted(unknown)}; expected a subset of {sorted(sections)}"
                             f"{_OLD_CONFIG_HINT}")
        defaults = _DEFAULT_SECTIONS()
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            section_type = _SECTION_TYPES.get(key)
            if section_type is None:
                kwargs[key] = value
                continue
            known = [f.name for f in dataclasses.fields(section_type)]
            bad = set(value) - set(known)
            if bad:
                raise ValueError(f"unknown keys {sorted(bad)} in config section {key!r}; expected {sorted(known)}"
                                 f"{_OLD_CONFIG_HINT}")
            values = {**{name: getattr(defaults[key], name) for name in known}, **_from_plain(key, value)}
            try:
                kwargs[key] = section_type(**values)
            except (TypeError, ValueError) as exc:
                message = str(exc)
                prefix = f"{key}." if message.split(" ", 1)[0] in known else f"config section {key!r}: "
                raise type(exc)(prefix + message) from None
        return cls(**kwargs)

    def to_json(self, path: str | Path | None = None) -> str:
        """Serialise to a JSON string, and write it to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True)
        if path is not None:
            Path(path).write_text(text + "\n", encoding="utf-8")
        return text

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> HolmesConfig:
        """Read a config from a JSON string or a path to a JSON file."""
        candidate = Path(text_or_path) if not str(text_or_path).lstrip().startswith("{") else None
        text = candidate.read_text(encoding="utf-8") if candidate is not None else str(text_or_path)
        return cls.from_dict(json.loads(text))

    # --- variants ---------------------------------------------------------------------------------
    def replace(self, **sections: Any) -> HolmesConfig:
        """Copy with some sections' fields changed, e.g. ``cfg.replace(schedule={"epochs": 3})``."""
        data = self.to_dict()
        for key, value in sections.items():
            if key not in data:
                raise ValueError(f"unknown config section {key!r}; expected one of {sorted(data)}")
            if isinstance(value, dict):
                data[key].update(value)
            else:
                data[key] = value
        return HolmesConfig.from_dict(data)

    def with_ablation(self, name: str) -> HolmesConfig:
        """Copy with one of the :data:`ABLATIONS` applied (``"full"`` leaves the Holmes defaults)."""
        check_choice(name, "ablation name", tuple(ABLATIONS))
        changes = dict(ABLATIONS[name])
        suffix = "" if name == "full" else f"+{name}"
        return self.replace(ablation={**dataclasses.asdict(AblationSettings()), **changes}, name=self.name + suffix)


def _plain(value: Any) -> Any:
    """``value`` with tuples as lists, recursively (JSON's arrays)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _from_plain(section: str, values: dict[str, Any]) -> dict[str, Any]:
    """A section's JSON values in the dataclass's types: tuples for lists, ``inf`` for a global width."""
    out = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    if section == "model" and "widths" in out:
        widths = out["widths"]
        out["widths"] = (cast(RegistryModelSettings, holmes_settings("release", "tvr").model).widths if widths is None else
                         tuple(math.inf if w is None else w for w in widths) if isinstance(widths, tuple) else widths)
    return out


_OLD_CONFIG_HINT = ("; a config of release 1.x? Version 3.0 no longer migrates their names (the changelog of "
                    "2.0.0 lists the renames)")


_SECTION_TYPES: dict[str, type] = {
    "model": ModelSettings,
    "optim": OptimSettings,
    "schedule": ScheduleSettings,
    "weights": LossWeights,
    "base": BaseLossSettings,
    "inter": InterVideoSettings,
    "transport": TransportSettings,
    "intra": IntraVideoSettings,
    "ablation": AblationSettings,
    "dab": DABSettings,
}


def _DEFAULT_SECTIONS() -> dict[str, Any]:  # noqa: N802 - a table, computed when first needed
    """The sections of ``HolmesConfig()``: the values of the fields a config dict leaves out."""
    return {f.name: getattr(_DEFAULT, f.name) for f in dataclasses.fields(HolmesConfig) if f.name in _SECTION_TYPES}


#: Table 3 rows (paper IDs in the comments), the MIL baseline and the DAB variant, as ablation overrides.
ABLATIONS: dict[str, dict[str, Any]] = {
    "full": {},  # (0)
    "frame_only": {"inter_branches": "frame", "aggregation": False, "fusion": "frame"},  # (1)
    "clip_only": {"inter_branches": "clip", "aggregation": False, "fusion": "clip"},  # (2)
    "no_aggregation": {"aggregation": False},  # (3)
    "trust_frame": {"fusion": "frame"},  # (5)
    "trust_clip": {"fusion": "clip"},  # (6)
    "confidence_dominance": {"fusion": "confidence_dominant"},  # (7)
    "no_calibration": {"calibration": "none"},  # (8)
    "initial_polysemous_only": {"calibration": "initial_polysemous"},  # (9)
    "no_intra": {"intra": False},  # (10)
    "softmax": {"assignment": "softmax"},  # (11)
    "ot": {"assignment": "ot"},  # (12)
    "fot": {"assignment": "fot"},  # (0), named for symmetry with (11)-(12)
    "ema_thresholds": {"threshold_decay": 0.9},  # beyond the paper: Eq. 11's thresholds smoothed across batches
    "baseline": {"method": "baseline"},  # L_base only (MIL)
    "dab": {"method": "dab"},  # DAB head + bridge + PAC in place of InfoNCE
}


def from_registry(dataset: str, source: Literal["release", "paper"] = "release") -> HolmesConfig:
    """The config of ``dataset`` built from :func:`evidential_prvr.presets.holmes_settings`.

    Every number (architecture, optimiser, loss weights, schedule) comes from the registry; the structural
    settings are the release's (this module's defaults).

    Parameters
    ----------
    dataset : {"tvr", "activitynet", "charades", "act", "cha"}
        The data set.
    source : {"release", "paper"}
        ``"release"`` (the ``--config`` presets) or ``"paper"``: the paper's evidential settings and the
        values it states (e.g. ActivityNet's query length of 64), the rest from the release as the paper
        says (App. A.1).
    """
    check_choice(source, "source", ("release", "paper"))
    settings = holmes_settings(source, dataset)
    name = canonical_dataset(dataset)
    # the preset of a data set has every section
    assert settings.schedule is not None and settings.weights is not None and settings.base is not None
    return HolmesConfig(
        name=name if source == "release" else f"{name}-paper",
        model=ModelSettings(**_fields(settings.model)),
        optim=OptimSettings(**_fields(settings.optimizer)),
        schedule=settings.schedule,
        weights=settings.weights,
        base=settings.base,
        inter=settings.inter,
        transport=settings.transport,
        intra=settings.intra,
    )


def _fields(section: object) -> dict[str, Any]:
    """The fields of a registry section by name (to build the reference's extension of its dataclass)."""
    return {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}  # type: ignore[arg-type]


def _embedded() -> HolmesConfig:
    # Small model and short stages so that Holmes and the baseline each train in about a minute on two
    # CPU cores. The loss weights, margins and τ are the release's TVR ones (the config's defaults).
    return HolmesConfig(
        name="embedded",
        model=ModelSettings(hidden_size=64, num_heads=4, num_blocks=1, dropout=0.1, widths=(math.inf, 1.0, 5.0),
                            ffn_multiplier=1, query_ffn_multiplier=0, kernel="symmetric", width_weighting="linear",
                            attention_output_projection=True, attention_mask="exclude", padded_frames="mask",
                            second_query_encoding=False, max_query_len=30),
        optim=OptimSettings(lr=1e-3, videos_per_batch=16, optimizer="adamw", lr_schedule="warmup_linear",
                            grad_clip_mode="global", no_decay="all_norms", eps=1e-8,
                            eval_video_batch=256, eval_query_batch=512, score_chunk=512),
        schedule=ScheduleSettings(epochs=15, warmup_stage_epochs=4, hard_negative_epoch=8, early_stop_patience=100),
    )


def _clip() -> HolmesConfig:
    # Features from ``prvr-videos index`` (CLIP frame and token features, 512-d for ViT-B-32, 768-d for ViT-L-14; the
    # widths are read from the data) on a collection of your own: the embedded preset's recipe, a wider
    # hidden size for the wider inputs, and CLIP's whole 77-token context kept.
    base = _embedded()
    return base.replace(model={"hidden_size": 128, "max_query_len": 77},
                        schedule={"epochs": 60, "warmup_stage_epochs": 6, "hard_negative_epoch": 12}, name="clip")


PRESETS: dict[str, Any] = {
    "tvr": lambda: from_registry("tvr"),
    "activitynet": lambda: from_registry("activitynet"),
    "charades": lambda: from_registry("charades"),
    "embedded": _embedded,
    "clip": _clip,
}


def preset(name: str) -> HolmesConfig:
    """A fresh :class:`HolmesConfig` for ``"tvr"``, ``"activitynet"``, ``"charades"``, ``"embedded"`` or ``"clip"``."""
    check_choice(name, "config preset", tuple(PRESETS))
    return PRESETS[name]()


def _positive_int(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


_DEFAULT = HolmesConfig()
