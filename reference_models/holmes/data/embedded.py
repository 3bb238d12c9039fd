"""The embedded benchmark: a small synthetic PRVR data set written in the real on-disk layout.

Generative model
----------------
A hidden *concept* space of dimension ``C`` (``spec.concept_dim``) links the two modalities through two
fixed random linear maps drawn once per seed, :math:`W_v \\in \\mathbb{R}^{D_v \\times C}` and
:math:`W_t \\in \\mathbb{R}^{D_t \\times C}`; a model has to learn the cross-modal map from data.

*Videos* are untrimmed: ``T`` frames (``spec.video_length``) of background plus several non-overlapping
*events*. Every frame is

.. math::

   x_t = W_v \\big(b + \\textstyle\\sum_{e \\ni t} a_e\\, c_e\\big) + \\varepsilon_t,
   \\qquad \\varepsilon_t \\sim \\mathcal{N}(0, \\sigma_v^2 / D_v\\, I),

with a per-video background latent ``b`` (norm ``spec.background_amplitude``), unit-norm event concepts
``c_e`` and frame noise as large as the concept, so that a single frame is a weak witness while an event's span,
averaged, is a clean one.

*Queries* each describe one event of their video (partial relevance). A query has ``L`` tokens
(``spec.query_length``); a fraction ``spec.content_token_fraction`` are content tokens
:math:`W_t(a_q c_e + \\eta) + \\epsilon` and the rest are "function words" drawn from a fixed random
vocabulary, all with token noise.

Planted query types (recorded per caption id in ``planted_types.json``):

``"precise"``
    The event's concept is unique to this video.
``"polysemous"``
    The same concept is also planted as an (undescribed) event in ``g - 1`` other videos of the split
    (``spec.polysemous_group_size``), so several videos are plausibly relevant; the annotated ground truth
    stays the one video, which caps the attainable R@1 for these queries near ``1/g``.
``"underdetermined"``
    A unique concept, but the query carries it at a low amplitude (``spec.underdetermined_amplitude``),
    so its tokens are mostly noise.

*Spurious local frames* (Holmes Figure 1e): for a fraction ``spec.spurious_fraction`` of the queries,
``spec.spurious_videos`` irrelevant videos get one or two frames replaced by a clean, strong copy of the
query's concept. Max-over-frames matching (MIL) is drawn to these spikes, while the ground-truth video
carries the concept over a long but noisy span. The affected videos are listed in ``planted_events.json``.

Written files (under ``<root>/<collection>``): the three caption files, the RoBERTa-style token HDF5,
``FeatureData/<spec.visual_feature>/`` as ``feature.hdf5`` or a BigFile, ``planted_types.json``,
``planted_events.json`` (per caption: type, video, event span, sharing and spurious videos) and
``benchmark_meta.json`` (seed, spec, layout). Everything is a deterministic function of ``seed`` and ``spec``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from reference_models.holmes.data.features import open_visual_reader
from reference_models.holmes.data.layout import CollectionPaths
from reference_models.holmes.data.visual_formats import visual_format

__all__ = [
    "BENCHMARKS",
    "PLANTED_TYPES",
    "EmbeddedBenchmarkSpec",
    "benchmark_spec",
    "generate_embedded_benchmark",
    "planted_event_features",
    "read_planted_events",
    "read_planted_types",
]

PLANTED_TYPES = ("precise", "polysemous", "underdetermined")


@dataclass(frozen=True)
class EmbeddedBenchmarkSpec:
    """Sizes and difficulty knobs of the embedded benchmark (ranges are inclusive ``(low, high)``).

    The defaults give about 1,400 training captions that a GMMFormer-style model fits in a few minutes
    on two CPU cores; the difficulty defaults were chosen so that an MIL baseline lands well inside
    20-60 % R@1 (see the embedded-benchmark guide page for measured figures).
    """

    n_train_videos: int = 400
    n_val_videos: int = 120
    n_test_videos: int = 120
    captions_per_video: tuple[int, int] = (2, 5)
    extra_events_per_video: tuple[int, int] = (0, 1)
    video_length: tuple[int, int] = (20, 300)
    event_slot_fill: tuple[float, float] = (0.5, 1.0)
    visual_dim: int = 96
    text_dim: int = 64
    concept_dim: int = 32
    query_length: tuple[int, int] = (5, 20)
    content_token_fraction: float = 0.5
    n_function_words: int = 64
    background_amplitude: float = 1.0
    event_amplitude: float = 1.0
    frame_noise: float = 1.0
    concept_jitter: float = 0.3
    token_noise: float = 0.3
    polysemous_fraction: float = 0.2
    polysemous_group_size: tuple[int, int] = (3, 5)
    underdetermined_fraction: float = 0.2
    underdetermined_amplitude: float = 0.25
    spurious_fraction: float = 0.3
    spurious_videos: int = 2
    spurious_frames: tuple[int, int] = (1, 2)
    spurious_amplitude: float = 1.5
    spurious_noise: float = 0.2
    visual_feature: str = "synthetic"

    def __post_init__(self) -> None:
        for name in ("n_train_videos", "n_val_videos", "n_test_videos", "visual_dim", "text_dim",
                     "concept_dim", "n_function_words"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name, minimum in (("captions_per_video", 1), ("extra_events_per_video", 0), ("video_length", 1),
                              ("query_length", 1), ("polysemous_group_size", 2), ("spurious_frames", 1)):
            lo, hi = getattr(self, name)
            if not (minimum <= lo <= hi):
                raise ValueError(f"{name} must be (low, high) with {minimum} <= low <= high, got {(lo, hi)}")
        lo, hi = self.event_slot_fill
        if not (0 < lo <= hi <= 1):
            raise ValueError(f"event_slot_fill must satisfy 0 < low <= high <= 1, got {(lo, hi)}")
        for name in ("content_token_fraction", "polysemous_fraction", "underdetermined_fraction", "spurious_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {value}")
        if self.polysemous_fraction + self.underdetermined_fraction > 1.0:
            raise ValueError(
                "polysemous_fraction + underdetermined_fraction must be <= 1, got "
                f"{self.polysemous_fraction + self.underdetermined_fraction}"
            )
        for name in ("background_amplitude", "event_amplitude", "frame_noise", "concept_jitter", "token_noise",
                     "underdetermined_amplitude", "spurious_amplitude", "spurious_noise"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.spurious_videos < 0:
            raise ValueError(f"spurious_videos must be >= 0, got {self.spurious_videos}")

    def scaled(self, factor: float) -> EmbeddedBenchmarkSpec:
        """The same design with ``factor`` times the videos of every split (at least 4; for quick checks)."""
        if not factor > 0:
            raise ValueError(f"factor must be > 0, got {factor!r}")
        return replace(self, **{f"n_{s}_videos": max(4, round(getattr(self, f"n_{s}_videos") * factor))
                                for s in ("train", "val", "test")})


#: The named instances of the design, ``embedded`` (the demos', unchanged) and ``tvr-regime``, the same generator
#: with a TVR-sized test split (1,090 test videos, as TVR's test set) so that R@100 is informative; every planted
#: type, amplitude and fraction is the embedded one. Fixed on the MIL baseline alone (data seed 0, training
#: seed 0, R@100 87.4 and SumR 205.1) before any Holmes-vs-MIL number; docs/guide/embedded_benchmark.rst says why.
#: ``tvr-regime-sparse`` is ``tvr-regime`` with one or two captions per video instead of two to five (a batch of 16
#: videos holds about 24 captions instead of 56): the harder instance on which the identification thresholds,
#: set from a batch's correctly matched captions, are studied (fixed before any run; docs/guide/reference_model.rst).
BENCHMARKS: dict[str, EmbeddedBenchmarkSpec] = {
    "embedded": EmbeddedBenchmarkSpec(),
    "tvr-regime": EmbeddedBenchmarkSpec(n_test_videos=1090),
    "tvr-regime-sparse": EmbeddedBenchmarkSpec(n_test_videos=1090, captions_per_video=(1, 2)),
}


def benchmark_spec(name: str) -> EmbeddedBenchmarkSpec:
    """The spec of the named benchmark (:data:`~reference_models.holmes.data.embedded.BENCHMARKS`);
    ``ValueError`` for an unknown name."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown PRVR benchmark {name!r}; choose one of {', '.join(BENCHMARKS)}")
    return BENCHMARKS[name]


