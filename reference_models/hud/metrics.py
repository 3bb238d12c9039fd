"""WebVid-CoVR evaluation: R@1, R@5, R@10, R@50 and their mean, over all test targets, also per edit type.

The recalls are the library's (:func:`evidential_prvr.metrics.recall_from_ranks`) of the 1-based rank of each
triplet's target.
"""

from __future__ import annotations

import torch
from torch import nn

from evidential_prvr.metrics import recall_from_ranks
from reference_models.hud.data import EDIT_TYPES, CVRSplit, make_batch

__all__ = ["RECALL_KS", "covr_recalls", "target_ranks", "split_ranks", "evaluate_split"]

#: WebVid-CoVR's cut-offs, R@1, R@5, R@10 and R@50, whose mean HUD reports (HUD §4).
RECALL_KS = (1, 5, 10, 50)


def covr_recalls(ranks: torch.Tensor) -> dict[str, float]:
    """``{"R@1", "R@5", "R@10", "R@50", "mean"}`` in percent from 1-based ranks.

    :func:`evidential_prvr.metrics.recall_from_ranks` at :data:`RECALL_KS`, with the mean of the four recalls
    (their ``SumR`` over four) in place of the sum.
    """
    recalls = recall_from_ranks(ranks, RECALL_KS)
    out = {f"R@{k}": recalls[f"R@{k}"] for k in RECALL_KS}
    out["mean"] = recalls["SumR"] / len(RECALL_KS)
    return out


def target_ranks(scores: torch.Tensor, target_column: torch.Tensor, excluded: torch.Tensor) -> torch.Tensor:
    """1-based rank of each row's target among the gallery columns not ``excluded`` (ties count against it).

    The rank is 1 + the number of other columns, not excluded, scoring >= the target (the convention of
    :func:`evidential_prvr.metrics.ranks_of_ground_truth`). ``scores`` ``[Q, G]``, ``target_column`` ``[Q]``,
    ``excluded`` ``[Q, G]`` bool (the reference video itself).
    """
    positive = scores.gather(1, target_column[:, None])
    better = (scores >= positive) & ~excluded
    better[torch.arange(scores.shape[0]), target_column] = False
    return 1 + better.sum(dim=1)


@torch.no_grad()
def split_ranks(method, model: nn.Module, split: CVRSplit, device: torch.device, *, batch_size: int = 128,
                seed: int = 0) -> torch.Tensor:
    """``[Q]`` 1-based rank of every triplet's target among the split's target videos (its reference excluded).

    HUD's samples are drawn from a generator seeded with ``seed``, so the ranks are deterministic.
    """
    was_training = model.training
    model.eval()
    generator = torch.Generator(device=device).manual_seed(seed)
    gallery_ids = sorted({t.target for t in split.triplets})
    column = {vid: j for j, vid in enumerate(gallery_ids)}
    video_row = {vid: i for i, vid in enumerate(split.video_ids)}
    gallery_videos = split.videos[torch.tensor([video_row[v] for v in gallery_ids])]
    gallery = method.gallery(model, gallery_videos.to(device))
    ranks = []
    for start in range(0, len(split), batch_size):
        idx = torch.arange(start, min(start + batch_size, len(split)))
        batch = make_batch(split, idx).to(device)
        scores = method.scores(model, method.queries(model, batch, generator), gallery).float().cpu()
        targets = torch.tensor([column[split.triplets[i].target] for i in idx.tolist()])
        excluded = torch.zeros_like(scores, dtype=torch.bool)
        for row, i in enumerate(idx.tolist()):
            ref_col = column.get(split.triplets[i].reference)
            if ref_col is not None:
                excluded[row, ref_col] = True
        ranks.append(target_ranks(scores, targets, excluded))
    model.train(was_training)
    return torch.cat(ranks)


@torch.no_grad()
def evaluate_split(method, model: nn.Module, split: CVRSplit, device: torch.device,
                   *, batch_size: int = 128, seed: int = 0) -> dict[str, object]:
    """Recalls of ``split`` against the gallery of all its target videos (the query's reference excluded).

    HUD's samples are drawn from a generator seeded with ``seed``, so an evaluation is deterministic.
    """
    all_ranks = split_ranks(method, model, split, device, batch_size=batch_size, seed=seed)
    result: dict[str, object] = dict(covr_recalls(all_ranks))
    types = split.edit_types
    result["per_type"] = {
        kind: {**covr_recalls(all_ranks[[i for i, t in enumerate(types) if t == kind]]), "count": types.count(kind)}
        for kind in EDIT_TYPES if kind in types
    }
    return result
