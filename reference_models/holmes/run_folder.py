"""The output folder of a Holmes training run: moved to the shared engine (:mod:`reference_models.engine.run_folder`).

This module keeps the old import path of every name.
"""

from __future__ import annotations

from reference_models.engine import run_folder as _moved
from reference_models.engine.run_folder import *  # noqa: F403  (the old import path of every public name)

__all__ = list(_moved.__all__)
