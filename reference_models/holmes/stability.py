"""How stable the identification of the training queries is, epoch by epoch (the in-batch thresholds of
Holmes Eq. 11 or their smoothed form, ``ablation.threshold_decay``).

:class:`ThresholdStability` watches every training batch's identification and keeps, per epoch:

* ``type_changed``: the share of the training queries whose fused type (precise / polysemous /
  under-determined, Eq. 14) differs from the one they had at their previous visit (the previous epoch; a
  query's first visit is not counted);
* ``beta_u_sd`` and ``beta_p_sd`` (per branch, ``frame`` and ``clip``): the standard deviation over the
  epoch's batches of the thresholds β_u and β_p that partitioned them, and their means ``beta_u_mean``,
  ``beta_p_mean``.

It is recorded when asked for (``HolmesTask(..., stability=True)``; the comparison runner does, and writes
:meth:`ThresholdStability.summary` into each Holmes run's ``diagnostics.json``). Its state (the last type of
every query and the epochs' figures) is the module's extra state, so it is saved in ``last.pt`` with the
objective and a resumed run continues the record.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from evidential_prvr import Identification

__all__ = ["ThresholdStability"]

_BRANCHES = ("frame", "clip")


def _mean_sd(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, math.nan
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


class ThresholdStability(nn.Module):
    """Per-epoch stability of the training queries' identification (see the module documentation).

    Call :meth:`start_epoch` before each epoch and :meth:`observe` with each training batch's caption ids
    and identification (in ``.train()`` mode; ``.eval()`` ignores the batches).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import identify
    >>> monitor = ThresholdStability()
    >>> sim = torch.tensor([[0.9, 0.1, 0.0], [0.5, 0.5, 0.4], [0.0, 0.1, 0.05]])
    >>> for epoch in range(2):
    ...     monitor.start_epoch(epoch)
    ...     monitor.observe(["a", "b", "c"], identify(sim, sim, torch.tensor([0, 1, 2])))
    >>> monitor.summary()["epoch02"]["type_changed"]
    0.0
    """

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, int] = {}
        self._epochs: dict[int, dict[str, Any]] = {}
        self._epoch = 0

    def start_epoch(self, epoch: int) -> None:
        """Record the following batches under ``epoch`` (0-based); a repeated epoch starts afresh."""
        self._epoch = int(epoch)
        self._epochs[self._epoch] = {"changed": 0, "compared": 0,
                                     "thresholds": {f"{name}_{b}": [] for name in ("beta_u", "beta_p")
                                                    for b in _BRANCHES}}

    @torch.no_grad()
    def observe(self, caption_ids: list[str], identification: Identification) -> None:
        """Add one batch: its captions' ids (in the order of the identification's queries) and identification."""
        if not self.training:
            return
        if self._epoch not in self._epochs:
            self.start_epoch(self._epoch)
        record = self._epochs[self._epoch]
        types = identification.query_type.tolist()
        if len(types) != len(caption_ids):
            raise ValueError(f"caption_ids has {len(caption_ids)} ids but the identification {len(types)} queries")
        for cid, kind in zip(caption_ids, types):
            previous = self._last.get(cid)
            if previous is not None:
                record["compared"] += 1
                record["changed"] += int(previous != kind)
            self._last[cid] = int(kind)
        for b, branch in zip(_BRANCHES, (identification.frame, identification.clip)):
            record["thresholds"][f"beta_u_{b}"].append(float(branch.uncertainty_threshold))
            record["thresholds"][f"beta_p_{b}"].append(float(branch.consistency_threshold))

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per epoch (``"epoch01"``, ... 1-based), ``type_changed`` (NaN in the first epoch) and, per
        threshold and branch, the mean and s.d. over the epoch's batches."""
        out: dict[str, dict[str, Any]] = {}
        for epoch in sorted(self._epochs):
            record = self._epochs[epoch]
            if not any(record["thresholds"].values()):
                continue
            entry: dict[str, Any] = {"type_changed": record["changed"] / record["compared"]
                                     if record["compared"] else math.nan}
            for name in ("beta_u", "beta_p"):
                stats = {b: _mean_sd(record["thresholds"][f"{name}_{b}"]) for b in _BRANCHES}
                entry[f"{name}_mean"] = {b: stats[b][0] for b in _BRANCHES}
                entry[f"{name}_sd"] = {b: stats[b][1] for b in _BRANCHES}
            out[f"epoch{epoch + 1:02d}"] = entry
        return out

    def get_extra_state(self) -> dict[str, Any]:
        return {"last": dict(self._last), "epochs": {str(k): v for k, v in self._epochs.items()},
                "epoch": self._epoch}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self._last = {str(k): int(v) for k, v in state["last"].items()}
        self._epochs = {int(k): v for k, v in state["epochs"].items()}
        self._epoch = int(state["epoch"])

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, local_metadata: dict[str, Any],
                              strict: bool, missing_keys: list[str], unexpected_keys: list[str],
                              error_msgs: list[str]) -> None:
        # a checkpoint written before this record existed resumes with an empty record
        key = prefix + "_extra_state"
        absent = key not in state_dict
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        if absent and key in missing_keys:
            missing_keys.remove(key)
