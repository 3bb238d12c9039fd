"""Bases of the modules: what each sets up the same way (presets, settings, ``validate_args``, ``reduction``).

:class:`PresetModule` writes ``from_preset`` once: a subclass says which constructor arguments a preset
gives (:meth:`~PresetModule._preset_arguments`), and the call's own arguments replace them.
:class:`_SettingsModule` holds one settings dataclass in ``_settings`` (see :mod:`evidential_prvr._overrides`)
and ``validate_args``; :class:`_SettingsLoss` adds a loss's ``reduction`` and ``distributed``, which
:class:`_ReducedLoss` holds for the losses without a settings dataclass. :class:`LossOptions` declares those
three options once for the arguments dataclasses of the losses' constructors
(:func:`~evidential_prvr._overrides.settings_constructor`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from torch import nn

from evidential_prvr._checks import check_choice
from evidential_prvr._overrides import M, P, preset_module, settings_repr
from evidential_prvr.choices import REDUCTIONS, DatasetName, Preset, Reduction

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["LossOptions", "PresetModule", "_SettingsModule", "_ReducedLoss", "_SettingsLoss"]

S = TypeVar("S", bound="DataclassInstance")  # a module's settings dataclass


@dataclass(frozen=True, kw_only=True)
class LossOptions:
    """The constructor options of a loss module besides its settings (checked by :class:`_SettingsLoss`)."""

    reduction: Reduction = "mean"
    validate_args: bool | None = None
    distributed: bool = False


def _hold_loss_options(module: _ReducedLoss | _SettingsLoss[Any], reduction: Reduction, distributed: bool) -> None:
    check_choice(reduction, "reduction", REDUCTIONS)
    module.reduction = reduction
    module.distributed = bool(distributed)


class PresetModule(nn.Module):
    """Base of the modules with presets: :meth:`from_preset` of every one of them, typed from its constructor.

    A subclass says which of its constructor's arguments a preset sets (``_preset_arguments``); the others
    keep their defaults. Type checkers read the overrides of ``from_preset`` from the subclass's
    constructor, so a misspelt name or choice is reported as a call of ``"from_preset" of "PresetModule"``
    with the subclass's parameter.

    Examples
    --------
    >>> from evidential_prvr import FlexibleOT, PresetModule
    >>> issubclass(FlexibleOT, PresetModule)
    True
    >>> FlexibleOT.from_preset("paper", n_iters=20).n_iters
    20

    References
    ----------
    Holmes (ICML 2026), §4.2 and App. A.1 (the paper's settings); the official Holmes release
    (``lijun2005/ICML26-Holmes``, ``src/Configs``).
    """

    @classmethod
    def _preset_arguments(cls, preset: Preset, dataset: DatasetName | None) -> dict[str, Any]:
        """The constructor arguments that ``preset`` (and ``dataset``) give; the others keep their defaults."""
        raise NotImplementedError(f"{cls.__name__} defines no presets")

    @classmethod
    def from_preset(
        cls: Callable[P, M], preset: Preset, dataset: DatasetName | None = None, *args: P.args, **overrides: P.kwargs
    ) -> M:
        """The module with the settings of the ``"paper"`` or ``"release"`` preset
        (:func:`evidential_prvr.presets.holmes_settings`; ``dataset=None``: TVR's); the class's documentation
        says which settings they are.

        ``args`` and ``overrides`` are the constructor's arguments (checked by type checkers as the
        constructor's): each replaces the preset's value, and a name the constructor does not take raises
        ``TypeError``.
        """
        module = cast("type[PresetModule]", cls)
        return preset_module(cls, module._preset_arguments(preset, dataset), args, overrides)


class _SettingsModule(PresetModule, Generic[S]):
    """Base of the modules whose hyperparameters are one settings dataclass ``S``, kept in ``self._settings``."""

    _settings: S

    def __init__(self, settings: S, validate_args: bool | None = None) -> None:
        super().__init__()
        self._settings = settings
        self.validate_args = validate_args

    def settings(self) -> S:
        """The module's settings (frozen; :func:`dataclasses.replace` makes a changed copy, which the
        class's ``from_settings`` turns into a module)."""
        return self._settings

    def extra_repr(self) -> str:
        return settings_repr(self._settings)


class _ReducedLoss(PresetModule):
    """Base of the loss modules without a settings dataclass: ``reduction`` (one of ``"mean"``, ``"sum"``,
    ``"none"``), ``validate_args`` and ``distributed`` (multi-process training, :doc:`/guide/distributed`)."""

    reduction: Reduction
    distributed: bool

    def __init__(self, reduction: Reduction = "mean", validate_args: bool | None = None,
                 distributed: bool = False) -> None:
        super().__init__()
        self.validate_args = validate_args
        _hold_loss_options(self, reduction, distributed)


class _SettingsLoss(_SettingsModule[S]):
    """A :class:`_SettingsModule` that is a loss: with the :class:`LossOptions` ``reduction`` and
    ``distributed`` besides ``validate_args``."""

    reduction: Reduction
    distributed: bool

    def __init__(self, settings: S, options: LossOptions) -> None:
        super().__init__(settings, options.validate_args)
        _hold_loss_options(self, options.reduction, options.distributed)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, reduction={self.reduction!r}"