@dataclass
class _Event:
    concept: np.ndarray
    caption_index: int | None  # index into the split's caption list, None for an undescribed event
    span: tuple[int, int] = (0, 0)


@dataclass
class _Query:
    caption_id: str
    video: int
    event: _Event
    kind: str
    concept_name: str
    sharing: list[int] = field(default_factory=list)
    spurious: list[int] = field(default_factory=list)


def _unit(rng: np.random.Generator, dim: int) -> np.ndarray:
    v = rng.standard_normal(dim)
    return v / np.linalg.norm(v)


def _randint(rng: np.random.Generator, bounds: tuple[int, int]) -> int:
    return int(rng.integers(bounds[0], bounds[1] + 1))


class _Maps:
    """The per-seed cross-modal maps and function-word vocabulary shared by all splits."""

    def __init__(self, rng: np.random.Generator, spec: EmbeddedBenchmarkSpec) -> None:
        c = spec.concept_dim
        self.visual = rng.standard_normal((spec.visual_dim, c)) / np.sqrt(c)
        self.text = rng.standard_normal((spec.text_dim, c)) / np.sqrt(c)
        words = rng.standard_normal((spec.n_function_words, spec.text_dim))
        self.function_words = words / np.linalg.norm(words, axis=1, keepdims=True)


