"""``search``: free-text queries over one gallery, answered zero-shot or with a trained checkpoint.

For each query, an :class:`Answer`:

* the top ``k`` videos, each with its score and its **moment** (the span in seconds that matches best: the best
  window of a zero-shot search, the best clip segment of a trained one);
* the query's **opinion** over its top :data:`~reference_models.videos.calibration.OPINION_K` videos (Holmes
  Eq. 3-5, 16): the belief in the top video and the uncertainty, at the stated evidence temperature;
* its **query type** in words (precise, polysemous, under-determined: Holmes Eq. 10-12 with thresholds fitted
  on held-out captions) and one line on what it means;
* **the probability that the right video is among the k shown**, calibrated on the gallery's held-out
  captions, and the **decision** to answer or to ask to rephrase at the accepted risk
  (:mod:`reference_models.videos.calibration`).

A gallery without held-out captions (indexed without ``--captions``, or with no ``val`` split) is *not
calibrated*: the answer says so, gives no probability and no decision, and its opinion uses the encoder's
recorded temperature (the bundled encoder's, chosen on the generated world's held-out captions) or, for any
other encoder, the paper's 0.1, and says which.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from reference_models import engine
from reference_models.videos.calibration import OPINION_K, Calibration
from reference_models.videos.clip_encoder import ClipEncoder, EncoderError, EncoderSpec
from reference_models.videos.gallery import ENCODER_CONFIG, GalleryFiles, read_gallery
from reference_models.videos.saved_index import (
    CALIBRATION_DEPTH,
    MIN_CALIBRATION_CAPTIONS,
    SavedIndex,
    open_saved_index,
)

__all__ = ["QUERY_TYPES", "QUERY_TYPE_MEANINGS", "PAPER_TEMPERATURE", "Moment", "Hit", "Answer", "Answerer",
           "gallery_encoder", "uncalibrated_evidence", "format_answers"]

QUERY_TYPES = ("precise", "polysemous", "underdetermined")
#: One line per query type, for a person.
QUERY_TYPE_MEANINGS = {
    "precise": "one video stands out: the evidence points at one answer",
    "polysemous": "several videos fit about as well: the query could mean more than one of them",
    "underdetermined": "the query says too little for any video to stand out: say more about what happens",
    None: "not identified: this gallery has no held-out captions to fit the query types on",
}
#: Holmes' evidence temperature (its paper's default), used only by an uncalibrated zero-shot search of an encoder
#: that records no temperature of its own.
PAPER_TEMPERATURE = 0.1


@dataclass(frozen=True)
class Moment:
    """The span of a video that matches the query best (seconds) and its cosine with the query."""

    start: float
    end: float
    similarity: float


@dataclass(frozen=True)
class Hit:
    """One ranked video: rank (1-based), id, score and best moment."""

    rank: int
    video: str
    score: float
    moment: Moment


@dataclass(frozen=True)
class Answer:
    r"""The answer to one query (the JSON of ``search``, one object per query).

    ``probability`` is the calibrated probability that the right video is among the ``k`` results (``None``
    when the gallery is not calibrated, or ``k`` exceeds the calibration's depth); ``decision`` is
    ``"answer"``, ``"rephrase"`` or ``"not calibrated"``. ``temperature`` and ``evidence_form`` are those of
    Holmes Eq. 3 (``"inside"``: :math:`\exp(\tanh(s/\tau))`, ``"outside"``: :math:`\exp(\tanh(s)/\tau)`).
    """

    query: str
    mode: str
    results: list[Hit]
    belief: float
    uncertainty: float
    temperature: float
    temperature_source: str
    evidence_form: str
    query_type: str | None
    query_type_meaning: str
    confidence: float
    confidence_kind: str
    calibrated: bool
    probability: float | None
    decision: str
    risk: float
    threshold: float | None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def gallery_encoder(gallery: GalleryFiles, device: str | torch.device = "cpu") -> ClipEncoder:
    """The encoder the gallery was indexed with, re-created and checked against its record (digest of the weights)."""
    spec = EncoderSpec.from_dict(gallery.record["encoder"])
    config = gallery.root / ENCODER_CONFIG
    try:
        if not config.is_file():
            encoder = ClipEncoder(spec.model, spec.pretrained, device=device, seed=spec.seed)
        else:  # the gallery's JSON configuration, registered under the name it had when indexed
            with tempfile.TemporaryDirectory() as tmp:
                named = Path(tmp) / f"{spec.model}.json"
                shutil.copyfile(config, named)
                encoder = ClipEncoder(str(named), spec.pretrained, device=device, seed=spec.seed)
        encoder.check_matches(spec)
    except EncoderError as exc:
        raise engine.UserError(f"--gallery {gallery.root}: {exc}") from None
    return encoder


def uncalibrated_evidence(encoder: ClipEncoder, scorer: Any) -> Calibration:
    """The evidence of a search whose gallery has no held-out captions (no probability, no decision).

    A trained checkpoint: its training temperature. Zero-shot: the temperature, confidence and query-type
    thresholds the encoder records (the bundled encoder's were chosen on the generated world's held-out
    captions), else :data:`PAPER_TEMPERATURE` without query types.
    """
    empty = torch.zeros(0, dtype=torch.float64)
    none = torch.zeros(0, dtype=torch.long)
    if hasattr(scorer, "identifier"):  # a trained checkpoint
        return Calibration(0, float(scorer.identifier.tau), "the checkpoint's training temperature", "top_belief",
                           math.nan, {}, empty, none, None, str(scorer.identifier.tanh_scaling))
    recorded = encoder.recorded_zero_shot()
    if recorded is not None:
        thresholds = {k: float(v) for k, v in recorded["thresholds"].items() if v is not None}  # JSON: no infinities
        return Calibration(0, float(recorded["temperature"]), str(recorded["source"]), str(recorded["confidence_kind"]),
                           math.nan, thresholds, empty, none, None, str(recorded["tanh_scaling"]))
    return Calibration(0, PAPER_TEMPERATURE, "the paper's default (not chosen on data: index with --captions to "
                       "choose it on this gallery's held-out captions)", "top_belief", math.nan, {}, empty, none)


class Answerer:
    """One gallery, one way of scoring it (zero-shot, or a trained checkpoint) and its saved index, ready to answer.

    Parameters
    ----------
    gallery : path
        The ``--out`` of ``index`` (holds ``gallery.json``).
    checkpoint : path, optional
        A trained checkpoint (``train --config clip --data-root ROOT``); ``None``: zero-shot.
    device : str
        Where the encoder (and the model) run.
    index : {"exact", "faiss"}
        Exact scoring of every video, or FAISS candidates re-ranked exactly.
    rebuild : bool
        Compute the saved search index again.
    """

    def __init__(self, gallery: str | Path, *, checkpoint: str | Path | None = None, device: str = "cpu",
                 index: str = "exact", rebuild: bool = False) -> None:
        from reference_models.videos.zero_shot import ZeroShotScorer

        if index not in ("exact", "faiss"):
            raise engine.UserError(f"--index must be exact or faiss, got {index!r}")
        self.gallery = read_gallery(gallery)
        self.root = self.gallery.root
        self.encoder = gallery_encoder(self.gallery, device)
        if checkpoint is None:
            self.scorer: Any = ZeroShotScorer(self.encoder)
        else:
            from reference_models.videos.trained import HolmesScorer

            self.scorer = HolmesScorer(checkpoint, self.encoder, device=device)
        self.saved: SavedIndex = open_saved_index(self.gallery, self.scorer, rebuild=rebuild, faiss=index == "faiss",
                                                  log=lambda line: engine.print_line("note", line))
        self.calibration = self.saved.calibration or uncalibrated_evidence(self.encoder, self.scorer)

    @property
    def mode(self) -> str:
        return str(self.scorer.key)

    @property
    def num_videos(self) -> int:
        return self.saved.num_videos

    @property
    def video_ids(self) -> list[str]:
        return self.saved.video_ids

    @property
    def calibrated(self) -> bool:
        return self.calibration.captions > 0

    @torch.no_grad()
    def answer(self, queries: list[str], *, k: int = 5, risk: float = 0.2) -> list[Answer]:
        """Answer every query (see the module documentation)."""
        if not queries:
            raise ValueError("queries must hold at least one query")
        for text in queries:
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"every query must be a non-empty string, got {text!r}")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.num_videos:
            raise ValueError(f"k must be an int in [1, {self.num_videos}] (the gallery's videos), got {k!r}")
        if isinstance(risk, bool) or not isinstance(risk, (int, float)) or not 0.0 < risk < 1.0:
            raise ValueError(f"risk must be a number in (0, 1), got {risk!r}")
        saved, cal = self.saved, self.calibration
        q = self.scorer.encode_texts(queries)
        depth = min(self.num_videos, max(k, OPINION_K))
        candidates = None
        if saved.candidates is not None:
            candidates = saved.candidates.candidates(q, depth, saved.slot_to_row())
        result = self.scorer.top_k(q, saved.rows, depth, candidates=candidates)
        opinion = cal.opinion(result, q)
        confidence = cal.confidence_of(opinion)
        types: list[int | None] = [None] * len(queries)
        if cal.thresholds:
            types = [int(t) for t in cal.identifier()(opinion).query_type.tolist()]
        probability = None
        note = None
        if not self.calibrated:
            note = ("not calibrated: this gallery has no held-out captions (index it with --captions holding a "
                    f"val split of at least {MIN_CALIBRATION_CAPTIONS} captions) to estimate how likely an answer is "
                    "to be right")
        elif k > CALIBRATION_DEPTH:
            note = f"no probability for k > {CALIBRATION_DEPTH}: the held-out captions were ranked that deep"
        else:
            probability = cal.probability(confidence, k)
        threshold = cal.threshold(k, risk) if self.calibrated else None
        if self.calibrated and threshold is None:
            note = f"no confidence threshold reaches risk {risk:g} on the held-out captions: every query is sent back"
        spans, sims = self.scorer.moments(q, saved.rows, result.indices[:, :k])
        answers = []
        for i, text in enumerate(queries):
            hits = [Hit(r + 1, saved.video_ids[int(result.indices[i, r])], float(result.scores[i, r]),
                        Moment(round(float(spans[i, r, 0]), 3), round(float(spans[i, r, 1]), 3), float(sims[i, r])))
                    for r in range(k)]
            conf = float(confidence[i])
            if not self.calibrated:
                decision = "not calibrated"
            else:
                decision = "answer" if threshold is not None and conf >= threshold else "rephrase"
            code = types[i]
            kind = None if code is None else QUERY_TYPES[code]
            answers.append(Answer(
                text, self.mode, hits, float(opinion.fused.top_belief[i]), float(opinion.fused.uncertainty[i]),
                cal.temperature, cal.temperature_source, cal.tanh_scaling, kind, QUERY_TYPE_MEANINGS[kind], conf, cal.confidence_kind,
                self.calibrated, None if probability is None else float(probability[i]), decision, float(risk),
                threshold, note))
        return answers


def format_answers(answers: list[Answer]) -> str:
    """A readable block per query (what ``search`` prints on a terminal)."""
    blocks = []
    for a in answers:
        if a.decision == "not calibrated":
            verdict = "not calibrated (no held-out captions): no probability"
        else:
            verdict = (f"{100 * a.probability:.0f} % that the right video is among these {len(a.results)}"
                       if a.probability is not None else "no probability")
            verdict += (" -> answer" if a.decision == "answer" else
                        f" -> REPHRASE: not confident enough at risk {a.risk:g}; say more about what happens")
        kind = a.query_type or "type not identified"
        head = (f"query: {a.query}\n  {verdict}\n  {kind}: {a.query_type_meaning}\n"
                f"  opinion: belief {a.belief:.3f}, uncertainty {a.uncertainty:.3f} (temperature {a.temperature:.3g}, "
                f"evidence {a.evidence_form}, {a.temperature_source}); {a.mode}")
        rows = [["rank", "video", "score", "moment (s)", "similarity"]]
        rows += [[str(h.rank), h.video, f"{h.score:.3f}", f"{h.moment.start:.1f}-{h.moment.end:.1f}",
                  f"{h.moment.similarity:.3f}"] for h in a.results]
        blocks.append(head + "\n" + engine.format_table(rows))
    return "\n\n".join(blocks)

