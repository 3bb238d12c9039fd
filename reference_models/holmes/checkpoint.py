"""Checkpoints of a Holmes training run: moved to the shared engine (:mod:`reference_models.engine.checkpoint`).

This module keeps the old import path of every name.
"""

from __future__ import annotations

from reference_models.engine import checkpoint as _moved
from reference_models.engine.checkpoint import *  # noqa: F403  (the old import path of every public name)

__all__ = list(_moved.__all__)
