"""``search``: free-text queries against an extracted gallery, answered by a trained Holmes checkpoint.

For each query: the top-``k`` videos by the Holmes score (Eq. 1-2), each with its best-matching *moment*
(the clip segment with the highest similarity to the query, as a span in seconds); the query's evidential
opinion over the top-k (fused belief of the top video and uncertainty, Holmes Eq. 5 and the Dempster-Shafer
fusion of Eq. 16); its query type (precise / polysemous / under-determined) by the thresholds fitted on the
validation captions searched against the whole gallery (Youden's J of a correct top-1, Eq. 10-12); and the
decision to **answer** or to **ask to rephrase**.

**The decision at a risk.** On the validation split every caption is a query with a known video. Its
confidence (the evidential confidence with the lowest AURC there) and whether its video is among the top
``k`` (the videos a user is shown) give a risk-coverage curve; for a risk ``r`` the threshold is the lowest
confidence whose accepted validation queries miss their video at most a share ``r`` of the time (the largest
coverage at that risk). The validation captions are scored against the whole gallery, as a search is. A
query whose confidence is below the threshold gets "rephrase". When no threshold reaches the risk on
validation, every query gets "rephrase" and the answer says so. The risk holds on validation; on new
queries it is an estimate (from as many validation captions as the collection has).

**The gallery index** (every video's clip and frame embeddings, each clip's span, the validation fit) is
computed once and saved next to the checkpoint as ``gallery_<collection>_<feature>.pt``, with the SHA-256
of the checkpoint, of the feature and text-feature files and of the validation captions. A search whose
files no longer match is refused with one line (``--rebuild-index`` computes it again). ``--index faiss``
takes candidates from :class:`evidential_prvr.search.ClipIndex` (saved beside it) and re-ranks them exactly.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F

from evidential_prvr import GalleryQueryIdentifier
from evidential_prvr.functional import selective_confidence
from evidential_prvr.metrics import risk_coverage
from evidential_prvr.search import ClipIndex, SearchScoring, gallery_search
from evidential_prvr.uncertainty import QueryTypeThresholds
from reference_models import engine
from reference_models.holmes.config import HolmesConfig
from reference_models.holmes.data import load_split, make_query_loader, make_video_loader
from reference_models.holmes.data.batches import collate_queries
from reference_models.holmes.data.layout import CollectionPaths
from reference_models.holmes.data.sampling import l2_normalize, segment_boundaries
from reference_models.holmes.data.split import load_gallery
from reference_models.holmes.model import VideoEmbeddings
from reference_models.holmes.scoring import encode_all_queries, encode_all_videos, index_search, score_matrix
from reference_models.holmes.selective import RetrievalUncertainty
from reference_models.holmes.videos.clip_encoder import ClipEncoder, EncoderError, EncoderSpec
from reference_models.holmes.videos.extraction import read_extraction

__all__ = ["Moment", "Hit", "Answer", "GallerySearch", "threshold_at_risk", "QUERY_TYPES"]

QUERY_TYPES = ("precise", "polysemous", "underdetermined")
_INDEX_VERSION = 2  # 2: the type thresholds are fitted against the whole gallery


@dataclass(frozen=True)
class Moment:
    """The best-matching clip of a video: its span in seconds, its index and its cosine similarity."""

    start: float
    end: float
    clip: int
    similarity: float


@dataclass(frozen=True)
class Hit:
    """One ranked video: rank (1-based), id, Holmes score (Eq. 2) and best moment."""

    rank: int
    video: str
    score: float
    moment: Moment


@dataclass(frozen=True)
class Answer:
    """The answer to one query (the JSON of ``search``, one object per query)."""

    query: str
    results: list[Hit]
    belief: float
    uncertainty: float
    query_type: str
    confidence: float
    confidence_kind: str
    decision: str
    risk: float
    threshold: float | None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def threshold_at_risk(confidence: torch.Tensor, correct: torch.Tensor, risk: float) -> float | None:
    """The lowest confidence whose accepted queries have a selective risk of at most ``risk`` (``None``: none has).

    The operating points are :func:`evidential_prvr.metrics.risk_coverage`'s (ties accepted together).
    """
    if not 0.0 < risk < 1.0:
        raise ValueError(f"risk must be in (0, 1), got {risk!r}")
    coverage, risks = risk_coverage(confidence, correct)
    thresholds = torch.unique(confidence).flip(0)
    ok = (risks <= risk + 1e-12).nonzero()
    if len(ok) == 0:
        return None
    return float(thresholds[int(ok.max())])


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _clip_spans(times: list[float], rate: float, duration: float, n_clips: int, boundaries: str) -> np.ndarray:
    """``[n_clips, 2]`` seconds covered by each clip segment of a video (the frames it averages)."""
    n = len(times)
    idx = segment_boundaries(n, n_clips, boundaries)
    step = 1.0 / rate if rate > 0 else 0.0
    t = np.asarray(times, dtype=np.float64)
    first = t[np.minimum(idx[:-1], n - 1)]
    last = t[np.minimum(np.maximum(idx[1:] - 1, idx[:-1]), n - 1)]
    return np.stack([first, np.minimum(last + step, max(duration, last.max() + step))], axis=1)


class GallerySearch:
    """A trained checkpoint, an extracted gallery and its saved index, ready to answer queries.

    Parameters
    ----------
    checkpoint : path
        ``best.pt`` (or ``last.pt``) of ``train --data-root ROOT``.
    gallery : path
        The ``--out`` of ``extract`` (holds ``extraction.json``).
    device : str
        Where the model and the encoder run.
    index : {"exact", "faiss"}
        Exact scoring of every video, or FAISS candidates (by best clip) re-ranked exactly.
    rebuild : bool
        Compute and save the gallery index again even when a saved one exists.
    """

    def __init__(self, checkpoint: str | Path, gallery: str | Path, *, device: str = "cpu", index: str = "exact",
                 rebuild: bool = False) -> None:
        from reference_models.holmes.factory import build_model
        from reference_models.holmes.objective import HolmesObjective

        if index not in ("exact", "faiss"):
            raise engine.UserError(f"--index must be exact or faiss, got {index!r}")
        self.checkpoint, self.root, self.device, self.index_kind = Path(checkpoint), Path(gallery), device, index
        record = read_extraction(self.root)
        if record is None:
            raise engine.UserError(f"--gallery {self.root}: no extraction.json (not a folder written by extract)")
        self.record = record
        self.paths = CollectionPaths(self.root, record["collection"], record["visual_feature"])
        state = engine.load_checkpoint(self.checkpoint, map_location=device)
        engine.require_keys(state, self.checkpoint, ("config", "model", "visual_dim", "text_dim", "n_clips", "n_frames"))
        try:
            self.config = HolmesConfig.from_dict(state["config"])
        except (TypeError, ValueError) as exc:
            raise engine.CheckpointError(self.checkpoint, f"its config is not valid here ({exc})") from None
        spec = EncoderSpec.from_dict(record["encoder"])
        if (spec.frame_dim, spec.token_dim) != (state["visual_dim"], state["text_dim"]):
            raise engine.UserError(f"checkpoint {self.checkpoint} expects (D_v, D_t) = ({state['visual_dim']}, "
                                   f"{state['text_dim']}), the gallery's encoder gives ({spec.frame_dim}, {spec.token_dim})")
        self.model = build_model(self.config, state["visual_dim"], state["text_dim"], state["n_clips"],
                                 state["n_frames"]).to(device)
        self.model.load_state_dict(state["model"])
        self.model.eval()
        self.objective = HolmesObjective(self.config, self.config.model.hidden_size)
        self.encoder = self._encoder(spec)
        self.index_path = self.checkpoint.parent / f"gallery_{self.paths.collection}_{self.paths.visual_feature}.pt"
        self.saved = self._load_or_build(rebuild)
        # unit rows once here, so that a search does not normalise the whole gallery again per query
        self.videos = VideoEmbeddings(clip=F.normalize(self.saved["clip"].to(device), dim=-1),
                                      frame=F.normalize(self.saved["frame"].to(device), dim=-1),
                                      frame_mask=self.saved["frame_mask"].to(device))
        self.video_ids: list[str] = list(self.saved["video_ids"])
        self.uncertainty = self._restore_uncertainty(self.saved["uncertainty"])
        self.faiss = self._faiss_index() if index == "faiss" else None

    # --- construction -----------------------------------------------------------------------------
    def _encoder(self, spec: EncoderSpec) -> ClipEncoder:
        config = self.root / "encoder_config.json"
        try:
            if not config.is_file():
                encoder = ClipEncoder(spec.model, spec.pretrained, device=self.device, seed=spec.seed)
            else:  # the gallery's JSON configuration, registered under the name it had at extraction
                with tempfile.TemporaryDirectory() as tmp:
                    named = Path(tmp) / f"{spec.model}.json"
                    shutil.copyfile(config, named)
                    encoder = ClipEncoder(str(named), spec.pretrained, device=self.device, seed=spec.seed)
            encoder.check_matches(spec)
        except EncoderError as exc:
            raise engine.UserError(f"--gallery {self.root}: {exc}") from None
        return encoder

    def _fingerprint(self) -> dict[str, str]:
        files = {"checkpoint": self.checkpoint, "features": self.paths.feature_hdf5,
                 "text_features": self.paths.text_features, "val_captions": self.paths.caption_file("val")}
        for name, path in files.items():
            if not path.is_file():
                raise engine.UserError(f"--gallery {self.root}: missing {path} ({name.replace('_', ' ')})")
        return {name: _sha256(path) for name, path in files.items()}

    def _load_or_build(self, rebuild: bool) -> dict[str, Any]:
        fingerprint = self._fingerprint()
        if self.index_path.is_file() and not rebuild:
            saved = engine.load_checkpoint(self.index_path)
            differ = [k for k, v in fingerprint.items() if saved.get("fingerprint", {}).get(k) != v]
            if saved.get("version") != _INDEX_VERSION or differ:
                what = " and ".join(d.replace("_", " ") for d in differ) or "version"
                raise engine.UserError(f"the saved gallery index {self.index_path} does not match the {what} it was "
                                       "built from (changed since); run search with --rebuild-index to compute it again")
            return saved
        saved = self._build(fingerprint)
        engine.atomic_write(self.index_path, lambda handle: torch.save(saved, handle))
        return saved

    @torch.no_grad()
    def _build(self, fingerprint: dict[str, str]) -> dict[str, Any]:
        cfg, model = self.config, self.model
        max_len, n_clips, n_frames = cfg.model.max_query_len, model.config.n_clips, model.config.n_frames
        gallery = load_gallery(self.root, self.paths.collection, self.paths.visual_feature, max_query_len=max_len,
                               n_clips=n_clips, n_frames=n_frames)
        videos = encode_all_videos(model, make_video_loader(gallery, cfg.optim.eval_video_batch), self.device)
        times = engine.read_json_file(self.paths.feature_dir / "frame_times.json", "--gallery")
        spans = np.stack([_clip_spans(times[v]["times"], times[v]["rate"], times[v]["duration"],
                                      model.config.n_clips, gallery.boundaries) for v in gallery.video_ids])
        val = load_split(self.root, self.paths.collection, self.paths.visual_feature, "val", max_query_len=max_len,
                         n_clips=n_clips, n_frames=n_frames)
        # Everything is fitted as search meets it: the validation captions against the whole gallery. Against
        # the validation videos alone the opinions rest on fewer, weaker candidates (a larger uncertainty), so
        # thresholds fitted there would misplace the gallery's queries.
        queries = encode_all_queries(model, make_query_loader(val, cfg.optim.eval_query_batch), self.device)
        sims = score_matrix(model, videos, queries)
        where = {v: i for i, v in enumerate(gallery.video_ids)}
        target = torch.tensor([where[val.video_ids[int(j)]] for j in val.caption_video_index],
                              dtype=torch.int64, device=sims.score.device)
        uncertainty = RetrievalUncertainty.from_identifier(self.objective.identifier())
        uncertainty.fit_scores(sims, queries, target, [None] * val.num_captions)  # query-norm reference, thresholds
        opinion = uncertainty.opinion(sims, queries, target)
        confidence = selective_confidence(opinion, uncertainty.chosen_confidence)  # type: ignore[arg-type]
        # 0-based rank of each validation caption's video in the gallery (ties counted against it)
        val_rank = (sims.score > sims.score.gather(1, target[:, None])).sum(dim=1)
        return {
            "version": _INDEX_VERSION, "fingerprint": fingerprint, "video_ids": list(gallery.video_ids),
            "clip": videos.clip.cpu(), "frame": videos.frame.cpu(), "frame_mask": videos.frame_mask.cpu(),
            "clip_spans": torch.from_numpy(spans),
            "uncertainty": {"reference_norm": uncertainty.reference_norm,
                            "thresholds": uncertainty.thresholds.to_dict(),
                            "confidence": uncertainty.chosen_confidence,
                            "val_confidence": confidence.cpu(), "val_rank": val_rank.cpu(),
                            "criterion": uncertainty.fit_criterion},
        }

    def _restore_uncertainty(self, saved: dict[str, Any]) -> RetrievalUncertainty:
        uncertainty = RetrievalUncertainty.from_identifier(self.objective.identifier())
        uncertainty.identifier = GalleryQueryIdentifier(thresholds=QueryTypeThresholds(**saved["thresholds"]))
        uncertainty.reference_norm = float(saved["reference_norm"])
        uncertainty.chosen_confidence = str(saved["confidence"])
        return uncertainty

    def _faiss_index(self) -> ClipIndex:
        digest = hashlib.sha256(repr(sorted(self.saved["fingerprint"].items())).encode()).hexdigest()[:16]
        path = self.index_path.with_name(f"{self.index_path.stem}.{digest}.faiss")
        if path.is_file():
            return ClipIndex.load(path, device=self.device)
        index = ClipIndex(self.videos.clip)
        index.save(path)
        return index

    # --- queries ------------------------------------------------------------------------------------
    @property
    def num_videos(self) -> int:
        return len(self.video_ids)

    @torch.no_grad()
    def encode_queries(self, queries: list[str]) -> torch.Tensor:
        """``[Q, d]`` Holmes query embeddings of free-text queries (CLIP tokens, then the query encoder)."""
        max_len = self.config.model.max_query_len
        tokens = [l2_normalize(t[:max_len]) for t in self.encoder.encode_tokens(queries)]
        feats, mask = collate_queries(tokens)
        return self.model.encode_queries(feats.to(self.device), mask.to(self.device))

    @torch.no_grad()
    def search(self, queries: list[str], *, k: int = 10, risk: float = 0.2) -> list[Answer]:
        """Answer every query (see the module documentation)."""
        if not queries:
            raise ValueError("queries must hold at least one query")
        for text in queries:
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"every query must be a non-empty string, got {text!r}")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.num_videos:
            raise ValueError(f"k must be an int in [1, {self.num_videos}] (the gallery's videos), got {k!r}")
        if not isinstance(risk, (int, float)) or isinstance(risk, bool) or not 0.0 < risk < 1.0:
            raise ValueError(f"risk must be a number in (0, 1), got {risk!r}")
        q = self.encode_queries(queries)
        u = self.uncertainty
        assert u.reference_norm is not None  # restored from the saved index
        scale = q.norm(dim=-1) / u.reference_norm
        k_opinion = min(u.gallery.k or self.num_videos, self.num_videos)
        if self.faiss is not None:  # candidates by best clip, re-ranked exactly
            result = index_search(self.model, self.videos, q, self.faiss, k=max(k, k_opinion))
        else:  # exact and streamed over the gallery (no [Q, V] matrix), on the unit rows kept at load
            scoring = SearchScoring(clip_weight=self.model.config.clip_weight,
                                    frame_weight=self.model.config.frame_weight,
                                    padded_frame_score=self.model.padded_frame_score, normalize=False)
            result = gallery_search(F.normalize(q, dim=-1), self.videos.clip, frames=self.videos.frame,
                                    frame_mask=self.videos.frame_mask, k=max(k, k_opinion), scoring=scoring,
                                    validate_args=False)
        top_scores, top_idx = result.scores[:, :k], result.indices[:, :k]
        opinion = u.gallery.search_opinion(result, query_scale=scale)
        types = u.identifier(opinion).query_type.tolist()
        confidence = selective_confidence(opinion, cast(Any, u.chosen_confidence))
        saved = self.saved["uncertainty"]
        threshold = threshold_at_risk(saved["val_confidence"], saved["val_rank"] < k, risk)
        clip_sims = torch.einsum("qd,qkmd->qkm", F.normalize(q, dim=-1), self.videos.clip[top_idx])
        best_sim, best_clip = clip_sims.max(dim=-1)
        spans = self.saved["clip_spans"]
        answers = []
        for i, text in enumerate(queries):
            hits = []
            for r in range(k):
                v, c = int(top_idx[i, r]), int(best_clip[i, r])
                start, end = (float(x) for x in spans[v, c])
                hits.append(Hit(r + 1, self.video_ids[v], float(top_scores[i, r]),
                                Moment(round(start, 3), round(end, 3), c, float(best_sim[i, r]))))
            conf = float(confidence[i])
            answer = threshold is not None and conf >= threshold
            note = None if threshold is not None else (
                f"no confidence threshold reaches risk {risk:g} on the validation split: every query is sent back")
            answers.append(Answer(text, hits, float(opinion.fused.top_belief[i]), float(opinion.fused.uncertainty[i]),
                                  QUERY_TYPES[types[i]], conf, u.chosen_confidence,
                                  "answer" if answer else "rephrase", float(risk),
                                  None if threshold is None else float(threshold), note))
        return answers


def format_answers(answers: list[Answer]) -> str:
    """A readable table per query (what ``search`` prints on a terminal)."""
    blocks = []
    for a in answers:
        verdict = ("answer" if a.decision == "answer" else
                   "REPHRASE: not confident enough at this risk; say more about what happens")
        head = (f"query: {a.query}\n  type {a.query_type}, belief {a.belief:.3f}, uncertainty {a.uncertainty:.3f}, "
                f"confidence {a.confidence:.3f} ({a.confidence_kind}; threshold at risk {a.risk:g}: "
                f"{'-' if a.threshold is None else f'{a.threshold:.3f}'}) -> {verdict}")
        rows = [["rank", "video", "score", "moment (s)", "clip sim."]]
        rows += [[str(h.rank), h.video, f"{h.score:.3f}", f"{h.moment.start:.1f}-{h.moment.end:.1f}",
                  f"{h.moment.similarity:.3f}"] for h in a.results]
        blocks.append(head + "\n" + engine.format_table(rows))
    return "\n\n".join(blocks)