def _plan_split(rng: np.random.Generator, spec: EmbeddedBenchmarkSpec, split: str, n_videos: int):
    """Videos (lengths, events) and queries (types, concepts, sharing and spurious videos) of one split."""
    c = spec.concept_dim
    video_ids = [f"{split}{i:05d}" for i in range(n_videos)]
    lengths = [_randint(rng, spec.video_length) for _ in range(n_videos)]
    events: list[list[_Event]] = [[] for _ in range(n_videos)]
    queries: list[_Query] = []
    p_poly, p_under = spec.polysemous_fraction, spec.underdetermined_fraction
    for v in range(n_videos):
        for k in range(_randint(rng, spec.captions_per_video)):
            u = rng.random()
            kind = "polysemous" if u < p_poly else ("underdetermined" if u < p_poly + p_under else "precise")
            ev = _Event(_unit(rng, c), len(queries))
            events[v].append(ev)
            queries.append(_Query(f"{video_ids[v]}#enc#{k}", v, ev, kind, f"{kind[0]}{len(queries):05d}"))
        for _ in range(_randint(rng, spec.extra_events_per_video)):
            events[v].append(_Event(_unit(rng, c), None))
    others = np.arange(n_videos)
    for q in queries:
        candidates = others[others != q.video]
        if q.kind == "polysemous" and len(candidates):
            g = min(_randint(rng, spec.polysemous_group_size) - 1, len(candidates))
            q.sharing = sorted(int(x) for x in rng.choice(candidates, size=g, replace=False))
            for s in q.sharing:
                events[s].append(_Event(q.event.concept, None))
        if spec.spurious_videos and rng.random() < spec.spurious_fraction:
            pool = np.setdiff1d(candidates, q.sharing)
            n = min(spec.spurious_videos, len(pool))
            q.spurious = sorted(int(x) for x in rng.choice(pool, size=n, replace=False)) if n else []
    # Events go into equal slots in random order, each filling a random part of its slot.
    for v in range(n_videos):
        evs = events[v]
        order = rng.permutation(len(evs))
        slot = lengths[v] / len(evs)
        for pos, e in zip(range(len(evs)), order):
            fill = rng.uniform(*spec.event_slot_fill)
            n = max(1, int(round(fill * slot)))
            lo = int(np.floor(pos * slot))
            hi = max(lo + 1, int(np.floor((pos + 1) * slot)))
            n = min(n, hi - lo)
            start = lo + int(rng.integers(0, hi - lo - n + 1))
            evs[e].span = (start, start + n)
    return video_ids, lengths, events, queries


