"""How a module holds its settings dataclass, and the one override rule of every ``from_preset``.

Each operation has one frozen, keyword-only settings dataclass (its hyperparameters, defaults and
checks). A module keeps one instance of it; :func:`settings_properties` exposes its fields as
attributes (assigning one validates the new value by rebuilding the settings), and
:func:`settings_constructor` makes its constructor from a dataclass of its arguments (the settings' fields
and the module's own options), so that the fields are written once. Every ``from_preset``
takes the constructor's arguments (typed from the constructor): :func:`preset_module` puts them in place of
the preset's and refuses a name the constructor does not take with a ``TypeError``, as
:func:`resolve_overrides` does for the ``from_preset`` of a module without a settings dataclass.
:func:`module_from_settings` builds a module from a settings dataclass (its ``from_settings``).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "reject_unknown",
    "resolve_overrides",
    "preset_module",
    "check_settings",
    "module_from_settings",
    "settings_fields",
    "settings_of",
    "settings_constructor",
    "settings_properties",
    "settings_repr",
]

S = TypeVar("S", bound="DataclassInstance")  # a settings dataclass
C = TypeVar("C", bound=type)
M = TypeVar("M")
A = TypeVar("A")  # a module's arguments dataclass
P = ParamSpec("P")


def reject_unknown(given: Collection[str], accepted: Collection[str], owner: str) -> None:
    """Raise ``TypeError`` naming every entry of ``given`` that is not in ``accepted``."""
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        raise TypeError(f"{owner}.from_preset() got unexpected override(s) {', '.join(map(repr, unknown))}; "
                        f"accepted: {', '.join(sorted(accepted))}")


def resolve_overrides(
    defaults: Mapping[str, Any], overrides: Mapping[str, Any], owner: str, extras: Collection[str] = ()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``defaults`` updated with the overrides that name one of them, and the overrides named in ``extras``.

    Any other name raises ``TypeError`` (a misspelt override fails loudly instead of being ignored).

    Examples
    --------
    >>> from evidential_prvr._overrides import resolve_overrides
    >>> resolve_overrides({"tau": 0.1, "beta": 0.3}, {"tau": 0.05}, "EvidentialRetrievalLoss")
    ({'tau': 0.05, 'beta': 0.3}, {})
    """
    reject_unknown(overrides, [*defaults, *extras], owner)
    values = {**defaults, **{k: v for k, v in overrides.items() if k in defaults}}
    return values, {k: v for k, v in overrides.items() if k not in defaults}


def settings_fields(settings: DataclassInstance, schema: DataclassInstance | type[DataclassInstance] | None = None
                    ) -> dict[str, Any]:
    """The field values of a settings dataclass, by name (not copied); with ``schema``, only those of the
    fields of ``schema`` (the part of an extended settings object that a base schema holds)."""
    return {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings if schema is None else schema)}


def settings_of(values: DataclassInstance, schema: type[S]) -> S:
    """A ``schema`` instance of the fields of ``values`` that ``schema`` holds (checked again): the settings
    part of a module's arguments, or the base part of an extended settings object."""
    return schema(**settings_fields(values, schema))


def settings_constructor(
    arguments: Callable[P, A]
) -> Callable[[Callable[[M, A], None]], Callable[Concatenate[M, P], None]]:
    """Decorator of a module's ``__init__(self, arguments)``: the constructor takes the parameters of the
    dataclass ``arguments`` (a settings dataclass extended with the module's own options), builds it (its
    defaults and checks) and passes it on. Type checkers and :func:`inspect.signature` see those parameters."""
    signature = inspect.signature(arguments)

    def decorate(init: Callable[[M, A], None]) -> Callable[Concatenate[M, P], None]:
        def __init__(self: M, /, *args: P.args, **kwargs: P.kwargs) -> None:
            try:
                signature.bind(*args, **kwargs)
            except TypeError as error:  # named after the module, not after the arguments dataclass
                raise TypeError(f"{type(self).__name__}() {error}") from None
            init(self, arguments(*args, **kwargs))

        self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
        __init__.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[self_parameter, *signature.parameters.values()], return_annotation="None")
        __init__.__qualname__, __init__.__doc__ = init.__qualname__, init.__doc__
        return __init__

    return decorate


def preset_module(
    cls: Callable[..., M], arguments: Mapping[str, Any], args: tuple[Any, ...], overrides: Mapping[str, Any]
) -> M:
    """``cls`` built from a preset's constructor ``arguments`` with a ``from_preset`` call's ``args`` (named
    after the constructor's positional parameters) and ``overrides`` in their place; a name the constructor
    does not take, or one given twice, raises ``TypeError``."""
    name = cast(type, cls).__name__
    signature = inspect.signature(cls)
    named = signature.bind_partial(*args).arguments if args else {}
    twice = sorted(named.keys() & overrides.keys())
    if twice:
        raise TypeError(f"{name}.from_preset() got multiple values for {', '.join(twice)}")
    given = {**named, **overrides}
    reject_unknown(given, signature.parameters, name)
    return cls(**{**arguments, **given})


def check_settings(settings: object, settings_class: type) -> None:
    """Raise ``TypeError`` unless ``settings`` is a ``settings_class`` (the check of every ``from_settings``)."""
    if not isinstance(settings, settings_class):
        name = settings_class.__name__
        article = "an" if name[0] in "AEIOU" else "a"
        raise TypeError(f"settings must be {article} {name}, got {type(settings).__name__}")


def module_from_settings(cls: Callable[..., M], settings_class: type, settings: Any, **keywords: Any) -> M:
    """``cls`` built from the fields of ``settings_class`` in ``settings`` (checked to be one, or an extension
    of it) and ``keywords``: the body of a module's ``from_settings`` (its constructor takes every field as a
    keyword)."""
    check_settings(settings, settings_class)
    return cls(**settings_fields(settings, settings_class), **keywords)


def _field_property(name: str) -> property:
    def get(self: Any) -> Any:
        return getattr(self._settings, name)

    def set_(self: Any, value: Any) -> None:
        self._settings = dataclasses.replace(self._settings, **{name: value})

    return property(get, set_, doc=f"The ``{name}`` of :meth:`settings` (assigning it re-validates the settings).")


def settings_properties(settings_class: type) -> Any:
    """Class decorator: one attribute per field of ``settings_class``, read from (and written to) the
    instance's ``_settings``."""

    def decorate(cls: C) -> C:
        for field in dataclasses.fields(settings_class):
            if not hasattr(cls, field.name):
                setattr(cls, field.name, _field_property(field.name))
        return cls

    return decorate


def settings_repr(settings: Any) -> str:
    """``name=value, ...`` of every field of a settings dataclass (a module's ``extra_repr``)."""
    return ", ".join(f"{f.name}={getattr(settings, f.name)!r}" for f in dataclasses.fields(settings))
