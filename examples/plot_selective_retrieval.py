"""
Selective retrieval on the embedded benchmark
=============================================

A retrieval system that may abstain answers only the queries it is sure of. Holmes' opinions (§3.2) give a
confidence per query at retrieval time: the fused epistemic uncertainty :math:`u` (Eq. 5, 16), the fused
belief in the top-1 video and the aleatoric uncertainty :math:`\\xi` (Eq. 9). This example compares them with
the raw scores as confidences on the embedded benchmark of the reference model, by their risk-coverage
curves: at each coverage (share of queries answered, the most confident first), the share of wrong top-1
answers.

As in the identification example, the similarities come from a linear probe fitted in closed form on the
planted event spans, not from a trained PRVR model: it only stands in for one so that the example runs in
seconds. The numbers printed below are what this probe measures, not the reference model's.
"""

# %%
# The data and the probe
# ----------------------
# :func:`~reference_models.holmes.data.generate_embedded_benchmark` writes the benchmark with its planted
# query types. The probe is a ridge regression from a caption's mean token to the mean raw frame of its
# event span, fitted on the training split. The validation split fits the identification thresholds; the
# test split is evaluated.

import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from evidential_prvr import GalleryQueryIdentifier, GalleryUncertainty, QueryType, SelectiveConfidence
from evidential_prvr.functional import macro_f1
from evidential_prvr.metrics import aurc, e_aurc, recall_at_k, risk_coverage, selective_recall
from evidential_prvr.uncertainty import CONFIDENCES, EVIDENTIAL_CONFIDENCES
from reference_models.holmes.data import (
    EmbeddedBenchmarkSpec,
    generate_embedded_benchmark,
    load_split,
    planted_event_features,
    read_planted_types,
)

start = time.perf_counter()
workdir = tempfile.TemporaryDirectory()
root = Path(workdir.name)
spec = EmbeddedBenchmarkSpec(n_train_videos=200, n_val_videos=100, n_test_videos=100)
generate_embedded_benchmark(root, "embedded", seed=0, spec=spec)
planted_types = read_planted_types(root, "embedded")
splits = {name: load_split(root, "embedded", spec.visual_feature, name) for name in ("train", "val", "test")}


def caption_tokens(split):
    """Mean token feature of every caption of a split."""
    return torch.stack([torch.from_numpy(split.read_query(i)).mean(dim=0) for i in range(split.num_captions)])


targets = planted_event_features(root, "embedded", spec.visual_feature, splits["train"].caption_ids)
x, y = caption_tokens(splits["train"]), torch.from_numpy(targets)
probe = torch.linalg.solve(x.T @ x + torch.eye(x.shape[1]), x.T @ y)

# %%
# Scores of a split
# -----------------
# The probe's output is the query embedding. Its cosine with the frames and the clips of every video, maxed
# over positions, gives the frame- and clip-scale scores of Holmes Eq. 1, and their weighted sum the ranking
# score of Eq. 2.


def scores(split):
    clips, frames = zip(*(split.read_video(v) for v in range(split.num_videos)))
    query_emb = caption_tokens(split) @ probe
    queries = F.normalize(query_emb, dim=-1)
    frame = torch.stack([(queries @ torch.from_numpy(f).T).amax(dim=1) for f in frames], dim=1)
    clip = torch.stack([(queries @ torch.from_numpy(c).T).amax(dim=1) for c in clips], dim=1)
    types = torch.tensor([int(QueryType[planted_types[c].upper()]) for c in split.caption_ids])
    return query_emb, frame, clip, 0.4 * frame + 0.6 * clip, split.caption_video_index, types


val_emb, val_frame, val_clip, val_score, val_gt, val_types = scores(splits["val"])
test_emb, test_frame, test_clip, test_score, test_gt, test_types = scores(splits["test"])
for name, score, gt in (("val", val_score, val_gt), ("test", test_score, test_gt)):
    print(f"{name}: {score.shape[0]} queries, {score.shape[1]} videos,",
          {k: round(v, 1) for k, v in recall_at_k(score, gt).items()})