def _render_video(rng, spec, maps, length, events) -> np.ndarray:
    c = spec.concept_dim
    latent = np.broadcast_to(spec.background_amplitude * _unit(rng, c), (length, c)).copy()
    for e in events:
        latent[e.span[0] : e.span[1]] += spec.event_amplitude * e.concept
    noise = rng.standard_normal((length, spec.visual_dim)) * (spec.frame_noise / np.sqrt(spec.visual_dim))
    return latent @ maps.visual.T + noise


def _plant_spurious(rng, spec, maps, frames: np.ndarray, concept: np.ndarray) -> None:
    n = min(_randint(rng, spec.spurious_frames), frames.shape[0])
    where = rng.choice(frames.shape[0], size=n, replace=False)
    clean = spec.spurious_amplitude * (maps.visual @ concept)
    noise = rng.standard_normal((n, spec.visual_dim)) * (spec.spurious_noise / np.sqrt(spec.visual_dim))
    frames[where] = clean[None, :] + noise


def _render_query(rng, spec, maps, q: _Query) -> np.ndarray:
    length = _randint(rng, spec.query_length)
    n_content = max(1, int(round(spec.content_token_fraction * length)))
    amplitude = spec.underdetermined_amplitude if q.kind == "underdetermined" else 1.0
    jitter = rng.standard_normal((n_content, spec.concept_dim)) * (spec.concept_jitter / np.sqrt(spec.concept_dim))
    tokens = maps.function_words[rng.integers(0, spec.n_function_words, size=length)].copy()
    positions = rng.choice(length, size=n_content, replace=False)
    tokens[positions] = (amplitude * q.event.concept[None, :] + jitter) @ maps.text.T
    tokens += rng.standard_normal(tokens.shape) * (spec.token_noise / np.sqrt(spec.text_dim))
    return tokens.astype(np.float32)


def _write_visual(paths: CollectionPaths, layout: str, videos: dict[str, np.ndarray]) -> None:
    paths.feature_dir.mkdir(parents=True, exist_ok=True)
    visual_format(layout).write(paths, videos)


