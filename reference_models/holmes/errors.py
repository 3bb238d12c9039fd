"""The errors a user of the Holmes reference model can fix: :class:`UserError` and :func:`check_choice`.

Both moved to the shared engine (:mod:`reference_models.engine.errors`); this module keeps their old import path.
"""

from __future__ import annotations

from reference_models.engine.errors import UserError, check_choice

__all__ = ["UserError", "check_choice"]
