"""Benchmark: what L_intra costs on a lineage codebase's clips versus its multi-scale proposals.

MS-SL-lineage models encode ``C`` clips per video and pool them into multi-scale proposals with windows
1..C (``C (C + 1) / 2`` of them: 528 for 32 clips). L_intra (Holmes Eq. 17-20) transports every caption
of a video onto that video's clip embeddings, so its cost grows with the number of positions it is given.
This script times one forward + backward of :func:`evidential_prvr.build_intra_video_batch` followed by
the release's :class:`evidential_prvr.IntraVideoEvidentialLoss` with the ``C`` clips and with all the
proposals, on the same random batch, and prints the ratio (proposals / clips) measured in the same run.

Usage::

    python benchmarks/lineage_intra_cost.py            # MS-SL's TVR batch: 128 videos x 5 captions, 32 clips, d 384
    python benchmarks/lineage_intra_cost.py --videos 8 --captions 2 --clips 8 --dim 16 --repeats 1 --warmup 0
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a source checkout

from benchmarks._timing import set_threads, time_samples_ms  # noqa: E402
from evidential_prvr import IntraVideoEvidentialLoss, build_intra_video_batch  # noqa: E402


def multi_scale_proposals(clips: torch.Tensor) -> torch.Tensor:
    """``[V, C, d]`` clips -> ``[V, C (C + 1) / 2, d]``: mean-pooled windows of 1..C clips, stride 1 (MS-SL's map)."""
    pooled = [F.avg_pool1d(clips.transpose(1, 2), width, stride=1).transpose(1, 2) for width in range(1, clips.shape[1] + 1)]
    return torch.cat(pooled, dim=1)


def main() -> None:
    """Time L_intra on the clips and on the proposals of one random batch and print the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=128, help="videos per batch (MS-SL's bsz)")
    parser.add_argument("--captions", type=int, default=5, help="captions per video (TVR: 5)")
    parser.add_argument("--clips", type=int, default=32, help="clips per video (MS-SL's map_size)")
    parser.add_argument("--dim", type=int, default=384, help="embedding width (MS-SL's hidden_size)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    set_threads(args.threads)

    gen = torch.Generator().manual_seed(args.seed)
    query_video = torch.arange(args.videos).repeat_interleave(args.captions)
    query_emb = torch.randn(len(query_video), args.dim, generator=gen, requires_grad=True)
    clips = torch.randn(args.videos, args.clips, args.dim, generator=gen, requires_grad=True)
    intra = IntraVideoEvidentialLoss.from_preset("release", dataset="tvr")

    def step(positions: torch.Tensor) -> None:
        groups = build_intra_video_batch(query_emb, query_video, positions, max_queries=args.captions)
        intra(groups.sim, groups.query_mask, groups.clip_mask).backward()

    # the model computes the proposals anyway: both are leaves here, so only L_intra is timed
    proposals = multi_scale_proposals(clips.detach()).requires_grad_()
    results = {}
    for name, positions in (("clips", clips), ("proposals", proposals)):
        samples = time_samples_ms(lambda: step(positions), args.repeats, warmup=args.warmup)
        results[name] = (positions.shape[1], statistics.median(samples))

    print(f"L_intra forward + backward, {args.videos} videos x {args.captions} captions, d {args.dim}, "
          f"{args.threads} thread(s), median of {args.repeats}:")
    for name, (positions, ms) in results.items():
        print(f"  {name:<9} {positions:>5} per video  {ms:9.2f} ms")
    print(f"ratio proposals / clips: {results['proposals'][1] / results['clips'][1]:.2f}x")


if __name__ == "__main__":
    main()
