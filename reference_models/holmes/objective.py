"""The training objective of the reference model: the library's :class:`~evidential_prvr.HolmesCriterion`
configured by a :class:`~reference_models.holmes.config.HolmesConfig` (and the DAB variant).

.. math::

    L_{agg} = L_{base} + w_{inter} L_{inter} + w_{intra} L_{intra}  \\qquad \\text{(Holmes Eq. 21)}

with the two-stage schedule of Holmes §3.4 (the criterion's :meth:`~evidential_prvr.HolmesCriterion.set_epoch`).
The ablation switches of :class:`~reference_models.holmes.config.AblationSettings` choose the
criterion's parts:

* ``method="baseline"``: L_base only (the MIL baseline);
* ``method="dab"``: L_base with its InfoNCE part replaced by DAB's PAC loss on Gaussian embeddings
  (:class:`~reference_models.holmes.dab_variant.DABObjective`), no Holmes terms;
* ``inter_branches`` / ``aggregation``: the ``terms`` of L_inter (Table 3 rows 1-3);
* ``fusion`` / ``calibration``: the partition fusion and calibration of L_inter (rows 5-9);
* ``intra`` / ``assignment``: L_intra on or off, and its soft label (rows 10-12);
* ``threshold_decay``: the identification thresholds smoothed across batches (beyond the paper).

When the model encodes the queries a second time (``ModelOutput.query_aux``, the release's behaviour), that
encoding feeds L_div and L_intra; the first one gives the scores of the triplet, InfoNCE and L_inter terms.

Everything comes from the library's public API: each part is the library module built with the config's section
as its keyword arguments (the registry's sections are the modules' keyword arguments by name); this module applies
only the ablation switches.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from evidential_prvr import (
    BaseRetrievalLoss,
    EvidentialRetrievalLoss,
    FlexibleOT,
    HolmesCriterion,
    HolmesLossDetails,
    IntraVideoEvidentialLoss,
    UncertaintyGuidedIdentifier,
)
from reference_models.holmes.config import HolmesConfig
from reference_models.holmes.dab_variant import DABObjective
from reference_models.holmes.stability import ThresholdStability

__all__ = ["ObjectiveTerms", "HolmesObjective", "DistributedHolmesObjective", "build_criterion"]


@dataclass
class ObjectiveTerms:
    """One batch's loss and its parts (unweighted parts; ``total`` is what is back-propagated).

    Attributes
    ----------
    total : torch.Tensor
        The weighted sum that is minimised.
    base : torch.Tensor
        L_base (its own weights applied; without InfoNCE for the DAB variant).
    inter : torch.Tensor
        L_inter as configured by the ablation (0 when off).
    intra : torch.Tensor
        L_intra (0 when off or in the warm-up stage).
    pac : torch.Tensor
        DAB's PAC loss (0 unless ``method="dab"``).
    stage : int
        1 during the warm-up stage, 2 afterwards.
    query_type : torch.Tensor or None
        Fused query types of the batch's queries when the identification ran (detached), else ``None``.
    """

    total: torch.Tensor
    base: torch.Tensor
    inter: torch.Tensor
    intra: torch.Tensor
    pac: torch.Tensor
    stage: int
    query_type: torch.Tensor | None = None

    def scalars(self) -> dict[str, torch.Tensor]:
        """The loss tensors by name (detached), for logging without a host synchronisation."""
        return {k: getattr(self, k).detach() for k in ("total", "base", "inter", "intra", "pac")}


def _inter_loss(config: HolmesConfig, distributed: bool = False, **changes: Any) -> EvidentialRetrievalLoss:
    """L_inter of ``config``'s ``inter`` section with the ablation's fusion rule and ``changes``."""
    inter = {**dataclasses.asdict(config.inter), "fusion": config.ablation.fusion, **changes}
    return EvidentialRetrievalLoss(**inter, distributed=distributed)


def build_criterion(config: HolmesConfig, distributed: bool = False) -> HolmesCriterion:
    """The library's :class:`~evidential_prvr.HolmesCriterion` for ``config``: its parts built from the
    config's ``base``, ``weights``, ``inter``, ``transport`` and ``intra`` sections (the registry's
    dataclasses), with the ablation switches applied and the ``schedule`` section's switch epochs
    (``distributed``: the criterion and its parts see the global batch, :doc:`/guide/distributed`)."""
    weights, ablation = config.weights, config.ablation
    if ablation.method == "dab":  # DAB's PAC loss replaces InfoNCE
        weights = dataclasses.replace(weights, nce_frame=0.0, nce_clip=0.0)
    base = BaseRetrievalLoss(**dataclasses.asdict(config.base), frame_nce_weight=weights.nce_frame,
                             clip_nce_weight=weights.nce_clip, div_weight=weights.div, distributed=distributed)
    inter = intra = None
    if ablation.method == "holmes":
        terms = {"both": ("frame", "clip"), "frame": ("frame",), "clip": ("clip",)}[ablation.inter_branches]
        inter = _inter_loss(
            config,
            distributed,
            calibrate=ablation.calibration != "none",
            calibration_set="initial" if ablation.calibration == "initial_polysemous" else "refined",
            terms=terms + (("fused",) if ablation.aggregation else ()),
        )
        if ablation.intra:
            intra = IntraVideoEvidentialLoss(
                FlexibleOT(**dataclasses.asdict(config.transport)),
                **{**dataclasses.asdict(config.intra), "assignment": ablation.assignment}, distributed=distributed)
    return HolmesCriterion(base, inter, intra, inter_weight=weights.inter, intra_weight=weights.intra,
                           warmup_stage_epochs=config.schedule.warmup_stage_epochs,
                           hard_negative_epoch=config.schedule.hard_negative_epoch, distributed=distributed,
                           threshold_decay=ablation.threshold_decay if inter is not None else None)


class HolmesObjective(nn.Module):
    """Holmes objective (Eq. 21) of a :class:`HolmesConfig`: the criterion plus the DAB heads when asked for.

    Call :meth:`set_epoch` before each epoch; :meth:`forward` takes the model's output and the batch.

    Parameters
    ----------
    config : HolmesConfig
        Loss weights, schedule and ablation switches.
    hidden_size : int
        Embedding size of the model (the DAB heads' input size).
    distributed : bool
        The criterion sees the global batch of a multi-process run (:doc:`/guide/distributed`); see
        :class:`DistributedHolmesObjective`, which also gives the ranks the same random negatives.
    stability : bool
        Record the per-epoch stability of the training queries' identification in ``self.stability``
        (:class:`~reference_models.holmes.stability.ThresholdStability`; one process, a method with L_inter).
    """

    def __init__(self, config: HolmesConfig, hidden_size: int, distributed: bool = False,
                 stability: bool = False) -> None:
        super().__init__()
        self.config = config
        self.method = config.ablation.method
        if distributed and self.method == "dab":
            raise ValueError("method='dab' cannot train over several processes: its PAC loss has no distributed "
                             "form; use method='holmes' or 'baseline'")
        self.distributed = bool(distributed)
        self.criterion = build_criterion(config, self.distributed)
        self.dab: DABObjective | None = DABObjective(hidden_size, config.dab) if self.method == "dab" else None
        # one process only: a rank's captions are a slice of the global batch
        self.stability: ThresholdStability | None = (
            ThresholdStability() if stability and self.criterion.inter is not None and not self.distributed else None)

    def negatives_generator(self, device: torch.device) -> torch.Generator | None:
        """The random source of the triplet negatives on ``device``: ``None`` (torch's global generator)."""
        return None

    def identifier(self) -> UncertaintyGuidedIdentifier:
        """The query identifier of L_inter (built from the same settings when L_inter is off).

        Used at evaluation time to identify query types on validation/test similarities.
        """
        if self.criterion.inter is not None:
            return self.criterion.inter.identifier()
        return _inter_loss(self.config).identifier()

    def set_epoch(self, epoch: int) -> None:
        """Select the stage and the triplet negatives for ``epoch`` (0-based)."""
        self.criterion.set_epoch(int(epoch))
        if self.stability is not None:
            self.stability.start_epoch(int(epoch))

    @property
    def stage(self) -> int:
        """1 in the warm-up stage (no calibration, no L_intra), 2 afterwards."""
        return self.criterion.stage

    @property
    def hard_negatives(self) -> bool:
        """Whether the triplet losses of the current epoch draw hard negatives."""
        return self.criterion.hard_negatives

    def forward(self, output, batch, max_queries: int | None = None) -> ObjectiveTerms:
        """Loss of one training batch.

        Parameters
        ----------
        output : reference_models.holmes.model.ModelOutput
            The model's output on ``batch`` (queries × the batch's videos).
        batch : reference_models.holmes.data.TrainBatch
            The batch (``query_video`` maps each query to its video column).
        max_queries : int, optional
            Most captions of one video in the batch, computed on the host before the batch moved to
            the device (saves the intra-video batching a device synchronisation).
        """
        intra = self.criterion.intra is not None
        details = self.criterion.details(
            output.frame_sim, output.clip_sim, batch.query_video, query_emb=_second_encoding(output),
            clip_emb=output.videos.clip if intra else None, frame_logits=output.frame_logits,
            clip_logits=output.clip_logits, clip_mask=batch.clip_mask if intra else None, max_queries=max_queries,
            generator=self.negatives_generator(output.frame_sim.device),
        )
        assert isinstance(details, HolmesLossDetails)
        pac = details.loss.new_zeros(())
        if self.dab is not None:
            pac = self.dab(output, batch)
        query_type = None
        if details.inter_details is not None and details.inter_details.identification is not None:
            query_type = details.inter_details.identification.query_type
            if self.stability is not None:
                self.stability.observe(batch.caption_ids, details.inter_details.identification)
        total = details.loss + self.config.dab.weight * pac
        return ObjectiveTerms(total=total, base=details.base, inter=details.inter, intra=details.intra, pac=pac,
                              stage=details.stage, query_type=query_type)


class DistributedHolmesObjective(HolmesObjective):
    """:class:`HolmesObjective` of one rank of a multi-process run: the criterion sees the global batch, and
    the triplet negatives come from a generator of its own, equal on every rank.

    Each rank passes its queries' scores against every video of the global batch, with global video
    indices (:doc:`/guide/distributed`); the criterion then draws the global batch's negatives on every
    rank, which must therefore draw the same numbers. The ranks' global generators cannot give them (each
    rank's dropout draws as many numbers as its shard holds captions), so the negatives come from a
    generator seeded, when the objective is built, from torch's global generator (seeded alike on every
    rank at that point); its seed and state are saved with the objective (``_extra_state``).
    """

    def __init__(self, config: HolmesConfig, hidden_size: int) -> None:
        super().__init__(config, hidden_size, distributed=True)
        self._seed = int(torch.randint(2**62, ()))
        self._state: torch.Tensor | None = None  # a restored state, applied when the generator is made
        self._negatives: torch.Generator | None = None

    def negatives_generator(self, device: torch.device) -> torch.Generator:
        """This objective's generator, made on ``device`` at the first step (or after a restore)."""
        if self._negatives is None or self._negatives.device != torch.device(device):
            self._negatives = torch.Generator(device).manual_seed(self._seed)
            if self._state is not None:
                self._negatives.set_state(self._state)
        return self._negatives

    def identifier(self) -> UncertaintyGuidedIdentifier:
        """The query identifier of L_inter's settings for one process (evaluation runs on rank 0 alone)."""
        if self.criterion.inter is not None:
            identifier = self.criterion.inter.identifier()
            identifier.distributed = False
            return identifier
        return super().identifier()

    def get_extra_state(self) -> dict[str, object]:
        """The negatives' seed and generator state (what :meth:`set_extra_state` restores)."""
        return {"seed": self._seed, "state": None if self._negatives is None else self._negatives.get_state()}

    def set_extra_state(self, state: dict[str, object]) -> None:
        """Restore :meth:`get_extra_state`; the generator is made again at the next step."""
        saved = state["state"]
        self._seed = int(state["seed"])  # type: ignore[call-overload]
        self._state = saved.cpu() if isinstance(saved, torch.Tensor) else None
        self._negatives = None


def _second_encoding(output) -> torch.Tensor:
    """The query embeddings L_div and L_intra use: ``output.query_aux`` when the model encoded the queries a
    second time (the release), else ``output.query``."""
    aux = getattr(output, "query_aux", None)
    return output.query if aux is None else aux
