"""User mistakes that a type checker must report (tests/test_static_types.py reads mypy's messages)."""

from __future__ import annotations

import torch
from typing_extensions import reveal_type

import evidential_prvr as ep
from evidential_prvr import functional as F
from evidential_prvr.probabilistic import ConditionedDistributionBridge, DistributionBridge, HUDObjective

ot = ep.FlexibleOT(epsilon=0.1, n_iter=50)  # typo: the parameter is n_iters
m = ep.FlexibleOT(method="lgo")  # misspelt choice in a written-out constructor
u = ep.UncertaintyGuidedIdentifier(fusion="uncertain")  # misspelt choice
r = F.flexible_ot(torch.rand(2, 3, 4), epsilon="x")  # wrong type
c = ep.HolmesCriterion.from_preset("release", "tvr", inter_weigth=0.2)  # typo in an override
b = ep.BaseRetrievalLoss.from_preset("release", dataset="tvr", video_negative="hardset")  # misspelt choice
i = F.intra_video_loss(torch.rand(2, 3, 4), asignment="ot")  # misspelt keyword
d = F.inter_video_loss_details(torch.rand(3, 2), torch.rand(3, 2), torch.tensor([0, 1, 1]), fusion="uncertain")
e = ep.EvidentialRetrievalLoss(reduction="avg")  # misspelt choice in a constructor
p = ep.IntraVideoEvidentialLoss.from_preset("relase", "tvr")  # misspelt preset
g = ep.GalleryUncertainty.from_preset("release", "tvr", kk=3)  # typo in an override
h = HUDObjective.from_preset("relase", dim=4, holistic_dim=4, num_reference_tokens=2)  # misspelt preset
k = HUDObjective.from_preset("paper", dim=4, holistic_dim=4, num_reference_tokens=2, kapa=0.5)  # typo in an override
n = ep.HolmesCriterion.from_preset("release", "tvr", total_epoch=6)  # typo: the keyword is total_epochs
q = DistributionBridge.from_preset("paper", "msrvtt", dim=8)  # misspelt data set
w = ConditionedDistributionBridge.from_preset("paper", dim=8, contractoin=0.5)  # typo in an override
reveal_type(ep.FlexibleOT.__init__)
reveal_type(F.flexible_ot)
ot.n_iters = "many"  # a hyperparameter is a typed plain attribute
