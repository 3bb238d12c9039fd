"""Module of uncertainty-guided identification (Holmes Eq. 10-14): see :func:`evidential_prvr.functional.identify`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from evidential_prvr._distributed import batch_rows, shared_gathers
from evidential_prvr._docs import VALUE_CHECKS, insert_docs
from evidential_prvr._module_bases import _SettingsModule
from evidential_prvr._overrides import (
    module_from_settings,
    settings_constructor,
    settings_fields,
    settings_of,
    settings_properties,
)
from evidential_prvr._threshold_ema import ThresholdEMA
from evidential_prvr.choices import DatasetName, EntropyMedian, Fusion, MatchRule, Preset, TanhScaling
from evidential_prvr.functional._identification import (
    IDENTIFICATION_PARAMETERS,
    Identification,
    IdentificationSettings,
    run_identify,
)
from evidential_prvr.presets import module_settings


class _IdentificationAttributes:
    """The fields of ``IdentificationSettings`` as a module's attributes, declared for type checkers
    (:func:`~evidential_prvr._overrides.settings_properties` adds them at run time)."""

    beta: float
    tau: float
    tanh_scaling: TanhScaling
    entropy_median: EntropyMedian
    matched: MatchRule
    fusion: Fusion


@settings_properties(IdentificationSettings)
@insert_docs(identification=IDENTIFICATION_PARAMETERS, value_checks=VALUE_CHECKS)
class UncertaintyGuidedIdentifier(_SettingsModule[IdentificationSettings], _IdentificationAttributes):
    """Partition queries into precise / polysemous / under-determined (Holmes Eq. 10-14).

    Holds the hyperparameters of :func:`~evidential_prvr.functional.identify`, whose documentation
    gives the rule; ``forward`` is one call of it.

    The hyperparameters are keyword-only, the fields of its :meth:`settings` (also attributes): the
    keyword arguments of :func:`~evidential_prvr.functional.identify` as one object. :meth:`from_preset`
    takes them from the preset's L_inter settings (:class:`EvidentialRetrievalLoss`).

    Parameters
    ----------
    {identification}
    {value_checks}
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

    @dataclass(frozen=True, kw_only=True)
    class _Arguments(IdentificationSettings):
        """The constructor's arguments: the identification settings and its options."""

        validate_args: bool | None = None
        distributed: bool = False
        threshold_decay: float | None = None

    @settings_constructor(_Arguments)
    def __init__(self, arguments: _Arguments) -> None:
        super().__init__(settings_of(arguments, IdentificationSettings), arguments.validate_args)
        self.distributed = bool(arguments.distributed)
        decay = arguments.threshold_decay
        self.threshold_ema = None if decay is None else ThresholdEMA(decay)

    @property
    def threshold_decay(self) -> float | None:
        """The decay of the smoothed thresholds, ``None`` for the in-batch rule of Eq. 11."""
        return None if self.threshold_ema is None else self.threshold_ema.decay

    @classmethod
    def from_settings(cls, settings: IdentificationSettings, *, validate_args: bool | None = None,
                      distributed: bool = False, threshold_decay: float | None = None) -> UncertaintyGuidedIdentifier:
        """The identifier of an ``IdentificationSettings`` (or of a registry ``inter`` section, which
        extends it; only the identification fields are kept)."""
        return module_from_settings(cls, IdentificationSettings, settings, validate_args=validate_args,
                                    distributed=distributed, threshold_decay=threshold_decay)

    @classmethod
    def _preset_arguments(cls, preset: Preset, dataset: DatasetName | None) -> dict[str, Any]:
        return settings_fields(module_settings(preset, dataset).inter, IdentificationSettings)

    def forward(self, frame_sim: torch.Tensor, clip_sim: torch.Tensor, query_video: torch.Tensor) -> Identification:
        """Identify the query types of a batch: ``frame_sim``, ``clip_sim`` ``[Q, V]`` and the positives
        ``query_video`` (``LongTensor [Q]`` or ``{0, 1}`` matrix ``[Q, V]``)."""
        with shared_gathers():
            frame_sim, clip_sim, query_video = batch_rows(self.distributed, type(self).__name__, frame_sim, clip_sim,
                                                          query_video)
            ema = self.threshold_ema
            result = run_identify(frame_sim, clip_sim, query_video, self._settings, self.validate_args,
                                  None if ema is None else ema.running())
            if ema is not None:
                ema.record(result)
            return result

    if TYPE_CHECKING:  # nn.Module.__call__ is untyped: calling the module is calling forward
        __call__ = forward
