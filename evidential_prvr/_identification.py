"""Module of uncertainty-guided identification (Holmes Eq. 10-14): see :func:`evidential_prvr.functional.identify`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from evidential_prvr._loss_gathers import batch_rows, shared_gathers
from evidential_prvr._module_bases import PresetModule
from evidential_prvr._settings import check_identification_options
from evidential_prvr.choices import DatasetName, EntropyMedian, Fusion, MatchRule, Preset, TanhScaling
from evidential_prvr.functional._identification import (
    BranchPair,
    Identification,
    RunningThresholds,
    check_decay,
    identify,
)
from evidential_prvr.presets import module_settings


class UncertaintyGuidedIdentifier(PresetModule):
    """Partition queries into precise / polysemous / under-determined (Holmes Eq. 10-14).

    Holds the keyword arguments of :func:`~evidential_prvr.functional.identify`, whose documentation
    gives the rule, as plain attributes (keyword-only, checked here); ``forward`` is one call of it.
    :meth:`from_preset` takes them from the preset's L_inter settings (:class:`EvidentialRetrievalLoss`).

    Parameters
    ----------
    beta : float
        :math:`\\beta \\in [0, 1]` of Eq. 11 (default 0.3).
    tau : float
        Evidence temperature of Eq. 3 (> 0).
    tanh_scaling : {"inside", "outside"}
        Evidence form, see :func:`~evidential_prvr.functional.evidence`.
    entropy_median : {"candidates", "batch"}
        Median rule of Eq. 12: over the precise candidates (paper) or the whole batch (release).
    matched : {"any_positive", "argmax"}
        The correctly matched set of Eq. 11, see :func:`~evidential_prvr.functional.correctly_matched`
        (paper: ``"any_positive"``; release: ``"argmax"``, ties to the first index).
    fusion : {"uncertainty_dominant", "confidence_dominant", "frame", "clip"}
        Partition fusion rule (Eq. 14, Table 3 rows 5-7).
    validate_args : bool, optional
        Value checks (host synchronisations); ``None`` follows :func:`evidential_prvr.set_default_validate_args`.
    distributed : bool
        Multi-process training (:doc:`/guide/distributed`): each rank passes its queries' scores
        ``[Q_r, V_global]`` and global video indices and receives the identification of the global batch
        (the Eq. 11-12 medians over every rank's queries; every rank gets the same ``[Q_global]`` result).
    threshold_decay : float, optional
        ``None`` (default, the paper and the release): the thresholds :math:`\\beta_u, \\beta_p` of Eq. 11
        come from each batch alone. A decay :math:`d \\in [0, 1)`: they are smoothed across batches by an
        exponential moving average (:func:`~evidential_prvr.functional.ema_thresholds`, an extension beyond
        the paper), whose state is the submodule ``threshold_ema`` (buffers in ``state_dict``); each call in
        ``.train()`` mode updates it, ``.eval()`` reads it. With ``distributed=True`` the in-batch thresholds
        are those of the global batch, so every rank updates the same state the same way.

    Examples
    --------
    >>> import torch
    >>> import evidential_prvr as ep
    >>> from evidential_prvr import UncertaintyGuidedIdentifier
    >>> identifier = UncertaintyGuidedIdentifier.from_preset("release", dataset="tvr")
    >>> identifier.tau, identifier.matched  # the release's TVR settings, as attributes
    (0.05, 'argmax')
    >>> sim = torch.tensor([[0.9, 0.8, 0.2], [0.9, 0.7, 0.8], [0.2, 0.6, 0.3]])
    >>> result = identifier(sim, sim, torch.eye(3))  # the positives may be a {0, 1} matrix
    >>> [ep.QueryType(t).name for t in result.query_type.tolist()]
    ['PRECISE', 'POLYSEMOUS', 'UNDERDETERMINED']

    References
    ----------
    Holmes (ICML 2026), §3.2 (the identification module), Eq. 10-14.
    """

    def __init__(
        self,
        *,
        beta: float = 0.3,
        tau: float = 0.1,
        tanh_scaling: TanhScaling = "inside",
        entropy_median: EntropyMedian = "candidates",
        matched: MatchRule = "any_positive",
        fusion: Fusion = "uncertainty_dominant",
        validate_args: bool | None = None,
        distributed: bool = False,
        threshold_decay: float | None = None,
    ) -> None:
        super().__init__()
        check_identification_options(beta=beta, tau=tau, tanh_scaling=tanh_scaling, entropy_median=entropy_median,
                                     matched=matched, fusion=fusion)
        self.beta = beta
        self.tau = tau
        self.tanh_scaling = tanh_scaling
        self.entropy_median = entropy_median
        self.matched = matched
        self.fusion = fusion
        self.validate_args = validate_args
        self.distributed = bool(distributed)
        self.threshold_ema = None if threshold_decay is None else ThresholdEMA(threshold_decay)

    @property
    def threshold_decay(self) -> float | None:
        """The decay of the smoothed thresholds, ``None`` for the in-batch rule of Eq. 11."""
        return None if self.threshold_ema is None else self.threshold_ema.decay

    @classmethod
    def _preset_arguments(cls, preset: Preset, dataset: DatasetName | None) -> dict[str, Any]:
        inter = module_settings(preset, dataset).inter
        return {"beta": inter.beta, "tau": inter.tau, "tanh_scaling": inter.tanh_scaling,
                "entropy_median": inter.entropy_median, "matched": inter.matched, "fusion": inter.fusion}

    def extra_repr(self) -> str:
        return (f"beta={self.beta}, tau={self.tau}, tanh_scaling={self.tanh_scaling!r}, "
                f"entropy_median={self.entropy_median!r}, matched={self.matched!r}, fusion={self.fusion!r}")

    def forward(self, frame_sim: torch.Tensor, clip_sim: torch.Tensor, query_video: torch.Tensor) -> Identification:
        """Identify the query types of a batch: ``frame_sim``, ``clip_sim`` ``[Q, V]`` and the positives
        ``query_video`` (``LongTensor [Q]`` or ``{0, 1}`` matrix ``[Q, V]``)."""
        with shared_gathers():
            frame_sim, clip_sim, query_video = batch_rows(self.distributed, type(self).__name__, frame_sim, clip_sim,
                                                          query_video)
            ema = self.threshold_ema
            result = identify(frame_sim, clip_sim, query_video, beta=self.beta, tau=self.tau,
                              tanh_scaling=self.tanh_scaling, entropy_median=self.entropy_median,
                              matched=self.matched, fusion=self.fusion, validate_args=self.validate_args,
                              running_thresholds=None if ema is None else ema.running())
            if ema is not None:
                ema.record(result)
            return result

    if TYPE_CHECKING:  # nn.Module.__call__ is untyped: calling the module is calling forward
        __call__ = forward


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
    >>> from evidential_prvr._identification import ThresholdEMA
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
