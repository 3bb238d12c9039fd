"""
Query identification on the embedded benchmark
==============================================

Holmes (§3.2) sorts the captions of a batch into *precise*, *polysemous* and *under-determined* from three
quantities per caption: the epistemic uncertainty :math:`u` (Eq. 5), the label consistency :math:`c`
(Eq. 7) and the aleatoric uncertainty :math:`\\xi` (Eq. 9). The embedded benchmark of the reference model
plants these three kinds of captions on purpose and records which caption is which, so the identification
can be compared with the truth.

The similarities here come from a linear probe fitted in closed form, not from a trained PRVR model: it
maps a caption's mean token to the mean frame of its event span. The spans are information a PRVR model
never sees; the probe only stands in for a trained model so that the example runs in seconds.
"""

# %%
# The data
# --------
# :func:`~reference_models.holmes.data.generate_embedded_benchmark` writes the benchmark in the MS-SL /
# GMMFormer on-disk layout, with ``planted_types.json`` (caption id to planted type) and
# ``planted_events.json`` (each caption's video and event span). A smaller training split keeps it fast.

import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

from evidential_prvr import QueryType, UncertaintyGuidedIdentifier
from evidential_prvr.metrics import recall_at_k
from reference_models.holmes.data import (
    EmbeddedBenchmarkSpec,
    generate_embedded_benchmark,
    load_split,
    planted_event_features,
    read_planted_types,
)

workdir = tempfile.TemporaryDirectory()
root = Path(workdir.name)
spec = EmbeddedBenchmarkSpec(n_train_videos=200, n_val_videos=10, n_test_videos=100)
generate_embedded_benchmark(root, "embedded", seed=0, spec=spec)
planted_types = read_planted_types(root, "embedded")


def caption_tokens(split):
    """Mean token feature of every caption of a split."""
    return torch.stack([torch.from_numpy(split.read_query(i)).mean(dim=0) for i in range(split.num_captions)])


train = load_split(root, "embedded", spec.visual_feature, "train")
test = load_split(root, "embedded", spec.visual_feature, "test")
print(f"train: {train.num_videos} videos, {train.num_captions} captions; "
      f"test: {test.num_videos} videos, {test.num_captions} captions")

# %%
# The probe
# ---------
# Ridge regression from a caption's mean token to the mean raw frame of its event span
# (:func:`~reference_models.holmes.data.planted_event_features`), fitted on the training split.

targets = planted_event_features(root, "embedded", spec.visual_feature, train.caption_ids)
x, y = caption_tokens(train), torch.from_numpy(targets)
probe = torch.linalg.solve(x.T @ x + torch.eye(x.shape[1]), x.T @ y)

# %%
# Frame- and clip-scale similarities of every test caption to every test video: the maximum cosine over
# the video's (at most 128) frames and over its 32 clips, Holmes Eq. 1.

clips, frames = zip(*(test.read_video(v) for v in range(test.num_videos)))
queries = F.normalize(caption_tokens(test) @ probe, dim=-1)
frame_sim = torch.stack([(queries @ torch.from_numpy(f).T).amax(dim=1) for f in frames], dim=1)
clip_sim = torch.stack([(queries @ torch.from_numpy(c).T).amax(dim=1) for c in clips], dim=1)
query_video = test.caption_video_index
print({k: round(v, 1) for k, v in recall_at_k(0.4 * frame_sim + 0.6 * clip_sim, query_video).items()})

# %%
# Identification
# --------------
# :class:`~evidential_prvr.UncertaintyGuidedIdentifier` with the release's TVR settings (the ones the
# release trains with), over all test videos as candidates. Each branch computes :math:`u`, :math:`c`
# and :math:`\xi`, sets the adaptive thresholds of Eq. 11 from the correctly matched captions, and the
# two branches' types are fused by uncertainty dominance (Eq. 14).

identifier = UncertaintyGuidedIdentifier.from_preset("release", dataset="tvr")
result = identifier(frame_sim, clip_sim, query_video)
planted = np.array([planted_types[c] for c in test.caption_ids])
kinds = ("precise", "polysemous", "underdetermined")

print("planted \\ identified   " + "  ".join(f"{t.name.lower():>15}" for t in QueryType))
for kind in kinds:
    counts = np.bincount(result.query_type.numpy()[planted == kind], minlength=3)
    print(f"{kind:>20}   " + "  ".join(f"{n:>15}" for n in counts))

branch = result.clip
for kind in kinds:
    sel = torch.from_numpy(planted == kind)
    print(f"clip branch, {kind:>15}: median log u {branch.epistemic[sel].log().median():.2f}, "
          f"c {branch.consistency[sel].median():.3f}, xi {branch.aleatoric[sel].median():.3f}")

# %%
# The u-c-ξ space
# ---------------
# Each caption of the clip branch, coloured by its planted type. Left: the coarse split of Eq. 10 on the
# :math:`c`-:math:`u` plane with the adaptive thresholds :math:`\beta_u` and :math:`\beta_p` of Eq. 11
# (above :math:`\beta_u`: under-determined; below it, :math:`c \ge \beta_p`: precise candidates). Right:
# the refinement of the candidates along :math:`\xi` (Eq. 12), with the batch median the release uses.

colors = {"precise": "tab:green", "polysemous": "tab:orange", "underdetermined": "tab:red"}
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
for kind in kinds:
    sel = torch.from_numpy(planted == kind)
    left.scatter(branch.consistency[sel], branch.epistemic[sel], s=10, alpha=0.7, c=colors[kind], label=kind)
    right.scatter(branch.consistency[sel], branch.aleatoric[sel], s=10, alpha=0.7, c=colors[kind], label=kind)
left.axhline(float(branch.uncertainty_threshold), color="grey", linestyle="--", label=r"$\beta_u$")
left.axvline(float(branch.consistency_threshold), color="grey", linestyle=":", label=r"$\beta_p$")
left.set_yscale("log")
left.set_xlabel("label consistency c")
left.set_ylabel("epistemic uncertainty u")
left.legend(fontsize="small")
right.axhline(float(branch.entropy_threshold), color="grey", linestyle="--", label=r"median of $\xi$")
right.axvline(float(branch.consistency_threshold), color="grey", linestyle=":")
right.set_xlabel("label consistency c")
right.set_ylabel(r"aleatoric uncertainty $\xi$")
right.legend(fontsize="small")
fig.tight_layout()
plt.show()

# %%
# With the paper's evidence, :math:`e = \exp(\tanh(s/\tau))` lies in :math:`[e^{-1}, e]`, so :math:`u` barely
# varies across captions; the release's :math:`\exp(\tanh(s)/\tau)` spreads it over orders of magnitude:

paper = UncertaintyGuidedIdentifier.from_preset("paper")(frame_sim, clip_sim, query_video)
for name, ident in (("paper", paper), ("release", result)):
    u = ident.clip.epistemic
    print(f"{name:>8}: u from {u.min():.3g} to {u.max():.3g}")

workdir.cleanup()