# %%
# Gallery opinions and the identification
# -----------------------------------------
# :class:`~evidential_prvr.GalleryUncertainty` forms each query's frame, clip and fused opinions over its
# 10 best candidates with the release's TVR evidence, at a per-query temperature scaled by the query
# embedding's norm relative to the validation mean (the reference model does the same).
# :class:`~evidential_prvr.GalleryQueryIdentifier` fits its thresholds on the validation opinions against
# the planted types, and identifies the test queries from their opinions alone.

gallery = GalleryUncertainty.from_preset("release", "tvr", k=10)
reference_norm = val_emb.norm(dim=-1).mean()
val = gallery(val_frame, val_clip, ranking=val_score, query_scale=val_emb.norm(dim=-1) / reference_norm,
              target=val_gt)
test = gallery(test_frame, test_clip, ranking=test_score, query_scale=test_emb.norm(dim=-1) / reference_norm,
               target=test_gt)  # the target only adds the correct flags and Eq. 7; the opinion does not use it

identifier = GalleryQueryIdentifier()
print("thresholds fitted on val:", identifier.fit(val, query_types=val_types))
identified = identifier(test).query_type
print(f"test macro-F1 of the identification: {macro_f1(identified, test_types):.3f}")
for code in QueryType:
    planted = test_types == int(code)
    print(f"  planted {code.name.lower():>15}: {int(planted.sum()):>3} queries, "
          f"R@1 {100 * test.correct[planted].float().mean():5.1f} %, "
          f"identified as such {100 * (identified[planted] == int(code)).float().mean():5.1f} %")

# %%
# Confidences and risk-coverage curves
# ------------------------------------
# :class:`~evidential_prvr.SelectiveConfidence` reads each confidence of
# :data:`~evidential_prvr.uncertainty.CONFIDENCES` off the test opinion. ``kl_margin`` needs the Gaussian
# embeddings of a DAB model, which the probe does not have, so it is left out. The dashed line is the ideal
# confidence, which answers every correct query before any wrong one; E-AURC is the AURC above it.

correct = test.correct
kinds = [kind for kind in CONFIDENCES if kind != "kl_margin"]
print(f"test R@1 at full coverage: {100 * correct.float().mean():.1f} %")
print(f"{'confidence':>12} {'AURC':>7} {'E-AURC':>7} {'R@1@50%':>8} {'R@1@80%':>8}")
fig, ax = plt.subplots(figsize=(6, 4.5))
for kind in kinds:
    confidence = SelectiveConfidence(kind)(test)
    curve = risk_coverage(confidence, correct)
    area = float(aurc(confidence, correct))
    at_50, at_80 = selective_recall(confidence, correct, (0.5, 0.8)).tolist()
    print(f"{kind:>12} {area:7.3f} {float(e_aurc(confidence, correct)):7.3f} {at_50:8.1f} {at_80:8.1f}")
    style = "-" if kind in EVIDENTIAL_CONFIDENCES else ":"
    ax.plot(curve.coverage, curve.risk, style, label=f"{kind} (AURC {area:.3f})")
n, n_correct = correct.numel(), int(correct.sum())
k = torch.arange(1, n + 1, dtype=torch.float64)
ax.plot(k / n, (k - n_correct).clamp_min(0) / k, "--", color="grey", label="ideal")
ax.set_xlabel("coverage (share of queries answered)")
ax.set_ylabel("selective risk (share of wrong top-1 answers)")
ax.set_title("Risk-coverage on the embedded test split (linear probe)")
ax.legend(fontsize="small")
fig.tight_layout()
plt.show()

# %%
# Solid lines are the evidential confidences, dotted ones the score-based ones; lower is better. Each curve
# has one point per distinct confidence value, so queries of equal confidence are answered together.

print(f"total time {time.perf_counter() - start:.1f} s")
workdir.cleanup()
