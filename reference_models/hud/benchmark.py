"""The embedded CVR benchmark: a small synthetic composed-video-retrieval data set with HUD's two problems planted.

Written in the CoVR layout (:mod:`reference_models.hud.data`) and read back through the same loader. The design
(what is planted and how much) is :class:`CVRBenchmarkSpec`; ``docs/guide/hud.rst`` states it in words. It was
fixed before any HUD-vs-base number was looked at.

World. Three entity categories, each with its own attribute family, and scenes:

* animals {dog, cat, bird, horse, sheep} with a coat {brown, white, black, grey};
* vehicles {car, boat, bus, bike, truck} with a paint {red, blue, green, yellow};
* items {ball, cup, hat, kite, lamp, book} with a material {wooden, metal, plastic, glass};
* scenes {beach, street, park, room, snow}.

A video is ``frames x tokens`` feature tokens (default 4 x 8 of dim 32). Every video has a scene, one animal
(3 tokens in every frame), one vehicle (2 tokens in every frame) and, in 80 % of the videos, an item. An item is
a **key detail** in 75 % of those videos: one token in one frame (a pair of items, 30 % of key details: one token
in each of two frames), i.e. 1-2 of the 32 tokens; otherwise it is large (2 tokens in every frame). A token is
``class + 0.7 attribute + 0.3 scene + 0.5 video style + noise`` (scene tokens: ``scene + style + noise``), the
prototypes being random unit vectors drawn per seed.

Edits. Recolour (change the attribute), replace (by another class of the same category), remove / add an item
(an added item is a key detail), change the scene. An edit is written with an **ambiguous pronoun** ("make it
red", "replace it with a cat", "remove them") for 40 % of the val/test edits and 45 % of the training edits
(HUD Table 1: 34.66 % / 44.76 %); its referent is told only by the video together with the edit's word (a paint
goes with the vehicle, a coat with the animal, a material or a removal with the item; which class, which tokens
and which current attribute only the video holds). The target is the reference video with the edit applied:
the edited entity's tokens are drawn again with the new class or attribute, every other token is the
reference's plus re-encoding noise. Edit types for the metrics: ``pronoun`` (the pronoun form), ``key_detail``
(an explicit edit of a key-detail item, or an added item), ``explicit`` (the rest).

Splits. Training: 1200 reference videos with 2 edits each; validation: 100 videos x 4 edits; test: 150 videos
x 4 edits. Every reference video (and target) is new in each split (test videos are unseen in training). The
4 edits of one test video are different, so the gallery (all 600 test targets) holds 3 siblings of every target
that differ from it only in what was edited.

Named instances (:data:`BENCHMARKS`): ``embedded`` is the design above (the demos'); ``covr-regime`` is the same
generator in the paper's regime (WebVid-CoVR-like, 2,500 test triplets: 500 test videos x 5 edits, token and
re-encoding noise 0.6, style weight 0.2, and reference videos in groups of 8 near-duplicates that share their scene
and entities, ``near_duplicates``); ``docs/guide/hud.rst`` says what each knob changes and why.
"""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import cast

import numpy as np
import torch

from reference_models.engine import write_text

__all__ = ["BENCHMARKS", "CVRBenchmarkSpec", "WORLD", "benchmark_spec", "generate_cvr_benchmark"]

WORLD = {
    "animal": (("dog", "cat", "bird", "horse", "sheep"), ("brown", "white", "black", "grey")),
    "vehicle": (("car", "boat", "bus", "bike", "truck"), ("red", "blue", "green", "yellow")),
    "item": (("ball", "cup", "hat", "kite", "lamp", "book"), ("wooden", "metal", "plastic", "glass")),
}
SCENES = ("beach", "street", "park", "room", "snow")


