"""Time forward + backward of the inter-video evidential loss L_inter (Holmes Eq. 18).

For each batch size (queries x videos) the script times one forward + backward pass of
:class:`evidential_prvr.EvidentialRetrievalLoss` on frame- and clip-scale similarity matrices and, on the
same batch, of the InfoNCE loss of both branches (:func:`evidential_prvr.functional.info_nce_loss` on
frame and on clip scores), and prints the median times and their ratio as a table.

Example::

    python benchmarks/inter_video.py --sizes 640x128 1280x256 --threads 2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks._timing import median_ms, set_threads  # noqa: E402
from evidential_prvr import EvidentialRetrievalLoss  # noqa: E402
from evidential_prvr.functional import info_nce_loss  # noqa: E402


def _parse_size(text: str) -> tuple[int, int]:
    try:
        queries, videos = (int(part) for part in text.lower().split("x"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"size must look like 640x128, got {text!r}") from exc
    if queries < 1 or videos < 1 or queries < videos:
        raise argparse.ArgumentTypeError(f"size needs queries >= videos >= 1, got {text!r}")
    return queries, videos


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", type=_parse_size, default=[(640, 128), (1280, 256), (2560, 512)],
                        metavar="QxV", help="batch sizes as queries x videos (default: 640x128 1280x256 2560x512)")
    parser.add_argument("--preset", choices=["paper", "release"], default="release", help="loss preset (default: release)")
    parser.add_argument("--dataset", choices=["tvr", "activitynet", "charades"], default="tvr",
                        help="dataset of the release preset (default: tvr)")
    parser.add_argument("--repeats", type=int, default=30, help="timed repetitions per size (default: 30)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed warm-up repetitions (default: 5)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: 2)")
    parser.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32", help="similarity dtype")
    args = parser.parse_args(argv)

    set_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    dataset = args.dataset if args.preset == "release" else None
    loss_fn = EvidentialRetrievalLoss.from_preset(args.preset, dataset=dataset)
    generator = torch.Generator().manual_seed(0)

    print(f"preset={args.preset}{'/' + dataset if dataset else ''} device={device} dtype={args.dtype} "
          f"threads={args.threads} repeats={args.repeats}")
    header = f"{'queries x videos':>18} | {'L_inter fwd+bwd ms':>18} | {'InfoNCE fwd+bwd ms':>18} | {'ratio':>6}"
    print(header)
    print("-" * len(header))
    for queries, videos in args.sizes:
        # each video has queries / videos captions, as in a PRVR batch (TVR: 5 per video)
        owner = torch.arange(queries) % videos
        frame = (torch.randn(queries, videos, generator=generator) * 0.3).tanh().to(device, dtype)
        clip = (torch.randn(queries, videos, generator=generator) * 0.3).tanh().to(device, dtype)
        frame[torch.arange(queries), owner] += 0.3
        clip[torch.arange(queries), owner] += 0.3
        frame.requires_grad_()
        clip.requires_grad_()
        owner = owner.to(device)

        def inter_step() -> None:
            frame.grad = clip.grad = None
            loss_fn(frame, clip, owner).backward()

        def nce_step() -> None:
            frame.grad = clip.grad = None
            (info_nce_loss(frame, owner) + info_nce_loss(clip, owner)).backward()

        inter_ms = median_ms(inter_step, args.repeats, warmup=args.warmup, device=device)
        nce_ms = median_ms(nce_step, args.repeats, warmup=args.warmup, device=device)
        print(f"{f'{queries} x {videos}':>18} | {inter_ms:>18.2f} | {nce_ms:>18.2f} | {inter_ms / nce_ms:>6.2f}")


if __name__ == "__main__":
    main()
