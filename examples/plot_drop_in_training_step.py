"""
Holmes as a drop-in loss in a GMMFormer-style training step
===========================================================

A PRVR codebase of the MS-SL / GMMFormer lineage scores every caption of a batch against every video
with the maximum cosine over frame and clip embeddings (Holmes Eq. 1). :class:`evidential_prvr.HolmesCriterion`
takes exactly those tensors and returns L_base + L_inter + L_intra (Eq. 21) with the two-stage schedule of
§3.4. This example trains a tiny model of that shape on synthetic untrimmed videos for a few epochs and
prints every part of the loss.
"""

# %%
# Synthetic untrimmed videos
# --------------------------
# Each video is a sequence of frame features holding a few *events*: spans whose frames carry a concept
# vector. A caption describes one event of its video through a different linear map (the "text
# modality") plus noise, so a model has to learn the cross-modal map, and only part of the video is
# relevant to a caption.

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from evidential_prvr import HolmesCriterion, QueryType

torch.manual_seed(0)
N_VIDEOS, N_FRAMES, N_CLIPS, VISUAL_DIM, TEXT_DIM, CONCEPT_DIM = 64, 32, 8, 48, 32, 16
to_visual = torch.randn(CONCEPT_DIM, VISUAL_DIM) / CONCEPT_DIM**0.5
to_text = torch.randn(CONCEPT_DIM, TEXT_DIM) / CONCEPT_DIM**0.5