@dataclass(frozen=True)
class CVRBenchmarkSpec:
    """What the embedded CVR benchmark plants and how much (fixed; see the module docstring).

    ``near_duplicates``: reference videos come in groups of this many that share their scene and entities
    (classes, attributes, token positions), each with its own style and noise (1: none, the embedded design).
    """

    dim: int = 32
    frames: int = 4
    tokens: int = 8
    animal_tokens: int = 3
    vehicle_tokens: int = 2
    large_item_tokens: int = 2
    item_probability: float = 0.8
    key_detail_probability: float = 0.75
    pair_probability: float = 0.3
    attribute_weight: float = 0.7
    scene_weight: float = 0.3
    style_weight: float = 0.5
    noise: float = 0.3
    reencode_noise: float = 0.1
    train_videos: int = 1200
    train_edits: int = 2
    val_videos: int = 100
    test_videos: int = 150
    eval_edits: int = 4
    train_pronoun_ratio: float = 0.45
    eval_pronoun_ratio: float = 0.40
    near_duplicates: int = 1

    def scaled(self, factor: float) -> CVRBenchmarkSpec:
        """The same design with ``factor`` times the videos of every split (tests use tiny versions)."""
        from dataclasses import replace

        return replace(self, train_videos=max(4, round(self.train_videos * factor)),
                       val_videos=max(2, round(self.val_videos * factor)), test_videos=max(2, round(self.test_videos * factor)))



#: The named instances of the design, ``embedded`` (the demo's, unchanged) and ``covr-regime`` (the comparison in
#: the paper's regime, WebVid-CoVR-like, 2,500 test triplets; docs/guide/hud.rst says what each knob changes and
#: why; fixed on the base's validation split of development seed 100 before any HUD-vs-base number).
BENCHMARKS: dict[str, CVRBenchmarkSpec] = {
    "embedded": CVRBenchmarkSpec(),
    "covr-regime": CVRBenchmarkSpec(test_videos=500, val_videos=120, eval_edits=5, noise=0.6, reencode_noise=0.6,
                                    style_weight=0.2, near_duplicates=8),
}


