"""The Holmes reference model as one :class:`~reference_models.engine.TrainingTask` of the shared engine.

:class:`HolmesTask` gives the engine's :class:`~reference_models.engine.Trainer` what is particular to PRVR
with Holmes: the :class:`~reference_models.holmes.model.HolmesModel` built from a
:class:`~reference_models.holmes.config.HolmesConfig` and the data's feature sizes, the
:class:`~reference_models.holmes.objective.HolmesObjective` (Holmes Eq. 21, or an ablation, the MIL baseline or
the DAB variant), the batches of whole videos with all their captions, the optimiser of the config and the
validation SumR (:func:`~reference_models.holmes.evaluate.evaluate_retrieval`), which selects ``best.pt``.

**Several processes** (``torchrun``, :meth:`HolmesTask.use_distributed`): each rank trains on its
contiguous shard of every global batch of ``videos_per_batch`` videos (with their captions); in each step it
gathers the video embeddings of the global batch with gradient
(:func:`evidential_prvr.distributed.gather_with_grad`), scores its own queries against all of them and
labels them with global video indices, and the :class:`~reference_models.holmes.objective.DistributedHolmesObjective`
computes the single-process loss of the global batch (the calling convention of :doc:`/guide/distributed`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import torch
from torch import nn

from evidential_prvr.distributed import gather_sizes, gather_with_grad, rank_offset
from evidential_prvr.metrics import DEFAULT_KS
from reference_models.engine import (
    ComparisonSpec,
    DistributedRun,
    NonFiniteOutputError,
    QueryRanks,
    TrainingSchedule,
    TrainingTask,
    UserError,
    all_finite,
    build_scheduler,
    fingerprint_differences,
)
from reference_models.holmes.config import HolmesConfig
from reference_models.holmes.data import PRVRSplit, make_train_loader
from reference_models.holmes.evaluate import evaluate_retrieval
from reference_models.holmes.factory import build_model
from reference_models.holmes.model import HolmesModel, VideoEmbeddings, max_over_positions
from reference_models.holmes.objective import DistributedHolmesObjective, HolmesObjective, ObjectiveTerms
from reference_models.holmes.optimization import build_optimizer

__all__ = ["HolmesTask"]


class HolmesTask(TrainingTask):
    """Partially relevant video retrieval with the Holmes objective, trained on one data set.

    Parameters
    ----------
    config : HolmesConfig
        The run's settings.
    train_split, val_split : PRVRSplit
        Training and validation data (they must share the feature sizes ``D_v`` and ``D_t``).
    stability : bool
        Record the identification's stability per epoch (``objective.stability``, one process; see
        :class:`~reference_models.holmes.stability.ThresholdStability`).
    """

    name = "holmes"
    selection_metric = "SumR"

    def __init__(self, config: HolmesConfig, train_split: PRVRSplit, val_split: PRVRSplit, *,
                 stability: bool = False) -> None:
        if train_split.visual_dim != val_split.visual_dim or train_split.text_dim != val_split.text_dim:
            raise ValueError(
                f"train and val splits must share feature dims, got (D_v, D_t) = "
                f"({train_split.visual_dim}, {train_split.text_dim}) and ({val_split.visual_dim}, {val_split.text_dim})"
            )
        self.config = config
        self.train_split = train_split
        self.val_split = val_split
        self.run: DistributedRun | None = None
        self.stability = bool(stability)

    @property
    def schedule(self) -> TrainingSchedule:
        optim, schedule = self.config.optim, self.config.schedule
        return TrainingSchedule(epochs=schedule.epochs, early_stop_patience=schedule.early_stop_patience,
                                lr=optim.lr, grad_clip=optim.max_grad_norm, grad_clip_mode=optim.grad_clip_mode)

    def config_dict(self) -> dict[str, Any]:
        return self.config.to_dict()

    def config_differences(self, saved: dict[str, Any]) -> list[str]:
        previous = HolmesConfig.from_dict(saved)
        if previous == self.config:
            return []
        return fingerprint_differences(previous.to_dict(), self.config.to_dict(), sep=".")

    def data_fingerprint(self) -> dict[str, Any]:
        return {"train": self.train_split.fingerprint(), "val": self.val_split.fingerprint()}

    def checkpoint_extras(self) -> dict[str, int]:
        """The feature sizes and counts the model is built for (``evaluate`` and ``diagnose`` rebuild it)."""
        split = self.train_split
        return {"visual_dim": split.visual_dim, "text_dim": split.text_dim, "n_clips": split.n_clips,
                "n_frames": split.n_frames}

    def build_model(self) -> nn.Module:
        split = self.train_split
        return build_model(self.config, split.visual_dim, split.text_dim, split.n_clips, split.n_frames)

    def use_distributed(self, run: DistributedRun) -> None:
        """Train as rank ``run.rank`` of ``run.world_size``: the global batch keeps ``videos_per_batch`` videos."""
        vpb = self.config.optim.videos_per_batch
        if self.config.ablation.method == "dab":
            raise UserError("--ablation dab cannot train over several processes (the PAC loss of the DAB variant has "
                            "no distributed form); run it in one process")
        if vpb < run.world_size:
            raise UserError(f"optim.videos_per_batch is {vpb}, fewer than the {run.world_size} processes: every "
                            f"process needs a video of each batch")
        self.run = run

    def build_objective(self) -> nn.Module:
        if self.run is not None:
            return DistributedHolmesObjective(self.config, self.config.model.hidden_size)
        return HolmesObjective(self.config, self.config.model.hidden_size, stability=self.stability)

    def train_loader(self, seed: int, num_workers: int = 0):
        split, vpb = self.train_split, self.config.optim.videos_per_batch
        ranks = {} if self.run is None else {"rank": self.run.rank, "world_size": self.run.world_size}
        # A trailing batch with a single video has no in-batch negative: drop it (the shuffle changes per epoch).
        return make_train_loader(split, vpb, seed=seed, num_workers=num_workers,
                                 drop_last=split.num_videos % vpb == 1 and split.num_videos > 1, **ranks)

    def training_step(self, model: nn.Module, objective: nn.Module, batch, device: torch.device) -> ObjectiveTerms:
        # on the host, before the copy; with several processes the criterion gathers the global batch's
        max_queries = int(torch.bincount(batch.query_video).max()) if self.run is None else None
        batch = batch.to(device, non_blocking=True)
        if self.run is None:
            output = model(batch)
        else:  # the model encodes only; its queries are scored once, against the gathered global batch
            # model: the DistributedDataParallel wrapper of the HolmesModel
            output, batch = _global_scores(cast(HolmesModel, model.module), model(batch, score_batch=False), batch)
        try:
            return objective(output, batch, max_queries)
        except ValueError as exc:  # the library refuses non-finite scores: say that training diverged
            if all_finite(output):
                raise
            raise NonFiniteOutputError(str(exc)) from exc

    def build_optimizer(self, modules: list[nn.Module]) -> torch.optim.Optimizer:
        # no clipping inside the optimiser: the trainer clips (``optim.grad_clip_mode``) before each step
        optim = self.config.optim
        return build_optimizer(modules, optim.lr, optim.weight_decay, optimizer=optim.optimizer,
                               no_decay=optim.no_decay, eps=optim.eps, betas=optim.betas, max_grad_norm=0.0)

    def build_scheduler(self, optimizer: torch.optim.Optimizer, total_steps: int):
        optim = self.config.optim
        return build_scheduler(optimizer, total_steps, optim.warmup_proportion, schedule=optim.lr_schedule)

    def validate(self, model: nn.Module, objective: nn.Module, device: torch.device) -> dict[str, float]:
        return evaluate_retrieval(model, self.val_split, self.config, device=device).recall

    #: Holmes vs the MIL baseline (``--ablation baseline``); the verdict is read on the test SumR.
    comparison = ComparisonSpec(method="holmes", base="baseline", headline=("SumR",),
                                metrics=("R@1", "R@5", "R@10", "R@100", "SumR"), ks=DEFAULT_KS)

    def query_ranks(self, model: nn.Module, split: PRVRSplit, device: torch.device | str) -> QueryRanks:
        """The rank of every caption's video on ``split``, from the score matrix that
        :func:`~reference_models.holmes.evaluate.evaluate_retrieval` ranks (ties count against the model)."""
        from evidential_prvr.metrics import ranks_of_ground_truth
        from reference_models.holmes.data import make_query_loader, make_video_loader
        from reference_models.holmes.scoring import encode_all_queries, encode_all_videos, score_matrix

        optim = self.config.optim
        videos = encode_all_videos(cast(HolmesModel, model), make_video_loader(split, optim.eval_video_batch), device)
        queries = encode_all_queries(cast(HolmesModel, model), make_query_loader(split, optim.eval_query_batch), device)
        scores = score_matrix(model, videos, queries, query_chunk=optim.score_chunk,  # type: ignore[arg-type]
                              video_chunk=optim.eval_video_batch).score
        ranks = ranks_of_ground_truth(scores, split.caption_video_index.to(scores.device))
        return QueryRanks(ranks.tolist(), list(split.caption_ids))


def _global_scores(model: HolmesModel, output, batch):
    """This rank's ``output`` and ``batch`` in the distributed calling convention: its queries' scores and
    logits against every video of the global batch (gathered with gradient, rank order) and its captions'
    global video indices; ``output.videos`` (the clip embeddings of L_intra) stays this rank's own. ``output``
    comes from ``forward(batch, score_batch=False)``: the queries are scored here only, once."""
    videos = output.videos
    sizes = gather_sizes(len(videos), videos.clip.device)
    everyone = VideoEmbeddings(*(gather_with_grad(t, sizes=sizes) for t in (videos.clip, videos.frame,
                                                                           videos.frame_mask)))
    sims = model.similarity(output.query, everyone)
    output = dataclasses.replace(
        output, clip_sim=sims.clip, frame_sim=sims.frame, score=sims.score,
        clip_logits=max_over_positions(output.query, everyone.clip),
        frame_logits=max_over_positions(output.query, everyone.frame, everyone.frame_mask,
                                        fill=model.padded_frame_logit),
    )
    return output, dataclasses.replace(batch, query_video=batch.query_video + rank_offset(sizes))
