"""Evaluation time and peak memory of chunked PRVR scoring + recall@K at ActivityNet test scale.

Random embeddings stand in for the encoded test set (15,753 queries × 4,430 videos, d = 384, M_c = 32,
M_f = 128 with a random number of valid frames per video), so this measures only the retrieval step the
paper's Table 2 calls "retrieval time" minus query encoding: chunked max-cosine scoring
(:func:`reference_models.holmes.scoring.score_matrix`) and :func:`evidential_prvr.metrics.recall_at_k`.

Usage::

    python benchmarks/evaluation.py            # full ActivityNet scale
    python benchmarks/evaluation.py --quick    # 1,000 queries × 300 videos, a few seconds
    python benchmarks/evaluation.py --device cuda --json results.json
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._timing import set_threads, synchronize  # noqa: E402
from evidential_prvr.metrics import recall_at_k  # noqa: E402
from reference_models.holmes.model import HolmesModel, ModelConfig, VideoEmbeddings  # noqa: E402
from reference_models.holmes.scoring import score_matrix  # noqa: E402


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def run(args: argparse.Namespace) -> dict[str, float | int | str]:
    device = torch.device(args.device)
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    n_q, n_v, d = args.queries, args.videos, args.hidden
    videos = VideoEmbeddings(
        clip=torch.randn(n_v, args.clips, d, generator=gen).to(device),
        frame=torch.randn(n_v, args.frames, d, generator=gen).to(device),
        frame_mask=(
            torch.arange(args.frames).unsqueeze(0) < torch.randint(1, args.frames + 1, (n_v, 1), generator=gen)
        ).to(device),
    )
    queries = torch.randn(n_q, d, generator=gen).to(device)
    gt = torch.randint(0, n_v, (n_q,), generator=gen).to(device)
    # only Eq. 2's branch weights are used from the model
    model = HolmesModel(ModelConfig(visual_dim=1, text_dim=1, hidden_size=8, num_heads=1, widths=(math.inf,)))

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base_alloc = torch.cuda.memory_allocated(device)
    rss_before = _peak_rss_mib()
    synchronize(device)
    start = time.perf_counter()
    sims = score_matrix(model, videos, queries, query_chunk=args.query_chunk, video_chunk=args.video_chunk)
    synchronize(device)
    scoring_s = time.perf_counter() - start
    start = time.perf_counter()
    recalls = recall_at_k(sims.score, gt, query_chunk=args.query_chunk)
    synchronize(device)
    recall_s = time.perf_counter() - start

    block_mib = args.query_chunk * args.video_chunk * max(args.clips, args.frames) * 4 / 2**20
    result: dict[str, float | int | str] = {
        "device": str(device),
        "queries": n_q,
        "videos": n_v,
        "hidden": d,
        "clips": args.clips,
        "frames": args.frames,
        "query_chunk": args.query_chunk,
        "video_chunk": args.video_chunk,
        "scoring_s": round(scoring_s, 3),
        "recall_s": round(recall_s, 3),
        "total_s": round(scoring_s + recall_s, 3),
        "score_block_mib": round(block_mib, 1),
        "score_matrices_mib": round(3 * n_q * n_v * 4 / 2**20, 1),
        "SumR_random": round(recalls["SumR"], 3),
    }
    if device.type == "cuda":
        result["peak_extra_cuda_mib"] = round((torch.cuda.max_memory_allocated(device) - base_alloc) / 2**20, 1)
    else:
        result["peak_rss_growth_mib"] = round(_peak_rss_mib() - rss_before, 1)
        result["peak_rss_mib"] = round(_peak_rss_mib(), 1)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 queries × 300 videos")
    parser.add_argument("--queries", type=int, default=15_753)
    parser.add_argument("--videos", type=int, default=4_430)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--clips", type=int, default=32)
    parser.add_argument("--frames", type=int, default=128)
    parser.add_argument("--query-chunk", type=int, default=512)
    parser.add_argument("--video-chunk", type=int, default=256)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.queries, args.videos = 1_000, 300
    set_threads(args.threads)
    result = run(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