def generate_embedded_benchmark(
    root: str | Path,
    collection: str = "embedded",
    seed: int = 0,
    spec: EmbeddedBenchmarkSpec = EmbeddedBenchmarkSpec(),
    feature_layout: str = "hdf5",
) -> Path:
    """Write the embedded benchmark under ``<root>/<collection>`` and return that directory.

    Parameters
    ----------
    root : str or Path
        Data root (created if needed). Existing files of the collection are overwritten.
    collection : str
        Collection name (file names follow it).
    seed : int
        Everything (maps, videos, queries, planted types) is a deterministic function of ``seed`` and ``spec``.
    spec : EmbeddedBenchmarkSpec
        Sizes and difficulty; the visual feature directory is ``spec.visual_feature``.
    feature_layout : str
        A registered visual-feature format (:mod:`~reference_models.holmes.data.visual_formats`): ``"hdf5"``
        writes ``feature.hdf5``, ``"bigfile"`` the MS-SL BigFile (the same features either way).

    Returns
    -------
    pathlib.Path
        ``<root>/<collection>``.
    """
    visual_format(feature_layout)  # a registered format, or a ValueError naming them
    if not isinstance(spec, EmbeddedBenchmarkSpec):
        raise TypeError(f"spec must be an EmbeddedBenchmarkSpec, got {type(spec).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    import h5py

    paths = CollectionPaths(Path(root), collection, spec.visual_feature)
    paths.text_dir.mkdir(parents=True, exist_ok=True)
    map_seq, *split_seqs = np.random.SeedSequence(seed).spawn(4)
    maps = _Maps(np.random.default_rng(map_seq), spec)

    videos: dict[str, np.ndarray] = {}
    planted: dict[str, str] = {}
    details: dict[str, dict] = {}
    sizes = {"train": spec.n_train_videos, "val": spec.n_val_videos, "test": spec.n_test_videos}
    with h5py.File(paths.text_features, "w") as text_file:
        for (split, n_videos), seq in zip(sizes.items(), split_seqs):
            rng = np.random.default_rng(seq)
            video_ids, lengths, events, queries = _plan_split(rng, spec, split, n_videos)
            frames = [_render_video(rng, spec, maps, lengths[v], events[v]) for v in range(n_videos)]
            for q in queries:
                for s in q.spurious:
                    _plant_spurious(rng, spec, maps, frames[s], q.event.concept)
            for vid, f in zip(video_ids, frames):
                videos[vid] = f.astype(np.float32)
            lines = []
            for q in queries:
                text_file.create_dataset(q.caption_id, data=_render_query(rng, spec, maps, q))
                lines.append(f"{q.caption_id} someone does {q.concept_name} in the scene")
                planted[q.caption_id] = q.kind
                details[q.caption_id] = {
                    "type": q.kind,
                    "video": video_ids[q.video],
                    "span": list(q.event.span),
                    "video_length": lengths[q.video],
                    "sharing_videos": [video_ids[s] for s in q.sharing],
                    "spurious_videos": [video_ids[s] for s in q.spurious],
                }
            paths.caption_file(split).write_text("\n".join(lines) + "\n", encoding="utf-8")
    _write_visual(paths, feature_layout, videos)

    out = paths.collection_dir
    (out / "planted_types.json").write_text(json.dumps(planted, indent=0, sort_keys=True), encoding="utf-8")
    (out / "planted_events.json").write_text(json.dumps(details, indent=0, sort_keys=True), encoding="utf-8")
    meta = {"seed": seed, "collection": collection, "feature_layout": feature_layout, "spec": asdict(spec)}
    (out / "benchmark_meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")
    return out


def read_planted_types(root: str | Path, collection: str = "embedded") -> dict[str, str]:
    """The planted type (``"precise"``, ``"polysemous"`` or ``"underdetermined"``) of every caption id."""
    path = Path(root) / collection / "planted_types.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing planted_types.json (not an embedded benchmark?)")
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not all(v in PLANTED_TYPES for v in data.values()):
        raise ValueError(f"{path}: expected a JSON object mapping caption ids to one of {PLANTED_TYPES}")
    return {str(k): str(v) for k, v in data.items()}


def read_planted_events(root: str | Path, collection: str = "embedded") -> dict[str, dict[str, Any]]:
    """The planted event of every caption id (``planted_events.json``): its ``type``, ``video``, ``span``
    (``[start, end)`` frames), ``video_length``, ``sharing_videos`` and ``spurious_videos``."""
    path = Path(root) / collection / "planted_events.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing planted_events.json (not an embedded benchmark?)")
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not all(isinstance(v, dict) and "span" in v for v in data.values()):
        raise ValueError(f"{path}: expected a JSON object mapping caption ids to their planted events")
    return data


def planted_event_features(
    root: str | Path, collection: str, visual_feature: str, caption_ids: Sequence[str]
) -> np.ndarray:
    """The mean raw frame feature over each caption's planted event span, ``float32 [len(caption_ids), D_v]``.

    What each caption describes, read off the features with the planted spans (which a PRVR model never sees):
    the target of a probe that stands in for a trained model. Reads either visual-feature layout.
    """
    events = read_planted_events(root, collection)
    reader = open_visual_reader(CollectionPaths(Path(root), collection, visual_feature))
    frames: dict[str, np.ndarray] = {}
    rows = []
    try:
        for caption in caption_ids:
            event = events[caption]
            if event["video"] not in frames:
                frames[event["video"]] = reader.read(event["video"])
            start, end = event["span"]
            rows.append(frames[event["video"]][start:end].mean(axis=0))
    finally:
        reader.close()
    return np.stack(rows)
