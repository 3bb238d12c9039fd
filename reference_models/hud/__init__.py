"""The composed-video-retrieval reference model: HUD and its CoVR-style base on precomputed video features.

One :class:`~reference_models.hud.task.CVRTask` of the shared engine (:mod:`reference_models.engine`); data in the
CoVR layout (:mod:`reference_models.hud.data`), the embedded CVR benchmark (:mod:`reference_models.hud.benchmark`),
the models (:mod:`reference_models.hud.model`), the WebVid-CoVR metrics (:mod:`reference_models.hud.metrics`) and the
command line (:mod:`reference_models.hud.cli`).
"""
