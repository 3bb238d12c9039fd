"""Per-query time of DAB's one-step bridge against its base and the ``T'``-step bridge, in the same run.

The comparison's models (the ``msrvtt-regime`` preset, 256-d features): the base (cosine), DAB with its
``T'``-step text bridge, and DAB answering with the one-step student of :mod:`reference_models.dab.distill`
(``bridge.distill = "one-step"``; marked distilled without training: the time does not depend on the weights).
Each answers queries against a gallery of ``--gallery`` videos encoded beforehand (frame tokens, pooling and
video Gaussians are query-independent and not timed), in two ways:

* **one at a time**: ``--queries`` queries, each encoded and scored alone (a search box);
* **in a batch**: the same queries encoded and scored together, the time divided by their number (evaluation,
  a server that batches).

The gallery side of every model is prepared once with the gallery: the base's unit-norm videos, DAB's video
Gaussians and their side of the KL (:func:`evidential_prvr.functional.prepare_kl_sources`).

Each repeat times every model once in turn (so a change of load falls on all of them); printed: the median over
``--repeats`` repeats of the time per query, and each model's ratio to the base's median. The target is the
one-step bridge at <= 1.3x the base (DAB's own overhead figure).

What is timed starts at the precomputed text feature: the benchmark's features stand for frozen CLIP ones, so the
text encoder that DAB's latency (its paper's "~30 % overhead" of the 32 steps) includes is not in it.
``--text-encoder clip-b32`` adds a stand-in of that encoder's cost to every model alike, a transformer of CLIP
ViT-B/32's text-encoder size (12 pre-norm layers, width 512, 8 heads, 77 causal tokens, random weights, its
end-of-text token projected to the feature width), so that the ratio reads as the paper's does.

Example (the numbers in docs/guide/dab.rst)::

    OMP_NUM_THREADS=1 python benchmarks/dab_one_step.py --threads 1 --gallery 1000 --repeats 15
    OMP_NUM_THREADS=1 python benchmarks/dab_one_step.py --threads 1 --gallery 1000 --repeats 15 --validate off
    OMP_NUM_THREADS=1 python benchmarks/dab_one_step.py --threads 1 --gallery 1000 --repeats 5 --text-encoder clip-b32
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

import evidential_prvr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from benchmarks._timing import set_threads, synchronize  # noqa: E402
from reference_models.dab.comparison_runner import DABComparison  # noqa: E402
from reference_models.dab.config import PRESETS  # noqa: E402
from reference_models.dab.model import T2VModel  # noqa: E402

MODELS = ("base", "dab", "dab-onestep")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gallery", type=int, default=1000, help="videos in the gallery (1k-A: 1000)")
    parser.add_argument("--frames", type=int, default=12)
    parser.add_argument("--queries", type=int, default=64, help="queries per repeat")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's choice)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--validate", choices=("on", "off"), default="on",
                        help="the library's finiteness checks (evidential_prvr.set_default_validate_args; default on, "
                             "the library's default; off, a deployment's)")
    parser.add_argument("--text-encoder", choices=("none", "clip-b32"), default="none",
                        help="none: time from the precomputed text feature (default); clip-b32: add a CLIP "
                             "ViT-B/32-sized text transformer's cost to every model alike")
    return parser.parse_args(argv)


class TextEncoderCost(torch.nn.Module):
    """A stand-in of CLIP ViT-B/32's text encoder cost: 12 pre-norm layers of width 512, 8 heads, 77 causal
    tokens; the end-of-text token projected to ``dim``. Random weights: only its time is used."""

    def __init__(self, dim: int, width: int = 512, layers: int = 12, heads: int = 8, tokens: int = 77) -> None:
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, activation="gelu",
                                                 batch_first=True, norm_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.embed = torch.nn.Linear(dim, tokens * width)
        self.project = torch.nn.Linear(width, dim)
        self.tokens, self.width = tokens, width
        self.register_buffer("causal", torch.nn.Transformer.generate_square_subsequent_mask(tokens))

    def forward(self, text: torch.Tensor) -> torch.Tensor:
        x = self.embed(text).view(text.shape[0], self.tokens, self.width)
        return self.project(self.encoder(x, mask=self.causal, is_causal=True)[:, -1])


def build(name: str, dim: int, device: torch.device) -> T2VModel:
    """The comparison's model of ``name`` (untrained; the one-step student marked distilled)."""
    config = DABComparison(PRESETS["msrvtt-regime"]).variant_config(name)
    torch.manual_seed(0)
    model = T2VModel(dim, dim, config).to(device).eval()
    if model.student is not None:
        model.student_ready.fill_(True)
    return model


def per_query_ms(fn: Callable[[], object], count: int, device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return (time.perf_counter() - start) * 1e3 / count


@torch.no_grad()
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    set_threads(args.threads)
    evidential_prvr.set_default_validate_args(args.validate == "on")
    device = torch.device(args.device)
    dim = PRESETS["msrvtt-regime"].backbone.hidden
    g = torch.Generator().manual_seed(0)
    frames = torch.randn(args.gallery, args.frames, dim, generator=g).to(device)
    mask = torch.ones(args.gallery, args.frames, dtype=torch.bool, device=device)
    text = torch.randn(args.queries, dim, generator=g).to(device)
    models = {name: build(name, dim, device) for name in MODELS}
    encode = TextEncoderCost(dim).to(device).eval() if args.text_encoder == "clip-b32" else torch.nn.Identity()
    galleries = {name: model.encode_gallery(frames, mask, prepare_kl=True) for name, model in models.items()}
    samples: dict[tuple[str, str], list[float]] = {(n, m): [] for n in MODELS for m in ("single", "batch")}

    def single(name: str) -> Callable[[], object]:
        model, gallery = models[name], galleries[name]
        return lambda: [model.score(model.encode_text(encode(text[i : i + 1])), gallery) for i in range(args.queries)]

    def batch(name: str) -> Callable[[], object]:
        model, gallery = models[name], galleries[name]
        return lambda: model.score(model.encode_text(encode(text)), gallery)

    for name in MODELS:  # warm-up
        single(name)()
        batch(name)()
    for _ in range(args.repeats):
        for name in MODELS:
            samples[name, "single"].append(per_query_ms(single(name), args.queries, device))
            samples[name, "batch"].append(per_query_ms(batch(name), args.queries, device))
    medians = {key: statistics.median(values) for key, values in samples.items()}
    b = PRESETS["msrvtt-regime"]
    print(f"msrvtt-regime models: Gaussian dim {b.head.gaussian_dim}, T' = {b.bridge.n_steps}; gallery {args.gallery} "
          f"videos x {args.frames} frames; {args.queries} queries x {args.repeats} repeats; threads "
          f"{torch.get_num_threads()}; {device}; validate_args {args.validate}; text encoder {args.text_encoder}")
    print(f"{'model':<12} {'one at a time ms':>17} {'x base':>7} {'in a batch ms':>14} {'x base':>7}")
    for name in MODELS:
        one, many = medians[name, "single"], medians[name, "batch"]
        print(f"{name:<12} {one:17.4f} {one / medians['base', 'single']:7.2f} {many:14.4f} "
              f"{many / medians['base', 'batch']:7.2f}")
    for mode in ("single", "batch"):
        ratio = medians["dab-onestep", mode] / medians["base", mode]
        print(f"one-step bridge / base, {'one at a time' if mode == 'single' else 'in a batch'}: {ratio:.2f}x "
              f"(target <= 1.3x): {'MET' if ratio <= 1.3 else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
