"""The base of the modules with presets: :class:`PresetModule` writes ``from_preset`` once.

A subclass says which constructor arguments a preset gives (:meth:`~PresetModule._preset_arguments`, or
:meth:`~PresetModule._preset_arguments_given` when they depend on the call's own arguments), and the call's own
arguments replace them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Any, ParamSpec, Protocol, TypeVar, cast

from torch import nn

__all__ = ["PresetModule"]

N = TypeVar("N", contravariant=True)  # the preset names of a class with presets (a Literal)
D = TypeVar("D", contravariant=True)  # its data set names
M = TypeVar("M", covariant=True)  # the module from_preset builds
P = ParamSpec("P")  # its constructor's parameters


def reject_unknown(given: Collection[str], accepted: Collection[str], owner: str) -> None:
    """Raise ``TypeError`` naming every entry of ``given`` that is not in ``accepted``."""
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        raise TypeError(f"{owner}.from_preset() got unexpected override(s) {', '.join(map(repr, unknown))}; "
                        f"accepted: {', '.join(sorted(accepted))}")


class _PresetClass(Protocol[N, D, P, M]):
    """What :meth:`PresetModule.from_preset` reads from the class it is called on, for type checkers: calling
    the class (the constructor's parameters ``P``, its instance ``M``) and the preset and data set names that
    its ``_preset_arguments`` takes (``N``, ``D``: ``Literal`` types of :mod:`evidential_prvr.choices`)."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> M: ...

    def _preset_arguments(self, preset: N, dataset: D | None, /) -> dict[str, Any]: ...


class PresetModule(nn.Module):
    """Base of the modules with presets: :meth:`from_preset` of every one of them, typed from its constructor.

    A subclass says which of its constructor's arguments a preset sets (``_preset_arguments``, whose
    ``preset`` and ``dataset`` annotations are the names it accepts); the others keep their defaults. Type
    checkers read the preset and data set names from that method and the overrides of ``from_preset`` from the
    subclass's constructor, so a misspelt preset, keyword or choice is reported as a call of
    ``"from_preset" of "PresetModule"`` with the subclass's parameter.

    Examples
    --------
    >>> from evidential_prvr import FlexibleOT, HolmesCriterion, PresetModule
    >>> issubclass(FlexibleOT, PresetModule) and issubclass(HolmesCriterion, PresetModule)
    True
    >>> FlexibleOT.from_preset("paper", n_iters=20).n_iters
    20

    References
    ----------
    Holmes (ICML 2026), §4.2 and App. A.1 (the paper's settings); the official Holmes release
    (``lijun2005/ICML26-Holmes``, ``src/Configs``); HUD's implementation details
    (:class:`~evidential_prvr.probabilistic.HUDObjective`).
    """

    @classmethod
    def _preset_arguments(cls, preset: Any, dataset: Any) -> dict[str, Any]:
        """The constructor arguments that ``preset`` (and ``dataset``) give; the others keep their defaults.

        A subclass annotates ``preset`` and ``dataset`` with the ``Literal`` of the names it accepts
        (:data:`~evidential_prvr.choices.Preset` and :data:`~evidential_prvr.choices.DatasetName` for the
        Holmes modules): :meth:`from_preset` takes its own ``preset`` and ``dataset`` types from there."""
        raise NotImplementedError(f"{cls.__name__} defines no presets")

    @classmethod
    def _preset_arguments_given(cls, preset: Any, dataset: Any, given: Mapping[str, Any]) -> dict[str, Any]:
        """The constructor arguments of ``preset`` for a call of :meth:`from_preset` that gives ``given`` (the
        call's own arguments by name, positional ones included), for a module whose preset values depend on
        them (e.g. parts built with the call's ``validate_args``). The default: :meth:`_preset_arguments`.
        ``given`` still replaces what this returns."""
        return cls._preset_arguments(preset, dataset)

    @classmethod
    def from_preset(
        cls: _PresetClass[N, D, P, M], preset: N, dataset: D | None = None, *args: P.args, **overrides: P.kwargs
    ) -> M:
        """The module with the settings of a preset (the class's documentation says which settings they are).

        ``preset`` and ``dataset`` are the names the class accepts: ``"paper"`` or ``"release"`` and a data
        set of :func:`evidential_prvr.presets.holmes_settings` for the Holmes modules (``dataset=None``: TVR's),
        ``"paper"`` and ``None`` or ``"webvid-covr"`` for :class:`~evidential_prvr.probabilistic.HUDObjective`
        (:func:`evidential_prvr.presets.hud_settings`), ``"paper"`` and ``None``, ``"msr-vtt"``, ``"msvd"`` or
        ``"vatex"`` for the DAB heads and bridges (:func:`evidential_prvr.presets.dab_settings`).

        ``args`` and ``overrides`` are the constructor's arguments (checked by type checkers as the
        constructor's): each replaces the preset's value, and a name the constructor does not take raises
        ``TypeError``.
        """
        module = cast("type[PresetModule]", cls)
        signature = inspect.signature(module)
        named = signature.bind_partial(*args).arguments if args else {}
        twice = sorted(named.keys() & overrides.keys())
        if twice:
            raise TypeError(f"{module.__name__}.from_preset() got multiple values for {', '.join(twice)}")
        given = {**named, **overrides}
        reject_unknown(given, signature.parameters, module.__name__)
        arguments = module._preset_arguments_given(preset, dataset, given)
        return cast("Callable[..., M]", cls)(**{**arguments, **given})
