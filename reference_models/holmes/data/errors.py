"""The error raised when a PRVR data root is missing files or holds inconsistent data."""

from __future__ import annotations

from reference_models.holmes.errors import UserError

__all__ = ["DataValidationError"]


class DataValidationError(UserError, ValueError):
    """A data-root problem, with a one-line message naming the file and what is wrong with it."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self):
        # Rebuilt from (path, problem), so the error survives pickling (e.g. out of a worker process).
        return (type(self), (self.path, self.problem))
