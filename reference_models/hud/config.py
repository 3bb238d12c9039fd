"""Settings of one CVR reference-model run (a frozen dataclass, saved in checkpoints and compared on resume)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from reference_models.engine import check_choice
from reference_models.hud.model import METHODS

__all__ = ["HUDRunConfig", "DERIVATIVE_CHOICES"]

DERIVATIVE_CHOICES = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9)


@dataclass(frozen=True)
class HUDRunConfig:
    """One run: the variant (``"hud"`` or ``"base"``), HUD's Table 4 derivative, sizes and optimisation.

    ``derivative`` 0 is the full HUD; 1-9 turn off the part of Table 4's D#1-D#9 (HUD only).
    """

    method: str = "hud"
    derivative: int = 0
    dim: int = 64
    embed_dim: int = 64
    queries_per_frame: int = 2
    composer_queries: int = 8
    num_heads: int = 2
    max_words: int = 12
    batch_size: int = 64
    epochs: int = 12
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_ratio: float = 0.05
    grad_clip: float = 5.0
    early_stop_patience: int = 100
    eval_seed: int = 0

    def __post_init__(self) -> None:
        check_choice(self.method, "method", tuple(METHODS))
        check_choice(self.derivative, "derivative", DERIVATIVE_CHOICES)
        if self.derivative and self.method != "hud":
            raise ValueError(f"derivative {self.derivative} is a HUD derivative; method must be 'hud', got {self.method!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", "float") and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise TypeError(f"{f.name} must be a number, got {value!r}")

    def backbone_sizes(self) -> dict[str, int]:
        """The :class:`~reference_models.hud.model.BackboneSettings` sizes this run sets."""
        return {"dim": self.dim, "embed_dim": self.embed_dim, "queries_per_frame": self.queries_per_frame,
                "composer_queries": self.composer_queries, "num_heads": self.num_heads}

    def to_dict(self) -> dict[str, object]:
        """JSON-able settings."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object) -> HUDRunConfig:
        """The config saved by :meth:`to_dict`; ``ValueError`` when ``data`` is not one."""
        if not isinstance(data, dict) or set(data) != {f.name for f in fields(cls)}:
            raise ValueError("not a HUD run config (keys differ)")
        return cls(**data)

    def differences(self, saved: HUDRunConfig) -> list[str]:
        """``"<name> <saved> vs <now>"`` for every setting that differs."""
        return [f"{f.name} {getattr(saved, f.name)!r} vs {getattr(self, f.name)!r}"
                for f in fields(self) if getattr(saved, f.name) != getattr(self, f.name)]
