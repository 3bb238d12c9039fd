"""Typical user code, checked by mypy in tests/test_static_types.py (never imported by pytest).

The README's drop-in snippet and the call sites of docs/guide/drop_in*.rst, with the types a user's editor
and type checker must infer for them.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from typing_extensions import assert_type

import evidential_prvr as ep
from evidential_prvr import HolmesCriterion
from evidential_prvr import functional as EF
from evidential_prvr.probabilistic import DistributionBridge, HUDObjective

criterion = HolmesCriterion.from_preset("release", dataset="tvr")
assert_type(criterion, HolmesCriterion)
short = HolmesCriterion.from_preset("release", "tvr", total_epochs=6)
mapped = HolmesCriterion.from_preset("release", "tvr", warmup_stage_epochs=2, hard_negative_epoch=3)
no_intra = HolmesCriterion.from_preset("release", dataset="tvr", intra=None)
hud = HUDObjective.from_preset("paper", "webvid-covr", dim=16, holistic_dim=8, num_reference_tokens=3, derivative=7)
assert_type(hud, HUDObjective)

query_emb = torch.randn(10, 16, requires_grad=True)
frame_emb = torch.randn(4, 12, 16, requires_grad=True)
clip_emb = torch.randn(4, 8, 16, requires_grad=True)
query_video = [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]


def max_cosine(videos: torch.Tensor) -> torch.Tensor:
    sim = torch.einsum("qd,vmd->qvm", F.normalize(query_emb, dim=-1), F.normalize(videos, dim=-1))
    return sim.amax(dim=-1)


criterion.set_epoch(25)
details = criterion.details(max_cosine(frame_emb), max_cosine(clip_emb), query_video, query_emb=query_emb,
                            clip_emb=clip_emb)
assert_type(details, ep.HolmesLossDetails)
details.loss.backward()
assert_type(details.stage, int)
loss = criterion(max_cosine(frame_emb), max_cosine(clip_emb), query_video, query_emb=query_emb, clip_emb=clip_emb)
assert_type(loss, torch.Tensor)

inter = ep.EvidentialRetrievalLoss.from_preset("release", dataset="tvr")
warm_up = ep.EvidentialRetrievalLoss.from_preset("release", dataset="tvr", calibrate=False)
intra = ep.IntraVideoEvidentialLoss.from_preset("release", dataset="tvr")
base = ep.BaseRetrievalLoss.from_preset("release", "tvr", margin=0.1)
assert_type(inter.tau, float)
assert_type(intra, ep.IntraVideoEvidentialLoss)
assert_type(inter.calibrate, bool)
inter.gamma = 0.1  # the hyperparameters are plain attributes
assert_type(ep.FlexibleOT.from_preset("paper", n_iters=20).n_iters, int)
assert_type(ep.EvidentialRetrievalLoss(**dataclasses.asdict(ep.presets.holmes_settings("paper").inter)),
            ep.EvidentialRetrievalLoss)  # a registry section is the module's keyword arguments
assert_type(ep.GalleryUncertainty.from_preset("release", "tvr", k=5), ep.GalleryUncertainty)
fot = ep.FlexibleOT(epsilon=0.05, n_iters=20)
assert_type(fot.n_iters, int)
result = fot(torch.rand(2, 3, 4))
assert_type(result, ep.FlexibleOTResult)
assert_type(EF.flexible_ot(torch.rand(2, 3, 4), epsilon=0.1), ep.FlexibleOTResult)
assert_type(EF.inter_video_loss(torch.rand(3, 2), torch.rand(3, 2), torch.tensor([0, 1, 1])), torch.Tensor)
assert_type(EF.inter_video_loss_details(torch.rand(3, 2), torch.rand(3, 2), torch.tensor([0, 1, 1])),
            ep.InterVideoLossDetails)
assert_type(ep.UncertaintyGuidedIdentifier()(torch.rand(3, 2), torch.rand(3, 2), torch.tensor([0, 1, 1])),
            ep.Identification)
assert_type(DistributionBridge.from_preset("paper", "vatex", 8, n_steps=4), DistributionBridge)
