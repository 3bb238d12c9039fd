"""The base class of the errors a user of the reference model can fix (a file, a flag or a value).

The command line (:mod:`reference_models.holmes.cli`) prints the one-line message of a :class:`UserError`
as ``error: <message>`` on standard error and exits with status 2, without a traceback. Anything else
that escapes is a bug and keeps its traceback.
"""

from __future__ import annotations

__all__ = ["UserError", "check_choice"]


class UserError(Exception):
    """A problem the user can fix; its message is one line naming the file, flag or value at fault."""


def check_choice(value: object, name: str, choices: tuple[object, ...]) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is one of ``choices`` (a setting's options)."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
