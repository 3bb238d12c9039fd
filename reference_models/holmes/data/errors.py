"""The error raised when a PRVR data root is missing files or holds inconsistent data.

:class:`DataValidationError` is task-agnostic and lives in the shared engine
(:class:`reference_models.engine.DataValidationError`); this module keeps its old import path.
"""

from __future__ import annotations

from reference_models.engine.errors import DataValidationError

__all__ = ["DataValidationError"]
