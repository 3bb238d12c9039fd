"""Hyperparameter presets: the Holmes paper and the official Holmes release.

The modules' ``from_preset`` classmethods read these tables, so every paper/release constant lives in
one place. See :doc:`/guide/inter_video` for what differs between the two and why.
"""

from __future__ import annotations

from typing import Any

from evidential_prvr._checks import check_choice

__all__ = ["PRESET_NAMES", "RELEASE_DATASETS", "HOLMES_RELEASE_TAU", "inter_video_preset"]

PRESET_NAMES = ("paper", "release")
"""Names accepted by ``from_preset``."""

RELEASE_DATASETS = ("tvr", "activitynet", "charades")
"""Datasets the official release ships settings for."""

HOLMES_RELEASE_TAU = {"tvr": 0.05, "activitynet": 0.04, "charades": 0.08}
"""Evidence temperature of the official release per dataset (used with ``tanh_scaling="outside"``)."""

_INTER_VIDEO_PAPER: dict[str, Any] = {
    "tau": 0.1,
    "tanh_scaling": "inside",
    "entropy_median": "candidates",
    "beta": 0.3,
    "gamma": 0.2,
    "fusion": "uncertainty_dominant",
}

_INTER_VIDEO_RELEASE: dict[str, Any] = {
    "tanh_scaling": "outside",
    "entropy_median": "batch",
    "beta": 0.3,
    "gamma": 0.2,
    "fusion": "uncertainty_dominant",
}


def inter_video_preset(name: str, dataset: str | None = None) -> dict[str, Any]:
    """Keyword arguments of the inter-video evidential modules for a named preset.

    Parameters
    ----------
    name : {"paper", "release"}
        ``"paper"``: Holmes §3.2 as printed (τ = 0.1, tanh scaling inside, median over the candidates,
        β = 0.3, γ = 0.2, uncertainty-dominant fusion). ``"release"``: the official code (tanh scaling
        outside with a per-dataset τ, lower median over the whole batch, β = 0.3, γ = 0.2, same fusion).
    dataset : {"tvr", "activitynet", "charades"}, optional
        Required for ``"release"`` (it picks τ); must be omitted for ``"paper"``.

    Returns
    -------
    dict
        A fresh dict with keys ``tau, tanh_scaling, entropy_median, beta, gamma, fusion``.
    """
    check_choice(name, "name", PRESET_NAMES)
    if name == "paper":
        if dataset is not None:
            raise ValueError(f"dataset must be None for the 'paper' preset (one τ for all datasets), got {dataset!r}")
        return dict(_INTER_VIDEO_PAPER)
    if dataset is None:
        raise ValueError(f"dataset must be one of {', '.join(map(repr, RELEASE_DATASETS))} for the 'release' preset, got None")
    check_choice(dataset, "dataset", RELEASE_DATASETS)
    return {"tau": HOLMES_RELEASE_TAU[dataset], **_INTER_VIDEO_RELEASE}
