"""Module of uncertainty-guided identification (Holmes Eq. 10-14): see :func:`evidential_prvr.functional.identify`."""

from __future__ import annotations

import torch
from torch import nn

from evidential_prvr.functional._identification import Identification, IdentificationSettings, identify
from evidential_prvr.presets import apply_overrides, holmes_settings

__all__ = ["UncertaintyGuidedIdentifier"]


class UncertaintyGuidedIdentifier(nn.Module):
    """Partition queries into precise / polysemous / under-determined (Holmes Eq. 10-14).

    Holds the hyperparameters of :func:`~evidential_prvr.functional.identify`, whose documentation
    gives the rule; ``forward`` is one call of it.

    Parameters
    ----------
    beta : float
        :math:`\\beta \\in [0, 1]` of Eq. 11 (default 0.3).
    tau : float
        Evidence temperature of Eq. 3 (> 0).
    tanh_scaling : {"inside", "outside"}
        Evidence form, see :func:`~evidential_prvr.functional.evidence`.
    entropy_median : {"candidates", "batch"}
        Median rule of Eq. 12: paper or release.
    matched : {"any_positive", "argmax"}
        The correctly matched set of Eq. 11: paper or release (ties to the first index).
    fusion : {"uncertainty_dominant", "confidence_dominant", "frame", "clip"}
        Partition fusion rule (Eq. 14, Table 3 rows 5-7).
    validate_args : bool, optional
        Value checks of the inputs (host synchronisations); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr import UncertaintyGuidedIdentifier
    >>> identifier = UncertaintyGuidedIdentifier.from_preset("release", dataset="tvr")
    >>> sim = torch.tensor([[0.9, 0.8, 0.2], [0.9, 0.7, 0.8], [0.2, 0.6, 0.3]])
    >>> identifier(sim, sim, torch.tensor([0, 1, 2])).query_type  # precise, polysemous, under-determined
    tensor([0, 1, 2])

    References
    ----------
    Holmes (ICML 2026), §3.2, Eq. 10-14.
    """

    def __init__(
        self,
        beta: float = 0.3,
        tau: float = 0.1,
        tanh_scaling: str = "inside",
        entropy_median: str = "candidates",
        matched: str = "any_positive",
        fusion: str = "uncertainty_dominant",
        validate_args: bool | None = None,
    ) -> None:
        super().__init__()
        IdentificationSettings(beta, tau, tanh_scaling, entropy_median, matched, fusion)  # validates
        self.beta = float(beta)
        self.tau = float(tau)
        self.tanh_scaling = tanh_scaling
        self.entropy_median = entropy_median
        self.matched = matched
        self.fusion = fusion
        self.validate_args = validate_args

    @classmethod
    def from_preset(cls, preset: str, dataset: str | None = None, **overrides: object) -> UncertaintyGuidedIdentifier:
        """The paper's or the release's identification settings (:func:`evidential_prvr.presets.holmes_settings`)."""
        inter = holmes_settings(preset, dataset).inter
        kwargs = dict(beta=inter.beta, tau=inter.tau, tanh_scaling=inter.tanh_scaling,
                      entropy_median=inter.entropy_median, matched=inter.matched, fusion=inter.fusion,
                      validate_args=None)
        return cls(**apply_overrides(kwargs, overrides, cls.__name__))

    def settings(self) -> dict[str, object]:
        """The keyword arguments of :func:`~evidential_prvr.functional.identify` this module passes."""
        return dict(beta=self.beta, tau=self.tau, tanh_scaling=self.tanh_scaling,
                    entropy_median=self.entropy_median, matched=self.matched, fusion=self.fusion)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.settings().items())

    def forward(self, frame_sim: torch.Tensor, clip_sim: torch.Tensor, query_video: torch.Tensor) -> Identification:
        """Identify the query types of a batch: ``frame_sim``, ``clip_sim`` ``[Q, V]`` and the positives
        ``query_video`` (``LongTensor [Q]`` or ``{0, 1}`` matrix ``[Q, V]``)."""
        return identify(frame_sim, clip_sim, query_video, **self.settings(), validate_args=self.validate_args)
