"""
Gaussian embeddings and the distribution bridge (DAB)
=====================================================

DAB models a text query and a video as diagonal Gaussians, drifts the text Gaussian towards the video
with a deterministic, sampling-free bridge and trains with a contrastive loss on the directional KL
divergence (PAC). :mod:`evidential_prvr.probabilistic` holds the pieces; this example trains them on
synthetic pairs where some captions are vague, and shows the learned variances and the KL margin that DAB
uses as a confidence for selective retrieval.
"""

# %%
# Synthetic text-video pairs
# --------------------------
# Each pair shares a latent vector. The video is a set of frame tokens around it; the caption is a noisy
# view of it, and a third of the captions are vague: most of their signal is replaced by noise.

import matplotlib.pyplot as plt
import torch

from evidential_prvr.functional import kl_margin, pairwise_gaussian_kl
from evidential_prvr.probabilistic import DABAlignment

torch.manual_seed(0)
N_PAIRS, N_TOKENS, DIM, GAUSSIAN_DIM = 1280, 8, 32, 16
to_video, to_text = torch.randn(DIM, DIM) / DIM**0.5, torch.randn(DIM, DIM) / DIM**0.5  # two modalities
latent = torch.randn(N_PAIRS, DIM)
video_tokens = (latent.unsqueeze(1) + 0.5 * torch.randn(N_PAIRS, N_TOKENS, DIM)) @ to_video
vague = torch.rand(N_PAIRS) < 1 / 3
signal = torch.where(vague, 0.3, 1.0).unsqueeze(1)
text = (signal * latent + (1.1 - signal) * torch.randn(N_PAIRS, DIM)) @ to_text
train, test = torch.arange(1024), torch.arange(1024, N_PAIRS)

# %%
# The whole DAB objective in one module
# -------------------------------------
# :class:`~evidential_prvr.probabilistic.DABAlignment` holds the Gaussian heads, the token uncertainty head
# on the video tokens, the bridge (``n_steps`` truncated steps) and the PAC loss. DAB shares one head
# between the modalities (its "shared probabilistic encoder", on top of a shared backbone); the raw
# features here come from two different maps, so each modality gets its own head (``share_head=False``).
# DAB does not report its temperature; the KL cost grows with the Gaussian dimension, so ``tau`` is set on
# that scale.

dab = DABAlignment(dim_in=DIM, dim=GAUSSIAN_DIM, tau=float(GAUSSIAN_DIM), n_steps=8, share_head=False)
optimizer = torch.optim.AdamW(dab.parameters(), lr=3e-3)


def recall_at_1(cost):
    return (cost.argmin(dim=1) == torch.arange(cost.shape[0])).float().mean().item()


with torch.no_grad():
    print(f"R@1 before training: {recall_at_1(dab.cost(text[test], video_tokens[test])):.2f}")
losses = []
for _step in range(300):
    batch = train[torch.randperm(len(train))[:64]]
    out = dab(text[batch], video_tokens[batch])  # text i describes video i
    optimizer.zero_grad()
    out.loss.backward()
    optimizer.step()
    losses.append(out.loss.item())
with torch.no_grad():
    cost = dab.cost(text[test], video_tokens[test])  # [Q, V]: lower is a better match
    gaussians = dab.gaussians(text[test], video_tokens[test])
print(f"R@1 after training: {recall_at_1(cost):.2f} (PAC loss {losses[0]:.2f} -> {losses[-1]:.2f})")

# %%
# The cost is :math:`C_{ij} = D_{\mathrm{KL}}(Q_{v_j} \,\|\, \hat P_{t_i})`: the video first, the bridged
# text second, i.e. the transpose of :func:`~evidential_prvr.functional.pairwise_gaussian_kl` called with
# the video Gaussians as source.

g = gaussians
same = pairwise_gaussian_kl(g.video.mu, g.video.logvar, g.bridged_text.mu, g.bridged_text.logvar).T
print("cost == pairwise_gaussian_kl(video, bridged text).T:", torch.allclose(same, cost))

# %%
# Variances and the KL margin
# ---------------------------
# Left: the mean variance of each Gaussian. Right: DAB's KL margin (second-lowest minus lowest cost of a
# query), which ranks queries by confidence: sorting by it and keeping the most confident ones is
# selective retrieval.

variance = {name: getattr(g, name).logvar.exp().mean(dim=1) for name in ("text", "bridged_text", "video")}
for name, values in variance.items():
    print(f"mean variance of the {name.replace('_', ' ')} Gaussians: {values.mean():.3f}")
margin = kl_margin(cost)
correct = cost.argmin(dim=1) == torch.arange(cost.shape[0])
order = margin.argsort(descending=True)
coverage = torch.arange(1, len(order) + 1) / len(order)
accuracy = correct[order].float().cumsum(0) / torch.arange(1, len(order) + 1)
for keep in (0.25, 0.5, 1.0):
    k = int(keep * len(order))
    print(f"R@1 on the {keep:.0%} most confident queries: {accuracy[k - 1]:.2f}")
print(f"vague captions: median margin {margin[vague[test]].median():.2f}, "
      f"others {margin[~vague[test]].median():.2f}; median text variance "
      f"{variance['text'][vague[test]].median():.3f} and {variance['text'][~vague[test]].median():.3f}")

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
left.boxplot([v.numpy() for v in variance.values()], tick_labels=["text", "bridged text", "video"])
left.set_ylabel(r"mean $\sigma^2$ per Gaussian")
right.plot(coverage, accuracy)
right.set_xlabel("coverage (queries kept, most confident first)")
right.set_ylabel("R@1 of the kept queries")
fig.tight_layout()
plt.show()
