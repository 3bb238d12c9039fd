"""Zero-shot scoring: the encoder's own sentence embedding against every video's windows, no training.

A query is ``encode_text`` of the sentence; a video's rows are its windows
(:func:`reference_models.videos.windows.video_windows`: multi-scale windows of consecutive frames, mean-pooled
then normalised); the score of a video is the cosine of its best window, and that window is the moment. The
top ``k`` come from the library's exact streamed search (:func:`evidential_prvr.search.gallery_search`, the
windows as a video's clips) or from FAISS candidates re-ranked exactly
(:func:`evidential_prvr.search.rerank_candidates`); both give the same scores.

The query's opinion is Holmes Eq. 3-5 over its top videos' scores, at the temperature chosen on the gallery's
held-out captions (:mod:`reference_models.videos.calibration`); without held-out captions, at the temperature
the encoder records (the bundled encoder: chosen on the generated world's held-out captions by the same
rule), else at the paper's 0.1, and the search says which.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from evidential_prvr.search import SearchResult, SearchScoring, gallery_search, rerank_candidates
from reference_models.videos.calibration import Calibration, fit_calibration
from reference_models.videos.clip_encoder import ClipEncoder
from reference_models.videos.gallery import GalleryFiles, part_catalogue, read_part
from reference_models.videos.windows import MAX_UNITS, video_windows, window_count

__all__ = ["ZeroShotScorer"]

#: Windows and queries are unit vectors already: their dot products are the cosines.
_UNIT_ROWS = SearchScoring(normalize=False)


class ZeroShotScorer:
    """The zero-shot :class:`~reference_models.videos.saved_index.Scorer` of a gallery's encoder.

    Parameters
    ----------
    encoder : ClipEncoder
        The gallery's encoder (checked against its record by the caller).
    max_units : int
        Units of a video's windows (:data:`~reference_models.videos.windows.MAX_UNITS`).
    """

    key = "zero-shot"
    token_rows = "windows"

    def __init__(self, encoder: ClipEncoder, *, max_units: int = MAX_UNITS) -> None:
        self.encoder, self.max_units = encoder, max_units
        self.device = encoder.device

    def settings(self) -> dict[str, Any]:
        return {"scorer": self.key, "encoder_sha256": self.encoder.spec.weights_sha256, "max_units": self.max_units,
                "windows": window_count(self.max_units)}

    def rows(self, gallery: GalleryFiles, video_ids: list[str]) -> dict[str, torch.Tensor]:
        """``windows [n, W, d]`` and ``spans [n, W, 2]`` (seconds) of ``video_ids``, read from the gallery's parts."""
        digests = gallery.encoded_videos()
        catalogue = part_catalogue(gallery.parts)
        by_part: dict[Path, list[str]] = defaultdict(list)
        for vid in video_ids:
            by_part[catalogue[digests[vid]]].append(digests[vid])
        found: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for part, wanted in by_part.items():
            want = set(wanted)
            for video in read_part(part):
                if video.digest in want:
                    found[video.digest] = video_windows(video.features, video.times, video.duration, video.rate,
                                                        max_units=self.max_units)
        windows = torch.stack([found[digests[v]][0] for v in video_ids])
        spans = torch.stack([found[digests[v]][1] for v in video_ids])
        return {"windows": windows, "spans": spans}

    def encode_texts(self, texts: list[str]) -> torch.Tensor:
        return self.encoder.encode_sentences(texts)

    @torch.no_grad()
    def top_k(self, queries: torch.Tensor, rows: dict[str, torch.Tensor], k: int, *,
              target: torch.Tensor | None = None, candidates: torch.Tensor | None = None) -> SearchResult:
        windows = rows["windows"]  # unit rows (video_windows)
        q = torch.nn.functional.normalize(queries.to(windows.device), dim=-1)
        if candidates is not None:
            return rerank_candidates(q, candidates.to(q.device), windows, k=min(k, candidates.shape[1]),
                                     scoring=_UNIT_ROWS, target=target, validate_args=False)
        return gallery_search(q, windows, k=k, scoring=_UNIT_ROWS, target=target, validate_args=False)

    def calibrate(self, result: SearchResult, queries: torch.Tensor) -> Calibration:
        return fit_calibration(result, queries)

    @torch.no_grad()
    def moments(self, queries: torch.Tensor, rows: dict[str, torch.Tensor], indices: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """``[Q, k, 2]`` spans (seconds) of each hit's best window and ``[Q, k]`` its cosine."""
        windows = rows["windows"][indices]  # [Q, k, W, d]
        sims = torch.einsum("qd,qkwd->qkw", torch.nn.functional.normalize(queries, dim=-1), windows)
        best, which = sims.max(dim=-1)
        spans = rows["spans"][indices].gather(2, which[..., None, None].expand(-1, -1, 1, 2)).squeeze(2)
        return spans, best
