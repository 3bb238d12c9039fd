"""The state of identification thresholds smoothed across batches (an extension of Holmes Eq. 11): see
:func:`evidential_prvr.functional.ema_thresholds`."""

from __future__ import annotations

import torch
from torch import nn

from evidential_prvr.functional._identification import (
    BranchPair,
    Identification,
    RunningThresholds,
    check_decay,
)

__all__ = ["ThresholdEMA"]


class ThresholdEMA(nn.Module):
    """Running :math:`(\\beta_u, \\beta_p)` of the frame and clip branches, carried from batch to batch.

    The state is three buffers (in ``state_dict``, so that a resumed run continues exactly):
    ``thresholds`` ``[2, 2]`` (rows frame, clip; columns :math:`\\beta_u`, :math:`\\beta_p`), ``seen``
    ``bool [2]`` (whether the branch has observed a correctly matched query) and ``batches`` (the number of
    batches recorded). :meth:`running` gives the state to the identification, :meth:`record` stores the
    thresholds it used; in ``.eval()`` mode :meth:`record` leaves the state as it is (the thresholds are read,
    not learnt, like a batch norm's statistics).

    Parameters
    ----------
    decay : float
        :math:`d \\in [0, 1)` of :func:`~evidential_prvr.functional.ema_thresholds`.

    Examples
    --------
    >>> from evidential_prvr._threshold_ema import ThresholdEMA
    >>> ema = ThresholdEMA(0.9)
    >>> sorted(ema.state_dict())
    ['batches', 'seen', 'thresholds']

    References
    ----------
    Holmes (ICML 2026), Eq. 10-14 (the thresholds of Eq. 11); the smoothing is not in the paper.
    """

    thresholds: torch.Tensor
    seen: torch.Tensor
    batches: torch.Tensor

    def __init__(self, decay: float) -> None:
        super().__init__()
        self.decay = check_decay(decay)
        self.register_buffer("thresholds", torch.zeros(2, 2, dtype=torch.float64))
        self.register_buffer("seen", torch.zeros(2, dtype=torch.bool))
        self.register_buffer("batches", torch.zeros((), dtype=torch.long))

    def extra_repr(self) -> str:
        return f"decay={self.decay}"

    def running(self) -> BranchPair:
        """The frame and clip branches' running thresholds, as the identification takes them."""
        frame, clip = (RunningThresholds(self.thresholds[i], self.seen[i], self.decay) for i in range(2))
        return frame, clip

    @torch.no_grad()
    def record(self, identification: Identification) -> None:
        """Store the thresholds ``identification`` used (the new running values); no-op in ``.eval()``."""
        if not self.training:
            return
        for i, branch in enumerate((identification.frame, identification.clip)):
            used = torch.stack([branch.uncertainty_threshold, branch.consistency_threshold])
            self.thresholds[i].copy_(used.to(self.thresholds.dtype))
            self.seen[i] |= branch.correctly_matched.any().to(self.seen.device)
        self.batches += 1
