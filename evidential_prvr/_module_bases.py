"""Bases of the modules: what each sets up the same way (``validate_args``, ``reduction``, its settings).

:class:`_SettingsModule` holds one settings dataclass in ``_settings`` (see :mod:`evidential_prvr._overrides`)
and ``validate_args``; :class:`_ReducedLoss` checks and stores a loss's ``reduction``, ``validate_args`` and
``distributed``; :class:`_SettingsLoss` is a loss with settings, whose ``extra_repr`` lists them.
:class:`LossOptions` declares those three options once for the arguments dataclasses of the losses'
constructors (:func:`~evidential_prvr._overrides.settings_constructor`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from evidential_prvr._checks import check_choice
from evidential_prvr._overrides import settings_repr
from evidential_prvr.choices import REDUCTIONS, Reduction

__all__ = ["LossOptions", "_SettingsModule", "_ReducedLoss", "_SettingsLoss"]


@dataclass(frozen=True, kw_only=True)
class LossOptions:
    """The constructor options of a loss module besides its settings (checked by :class:`_ReducedLoss`)."""

    reduction: Reduction = "mean"
    validate_args: bool | None = None
    distributed: bool = False


class _SettingsModule(nn.Module):
    """Base of the modules whose hyperparameters are one settings dataclass, kept in ``self._settings``."""

    def __init__(self, settings: Any, validate_args: bool | None = None) -> None:
        super().__init__()
        self._settings = settings
        self.validate_args = validate_args


class _ReducedLoss(nn.Module):
    """Base of the loss modules: ``reduction`` (one of ``"mean"``, ``"sum"``, ``"none"``), ``validate_args``
    and ``distributed`` (multi-process training, :doc:`/guide/distributed`)."""

    def __init__(self, reduction: Reduction = "mean", validate_args: bool | None = None,
                 distributed: bool = False) -> None:
        super().__init__()
        check_choice(reduction, "reduction", REDUCTIONS)
        self.reduction = reduction
        self.validate_args = validate_args
        self.distributed = bool(distributed)


class _SettingsLoss(_ReducedLoss):
    """A :class:`_ReducedLoss` whose hyperparameters are one settings dataclass in ``self._settings``."""

    def __init__(self, settings: Any, options: LossOptions) -> None:
        super().__init__(options.reduction, options.validate_args, options.distributed)
        self._settings = settings

    def extra_repr(self) -> str:
        return f"{settings_repr(self._settings)}, reduction={self.reduction!r}"
