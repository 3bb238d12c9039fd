"""Readable differences between two nested dicts: what the engine reports when a resume is refused."""

from __future__ import annotations

from typing import Any

__all__ = ["fingerprint_differences"]


def fingerprint_differences(
    saved: dict[str, Any], current: dict[str, Any], label: str = "", sep: str = " "
) -> list[str]:
    """Human-readable differences between two nested dicts, e.g. ``"train videos 14 vs 12"``.

    Each entry reads ``"<key> <saved> vs <current>"``, nested keys joined by ``sep``; a ``*_sha256`` key
    is reported as ``"<key> differ"``. Used for data fingerprints and configs.

    >>> fingerprint_differences({"optim": {"lr": 0.001}}, {"optim": {"lr": 0.002}}, sep=".")
    ['optim.lr 0.001 vs 0.002']
    """
    changes: list[str] = []
    for key in list(saved) + [k for k in current if k not in saved]:
        name = f"{label}{sep}{key}" if label else str(key)
        old, new = saved.get(key, "(absent)"), current.get(key, "(absent)")
        if isinstance(old, dict) and isinstance(new, dict):
            changes.extend(fingerprint_differences(old, new, name, sep))
        elif old != new:
            if key.endswith("_sha256"):
                changes.append(f"{name.removesuffix('_sha256')} differ")
            else:
                changes.append(f"{name} {old!r} vs {new!r}" if isinstance(old, str) else f"{name} {old} vs {new}")
    return changes
