"""Synthetic *untrimmed* PRVR sets in the MS-SL layout with BigFile features, for comparing the reference model
with the release on data unlike the embedded benchmark.

This generator is independent of :mod:`reference_models.holmes.data.embedded` (another generative model, other
shapes), so that the comparison does not rest on one generator's quirks:

* **topics**: ``--topics`` topic centres in a hidden latent space; every topic has a few *actions* (latents near
  its centre). A video belongs to one topic; most of its events are actions of that topic, some of another, so
  videos of a topic are near neighbours of each other (hard negatives);
* **untrimmed, variable lengths**: a share of very short videos (``--short-fraction``, 2-16 frames) and a
  log-normal length otherwise (median ``--median-length``, up to ``--max-length`` frames; most longer than the
  128 frames a model sees), with events covering parts of the video between background;
* **frames**: a fixed random map of the latent (event or background) to ``--visual-dim`` features, temporally
  smooth noise plus frame noise, passed through a ReLU (non-negative, like CNN features);
* **captions**: ``--captions`` per video, each describing *one* event of its video (partial relevance); token
  features (``--text-dim``) are a fixed random map of that event's latent for the content tokens plus function
  words of a shared vocabulary, with token noise; lengths vary and some exceed the 30 tokens a model keeps;
* **files**: ``TextData/<collection>{train,val,test}.caption.txt``, ``TextData/roberta_<collection>_query_feat.hdf5``
  and ``FeatureData/<feature>/{feature.bin,id.txt,shape.txt,video2frames.txt}`` (a BigFile: rows in
  ``id.txt`` order, which is *not* the frames' order, ``video2frames.txt`` listing each video's rows in time
  order, as the MS-SL data do), plus ``untrimmed_meta.json`` (seed and settings).

Example (the set of the reference-model guide's "Held-back data" section; without the size options it writes
600 / 200 / 200 videos, the release-sized shape), then a training run on it::

    python benchmarks/untrimmed_sets.py --root /tmp/untrimmed --train-videos 200 --val-videos 100 \
        --test-videos 100 --seed 0
    python benchmarks/release_fidelity.py train --root /tmp/untrimmed --config tvr --epochs 8 --warmup-stage 3 \\
        --hard-negative-epoch 3 --threads 2 --seed 0 --output-dir /tmp/untrimmed-runs/s0
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

COLLECTION = "tvr"
FEATURE = "synthetic"  # the names benchmarks/release_fidelity.py reads


@dataclass(frozen=True)
class UntrimmedSpec:
    """Sizes and difficulty of one untrimmed set (see the module docstring)."""

    videos: tuple[int, int, int] = (600, 200, 200)  # train, val, test
    captions: int = 4  # per video, each describing one of its events
    topics: int = 40
    actions_per_topic: int = 6
    latent_dim: int = 48
    dims: tuple[int, int] = (3072, 768)  # frame and token feature sizes
    short_fraction: float = 0.1  # share of videos of 2-16 frames
    lengths: tuple[int, int] = (180, 480)  # median and longest length of the others (log-normal)
    events: tuple[int, int] = (2, 5)  # events per video
    off_topic: float = 0.25  # chance that an event is an action of another topic
    jitter: float = 0.5  # video-specific jitter of an event's latent
    noise: tuple[float, float, float] = (1.2, 0.6, 0.6)  # frame, temporally smooth and token noise
    content_fraction: float = 0.4  # share of content tokens in a caption (the rest: function words)
    query_length: tuple[int, int] = (6, 44)  # tokens per caption
    vocabulary: int = 300  # function words shared by all captions


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


class _World:
    """The fixed random parts of a set: topic and action latents, modality maps and the word vocabulary."""

    def __init__(self, spec: UntrimmedSpec, rng: np.random.Generator) -> None:
        k = spec.latent_dim
        self.spec = spec
        self.topics = _unit(rng.standard_normal((spec.topics, k)))
        noise = _unit(rng.standard_normal((spec.topics, spec.actions_per_topic, k)))
        self.actions = _unit(0.8 * self.topics[:, None, :] + 0.6 * noise)
        self.to_visual = rng.standard_normal((k, spec.dims[0])).astype(np.float32) / np.sqrt(k)
        self.to_text = rng.standard_normal((k, spec.dims[1])).astype(np.float32) / np.sqrt(k)
        self.bias = (0.3 * rng.standard_normal(spec.dims[0])).astype(np.float32)
        self.words = rng.standard_normal((spec.vocabulary, spec.dims[1])).astype(np.float32) / np.sqrt(k)

    def video(self, rng: np.random.Generator) -> tuple[np.ndarray, list[np.ndarray]]:
        """One video's frames ``[T, D_v]`` and the latents of its events."""
        spec = self.spec
        if rng.random() < spec.short_fraction:
            length = int(rng.integers(2, 17))
        else:
            length = int(np.clip(rng.lognormal(np.log(spec.lengths[0]), 0.55), 17, spec.lengths[1]))
        topic = int(rng.integers(spec.topics))
        n_events = int(rng.integers(spec.events[0], spec.events[1] + 1))
        latents = []
        for _ in range(n_events):
            t = topic if rng.random() >= spec.off_topic else int(rng.integers(spec.topics))
            base = self.actions[t, rng.integers(spec.actions_per_topic)]
            latents.append(_unit(base + spec.jitter * _unit(rng.standard_normal(spec.latent_dim))))
        background = 0.6 * _unit(self.topics[topic] + rng.standard_normal(spec.latent_dim))
        # events take disjoint spans in random order, background between them
        cuts = np.sort(rng.choice(np.arange(1, max(length, 2 * n_events + 1)), size=2 * n_events, replace=False))
        cuts = np.minimum(cuts, length)
        per_frame = np.repeat(background[None, :], length, axis=0)
        for e, latent in enumerate(latents):
            start, end = int(cuts[2 * e]), int(cuts[2 * e + 1])
            if end <= start:  # very short videos: the event covers one frame
                start, end = min(start, length - 1), min(start, length - 1) + 1
            per_frame[start:end] = latent
        smooth = np.cumsum(rng.standard_normal((length, spec.latent_dim)), axis=0)
        smooth /= np.sqrt(np.arange(1, length + 1))[:, None]
        z = per_frame + spec.noise[1] * smooth / np.sqrt(spec.latent_dim)
        frames = z.astype(np.float32) @ self.to_visual + self.bias
        frames += (spec.noise[0] / np.sqrt(spec.latent_dim)) * rng.standard_normal(frames.shape).astype(np.float32)
        return np.maximum(frames, 0.0, dtype=np.float32), latents

    def caption(self, latent: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Token features ``[L, D_t]`` of a caption describing the event with this latent."""
        spec = self.spec
        length = int(rng.integers(spec.query_length[0], spec.query_length[1] + 1))
        content = rng.random(length) < spec.content_fraction
        content[rng.integers(length)] = True
        tokens = self.words[rng.integers(spec.vocabulary, size=length)].copy()
        n = int(content.sum())
        z = latent[None, :] + 0.4 * rng.standard_normal((n, spec.latent_dim)) / np.sqrt(spec.latent_dim)
        tokens[content] = z.astype(np.float32) @ self.to_text
        tokens += (spec.noise[2] / np.sqrt(spec.latent_dim)) * rng.standard_normal(tokens.shape).astype(np.float32)
        return tokens


def write_untrimmed_set(root: Path, spec: UntrimmedSpec, seed: int) -> Path:
    """Write one set under ``root/tvr`` and return that folder."""
    import h5py

    rng = np.random.default_rng(seed)
    world = _World(spec, rng)
    out = Path(root) / COLLECTION
    text_dir, feature_dir = out / "TextData", out / "FeatureData" / FEATURE
    text_dir.mkdir(parents=True, exist_ok=True)
    feature_dir.mkdir(parents=True, exist_ok=True)
    sizes = dict(zip(("train", "val", "test"), spec.videos))
    video2frames: dict[str, list[str]] = {}
    names: list[str] = []
    n_rows = 0
    with open(feature_dir / "feature.bin", "wb") as fbin, \
            h5py.File(text_dir / f"roberta_{COLLECTION}_query_feat.hdf5", "w") as ftext:
        for split, n_videos in sizes.items():
            lines = []
            for v in range(n_videos):
                vid = f"{split}_v{v:05d}"
                frames, latents = world.video(rng)
                # rows of a video are written in a shuffled order; video2frames gives the time order
                order = rng.permutation(frames.shape[0])
                fbin.write(np.ascontiguousarray(frames[order], dtype="<f4").tobytes())
                row_names = [f"{vid}_f{t}" for t in order]
                names.extend(row_names)
                video2frames[vid] = [f"{vid}_f{t}" for t in range(frames.shape[0])]
                n_rows += frames.shape[0]
                for c in range(spec.captions):
                    cap_id = f"{vid}#enc#{c}"
                    latent = latents[int(rng.integers(len(latents)))]
                    ftext.create_dataset(cap_id, data=world.caption(latent, rng))
                    lines.append(f"{cap_id} synthetic caption {c} of {vid}\n")
            (text_dir / f"{COLLECTION}{split}.caption.txt").write_text("".join(lines), encoding="utf-8")
    (feature_dir / "id.txt").write_text(" ".join(names), encoding="utf-8")
    (feature_dir / "shape.txt").write_text(f"{n_rows} {spec.dims[0]}", encoding="utf-8")
    (feature_dir / "video2frames.txt").write_text(repr(video2frames), encoding="utf-8")
    meta = {"seed": seed, "spec": asdict(spec), "frames": n_rows}
    (out / "untrimmed_meta.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    defaults = UntrimmedSpec()
    ints = (("train-videos", defaults.videos[0]), ("val-videos", defaults.videos[1]),
            ("test-videos", defaults.videos[2]), ("captions", defaults.captions), ("topics", defaults.topics),
            ("visual-dim", defaults.dims[0]), ("text-dim", defaults.dims[1]),
            ("median-length", defaults.lengths[0]), ("max-length", defaults.lengths[1]))
    for name, default in ints:
        parser.add_argument("--" + name, type=int, default=default)
    floats = (("short-fraction", defaults.short_fraction), ("frame-noise", defaults.noise[0]),
              ("token-noise", defaults.noise[2]))
    for name, default in floats:
        parser.add_argument("--" + name, type=float, default=default)
    a = parser.parse_args(argv)
    spec = UntrimmedSpec(videos=(a.train_videos, a.val_videos, a.test_videos), captions=a.captions, topics=a.topics,
                         dims=(a.visual_dim, a.text_dim), short_fraction=a.short_fraction,
                         lengths=(a.median_length, a.max_length),
                         noise=(a.frame_noise, defaults.noise[1], a.token_noise))
    out = write_untrimmed_set(a.root, spec, a.seed)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