def benchmark_spec(name: str) -> CVRBenchmarkSpec:
    """The spec of the named benchmark (:data:`BENCHMARKS`); ``ValueError`` for an unknown name."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown CVR benchmark {name!r}; choose one of {', '.join(BENCHMARKS)}")
    return BENCHMARKS[name]

@dataclass
class _Entity:
    category: str
    cls: str
    attribute: str
    slots: list[tuple[int, int]]  # (frame, token) positions
    key_detail: bool = False
    plural: bool = False


@dataclass
class _Video:
    scene: str
    entities: dict[str, _Entity]
    style: np.ndarray


@dataclass(frozen=True)
class _Edit:
    kind: str  # recolor | replace | remove | add | scene
    category: str | None
    value: str | None


class _Generator:
    def __init__(self, seed: int, spec: CVRBenchmarkSpec) -> None:
        self.spec = spec
        self.rng = np.random.default_rng(seed)
        names = sorted({w for classes, attrs in WORLD.values() for w in (*classes, *attrs)} | set(SCENES))
        protos = self.rng.standard_normal((len(names), spec.dim))
        self.proto = {n: p / np.linalg.norm(p) for n, p in zip(names, protos)}

    # ---- videos
    def _free_slots(self, used: set[tuple[int, int]], frames: list[int], per_frame: int) -> list[tuple[int, int]]:
        slots = []
        for f in frames:
            free = [t for t in range(self.spec.tokens) if (f, t) not in used]
            for t in self.rng.choice(free, size=per_frame, replace=False):
                slots.append((f, int(t)))
                used.add((f, int(t)))
        return slots

    def _item(self, used: set[tuple[int, int]], cls: str | None = None, key_detail: bool | None = None) -> _Entity:
        s, (classes, attrs) = self.spec, WORLD["item"]
        cls = cls or str(self.rng.choice(classes))
        key = bool(self.rng.random() < s.key_detail_probability) if key_detail is None else key_detail
        plural = key and bool(self.rng.random() < s.pair_probability)
        if key:
            frames = sorted(int(f) for f in self.rng.choice(s.frames, size=2 if plural else 1, replace=False))
            slots = self._free_slots(used, frames, 1)
        else:
            slots = self._free_slots(used, list(range(s.frames)), s.large_item_tokens)
        return _Entity("item", cls, str(self.rng.choice(attrs)), slots, key_detail=key, plural=plural)

    def video(self) -> _Video:
        s = self.spec
        used: set[tuple[int, int]] = set()
        entities = {}
        for category, per_frame in (("animal", s.animal_tokens), ("vehicle", s.vehicle_tokens)):
            classes, attrs = WORLD[category]
            entities[category] = _Entity(category, str(self.rng.choice(classes)), str(self.rng.choice(attrs)),
                                         self._free_slots(used, list(range(s.frames)), per_frame))
        if self.rng.random() < s.item_probability:
            entities["item"] = self._item(used)
        style = self.rng.standard_normal(s.dim) / np.sqrt(s.dim)
        return _Video(str(self.rng.choice(SCENES)), entities, style)

    def features(self, video: _Video) -> np.ndarray:
        s = self.spec
        out = np.repeat((self.proto[video.scene] + s.style_weight * video.style)[None, None], s.frames, 0)
        out = np.repeat(out, s.tokens, 1)
        for e in video.entities.values():
            token = (self.proto[e.cls] + s.attribute_weight * self.proto[e.attribute] + s.scene_weight * self.proto[video.scene]
                     + s.style_weight * video.style)
            for f, t in e.slots:
                out[f, t] = token
        return out + s.noise / np.sqrt(s.dim) * self.rng.standard_normal(out.shape)

    # ---- edits
    def candidate_edits(self, video: _Video) -> list[_Edit]:
        edits = []
        for category, e in video.entities.items():
            classes, attrs = WORLD[category]
            edits.append(_Edit("recolor", category, str(self.rng.choice([a for a in attrs if a != e.attribute]))))
            edits.append(_Edit("replace", category, str(self.rng.choice([c for c in classes if c != e.cls]))))
        if "item" in video.entities:
            edits.append(_Edit("remove", "item", None))
        else:
            edits.append(_Edit("add", "item", str(self.rng.choice(WORLD["item"][0]))))
        edits.append(_Edit("scene", None, str(self.rng.choice([x for x in SCENES if x != video.scene]))))
        return edits

    def apply(self, video: _Video, reference: np.ndarray, edit: _Edit) -> np.ndarray:
        s = self.spec
        target = reference + s.reencode_noise / np.sqrt(s.dim) * self.rng.standard_normal(reference.shape)
        entities = {k: _Entity(**vars(e)) for k, e in video.entities.items()}
        scene = video.scene
        if edit.kind == "scene":
            scene = cast(str, edit.value)  # every token is re-drawn with the new scene
            return self.features(_Video(scene, entities, video.style))
        if edit.kind == "add":
            used = {slot for e in entities.values() for slot in e.slots}
            entities = {"item": self._item(used, cls=edit.value, key_detail=True)}
            entities["item"].plural = False
        elif edit.kind == "remove":
            entities = {"background": _Entity("item", "", "", entities["item"].slots)}
        elif edit.kind == "recolor":  # recolor and replace name the category they edit
            category = cast(str, edit.category)
            entities = {category: _Entity(**{**vars(entities[category]), "attribute": edit.value})}
        else:
            category = cast(str, edit.category)
            entities = {category: _Entity(**{**vars(entities[category]), "cls": edit.value})}
        changed = self.features(_Video(scene, {k: e for k, e in entities.items() if e.cls}, video.style))
        for e in entities.values():
            for f, t in e.slots:
                target[f, t] = changed[f, t]
        return target

    def text(self, video: _Video, edit: _Edit, pronoun: bool) -> str:
        if edit.kind == "scene":
            return f"change the scene to {edit.value}"
        if edit.kind == "add":
            return f"add a {edit.value}"
        e = video.entities[edit.category]  # type: ignore[index]
        subject = ("them" if e.plural else "it") if pronoun else (f"the {e.cls}s" if e.plural else f"the {e.cls}")
        verb = str(self.rng.choice(["make", "turn"]))
        if edit.kind == "recolor":
            return f"{verb} {subject} {edit.value}"
        if edit.kind == "replace":
            return f"replace {subject} with {edit.value}s" if e.plural else f"replace {subject} with a {edit.value}"
        return f"remove {subject}"


def _edit_type(video: _Video, edit: _Edit, pronoun: bool) -> str:
    if pronoun:
        return "pronoun"
    if edit.kind == "add" or (edit.category == "item" and video.entities["item"].key_detail):
        return "key_detail"
    return "explicit"


def _split(gen: _Generator, name: str, n_videos: int, edits_per_video: int, pronoun_ratio: float,
           emb_dir: Path) -> list[list[str]]:
    plans: list[tuple[_Video, list[_Edit]]] = []
    for v in range(n_videos):
        if gen.spec.near_duplicates > 1 and v % gen.spec.near_duplicates:  # a near-duplicate of the group's first
            first = plans[-1][0]
            video = _Video(first.scene, {k: _Entity(**vars(e)) for k, e in first.entities.items()},
                           gen.rng.standard_normal(gen.spec.dim) / np.sqrt(gen.spec.dim))
        else:
            video = gen.video()
        candidates = gen.candidate_edits(video)
        chosen = [candidates[i] for i in gen.rng.choice(len(candidates), size=edits_per_video, replace=False)]
        plans.append((video, chosen))
    pronounable = [(v, j) for v, (_, chosen) in enumerate(plans) for j, e in enumerate(chosen) if e.kind in ("recolor", "replace", "remove")]
    n_pronoun = min(len(pronounable), round(pronoun_ratio * n_videos * edits_per_video))
    pronoun = {pronounable[i] for i in gen.rng.choice(len(pronounable), size=n_pronoun, replace=False)}
    rows = []
    for v, (video, chosen) in enumerate(plans):
        ref_id = f"{name}/r{v:05d}"
        reference = gen.features(video)
        _save(emb_dir, ref_id, reference)
        for j, edit in enumerate(chosen):
            tgt_id = f"{name}/t{v:05d}_{j}"
            _save(emb_dir, tgt_id, gen.apply(video, reference, edit))
            is_pronoun = (v, j) in pronoun
            rows.append([ref_id, tgt_id, gen.text(video, edit, is_pronoun), _edit_type(video, edit, is_pronoun)])
    return rows


def _save(emb_dir: Path, video_id: str, array: np.ndarray) -> None:
    path = emb_dir / f"{video_id}.pth"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(torch.from_numpy(array.astype(np.float32)), path)


def generate_cvr_benchmark(root: str | Path, seed: int = 0, spec: CVRBenchmarkSpec | None = None) -> dict[str, object]:
    """Write the embedded CVR benchmark under ``root`` in the CoVR layout; returns its description.

    ``root/annotation/{train,val,test}.csv`` (columns ``pth1, pth2, edit, edit_type``) and
    ``root/embeddings/<split>/<id>.pth`` tensors ``[frames, tokens, dim]``. The same ``(seed, spec)`` writes the
    same files.
    """
    spec = spec or CVRBenchmarkSpec()
    root = Path(root)
    gen = _Generator(seed, spec)
    emb_dir = root / "embeddings"
    summary: dict[str, object] = {"seed": seed, "spec": asdict(spec)}
    sizes = {"train": (spec.train_videos, spec.train_edits, spec.train_pronoun_ratio),
             "val": (spec.val_videos, spec.eval_edits, spec.eval_pronoun_ratio),
             "test": (spec.test_videos, spec.eval_edits, spec.eval_pronoun_ratio)}
    (root / "annotation").mkdir(parents=True, exist_ok=True)
    for name, (n_videos, n_edits, ratio) in sizes.items():
        rows = _split(gen, name, n_videos, n_edits, ratio, emb_dir)
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["pth1", "pth2", "edit", "edit_type"])
        writer.writerows(rows)
        write_text(root / "annotation" / f"{name}.csv", buffer.getvalue())
        summary[name] = {kind: sum(r[3] == kind for r in rows) for kind in ("pronoun", "explicit", "key_detail")}
    return summary
