"""Train the bundled encoder: a small ``open_clip`` CLIP that understands the generated world.

``python -m reference_models.videos.train_encoder --out reference_models/videos/encoders`` trains the model of
``encoders/prvr-tiny.json`` (a 48-pixel ViT with 8-pixel patches and a 20-token text tower, both two layers of
width 64) contrastively on frames drawn with the generated world's own renderer
(:func:`reference_models.videos.generated.render_frame`) and captions of what each frame shows, at varying
specificity: the colour and the shape (each left out one time in ten), the background (one time in three),
the position (one time in three: ``at the left``, ``in the centre``, ...). One caption in four also names a
direction of motion drawn at random: a frame cannot show it, so the encoder learns that it tells nothing
about a frame, and a zero-shot search ranks motion captions by what their frames show.

A frame and a caption match when every attribute the caption names holds for the frame, so a batch has many
positives per row; the loss is CLIP's symmetric cross-entropy with the matches as soft targets (each row's
positives share its mass). Frames are drawn at 96 pixels, scaled to the encoder's 48 as ``index`` scales a
video's frames (bicubic, antialiased) and get a little pixel noise (the codec's).

Then the zero-shot evidence of a gallery without held-out captions is chosen: a generated world of
:data:`WORLD_VIDEOS` videos (seed :data:`WORLD_SEED`, not a seed the tests or the guide use) is indexed with
the new weights and its ``val`` captions choose the temperature, the confidence and the query-type thresholds
(:mod:`reference_models.videos.calibration`), recorded under ``zero_shot``.

Written into ``--out``: ``prvr-tiny-generated-world.safetensors`` (the weights in float16, about 6.7 MB;
``open_clip`` loads them with ``--pretrained``) and ``prvr-tiny-generated-world.json`` (the command, the
settings, the versions, the final loss, the held-out accuracy, the zero-shot evidence, the file's SHA-256
and the seconds). Seeded: the same command with the same torch build and thread count writes the same
weights. On an idle two-core machine the defaults take about five minutes (one thread).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from reference_models.engine import atomic_write, write_json
from reference_models.videos.generated import BACKGROUNDS, COLOURS, MOTIONS, SHAPES, render_frame

__all__ = ["WORLD_VIDEOS", "WORLD_SEED", "position_word", "draw_batch", "caption_matches", "train", "world_evidence", "main"]

_RENDER_SIZE = 96
#: Videos of the generated world whose held-out captions choose the recorded zero-shot evidence.
WORLD_VIDEOS = 120
#: Seed of that world (not one the tests or the guide use).
WORLD_SEED = 1000


def position_word(x: float, y: float) -> str:
    """Where a shape centred at ``(x, y)`` (shares of the side) is: ``centre``, ``left``, ``right``, ``top``, ``bottom``."""
    dx, dy = x - 0.5, y - 0.5
    if max(abs(dx), abs(dy)) < 0.1:
        return "centre"
    if abs(dx) >= abs(dy):
        return "left" if dx < 0 else "right"
    return "top" if dy < 0 else "bottom"


def _caption(rng: np.random.Generator, attrs: dict[str, str]) -> tuple[str, dict[str, str]]:
    """A caption of a frame with ``attrs`` and the attributes it names."""
    named: dict[str, str] = {}
    colour = attrs["colour"] if rng.random() >= 0.1 else None
    shape = attrs["shape"] if rng.random() >= 0.1 or colour is None else None
    if colour:
        named["colour"] = colour
    if shape:
        named["shape"] = shape
    text = f"a {colour or ''} {shape or 'shape'}".replace("  ", " ")
    if rng.random() < 0.25:
        text += f" moves {rng.choice(list(MOTIONS))}"
    if rng.random() < 1 / 3:
        named["background"] = attrs["background"]
        text += f" on a {attrs['background']} background"
    if rng.random() < 1 / 3:
        named["position"] = attrs["position"]
        text += " in the centre" if attrs["position"] == "centre" else f" at the {attrs['position']}"
    return text, named


def draw_batch(rng: np.random.Generator, n: int) -> tuple[np.ndarray, list[str], list[dict[str, str]],
                                                           list[dict[str, str]]]:
    """``n`` frames ``uint8 [n, 96, 96, 3]``, one caption each, each frame's attributes and each caption's named ones."""
    frames = np.empty((n, _RENDER_SIZE, _RENDER_SIZE, 3), dtype=np.uint8)
    captions, attrs, named = [], [], []
    for i in range(n):
        x, y = rng.uniform(0.2, 0.8, size=2)
        a = {"colour": str(rng.choice(list(COLOURS))), "shape": str(rng.choice(SHAPES)),
             "background": str(rng.choice(list(BACKGROUNDS))), "position": position_word(x, y)}
        frames[i] = render_frame(a["colour"], a["shape"], a["background"], x, y, _RENDER_SIZE)
        text, said = _caption(rng, a)
        captions.append(text)
        attrs.append(a)
        named.append(said)
    return frames, captions, attrs, named


def caption_matches(attrs: list[dict[str, str]], named: list[dict[str, str]]) -> torch.Tensor:
    """``bool [frames, captions]``: caption ``j`` holds for frame ``i`` (every attribute it names is the frame's)."""
    out = torch.ones(len(attrs), len(named), dtype=torch.bool)
    for key in ("colour", "shape", "background", "position"):
        frame_values = [a[key] for a in attrs]
        vocab = {v: k for k, v in enumerate(sorted(set(frame_values) | {n[key] for n in named if key in n}))}
        f = torch.tensor([vocab[v] for v in frame_values])
        said = torch.tensor([vocab[n[key]] if key in n else -1 for n in named])
        out &= (said[None, :] < 0) | (f[:, None] == said[None, :])
    return out


def _pixels(frames: np.ndarray, size: int, mean: torch.Tensor, std: torch.Tensor,
            generator: torch.Generator | None) -> torch.Tensor:
    x = torch.from_numpy(frames).permute(0, 3, 1, 2).float().div_(255.0)
    x = F.interpolate(x, size=(size, size), mode="bicubic", antialias=True, align_corners=False)
    if generator is not None:
        x = x + 0.02 * torch.randn(x.shape, generator=generator)
    return (x.clamp(0.0, 1.0) - mean) / std


def _soft_clip_loss(logits: torch.Tensor, matches: torch.Tensor) -> torch.Tensor:
    target = matches.float()
    rows = -(target / target.sum(1, keepdim=True) * logits.log_softmax(1)).sum(1).mean()
    cols = -(target / target.sum(0, keepdim=True) * logits.log_softmax(0)).sum(0).mean()
    return 0.5 * (rows + cols)


def _held_out_accuracy(model: Any, tokenizer: Any, size: int, mean: torch.Tensor, std: torch.Tensor,
                       seed: int, n: int = 512) -> float:
    """Share of held-out frames whose most similar caption (among ``n`` held-out captions) holds for them."""
    rng = np.random.default_rng(10_000 + seed)
    frames, captions, attrs, named = draw_batch(rng, n)
    with torch.no_grad():
        image = F.normalize(model.encode_image(_pixels(frames, size, mean, std, None)), dim=-1)
        text = F.normalize(model.encode_text(tokenizer(captions)), dim=-1)
    best = (image @ text.T).argmax(dim=1)
    return float(caption_matches(attrs, named)[torch.arange(n), best].float().mean())


def train(*, steps: int, batch_size: int, lr: float, seed: int, log_every: int = 100) -> tuple[Any, dict[str, Any]]:
    """The bundled model trained from its seed; returns it (eval mode) and the training record."""
    import open_clip

    from reference_models.videos.clip_encoder import BUNDLED_MODEL, bundled_files

    open_clip.add_model_config(bundled_files()["config"])
    torch.manual_seed(seed)
    logging.disable(logging.WARNING)  # open_clip warns that no weights were loaded: training starts without any
    try:
        model = open_clip.create_model(BUNDLED_MODEL, pretrained=None, device="cpu")
    finally:
        logging.disable(logging.NOTSET)
    tokenizer = open_clip.get_tokenizer(BUNDLED_MODEL)
    cfg = model.visual.preprocess_cfg
    size = int(cfg["size"] if isinstance(cfg["size"], int) else cfg["size"][0])
    mean = torch.tensor(cfg["mean"]).view(1, 3, 1, 1)
    std = torch.tensor(cfg["std"]).view(1, 3, 1, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    warmup = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))
    rng = np.random.default_rng(seed)
    noise = torch.Generator().manual_seed(seed)
    model.train()
    losses: list[float] = []
    start = time.perf_counter()
    for step in range(steps):
        frames, captions, attrs, named = draw_batch(rng, batch_size)
        image = F.normalize(model.encode_image(_pixels(frames, size, mean, std, noise)), dim=-1)
        text = F.normalize(model.encode_text(tokenizer(captions)), dim=-1)
        logits = model.logit_scale.exp().clamp(max=100.0) * image @ text.T
        loss = _soft_clip_loss(logits, caption_matches(attrs, named))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if log_every and (step + 1) % log_every == 0:
            print(f"step {step + 1}/{steps}: loss {np.mean(losses[-log_every:]):.3f} "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
    model.eval()
    record = {"steps": steps, "batch_size": batch_size, "lr": lr, "seed": seed,
              "final_loss": float(np.mean(losses[-min(100, len(losses)):])),
              "held_out_top_caption_holds": _held_out_accuracy(model, tokenizer, size, mean, std, seed),
              "train_seconds": time.perf_counter() - start}
    return model, record


def world_evidence(config: Path, weights: Path, work: Path) -> dict[str, Any]:
    """The zero-shot evidence chosen on the held-out captions of a generated world indexed with these weights."""
    from reference_models.videos.calibration import OPINION_K
    from reference_models.videos.gallery import read_gallery
    from reference_models.videos.generated import write_generated_collection
    from reference_models.videos.indexing import IndexSettings, Sampling, run_index
    from reference_models.videos.saved_index import open_saved_index
    from reference_models.videos.zero_shot import ZeroShotScorer

    world = write_generated_collection(work / "world", n_videos=WORLD_VIDEOS, seed=WORLD_SEED)
    settings = IndexSettings(videos=world.videos_dir, out=work / "gallery", model=str(config), pretrained=str(weights),
                             captions=world.captions_csv, sampling=Sampling(fps=2.0), workers=0)
    run_index(settings, show_progress=False)
    from reference_models.videos.answers import gallery_encoder

    gallery = read_gallery(settings.out)
    calibration = open_saved_index(gallery, ZeroShotScorer(gallery_encoder(gallery))).calibration
    assert calibration is not None
    return {"temperature": calibration.temperature, "tanh_scaling": calibration.tanh_scaling,
            "confidence_kind": calibration.confidence_kind,
            "thresholds": calibration.thresholds, "opinion_k": OPINION_K,
            "source": f"chosen on {calibration.captions} held-out captions of the generated world "
                      f"({WORLD_VIDEOS} videos, seed {WORLD_SEED}) by train_encoder"}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference_models.videos.train_encoder",
                                     description="Train the bundled encoder on frames of the generated world.")
    parser.add_argument("--out", type=Path, required=True, help="folder of the weights and their record")
    parser.add_argument("--steps", type=int, default=2000, help="optimiser steps (default 2000)")
    parser.add_argument("--batch-size", type=int, default=128, help="frames per step (default 128)")
    parser.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (default 0.002)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and the frames (default 0)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    import open_clip
    from safetensors.torch import save

    from reference_models.videos.clip_encoder import BUNDLED_MODEL, BUNDLED_WEIGHTS

    torch.set_num_threads(args.threads)
    model, record = train(steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    weights = out / f"{BUNDLED_MODEL}-{BUNDLED_WEIGHTS}.safetensors"
    state = {k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in model.state_dict().items()}

    data = save(state, metadata={"model": BUNDLED_MODEL, "pretrained": BUNDLED_WEIGHTS})
    atomic_write(weights, lambda handle: handle.write(data))
    import tempfile

    from reference_models.videos.clip_encoder import bundled_files

    with tempfile.TemporaryDirectory() as tmp:
        record["zero_shot"] = world_evidence(bundled_files()["config"], weights, Path(tmp))
    record.update({"command": "python -m reference_models.videos.train_encoder " + shlex.join(sys.argv[1:] if argv is None else argv),
                   "model": BUNDLED_MODEL, "pretrained": BUNDLED_WEIGHTS, "weights_file": weights.name,
                   "weights_sha256": _sha256(weights), "weights_bytes": weights.stat().st_size,
                   "threads": args.threads, "torch": torch.__version__, "open_clip": open_clip.__version__})
    write_json(out / f"{BUNDLED_MODEL}-{BUNDLED_WEIGHTS}.json", record)
    print(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
