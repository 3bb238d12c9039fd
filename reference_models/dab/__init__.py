"""Text-to-video retrieval with DAB (ECCV 2026) on the shared engine: a CLIP4Clip-style model on precomputed
features, its base (symmetric InfoNCE) and DAB's Gaussian heads, bridge, KL ranking and PAC loss.

Command line: ``python -m reference_models.dab demo|train|evaluate|validate`` (:mod:`reference_models.dab.cli`).
Guide: ``docs/guide/dab.rst``.
"""
