"""The two public entry points of a loss whose terms can be returned: the loss, and its details.

A loss with details is written once, as a private implementation whose first parameter (after ``self``
for a module) is ``details: bool``. :func:`loss_entries` (:func:`loss_method` and :func:`details_method` for
a module's ``forward`` and ``details``) makes the two public callables from it:
the same parameters, read by type checkers from the implementation (:class:`typing.ParamSpec`), and each
one return type. So a loss's parameter list is written in one place, and no ``@overload`` repeats it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

import torch

__all__ = ["loss_entries", "loss_method", "details_method"]

P = ParamSpec("P")
S = TypeVar("S")
D = TypeVar("D")


def _public(entry: Callable[..., object], impl: Callable[..., object], name: str, doc: str | None,
            skip: int, returns: type) -> None:
    """Give ``entry`` the name, docstring and signature (``impl``'s without its ``details`` flag) it shows."""
    functools.update_wrapper(entry, impl)
    del entry.__wrapped__  # type: ignore[attr-defined]  # the signature below is the one to show
    entry.__name__ = name
    entry.__qualname__ = impl.__qualname__.rsplit(".", 1)[0] + "." + name if "." in impl.__qualname__ else name
    entry.__doc__ = doc
    signature = inspect.signature(impl)
    parameters = list(signature.parameters.values())
    del parameters[skip]
    entry.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=parameters, return_annotation=returns.__name__)


def _details(out: object, kind: type[D], name: str) -> D:
    if not isinstance(out, kind):  # pragma: no cover - an implementation that ignored its details flag
        raise TypeError(f"{name} returned {type(out).__name__}, expected {kind.__name__}")
    return out


def loss_entries(
    impl: Callable[Concatenate[bool, P], object], kind: type[D], loss: str
) -> tuple[Callable[P, torch.Tensor], Callable[P, D]]:
    """The public loss function ``<loss>`` of ``impl`` (called with ``details=False``; its docstring is
    ``impl``'s) and its details function ``<loss>_details`` (called with ``details=True``, returning a
    ``kind``; its docstring points to the loss function's and shares its examples and references)."""

    def entry(*args: P.args, **kwargs: P.kwargs) -> torch.Tensor:
        return _details(impl(False, *args, **kwargs), torch.Tensor, loss)

    def details(*args: P.args, **kwargs: P.kwargs) -> D:
        return _details(impl(True, *args, **kwargs), kind, name)

    _public(entry, impl, loss, impl.__doc__, 0, torch.Tensor)
    name = f"{loss}_details"
    doc = impl.__doc__ or ""
    shared = doc[doc.find("    Examples\n"):] if "    Examples\n" in doc else ""
    _public(details, impl, name, f"""Every term that :func:`{loss}` computes, and its ``loss``.

    Takes the parameters of :func:`{loss}` and returns a
    :class:`~evidential_prvr.{kind.__name__}`, whose ``loss`` is what :func:`{loss}` returns.

{shared}""", 0, kind)
    return entry, details


def loss_method(impl: Callable[Concatenate[S, bool, P], object], doc: str) -> Callable[Concatenate[S, P], torch.Tensor]:
    """A module's ``forward`` from its implementation method ``impl`` (called with ``details=False``)."""

    def forward(self: S, /, *args: P.args, **kwargs: P.kwargs) -> torch.Tensor:
        return _details(impl(self, False, *args, **kwargs), torch.Tensor, "forward")

    _public(forward, impl, "forward", doc, 1, torch.Tensor)
    return forward


def details_method(impl: Callable[Concatenate[S, bool, P], object], kind: type[D],
                   doc: str) -> Callable[Concatenate[S, P], D]:
    """A module's ``details`` method from its implementation method ``impl`` (called with ``details=True``)."""

    def details(self: S, /, *args: P.args, **kwargs: P.kwargs) -> D:
        return _details(impl(self, True, *args, **kwargs), kind, "details")

    _public(details, impl, "details", doc, 1, kind)
    return details
