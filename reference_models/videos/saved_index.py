"""The saved search index of a gallery: one per way of scoring it, kept under the gallery and updated in place.

A search compares a query with every video's *tokens*: the windows of a zero-shot search
(:mod:`reference_models.videos.zero_shot`), a trained checkpoint's clip and frame embeddings
(:mod:`reference_models.videos.trained`). Computing them for a large gallery takes a while, so they are saved
in ``ROOT/search/<key>/index.pt``, where ``key`` is the scorer's (``zero-shot``, or ``holmes-`` and 16 digits
of the checkpoint's SHA-256): one checkpoint searches any number of galleries, each holding its own index, and
one gallery holds the indexes of any number of checkpoints; nothing of one is written over another.

Each video's rows are saved with the content digest of its file. When the gallery changes (``index`` ran
again on a folder that gained, changed or lost videos), :func:`open_saved_index` computes the rows of the
new and changed videos only, drops those of the removed ones, keeps the others as saved, fits the calibration
on the held-out captions again (:mod:`reference_models.videos.calibration`) and saves the index atomically.
The same happens when the held-out captions change. A saved index of other settings (another encoder,
window layout or format) is computed again, with a note.

With ``--index faiss``, candidate videos come from a FAISS index of every token (``IndexIDMap2`` over a flat
inner-product index, saved beside as ``candidates.pt``) and are re-ranked exactly
(:func:`evidential_prvr.search.rerank_candidates`). Each video has a *slot* that never changes while it stays,
and token ``m`` of slot ``s`` has the FAISS id ``s * M + m``: a gallery that changed is updated with
``remove_ids`` and ``add_with_ids``, never rebuilt.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from evidential_prvr.search import SearchResult
from reference_models import engine
from reference_models.videos.calibration import CALIBRATION_RULE, Calibration
from reference_models.videos.gallery import GalleryFiles

__all__ = ["INDEX_FORMAT", "CALIBRATION_DEPTH", "MIN_CALIBRATION_CAPTIONS", "Scorer", "SavedIndex", "TokenCandidates",
           "open_saved_index", "update_zero_shot_index",
           "calibration_captions"]

#: The ``format`` of ``index.pt``; another one is computed again.
INDEX_FORMAT = 1
#: Calibration searches keep each held-out caption's top this many videos (ranks beyond are "not shown").
CALIBRATION_DEPTH = 1000
#: Fewer held-out captions than this calibrate nothing (the search says "not calibrated").
MIN_CALIBRATION_CAPTIONS = 10


class Scorer(Protocol):
    """One way of scoring a gallery (a zero-shot encoder, a trained checkpoint)."""

    #: The saved index's folder name under ``ROOT/search``.
    key: str
    #: The row tensor whose tokens a FAISS index holds (``[V, M, d]``).
    token_rows: str

    def settings(self) -> dict[str, Any]:
        """What a saved index must have been computed with (digests, layout); another one is computed again."""

    def rows(self, gallery: GalleryFiles, video_ids: list[str]) -> dict[str, torch.Tensor]:
        """The rows (first dimension: ``video_ids``) of the given videos."""

    def encode_texts(self, texts: list[str]) -> torch.Tensor:
        """``[Q, d]`` query embeddings."""

    def top_k(self, queries: torch.Tensor, rows: dict[str, torch.Tensor], k: int, *,
              target: torch.Tensor | None = None, candidates: torch.Tensor | None = None) -> SearchResult:
        """The exact top ``k`` (``candidates``: ``[Q, K']`` rows to re-rank instead of the whole gallery)."""

    def calibrate(self, result: SearchResult, queries: torch.Tensor) -> Calibration:
        """The calibration on a search of the held-out captions (with targets)."""


def calibration_captions(gallery: GalleryFiles, video_ids: list[str]) -> list[dict[str, str]]:
    """The held-out captions (``val`` split) of the videos in ``video_ids``."""
    present = set(video_ids)
    return [c for c in gallery.captions() if c["split"] == "val" and c["video"] in present]


def _captions_digest(captions: list[dict[str, str]]) -> str:
    return hashlib.sha256("\n".join(f"{c['caption_id']} {c['sentence']}" for c in captions).encode()).hexdigest()


class TokenCandidates:
    """A FAISS index of every token of the gallery's rows, updated by slot (see the module documentation)."""

    def __init__(self, index: Any, tokens_per_video: int) -> None:
        self.index, self.tokens_per_video = index, tokens_per_video

    @classmethod
    def build(cls, tokens: torch.Tensor, slots: torch.Tensor) -> TokenCandidates:
        import faiss

        candidates = cls(faiss.IndexIDMap2(faiss.IndexFlatIP(tokens.shape[-1])), tokens.shape[1])
        candidates.add(tokens, slots)
        return candidates

    def _ids(self, slots: torch.Tensor) -> np.ndarray:
        m = self.tokens_per_video
        return (slots.long()[:, None] * m + torch.arange(m)[None, :]).reshape(-1).numpy().astype(np.int64)

    def add(self, tokens: torch.Tensor, slots: torch.Tensor) -> None:
        if len(slots):
            flat = torch.nn.functional.normalize(tokens.float(), dim=-1).reshape(-1, tokens.shape[-1])
            self.index.add_with_ids(np.ascontiguousarray(flat.numpy()), self._ids(slots))

    def remove(self, slots: torch.Tensor) -> None:
        if len(slots):
            self.index.remove_ids(self._ids(slots))

    def candidates(self, queries: torch.Tensor, want: int, slot_to_row: dict[int, int]) -> torch.Tensor:
        """``int64 [Q, want]`` distinct rows of each query, in order of their best token (``want`` <= rows)."""
        q = np.ascontiguousarray(torch.nn.functional.normalize(queries.float(), dim=-1).cpu().numpy())
        n = min(self.index.ntotal, want * self.tokens_per_video)  # the nearest want * M tokens hold want videos
        _, ids = self.index.search(q, n)
        out = torch.empty(len(q), want, dtype=torch.long)
        for i, row in enumerate(ids):
            seen = dict.fromkeys(slot_to_row[int(s)] for s in row[row >= 0] // self.tokens_per_video)
            out[i] = torch.tensor(list(seen)[:want])
        return out

    def save(self, path: Path, slots: torch.Tensor) -> None:
        import faiss

        data = {"faiss": torch.from_numpy(faiss.serialize_index(self.index)), "slots": slots.clone(),
                "tokens_per_video": self.tokens_per_video}
        engine.atomic_write(path, lambda handle: torch.save(data, handle))

    @classmethod
    def load(cls, path: Path) -> tuple[TokenCandidates, torch.Tensor]:
        import faiss

        data = torch.load(path, map_location="cpu", weights_only=True)
        return cls(faiss.deserialize_index(data["faiss"].numpy()), int(data["tokens_per_video"])), data["slots"]


@dataclass
class SavedIndex:
    """The rows of one scorer over one gallery, their calibration, and what the last update did."""

    key: str
    folder: Path
    video_ids: list[str]
    digests: list[str]
    slots: torch.Tensor
    rows: dict[str, torch.Tensor]
    calibration: Calibration | None
    captions_digest: str
    calibration_rule: int = CALIBRATION_RULE
    changes: dict[str, Any] = field(default_factory=dict)
    candidates: TokenCandidates | None = None

    @property
    def num_videos(self) -> int:
        return len(self.video_ids)

    def slot_to_row(self) -> dict[int, int]:
        return {int(s): i for i, s in enumerate(self.slots.tolist())}

    def save(self, settings: dict[str, Any]) -> None:
        data = {"format": INDEX_FORMAT, "key": self.key, "settings": settings, "video_ids": list(self.video_ids),
                "digests": list(self.digests), "slots": self.slots, "rows": self.rows,
                "calibration": None if self.calibration is None else self.calibration.to_dict(),
                "captions_digest": self.captions_digest, "calibration_rule": self.calibration_rule}
        engine.atomic_write(self.folder / "index.pt", lambda handle: torch.save(data, handle))


def _load(folder: Path, scorer: Scorer, settings: dict[str, Any]) -> SavedIndex | None:
    path = folder / "index.pt"
    if not path.is_file():
        return None
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        engine.print_line("note", f"{path} cannot be read ({type(exc).__name__}); computing it again")
        return None
    if not isinstance(data, dict) or data.get("format") != INDEX_FORMAT or data.get("settings") != settings:
        engine.print_line("note", f"{path} was computed with other settings; computing it again")
        return None
    calibration = None if data["calibration"] is None else Calibration.from_dict(data["calibration"])
    return SavedIndex(scorer.key, folder, list(data["video_ids"]), list(data["digests"]), data["slots"],
                      dict(data["rows"]), calibration, str(data["captions_digest"]), int(data.get("calibration_rule", 0)))


def _calibrate(gallery: GalleryFiles, scorer: Scorer, saved: SavedIndex) -> Calibration | None:
    captions = calibration_captions(gallery, saved.video_ids)
    if len(captions) < MIN_CALIBRATION_CAPTIONS:
        return None
    where = {v: i for i, v in enumerate(saved.video_ids)}
    queries = scorer.encode_texts([c["sentence"] for c in captions])
    target = torch.tensor([where[c["video"]] for c in captions], dtype=torch.long)
    result = scorer.top_k(queries, saved.rows, min(saved.num_videos, CALIBRATION_DEPTH), target=target)
    return scorer.calibrate(result, queries)


def open_saved_index(gallery: GalleryFiles, scorer: Scorer, *, rebuild: bool = False, faiss: bool = False,
                     log: Callable[[str], None] | None = None) -> SavedIndex:
    """The scorer's saved index of ``gallery``, brought up to date with the gallery (see the module documentation).

    ``faiss``: also open (or build) the FAISS candidates and bring them up to date. ``changes`` of the result
    says what was added, removed and kept, and whether the calibration was fitted again.
    """
    start = time.perf_counter()
    settings = scorer.settings()
    folder = gallery.search_index(scorer.key)
    current = gallery.encoded_videos()
    if not current:
        raise engine.UserError(f"--gallery {gallery.root}: holds no encoded video (index a folder of videos first)")
    saved = None if rebuild else _load(folder, scorer, settings)
    if saved is None:
        saved = SavedIndex(scorer.key, folder, [], [], torch.zeros(0, dtype=torch.long), {}, None, "")
    old = {(v, d): i for i, (v, d) in enumerate(zip(saved.video_ids, saved.digests))}
    keep = [old[(v, d)] for v, d in current.items() if (v, d) in old]
    new_ids = [v for v, d in current.items() if (v, d) not in old]
    dropped = sorted(set(range(saved.num_videos)) - set(keep))
    changed = bool(new_ids or dropped)
    if changed:
        new_rows = scorer.rows(gallery, new_ids) if new_ids else {}
        next_slot = int(saved.slots.max()) + 1 if len(saved.slots) else 0
        new_slots = torch.arange(next_slot, next_slot + len(new_ids), dtype=torch.long)
        keep_t = torch.tensor(keep, dtype=torch.long)
        rows = {}
        for name in set(saved.rows) | set(new_rows):
            pieces = ([saved.rows[name][keep_t]] if name in saved.rows else []) + (
                [new_rows[name]] if name in new_rows else [])
            rows[name] = torch.cat(pieces)
        ids = [saved.video_ids[i] for i in keep] + new_ids
        digests = [saved.digests[i] for i in keep] + [current[v] for v in new_ids]
        slots = torch.cat([saved.slots[keep_t], new_slots])
        order = sorted(range(len(ids)), key=ids.__getitem__)
        order_t = torch.tensor(order, dtype=torch.long)
        removed_slots = saved.slots[torch.tensor(dropped, dtype=torch.long)] if dropped else saved.slots[:0]
        saved = SavedIndex(scorer.key, folder, [ids[i] for i in order], [digests[i] for i in order], slots[order_t],
                           {n: t[order_t] for n, t in rows.items()}, saved.calibration, saved.captions_digest)
        saved.changes.update(removed_slots=removed_slots, added_slots=new_slots)
    captions_digest = _captions_digest(calibration_captions(gallery, saved.video_ids))
    recalibrate = changed or captions_digest != saved.captions_digest or saved.calibration_rule != CALIBRATION_RULE
    if recalibrate:
        saved.calibration = _calibrate(gallery, scorer, saved)
        saved.captions_digest, saved.calibration_rule = captions_digest, CALIBRATION_RULE
    if changed or recalibrate:
        folder.mkdir(parents=True, exist_ok=True)
        saved.save(settings)
    if faiss:
        _open_candidates(saved, scorer, rebuild)
    saved.changes.update(added=len(new_ids), removed=len(dropped), kept=len(keep), recalibrated=recalibrate,
                         seconds=time.perf_counter() - start)
    if log is not None and (changed or recalibrate):
        log(f"search index {scorer.key}: {len(new_ids)} videos added, {len(dropped)} removed, {len(keep)} kept"
            + (", calibration fitted again" if recalibrate else ""))
    return saved


def _open_candidates(saved: SavedIndex, scorer: Scorer, rebuild: bool) -> None:
    path = saved.folder / "candidates.pt"
    tokens = saved.rows[scorer.token_rows]
    candidates = None
    if path.is_file() and not rebuild:
        candidates, slots = TokenCandidates.load(path)
        stored = set(slots.tolist())
        wanted = set(saved.slots.tolist())
        if candidates.tokens_per_video != tokens.shape[1]:
            candidates = None
        elif stored != wanted:  # the gallery changed since: remove and add by slot
            candidates.remove(torch.tensor(sorted(stored - wanted), dtype=torch.long))
            add = torch.tensor(sorted(wanted - stored), dtype=torch.long)
            row = saved.slot_to_row()
            candidates.add(tokens[torch.tensor([row[int(s)] for s in add], dtype=torch.long)], add)
            candidates.save(path, saved.slots)
    if candidates is None:
        candidates = TokenCandidates.build(tokens, saved.slots)
        candidates.save(path, saved.slots)
    saved.candidates = candidates


def update_zero_shot_index(gallery: GalleryFiles, encoder: Any) -> dict[str, Any]:
    """Bring the gallery's zero-shot search index up to date (what ``index`` does last); returns its changes."""
    from reference_models.videos.zero_shot import ZeroShotScorer

    scorer = ZeroShotScorer(encoder)
    saved = open_saved_index(gallery, scorer, faiss=(gallery.search_index(scorer.key) / "candidates.pt").is_file())
    calibration = saved.calibration
    return {"key": saved.key, "added": saved.changes["added"], "removed": saved.changes["removed"],
            "kept": saved.changes["kept"], "seconds": saved.changes["seconds"],
            "calibrated_on": 0 if calibration is None else calibration.captions}
