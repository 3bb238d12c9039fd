"""Scoring with a trained Holmes checkpoint (``train --config clip --data-root ROOT``): what ``--checkpoint`` uses.

A video's rows are the checkpoint's clip and frame embeddings of its features (the model's video encoder,
:func:`reference_models.holmes.scoring.encode_all_videos`) and each clip segment's span in seconds; a query
is the encoder's caption tokens through the model's query encoder. Videos are scored by Holmes Eq. 1-2 (the
clip and frame branches' best cosine, weighted), exactly and streamed (:func:`evidential_prvr.search.gallery_search`)
or from FAISS candidates re-ranked exactly; the moment is the clip segment of highest cosine. The opinion
keeps the temperature and evidence form the checkpoint was trained with and scales each query's evidence by
its embedding norm (:mod:`reference_models.holmes.selective`); the calibration chooses the confidence and
fits the query types and the probability on the gallery's held-out captions.

From the Holmes task this module uses the checkpoint's model (:func:`reference_models.holmes.factory.build_model`,
:class:`~reference_models.holmes.config.HolmesConfig`), its video and query encoders
(:mod:`reference_models.holmes.scoring`), the feature reader (``reference_models.holmes.data.split.load_gallery``)
and the clip segments' boundaries (:func:`reference_models.holmes.data.sampling.segment_boundaries`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from evidential_prvr.search import SearchResult, SearchScoring, gallery_search, rerank_candidates
from reference_models import engine
from reference_models.holmes.config import HolmesConfig
from reference_models.holmes.data import make_video_loader
from reference_models.holmes.data.batches import collate_queries
from reference_models.holmes.data.sampling import l2_normalize, segment_boundaries
from reference_models.holmes.data.split import load_gallery
from reference_models.holmes.scoring import encode_all_videos
from reference_models.videos.calibration import Calibration, fit_calibration
from reference_models.videos.clip_encoder import ClipEncoder, EncoderSpec
from reference_models.videos.gallery import GalleryFiles, file_digest

__all__ = ["HolmesScorer", "clip_spans"]


def clip_spans(times: list[float], rate: float, duration: float, n_clips: int, boundaries: str) -> np.ndarray:
    """``[n_clips, 2]`` seconds covered by each clip segment of a video (the frames it averages)."""
    n = len(times)
    idx = segment_boundaries(n, n_clips, boundaries)
    step = 1.0 / rate if rate > 0 else 0.0
    t = np.asarray(times, dtype=np.float64)
    first = t[np.minimum(idx[:-1], n - 1)]
    last = t[np.minimum(np.maximum(idx[1:] - 1, idx[:-1]), n - 1)]
    return np.stack([first, np.minimum(last + step, max(duration, last.max() + step))], axis=1)


class HolmesScorer:
    """The :class:`~reference_models.videos.saved_index.Scorer` of a trained checkpoint on one gallery's encoder.

    Parameters
    ----------
    checkpoint : path
        ``best.pt`` (or ``last.pt``) of ``train --config clip --data-root ROOT``.
    encoder : ClipEncoder
        The gallery's encoder (its token features are the checkpoint's text input).
    device : str
        Where the model runs.
    """

    token_rows = "clip"

    def __init__(self, checkpoint: str | Path, encoder: ClipEncoder, *, device: str = "cpu") -> None:
        from reference_models.holmes.factory import build_model
        from reference_models.holmes.objective import HolmesObjective

        self.checkpoint, self.encoder, self.device = Path(checkpoint), encoder, device
        if not self.checkpoint.is_file():
            raise engine.UserError(f"--checkpoint {self.checkpoint}: no such file")
        self.sha256 = file_digest(self.checkpoint)
        self.key = f"holmes-{self.sha256[:16]}"
        state = engine.load_checkpoint(self.checkpoint, map_location=device)
        engine.require_keys(state, self.checkpoint, ("config", "model", "visual_dim", "text_dim", "n_clips", "n_frames"))
        try:
            self.config = HolmesConfig.from_dict(state["config"])
        except (TypeError, ValueError) as exc:
            raise engine.CheckpointError(self.checkpoint, f"its config is not valid here ({exc})") from None
        spec: EncoderSpec = encoder.spec
        if (spec.frame_dim, spec.token_dim) != (state["visual_dim"], state["text_dim"]):
            raise engine.UserError(f"--checkpoint {self.checkpoint} expects (D_v, D_t) = ({state['visual_dim']}, "
                                   f"{state['text_dim']}), the gallery's encoder gives ({spec.frame_dim}, {spec.token_dim})")
        self.model = build_model(self.config, state["visual_dim"], state["text_dim"], state["n_clips"],
                                 state["n_frames"]).to(device)
        self.model.load_state_dict(state["model"])
        self.model.eval()
        self.identifier = HolmesObjective(self.config, self.config.model.hidden_size).identifier()
        self.scoring = SearchScoring(clip_weight=self.model.config.clip_weight,
                                     frame_weight=self.model.config.frame_weight,
                                     padded_frame_score=self.model.padded_frame_score, normalize=False)

    def settings(self) -> dict[str, Any]:
        return {"scorer": "holmes", "checkpoint_sha256": self.sha256, "encoder_sha256": self.encoder.spec.weights_sha256}

    @torch.no_grad()
    def rows(self, gallery: GalleryFiles, video_ids: list[str]) -> dict[str, torch.Tensor]:
        """``clip [n, M_c, d]``, ``frame [n, M_f, d]`` (unit rows), ``frame_mask`` and ``spans [n, M_c, 2]``."""
        paths, model, cfg = gallery.collection, self.model, self.config
        split = load_gallery(gallery.root, paths.collection, paths.visual_feature, text_feature=paths.text_feature,
                             max_query_len=cfg.model.max_query_len, n_clips=model.config.n_clips,
                             n_frames=model.config.n_frames, video_ids=video_ids)
        videos = encode_all_videos(model, make_video_loader(split, cfg.optim.eval_video_batch), self.device)
        times = engine.read_json_file(paths.feature_dir / "frame_times.json", "--gallery")
        spans = np.stack([clip_spans(times[v]["times"], times[v]["rate"], times[v]["duration"], model.config.n_clips,
                                     split.boundaries) for v in video_ids])
        return {"clip": F.normalize(videos.clip, dim=-1).cpu(), "frame": F.normalize(videos.frame, dim=-1).cpu(),
                "frame_mask": videos.frame_mask.cpu(), "spans": torch.from_numpy(spans).float()}

    @torch.no_grad()
    def encode_texts(self, texts: list[str]) -> torch.Tensor:
        """``[Q, d]`` Holmes query embeddings (the encoder's caption tokens, then the model's query encoder)."""
        max_len = self.config.model.max_query_len
        tokens = [l2_normalize(t[:max_len]) for t in self.encoder.encode_tokens(texts)]
        feats, mask = collate_queries(tokens)
        return self.model.encode_queries(feats.to(self.device), mask.to(self.device))

    @torch.no_grad()
    def top_k(self, queries: torch.Tensor, rows: dict[str, torch.Tensor], k: int, *,
              target: torch.Tensor | None = None, candidates: torch.Tensor | None = None) -> SearchResult:
        q = F.normalize(queries, dim=-1)
        gallery = (rows["clip"], rows["frame"], rows["frame_mask"])
        if candidates is not None:
            return rerank_candidates(q, candidates.to(q.device), *gallery, k=min(k, candidates.shape[1]),
                                     scoring=self.scoring, target=target, validate_args=False)
        return gallery_search(q, *gallery, k=k, scoring=self.scoring, target=target, validate_args=False)

    def calibrate(self, result: SearchResult, queries: torch.Tensor) -> Calibration:
        return fit_calibration(result, queries, temperatures=(float(self.identifier.tau),),
                               forms=(str(self.identifier.tanh_scaling),),
                               temperature_source="the checkpoint's training temperature", query_norm=True)

    @torch.no_grad()
    def moments(self, queries: torch.Tensor, rows: dict[str, torch.Tensor], indices: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """``[Q, k, 2]`` spans (seconds) of each hit's best clip segment and ``[Q, k]`` its cosine."""
        sims = torch.einsum("qd,qkmd->qkm", F.normalize(queries, dim=-1), rows["clip"][indices])
        best, which = sims.max(dim=-1)
        spans = rows["spans"][indices].gather(2, which[..., None, None].expand(-1, -1, 1, 2)).squeeze(2)
        return spans, best
