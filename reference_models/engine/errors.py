"""The errors a user of a reference model can fix (a file, a flag or a value): :class:`UserError`,
:class:`DataValidationError` for a data file that is missing or holds inconsistent data, and the trainer's
:class:`ResumeMismatchError` and :class:`TrainingDivergedError` (with :class:`NonFiniteOutputError`, which a
task raises for the trainer to report as a divergence).

The command line of every reference model (:func:`reference_models.engine.run_main`) prints the one-line
message of a :class:`UserError` as ``error: <message>`` on standard error and exits with status 2, without a
traceback. Anything else that escapes is a bug and keeps its traceback.
"""

from __future__ import annotations

__all__ = [
    "UserError",
    "DataValidationError",
    "ResumeMismatchError",
    "TrainingDivergedError",
    "NonFiniteOutputError",
    "check_choice",
]


class UserError(Exception):
    """A problem the user can fix; its message is one line naming the file, flag or value at fault."""


class DataValidationError(UserError, ValueError):
    """A data problem of any reference task, with a one-line message ``<path>: <problem>`` naming the file
    (or folder) and what is wrong with it."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self):
        # Rebuilt from (path, problem), so the error survives pickling (e.g. out of a worker process).
        return (type(self), (self.path, self.problem))


class ResumeMismatchError(UserError, ValueError):
    """``last.pt`` was written with another config, seed or data set than the run that tries to resume it."""


class TrainingDivergedError(UserError, ArithmeticError):
    """The loss (or the gradient norm) stopped being finite.

    Attributes
    ----------
    epoch, step : int
        Where, counted from 1.
    lr : float
        The configured learning rate.
    """

    def __init__(self, epoch: int, step: int, lr: float) -> None:
        self.epoch, self.step, self.lr = epoch, step, lr
        super().__init__(
            f"loss became non-finite at epoch {epoch} step {step}; lower the learning rate (optim.lr = {lr:g})"
        )


class NonFiniteOutputError(ArithmeticError):
    """Raised by a :meth:`TrainingTask.training_step` whose objective refused the model's non-finite outputs;
    the trainer reports it as :class:`TrainingDivergedError` at that step."""


def check_choice(value: object, name: str, choices: tuple[object, ...]) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is one of ``choices`` (a setting's options)."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
