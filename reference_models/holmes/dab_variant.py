"""The DAB variant of the reference model: Gaussian heads + distribution bridge + PAC.

It replaces the InfoNCE part of L_base with the library's
:class:`~evidential_prvr.probabilistic.DABAlignment` (text Gaussian head → distribution bridge; video
Gaussian head on the mean of the frame embeddings plus the token uncertainty head over them; directional
KL cost; PAC loss). This module only decides how a PRVR batch feeds it.

**Pairs.** PAC needs a square cost with positives on the diagonal, while a PRVR batch holds several
queries per video. Each step therefore draws **one query per video** uniformly at random (from the global
torch generator, which the trainer seeds and checkpoints) and forms the ``[V, V]`` problem of those
queries and the batch's ``V`` videos.

The retrieval score is unchanged (the model's cosine score): the Gaussians only shape the embeddings
during training.
"""

from __future__ import annotations

import torch
from torch import nn

from evidential_prvr.probabilistic import DABAlignment
from reference_models.holmes.config import DABSettings

__all__ = ["DABObjective", "one_query_per_video"]


def one_query_per_video(query_video: torch.Tensor, num_videos: int) -> torch.Tensor:
    """Index ``[num_videos]`` of one query per video, drawn uniformly at random, with no Python loop.

    Entry ``j`` is a query of video ``j``; every video in ``range(num_videos)`` must own at least one query.
    """
    keys = torch.rand(query_video.shape, device=query_video.device) + 2.0 * query_video.to(torch.float32)
    order = torch.argsort(keys)
    counts = torch.bincount(query_video, minlength=num_videos)
    starts = torch.cumsum(counts, 0) - counts
    return order[starts]


class DABObjective(nn.Module):
    """PAC loss of a PRVR training batch through the library's :class:`~evidential_prvr.probabilistic.DABAlignment`.

    Parameters
    ----------
    hidden_size : int
        The reference model's embedding size.
    settings : reference_models.holmes.config.DABSettings
        Gaussian dimension, bridge steps and PAC temperature.
    """

    def __init__(self, hidden_size: int, settings: DABSettings) -> None:
        super().__init__()
        self.alignment = DABAlignment(hidden_size, settings.embed_dim, settings.tau, n_steps=settings.n_steps,
                                      logvar_weight_init=settings.logvar_weight_init)  # type: ignore[arg-type]

    def forward(self, output, batch) -> torch.Tensor:
        """Scalar PAC loss for the model ``output`` on ``batch`` (one random query per video)."""
        frames = output.videos.frame
        chosen = one_query_per_video(batch.query_video, frames.shape[0])
        return self.alignment(output.query[chosen], frames, output.videos.frame_mask).loss