frames = 0.5 * torch.randn(N_VIDEOS, N_FRAMES, VISUAL_DIM)
caption_concepts, caption_video = [], []
for v in range(N_VIDEOS):
    n_events = int(torch.randint(2, 4, ()))
    starts = torch.randperm(N_FRAMES // 8)[:n_events] * 8  # non-overlapping spans of 8 frames
    for start in starts.tolist():
        concept = F.normalize(torch.randn(CONCEPT_DIM), dim=0)
        frames[v, start : start + 8] += 2.0 * concept @ to_visual
        caption_concepts.append(concept)
        caption_video.append(v)
captions = torch.stack(caption_concepts) @ to_text + 0.3 * torch.randn(len(caption_concepts), TEXT_DIM)
caption_video = torch.tensor(caption_video)
clips = frames.view(N_VIDEOS, N_CLIPS, N_FRAMES // N_CLIPS, VISUAL_DIM).mean(dim=2)  # clip = mean of 4 frames
print(f"{N_VIDEOS} videos, {len(captions)} captions, {N_FRAMES} frames and {N_CLIPS} clips per video")

# %%
# A tiny GMMFormer-style model
# ----------------------------
# A frame branch, a clip branch and a query encoder. The model returns the cosine scores of Eq. 1 for
# ranking and the raw dot products that the release feeds to InfoNCE, the query embeddings and the clip
# embeddings. Any model that returns these six tensors works with the criterion.


class TinyPRVRModel(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.frame = nn.Sequential(nn.Linear(VISUAL_DIM, dim), nn.GELU(), nn.Linear(dim, dim))
        self.clip = nn.Sequential(nn.Linear(VISUAL_DIM, dim), nn.GELU(), nn.Linear(dim, dim))
        self.query = nn.Sequential(nn.Linear(TEXT_DIM, dim), nn.GELU(), nn.Linear(dim, dim))

    def forward(self, frame_feats, clip_feats, caption_feats):
        q = self.query(caption_feats)
        f, c = self.frame(frame_feats), self.clip(clip_feats)
        cosine = lambda x: torch.einsum("qd,vmd->qvm", F.normalize(q, dim=-1), F.normalize(x, dim=-1)).amax(-1)
        dot = lambda x: torch.einsum("qd,vmd->qvm", q, x).amax(-1)
        return dict(frame_sim=cosine(f), clip_sim=cosine(c), frame_logits=dot(f), clip_logits=dot(c),
                    query_emb=q, clip_emb=c)


# %%
# The criterion and the training loop
# -----------------------------------
# ``from_preset("release", dataset="tvr")`` takes every constant of the official release for TVR. The
# release runs 20 warm-up epochs; this short run overrides the schedule so that both stages appear.
# ``set_epoch`` at the start of each epoch switches calibration, L_intra and hard negatives.

model = TinyPRVRModel()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
criterion = HolmesCriterion.from_preset("release", dataset="tvr", warmup_stage_epochs=3, hard_negative_epoch=3)
print(criterion)

VIDEOS_PER_BATCH = 16
history = {"L_base": [], "L_inter": [], "L_intra": [], "total": []}
for epoch in range(8):
    criterion.set_epoch(epoch)
    for batch_videos in torch.randperm(N_VIDEOS).split(VIDEOS_PER_BATCH):
        in_batch = torch.isin(caption_video, batch_videos)  # every caption of the batch's videos
        # each caption's video as an index into the batch's videos (the release's text_labels)
        query_video = (caption_video[in_batch].unsqueeze(1) == batch_videos.unsqueeze(0)).int().argmax(dim=1)
        out = model(frames[batch_videos], clips[batch_videos], captions[in_batch])
        details = criterion.details(out["frame_sim"], out["clip_sim"], query_video, query_emb=out["query_emb"],
                                    clip_emb=out["clip_emb"], frame_logits=out["frame_logits"],
                                    clip_logits=out["clip_logits"])
        optimizer.zero_grad()
        details.loss.backward()
        optimizer.step()
        for key, value in zip(history, (details.base, details.inter, details.intra, details.loss)):
            history[key].append(value.item())
    types = details.inter_details.identification.query_type if details.inter_details else None
    counts = "" if types is None else ", last batch " + ", ".join(
        f"{QueryType(t).name.lower()} {int((types == t).sum())}" for t in range(3))
    print(f"epoch {epoch} stage {details.stage}: loss {details.loss.item():.3f} = L_base {details.base.item():.3f}"
          f" + {criterion.inter_weight} * L_inter {details.inter.item():.3f}"
          f" + {criterion.intra_weight} * L_intra {details.intra.item():.4f}{counts}")

# %%
# Every term of L_base is available as well (frame scale first, as everywhere in the library):

base = details.base_details
print(f"triplet frame {base.frame_triplet.item():.3f}, clip {base.clip_triplet.item():.3f}; "
      f"InfoNCE frame {base.frame_nce.item():.3f}, clip {base.clip_nce.item():.3f}; "
      f"diversity {base.diversity.item():.3f}")
inter = details.inter_details
print(f"L_U frame {inter.frame_loss.item():.3f}, clip {inter.clip_loss.item():.3f}, "
      f"fused {inter.fused_loss.item():.3f}")

# %%
# Retrieval on the training videos, ranked by :math:`s = 0.4 s^f + 0.6 s^c` (Holmes Eq. 2 with the release's
# weights), with the library's recall metric:

from evidential_prvr.metrics import recall_at_k  # noqa: E402 (a gallery cell)

with torch.no_grad():
    out = model(frames, clips, captions)
print({k: round(v, 1) for k, v in recall_at_k(0.4 * out["frame_sim"] + 0.6 * out["clip_sim"], caption_video).items()})

# %%
# The loss parts over the training steps; the dashed line is the start of the second stage, where
# label calibration and L_intra switch on.

steps_per_epoch = len(history["total"]) // 8
fig, ax = plt.subplots(figsize=(7, 3.5))
for key, values in history.items():
    ax.plot(values, label=key)
ax.axvline(criterion.warmup_stage_epochs * steps_per_epoch, color="grey", linestyle="--")
ax.set_xlabel("training step")
ax.set_ylabel("loss")
ax.set_yscale("log")
ax.legend(ncols=4, fontsize="small")
fig.tight_layout()
plt.show()
