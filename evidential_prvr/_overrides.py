"""Helpers of the modules that hold a settings dataclass, and the one override rule of every ``from_preset``.

Each operation has one frozen, keyword-only settings dataclass (its hyperparameters, defaults and
checks). A module keeps one instance of it, built by its constructor (whose keyword parameters are the
settings' fields and the module's own options, written out in the class); :func:`settings_fields` reads its
fields by name (what a ``from_settings`` passes to the constructor, after :func:`check_settings`) and
:func:`settings_repr` writes them for ``extra_repr``. :func:`reject_unknown` is the ``TypeError`` of
:meth:`~evidential_prvr.PresetModule.from_preset` for a name the constructor does not take.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "reject_unknown",
    "check_settings",
    "settings_fields",
    "settings_repr",
]

M = TypeVar("M")


def reject_unknown(given: Collection[str], accepted: Collection[str], owner: str) -> None:
    """Raise ``TypeError`` naming every entry of ``given`` that is not in ``accepted``."""
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        raise TypeError(f"{owner}.from_preset() got unexpected override(s) {', '.join(map(repr, unknown))}; "
                        f"accepted: {', '.join(sorted(accepted))}")


def settings_fields(settings: DataclassInstance, schema: DataclassInstance | type[DataclassInstance] | None = None
                    ) -> dict[str, Any]:
    """The field values of a settings dataclass, by name (not copied); with ``schema``, only those of the
    fields of ``schema`` (the part of an extended settings object that a base schema holds)."""
    return {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings if schema is None else schema)}


def check_settings(settings: object, settings_class: type) -> None:
    """Raise ``TypeError`` unless ``settings`` is a ``settings_class`` (the check of every ``from_settings``)."""
    if not isinstance(settings, settings_class):
        name = settings_class.__name__
        article = "an" if name[0] in "AEIOU" else "a"
        raise TypeError(f"settings must be {article} {name}, got {type(settings).__name__}")


def settings_repr(settings: Any) -> str:
    """``name=value, ...`` of every field of a settings dataclass (a module's ``extra_repr``)."""
    return ", ".join(f"{f.name}={getattr(settings, f.name)!r}" for f in dataclasses.fields(settings))
