"""Typed configuration of a Holmes reference-model run: model, optimisation, losses, schedule and ablations.

A :class:`HolmesConfig` is everything a training run needs besides the data location, the device and the
seed. It is a tree of plain dataclasses so that it can be written to and read back from JSON exactly
(:meth:`HolmesConfig.to_json` / :meth:`HolmesConfig.from_json`), stored in every checkpoint and compared
on ``--resume``.

Presets (:func:`preset`):

``tvr``, ``activitynet``, ``charades``
    The official Holmes release settings (issue 4): loss weights
    ``[InfoNCE clip, InfoNCE frame, div, intra, inter]``, margin, learning rate, 100 epochs with a 20-epoch
    warm-up stage, hard negatives from epoch 20, early stopping after 10 epochs without a better validation
    SumR (20 for TVR), batches of 128 videos, hidden size 384.
``embedded``
    Tuned for the small embedded benchmark on two CPU cores (hidden size 64, few epochs, short stages).

Ablations (:data:`ABLATIONS`, :meth:`HolmesConfig.with_ablation`) reproduce every row of the paper's
Table 3, the L_base-only baseline (MIL) and the DAB variant.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "ModelSettings",
    "OptimSettings",
    "LossSettings",
    "ScheduleSettings",
    "AblationSettings",
    "DABSettings",
    "HolmesConfig",
    "PRESETS",
    "ABLATIONS",
    "preset",
]

Method = Literal["holmes", "baseline", "dab"]
InterBranches = Literal["both", "frame", "clip"]
Fusion = Literal["uncertainty_dominant", "confidence_dominant", "frame", "clip"]
Calibration = Literal["full", "none", "initial_polysemous"]
Assignment = Literal["fot", "ot", "softmax"]

_METHODS = ("holmes", "baseline", "dab")
_BRANCHES = ("both", "frame", "clip")
_FUSIONS = ("uncertainty_dominant", "confidence_dominant", "frame", "clip")
_CALIBRATIONS = ("full", "none", "initial_polysemous")
_ASSIGNMENTS = ("fot", "ot", "softmax")
_LOSS_DATASETS = ("tvr", "activitynet", "charades")


@dataclass
class ModelSettings:
    """Architecture of the GMMFormer-style model (mapped onto the model's own ``ModelConfig``).

    Only the fields below are set from here; the feature dimensions come from the data at run time.
    """

    hidden_size: int = 384
    num_heads: int = 4
    num_blocks: int = 1
    dropout: float = 0.1
    frame_weight: float = 0.4
    clip_weight: float = 0.6
    #: Gaussian widths of the parallel attention blocks, ``None`` entries = global attention (kept JSON-
    #: standard); ``widths=None`` = the model's default (GMMFormerV2's eight widths).
    widths: list[float | None] | None = None
    ffn_multiplier: int = 4


@dataclass
class OptimSettings:
    """AdamW, learning-rate schedule, clipping, batch size and run length."""

    lr: float = 3e-4
    weight_decay: float = 0.01
    warmup_ratio: float = 0.01
    grad_clip: float = 1.0
    videos_per_batch: int = 128
    epochs: int = 100
    early_stop_patience: int = 10
    max_query_len: int = 30
    eval_video_batch: int = 256
    eval_query_batch: int = 512
    score_chunk: int = 1024


@dataclass
class LossSettings:
    """Weights and hyperparameters of L_base, L_inter and L_intra.

    ``evidential_preset`` picks the library preset for L_inter and L_intra: ``"release"`` (with
    ``loss_dataset``) or ``"paper"``. ``inter_tau`` / ``intra_tau``, when set, override the preset's
    evidence temperature (the embedded benchmark's similarity range differs from the real data sets').
    """

    nce_clip: float = 0.05
    nce_frame: float = 0.04
    div: float = 8e-5
    intra: float = 0.8
    inter: float = 0.2
    margin: float = 0.1
    div_delta: float = 0.15
    div_alpha: float = 32.0
    div_lambda: float = 1.0
    evidential_preset: Literal["release", "paper"] = "release"
    loss_dataset: str = "tvr"
    inter_tau: float | None = None
    intra_tau: float | None = None


@dataclass
class ScheduleSettings:
    """The two-stage schedule: ``warmup_stage_epochs`` epochs of L_inter without calibration and no L_intra."""

    warmup_stage_epochs: int = 20
    hard_negative_epoch: int = 20


@dataclass
class AblationSettings:
    """Switches for every Table 3 row, the MIL baseline and the DAB variant.

    ``method``: ``"holmes"`` (L_base + L_inter + L_intra), ``"baseline"`` (L_base only: MIL) or ``"dab"``
    (L_base with its InfoNCE part replaced by DAB's Gaussian heads + bridge + PAC, no Holmes terms).
    ``inter_branches``: which per-branch L_U terms enter L_inter (rows 1-2 keep one branch; the identifier then
    trusts that branch). ``aggregation``: include the DS-fused term L_U^o (row 3 turns it off).
    ``fusion``: partition fusion (rows 5-7). ``calibration``: ``"full"`` (Eq. 15 on the final polysemous set),
    ``"none"`` (row 8) or ``"initial_polysemous"`` (row 9, S̃_n only). ``intra``: include L_intra (row 10).
    ``assignment``: the intra-video soft label (rows 11-12: softmax, OT; FOT is the default).
    """

    method: Method = "holmes"
    inter_branches: InterBranches = "both"
    aggregation: bool = True
    fusion: Fusion = "uncertainty_dominant"
    calibration: Calibration = "full"
    intra: bool = True
    assignment: Assignment = "fot"


@dataclass
class DABSettings:
    """DAB variant (issue 5): Gaussian embedding dimension, bridge steps, PAC temperature and weight.

    DAB reports no PAC temperature. The KL costs grow linearly with ``embed_dim`` (about 2-3 nats per
    dimension at initialisation with log σ² = -2), so τ = ``embed_dim`` keeps the PAC logits O(1); τ = 1
    saturates the softmax (PAC ≈ 40 on the embedded benchmark) and training stays at chance level.
    """

    embed_dim: int = 64
    n_steps: int = 8
    tau: float = 64.0
    weight: float = 0.05


@dataclass
class HolmesConfig:
    """Everything a run needs besides data location, device and seed. JSON round-trips exactly."""

    name: str = "tvr"
    model: ModelSettings = field(default_factory=ModelSettings)
    optim: OptimSettings = field(default_factory=OptimSettings)
    loss: LossSettings = field(default_factory=LossSettings)
    schedule: ScheduleSettings = field(default_factory=ScheduleSettings)
    ablation: AblationSettings = field(default_factory=AblationSettings)
    dab: DABSettings = field(default_factory=DABSettings)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field for any out-of-range or unknown setting."""
        a = self.ablation
        _choice(a.method, "ablation.method", _METHODS)
        _choice(a.inter_branches, "ablation.inter_branches", _BRANCHES)
        _choice(a.fusion, "ablation.fusion", _FUSIONS)
        _choice(a.calibration, "ablation.calibration", _CALIBRATIONS)
        _choice(a.assignment, "ablation.assignment", _ASSIGNMENTS)
        _choice(self.loss.evidential_preset, "loss.evidential_preset", ("release", "paper"))
        _choice(self.loss.loss_dataset, "loss.loss_dataset", _LOSS_DATASETS)
        for name in ("hidden_size", "num_heads", "num_blocks"):
            _positive_int(getattr(self.model, name), f"model.{name}")
        if self.model.hidden_size % self.model.num_heads:
            raise ValueError(
                f"model.hidden_size must be divisible by model.num_heads, got {self.model.hidden_size} and "
                f"{self.model.num_heads}"
            )
        for name in ("videos_per_batch", "epochs", "early_stop_patience", "max_query_len", "eval_video_batch",
                     "eval_query_batch", "score_chunk"):
            _positive_int(getattr(self.optim, name), f"optim.{name}")
        if not self.optim.lr > 0:
            raise ValueError(f"optim.lr must be > 0, got {self.optim.lr}")
        if not 0 <= self.optim.warmup_ratio < 1:
            raise ValueError(f"optim.warmup_ratio must lie in [0, 1), got {self.optim.warmup_ratio}")
        if not self.optim.grad_clip > 0:
            raise ValueError(f"optim.grad_clip must be > 0, got {self.optim.grad_clip}")
        for f in dataclasses.fields(LossSettings):
            value = getattr(self.loss, f.name)
            if isinstance(value, float) and f.name not in ("inter_tau", "intra_tau") and value < 0:
                raise ValueError(f"loss.{f.name} must be >= 0, got {value}")
        for name in ("inter_tau", "intra_tau"):
            value = getattr(self.loss, name)
            if value is not None and not value > 0:
                raise ValueError(f"loss.{name} must be None or > 0, got {value}")
        if self.schedule.warmup_stage_epochs < 0 or self.schedule.hard_negative_epoch < 0:
            raise ValueError(f"schedule epochs must be >= 0, got {self.schedule}")
        _positive_int(self.dab.embed_dim, "dab.embed_dim")
        _positive_int(self.dab.n_steps, "dab.n_steps")
        if not self.dab.tau > 0:
            raise ValueError(f"dab.tau must be > 0, got {self.dab.tau}")

    # --- (de)serialisation -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Nested plain-Python dictionary (JSON-ready)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HolmesConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError`` (a typo must not pass silently)."""
        if not isinstance(data, dict):
            raise TypeError(f"config must be a dict, got {type(data).__name__}")
        sections = {f.name: f for f in dataclasses.fields(cls)}
        unknown = set(data) - set(sections)
        if unknown:
            raise ValueError(f"unknown config keys {sorted(unknown)}; expected a subset of {sorted(sections)}")
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            section_type = _SECTION_TYPES.get(key)
            if section_type is None:
                kwargs[key] = value
                continue
            if not isinstance(value, dict):
                raise TypeError(f"config section {key!r} must be a dict, got {type(value).__name__}")
            known = {f.name for f in dataclasses.fields(section_type)}
            bad = set(value) - known
            if bad:
                raise ValueError(f"unknown keys {sorted(bad)} in config section {key!r}; expected {sorted(known)}")
            kwargs[key] = section_type(**value)
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
        """Copy with some sections' fields changed, e.g. ``cfg.replace(optim={"epochs": 3})``."""
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
        _choice(name, "ablation name", tuple(ABLATIONS))
        changes = dict(ABLATIONS[name])
        suffix = "" if name == "full" else f"+{name}"
        return self.replace(ablation={**dataclasses.asdict(AblationSettings()), **changes}, name=self.name + suffix)


_SECTION_TYPES: dict[str, type] = {
    "model": ModelSettings,
    "optim": OptimSettings,
    "loss": LossSettings,
    "schedule": ScheduleSettings,
    "ablation": AblationSettings,
    "dab": DABSettings,
}

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
    "baseline": {"method": "baseline"},  # L_base only (MIL)
    "dab": {"method": "dab"},  # issue 5: DAB head + bridge + PAC in place of InfoNCE
}


def _release(name: str, *, lr: float, weights: tuple[float, float, float, float, float], margin: float,
             div_delta: float, patience: int, max_query_len: int) -> HolmesConfig:
    nce_clip, nce_frame, div, intra, inter = weights
    return HolmesConfig(
        name=name,
        model=ModelSettings(),
        optim=OptimSettings(lr=lr, early_stop_patience=patience, max_query_len=max_query_len),
        loss=LossSettings(nce_clip=nce_clip, nce_frame=nce_frame, div=div, intra=intra, inter=inter,
                          margin=margin, div_delta=div_delta, loss_dataset=name),
        schedule=ScheduleSettings(warmup_stage_epochs=20, hard_negative_epoch=20),
    )


def _embedded() -> HolmesConfig:
    # Small model and short stages so that Holmes and the baseline each train in about a minute on two
    # CPU cores. The loss weights keep the release's TVR balance; τ values are the release's TVR ones.
    return HolmesConfig(
        name="embedded",
        model=ModelSettings(hidden_size=64, num_heads=4, num_blocks=1, dropout=0.1,
                            widths=[None, 1.0, 5.0], ffn_multiplier=1),
        optim=OptimSettings(lr=1e-3, videos_per_batch=16, epochs=15, early_stop_patience=100, max_query_len=30,
                            eval_video_batch=256, eval_query_batch=512, score_chunk=512),
        loss=LossSettings(nce_clip=0.05, nce_frame=0.04, div=8e-5, intra=0.8, inter=0.2, margin=0.1,
                          div_delta=0.15, loss_dataset="tvr"),
        schedule=ScheduleSettings(warmup_stage_epochs=4, hard_negative_epoch=8),
    )


PRESETS: dict[str, Any] = {
    "tvr": lambda: _release("tvr", lr=3e-4, weights=(0.05, 0.04, 8e-5, 0.8, 0.2), margin=0.1, div_delta=0.15,
                            patience=20, max_query_len=30),
    "activitynet": lambda: _release("activitynet", lr=2.5e-4, weights=(0.02, 0.04, 0.003, 1e-4, 0.06), margin=0.2,
                                    div_delta=0.2, patience=10, max_query_len=64),
    "charades": lambda: _release("charades", lr=2e-4, weights=(0.02, 0.04, 0.003, 9e-4, 0.06), margin=0.2,
                                 div_delta=0.2, patience=10, max_query_len=30),
    "embedded": _embedded,
}


def preset(name: str) -> HolmesConfig:
    """A fresh :class:`HolmesConfig` for ``"tvr"``, ``"activitynet"``, ``"charades"`` or ``"embedded"``."""
    _choice(name, "config preset", tuple(PRESETS))
    return PRESETS[name]()


def _choice(value: object, name: str, choices: tuple[object, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")


def _positive_int(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
