"""The guide's drop-in: HUD replaces CoVR-2's composition and loss in a training step, and that step trains."""

from __future__ import annotations

import torch
from torch import nn

from evidential_prvr.probabilistic import HUDObjective, QueryTokenAttention
from reference_models.hud.losses import HardNegativeNCE


def batch(seed):
    g = torch.Generator().manual_seed(seed)
    frames = torch.randn(8, 16, 32, generator=g)
    edit_ids = torch.randint(1, 20, (8, 4), generator=g)
    target_frames = frames + 0.3 * torch.randn(8, 16, 32, generator=g)
    return frames, edit_ids, target_frames


def test_covr_step_then_hud_step_train():
    torch.manual_seed(0)
    encode_video, words = QueryTokenAttention(32, num_queries=4), nn.Embedding(20, 32)
    mask = torch.ones(8, 4, dtype=torch.bool)
    # before: CoVR-2 (the step runs)
    composer, text_proj, video_proj = QueryTokenAttention(32, num_queries=4), nn.Linear(32, 16), nn.Linear(32, 16)
    frames, ids, target_frames = batch(0)
    query = nn.functional.normalize(text_proj(composer(text=words(ids), text_mask=mask, visual=encode_video(visual=frames))), dim=-1).mean(1)
    target = nn.functional.normalize(video_proj(encode_video(visual=target_frames)), dim=-1).mean(1)
    HardNegativeNCE()(query, target).backward()
    # after: HUD, trained a few steps on one fixed batch: the loss goes down
    hud = HUDObjective.from_preset("paper", dim=32, holistic_dim=16, num_reference_tokens=4)
    params = [*encode_video.parameters(), *words.parameters(), *hud.parameters()]
    optimizer = torch.optim.AdamW(params, lr=3e-3)
    losses = []
    for _ in range(15):
        out = hud(encode_video(visual=frames), words(ids), encode_video(visual=target_frames), text_mask=mask,
                  generator=torch.Generator().manual_seed(0))
        optimizer.zero_grad()
        out.total.backward()
        optimizer.step()
        losses.append(float(out.total.detach()))
    assert losses[-1] < 0.5 * losses[0], losses
    with torch.no_grad():
        q = hud.compose(encode_video(visual=frames), words(ids), text_mask=mask, generator=torch.Generator().manual_seed(0))
        scores = hud.similarity(q, hud.embed_targets(encode_video(visual=target_frames)))
    assert (scores.argmax(1) == torch.arange(8)).float().mean() >= 0.75
