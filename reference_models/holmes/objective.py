"""The training objective of the reference model: L_base + L_inter + L_intra with the two-stage schedule.

.. math::

    L_{agg} = L_{base} + w_{inter} L_{inter} + w_{intra} L_{intra}  \\qquad \\text{(Holmes Eq. 21)}

with the release's loss weights. The schedule (Holmes §3.4): during the first
``schedule.warmup_stage_epochs`` epochs L_inter runs *without* label calibration and L_intra is off; after
that everything is on. Hard negatives of the triplet loss start at ``schedule.hard_negative_epoch``.

The ablation switches of :class:`~reference_models.holmes.config.AblationSettings` act here:

* ``method="baseline"``: L_base only (the MIL baseline);
* ``method="dab"``: L_base with its InfoNCE part replaced by DAB's PAC loss on Gaussian embeddings
  (:class:`~reference_models.holmes.dab_variant.DABObjective`), no Holmes terms;

When the model encodes the queries a second time (``ModelOutput.query_aux``, the release's behaviour), that
encoding feeds L_div and L_intra; the first one gives the scores of the triplet, InfoNCE and L_inter terms.
* ``inter_branches`` / ``aggregation``: which of the three L_U terms of Eq. 18 enter L_inter;
* ``fusion`` / ``calibration``: passed to the library's :class:`~evidential_prvr.EvidentialRetrievalLoss`;
* ``intra`` / ``assignment``: L_intra on or off, and its soft label (softmax / OT / FOT).

Everything comes from the library's public API; this module only wires and weights it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from evidential_prvr import (
    BaseRetrievalLoss,
    EvidentialRetrievalLoss,
    IntraVideoEvidentialLoss,
    UncertaintyGuidedIdentifier,
    build_intra_video_batch,
)
from reference_models.holmes.config import HolmesConfig
from reference_models.holmes.dab_variant import DABObjective

__all__ = ["ObjectiveTerms", "HolmesObjective"]


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
        Fused query types of the batch's queries when L_inter ran (detached), else ``None``.
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


class HolmesObjective(nn.Module):
    """Holmes objective (Eq. 21) wired from the library's losses according to a :class:`HolmesConfig`.

    Call :meth:`set_epoch` before each epoch; :meth:`forward` takes the model's output and the batch.

    Parameters
    ----------
    config : HolmesConfig
        Loss weights, schedule and ablation switches.
    hidden_size : int
        Embedding size of the model (the DAB heads' input size).
    """

    def __init__(self, config: HolmesConfig, hidden_size: int) -> None:
        super().__init__()
        self.config = config
        loss, ablation = config.loss, config.ablation
        self.method = ablation.method
        nce_off = self.method == "dab"
        self.base = BaseRetrievalLoss(
            margin=loss.margin,
            clip_nce_weight=0.0 if nce_off else loss.nce_clip,
            frame_nce_weight=0.0 if nce_off else loss.nce_frame,
            div_weight=loss.div,
            div_alpha=loss.div_alpha,
            div_delta=loss.div_delta,
            div_lambda=loss.div_lambda,
            hard_negative_topk=loss.hard_negative_topk,
        )
        self.inter: EvidentialRetrievalLoss | None = None
        self.inter_warmup: EvidentialRetrievalLoss | None = None
        self.intra: IntraVideoEvidentialLoss | None = None
        self.dab: DABObjective | None = None
        if self.method == "holmes":
            self.inter = self._inter_loss(calibrate=ablation.calibration != "none")
            self.inter_warmup = self._inter_loss(calibrate=False)
            if ablation.intra:
                self.intra = self._intra_loss()
        elif self.method == "dab":
            self.dab = DABObjective(hidden_size, config.dab)
        self.epoch = 0

    # --- construction -----------------------------------------------------------------------------
    def _preset_args(self) -> tuple[str, dict[str, object]]:
        loss = self.config.loss
        if loss.evidential_preset == "paper":
            return "paper", {}
        return "release", {"dataset": loss.loss_dataset}

    def _inter_loss(self, calibrate: bool) -> EvidentialRetrievalLoss:
        name, kwargs = self._preset_args()
        overrides: dict[str, object] = {
            "fusion": self.config.ablation.fusion,
            "calibrate": calibrate,
            "calibration_set": "initial" if self.config.ablation.calibration == "initial_polysemous" else "refined",
        }
        if self.config.loss.inter_tau is not None:
            overrides["tau"] = self.config.loss.inter_tau
        return EvidentialRetrievalLoss.from_preset(name, **kwargs, **overrides)

    def _intra_loss(self) -> IntraVideoEvidentialLoss:
        name, kwargs = self._preset_args()
        loss = IntraVideoEvidentialLoss.from_preset(name, assignment=self.config.ablation.assignment, **kwargs)
        if self.config.loss.intra_tau is None:
            return loss
        return IntraVideoEvidentialLoss(loss.fot, self.config.loss.intra_tau, loss.tanh_scaling, loss.assignment)

    def identifier(self) -> UncertaintyGuidedIdentifier:
        """The query identifier of L_inter (built from the same settings when L_inter is off).

        Used at evaluation time to identify query types on validation/test similarities.
        """
        loss = self.inter if self.inter is not None else self._inter_loss(calibrate=True)
        return loss.identifier

    # --- schedule ---------------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Select the stage and the triplet negatives for ``epoch`` (0-based)."""
        self.epoch = int(epoch)
        self.base.use_hard_negatives = self.epoch >= self.config.schedule.hard_negative_epoch

    @property
    def stage(self) -> int:
        """1 in the warm-up stage (no calibration, no L_intra), 2 afterwards."""
        return 1 if self.epoch < self.config.schedule.warmup_stage_epochs else 2

    # --- loss -------------------------------------------------------------------------------------
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
        weights = self.config.loss
        query_video = batch.query_video
        base = self.base(
            output.clip_sim,
            output.frame_sim,
            _second_encoding(output),
            query_video,
            clip_logits=getattr(output, "clip_logits", None),
            frame_logits=getattr(output, "frame_logits", None),
        )
        zero = base.total.new_zeros(())
        inter = intra = pac = zero
        query_type = None
        if self.method == "holmes":
            inter, query_type = self._inter_term(output, query_video)
            if self.intra is not None and self.stage == 2:
                intra = self._intra_term(output, batch, max_queries)
        elif self.method == "dab":
            pac = self.dab(output, batch)
        total = base.total + weights.inter * inter + weights.intra * intra + self.config.dab.weight * pac
        return ObjectiveTerms(total=total, base=base.total, inter=inter, intra=intra, pac=pac, stage=self.stage,
                              query_type=query_type)

    def _inter_term(self, output, query_video: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loss = self.inter if self.stage == 2 else self.inter_warmup
        details = loss(output.frame_sim, output.clip_sim, query_video, return_details=True)
        ablation = self.config.ablation
        terms = []
        if ablation.inter_branches in ("both", "frame"):
            terms.append(details.frame_loss)
        if ablation.inter_branches in ("both", "clip"):
            terms.append(details.clip_loss)
        if ablation.aggregation:
            terms.append(details.fused_loss)
        return torch.stack(terms).sum(), details.identification.query_type

    def _intra_term(self, output, batch, max_queries: int | None) -> torch.Tensor:
        packed = build_intra_video_batch(
            _second_encoding(output), batch.query_video, output.videos.clip, batch.clip_mask,
            max_queries=max_queries,
        )
        return self.intra(packed.sim, packed.query_mask, packed.clip_mask)


def _second_encoding(output) -> torch.Tensor:
    """The query embeddings L_div and L_intra use: ``output.query_aux`` when the model encoded the queries a
    second time (the release), else ``output.query``."""
    aux = getattr(output, "query_aux", None)
    return output.query if aux is None else aux
