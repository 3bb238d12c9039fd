"""Uncertainty at retrieval time for the reference model: fitted identification and selective retrieval.

:class:`RetrievalUncertainty` wires the library's :class:`~evidential_prvr.GalleryUncertainty`,
:class:`~evidential_prvr.GalleryQueryIdentifier` and :func:`~evidential_prvr.functional.selective_confidence`
to a trained model:

1. :meth:`RetrievalUncertainty.fit` encodes the **validation** split, forms every query's opinion over its
   top-``k`` videos and fits the identification thresholds there (macro-F1 against the planted types of
   the embedded benchmark; without types, the Youden fit on top-1 correctness);
2. :meth:`RetrievalUncertainty.evaluate` does the same on the evaluated split's scores and reports, per
   confidence, AURC, E-AURC, AUGRC and R@1 at 50 % / 80 % coverage (``"selective"``), and the fitted
   identification's per-type precision/recall and macro-F1 next to the paper's in-batch rule applied to
   the same opinions (``"gallery_identification"``).

**Evidence settings.** τ and the tanh form are those of the training objective's identifier. The
evidence of a query is computed at the temperature :math:`\\tau_i = \\tau\\,\\overline{\\lVert q\\rVert} /
\\lVert q_i\\rVert` (``query_scale`` of :func:`~evidential_prvr.functional.gallery_opinion`), where
:math:`\\overline{\\lVert q\\rVert}` is the mean query-embedding norm of the validation split: the cosine of
Eq. 1 drops the norm, and with it the one signal that tells an under-determined query (one the text encoder
barely responds to) from a clear one; ``use_query_norm=False`` reproduces the plain cosine evidence.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from evidential_prvr import GalleryQueryIdentifier, GalleryUncertainty, UncertaintyGuidedIdentifier
from evidential_prvr.choices import EntropyMedian
from evidential_prvr.functional import selective_confidence
from evidential_prvr.metrics import augrc, aurc, e_aurc, selective_recall
from evidential_prvr.search import SearchResult
from evidential_prvr.uncertainty import CONFIDENCES, EVIDENTIAL_CONFIDENCES, GalleryOpinion, QueryTypeThresholds
from reference_models.holmes.config import HolmesConfig
from reference_models.holmes.data import PRVRSplit, make_query_loader, make_video_loader
from reference_models.holmes.evaluate import TYPE_CODES, identification_report
from reference_models.holmes.model import HolmesModel
from reference_models.holmes.scoring import encode_all_queries, encode_all_videos, score_matrix

if TYPE_CHECKING:
    from reference_models.holmes.objective import HolmesObjective

__all__ = [
    "COVERAGES",
    "QueryUncertainty",
    "RetrievalUncertainty",
    "selective_metrics",
    "format_uncertainty_tables",
    "fit_retrieval_uncertainty",
]

#: Coverages of the R@1-at-coverage columns.
COVERAGES = (0.5, 0.8)


def selective_metrics(confidence: torch.Tensor, correct: torch.Tensor) -> dict[str, float]:
    """AURC, E-AURC, AUGRC (fractions) and R@1 at :data:`COVERAGES` (percent) of one confidence."""
    recall = selective_recall(confidence, correct, COVERAGES).tolist()
    out = {"AURC": float(aurc(confidence, correct)), "E-AURC": float(e_aurc(confidence, correct)),
           "AUGRC": float(augrc(confidence, correct))}
    out.update({f"R@1@{round(100 * c)}%": r for c, r in zip(COVERAGES, recall)})
    return out


@dataclass
class QueryUncertainty:
    """Per-query results on one split (what :meth:`RetrievalUncertainty.analyse` returns).

    Attributes
    ----------
    opinion : GalleryOpinion
        Opinions over the top-k candidates (computed with the ground truth, so ``correct`` is set).
    confidences : dict
        Confidence name → ``[Q]`` tensor (higher = more trusted).
    identified : torch.Tensor
        ``int64 [Q]`` types from the fitted thresholds.
    batch_rule : torch.Tensor
        ``int64 [Q]`` types from the paper's in-batch rule on the same opinions.
    types : list
        Planted type name per query, or ``None`` where unknown.
    """

    opinion: GalleryOpinion
    confidences: dict[str, torch.Tensor]
    identified: torch.Tensor
    batch_rule: torch.Tensor
    types: list[str | None]


class RetrievalUncertainty:
    """Gallery opinions, fitted identification and selective confidences of a trained model.

    Parameters
    ----------
    gallery : GalleryUncertainty
        Opinion settings (k, τ, tanh form).
    beta, entropy_median
        Settings of the paper's in-batch rule, reported for comparison.
    use_query_norm : bool
        Scale each query's evidence temperature by its embedding norm (see the module docstring).
    grid : int
        Quantile levels per threshold in the fit.
    kl_cost : collections.abc.Callable, optional
        ``(queries [Q, d], videos) -> [Q, V]`` DAB cost; adds the ``"kl_margin"`` confidence.
    """

    def __init__(
        self,
        gallery: GalleryUncertainty,
        *,
        beta: float = 0.3,
        entropy_median: EntropyMedian = "candidates",
        use_query_norm: bool = True,
        grid: int = 33,
        kl_cost: Callable[[torch.Tensor, Any], torch.Tensor] | None = None,
    ) -> None:
        self.gallery = gallery
        self.identifier = GalleryQueryIdentifier(grid=grid)
        self.batch_identifier = GalleryQueryIdentifier(rule="batch", beta=beta, entropy_median=entropy_median)
        self.use_query_norm = use_query_norm
        self.kl_cost = kl_cost
        self.reference_norm: float | None = None
        self.fit_criterion: str | None = None
        #: The evidential confidence with the lowest AURC on the validation split (set by :meth:`fit`).
        self.chosen_confidence: str = "top_belief"

    @classmethod
    def from_identifier(
        cls, identifier: UncertaintyGuidedIdentifier, *, k: int = 10, **kwargs: Any
    ) -> RetrievalUncertainty:
        """Use the evidence settings (τ, tanh form, β, median rule) of the training objective's identifier."""
        gallery = GalleryUncertainty(k=k, tau=identifier.tau, tanh_scaling=identifier.tanh_scaling)
        return cls(gallery, beta=identifier.beta, entropy_median=identifier.entropy_median, **kwargs)

    @property
    def thresholds(self) -> QueryTypeThresholds:
        """The identification thresholds (fitted by :meth:`fit`)."""
        return self.identifier.thresholds

    # --- opinions ---------------------------------------------------------------------------------
    def opinion(self, sims, queries: torch.Tensor, gt: torch.Tensor) -> GalleryOpinion:
        """Opinions of the scores ``sims`` (``frame``, ``clip``, ``score`` ``[Q, V]``) of ``queries [Q, d]``."""
        scale = None
        if self.use_query_norm:
            if self.reference_norm is None:
                raise RuntimeError("call fit() first: the query-norm reference comes from the validation split")
            scale = queries.norm(dim=-1).to(_ranking(sims).dtype) / self.reference_norm
        if isinstance(sims, SearchResult):  # a top-k search (large galleries): its targets are gt already
            return self.gallery.search_opinion(sims, query_scale=scale)
        target = gt.to(sims.score.device)
        return self.gallery(sims.frame, sims.clip, ranking=sims.score, query_scale=scale, target=target)

    @staticmethod
    def encode(model: nn.Module, split: PRVRSplit, config: HolmesConfig, device: torch.device | str):
        """``(videos, queries, sims)`` of a split (eval mode, blockwise scoring)."""
        optim = config.optim
        holmes = cast(HolmesModel, model)  # a Holmes reference model
        videos = encode_all_videos(holmes, make_video_loader(split, optim.eval_video_batch), device)
        queries = encode_all_queries(holmes, make_query_loader(split, optim.eval_query_batch), device)
        sims = score_matrix(holmes, videos, queries, query_chunk=optim.score_chunk, video_chunk=optim.eval_video_batch)
        return videos, queries, sims

    # --- fit --------------------------------------------------------------------------------------
    @torch.no_grad()
    def fit(
        self,
        model: nn.Module,
        split: PRVRSplit,
        config: HolmesConfig,
        *,
        device: torch.device | str = "cpu",
        planted_types: dict[str, str] | None = None,
    ) -> RetrievalUncertainty:
        """Fit the query-norm reference and the identification thresholds on ``split`` (the validation split)."""
        _, queries, sims = self.encode(model, split, config, device)
        types: list[str | None] = ([planted_types.get(c) for c in split.caption_ids] if planted_types
                                   else [None] * split.num_captions)
        self.fit_scores(sims, queries, split.caption_video_index, types)
        return self

    @torch.no_grad()
    def fit_scores(self, sims, queries: torch.Tensor, gt: torch.Tensor, types: list[str | None]) -> QueryTypeThresholds:
        """:meth:`fit` on already computed scores and query embeddings.

        Also picks :attr:`chosen_confidence`, the evidential confidence with the lowest AURC on these queries.
        """
        self.reference_norm = float(queries.norm(dim=-1).mean())
        op = self.opinion(sims, queries, gt)
        correct = op.correct
        assert correct is not None
        self.chosen_confidence = min(EVIDENTIAL_CONFIDENCES,
                                     key=lambda kind: float(aurc(selective_confidence(op, kind), correct)))
        if types and all(t is not None for t in types):
            codes = torch.tensor([TYPE_CODES[t] for t in types if t is not None], dtype=torch.int64,
                                 device=op.candidates.device)
            self.fit_criterion = "macro-F1 against the planted types"
            return self.identifier.fit(op, query_types=codes)
        self.fit_criterion = "Youden J of top-1 correctness"
        return self.identifier.fit(op)

    # --- evaluate ---------------------------------------------------------------------------------
    @torch.no_grad()
    def analyse(self, sims, queries: torch.Tensor, gt: torch.Tensor, types: list[str | None],
                videos=None) -> QueryUncertainty:
        """Per-query opinions, confidences and identifications of an evaluated split."""
        op = self.opinion(sims, queries, gt)
        kinds = [c for c in CONFIDENCES if c != "kl_margin"]
        confidences: dict[str, torch.Tensor] = {kind: selective_confidence(op, kind) for kind in kinds}
        if self.kl_cost is not None and videos is not None:
            confidences["kl_margin"] = selective_confidence(op, "kl_margin", kl_cost=self.kl_cost(queries, videos))
        return QueryUncertainty(op, confidences, self.identifier(op).query_type, self.batch_identifier(op).query_type,
                                types)

    def evaluate(self, sims, queries: torch.Tensor, gt: torch.Tensor, types: list[str | None],
                 videos=None) -> dict[str, Any]:
        """``{"selective": {confidence: metrics}, "gallery_identification": {...}}`` of an evaluated split."""
        return self.summarise(self.analyse(sims, queries, gt, types, videos))

    def summarise(self, result: QueryUncertainty) -> dict[str, Any]:
        """The metrics of :meth:`evaluate` from an :meth:`analyse` result."""
        types = result.types
        correct = result.opinion.correct
        assert correct is not None
        selective = {name: selective_metrics(conf, correct) for name, conf in result.confidences.items()}
        ident: dict[str, Any] = {
            "fitted": {**identification_report(result.identified, types), "thresholds": self.thresholds.to_dict(),
                       "criterion": self.fit_criterion},
            "batch_rule": identification_report(result.batch_rule, types),
            "settings": {"k": self.gallery.k, "tau": self.gallery.tau, "tanh_scaling": self.gallery.tanh_scaling,
                         "query_norm": self.use_query_norm, "reference_norm": self.reference_norm},
            "chosen_confidence": self.chosen_confidence,
        }
        return {"selective": selective, "gallery_identification": ident}


def _ranking(sims: Any) -> torch.Tensor:
    return sims.scores if isinstance(sims, SearchResult) else sims.score


def fit_retrieval_uncertainty(
    model: nn.Module,
    objective: HolmesObjective,
    val_split: PRVRSplit,
    config: HolmesConfig,
    *,
    device: torch.device | str = "cpu",
    planted_types: dict[str, str] | None = None,
    kl_margin: bool = False,
) -> RetrievalUncertainty:
    """:class:`RetrievalUncertainty` with the settings of ``objective`` (a ``HolmesObjective``) fitted on ``val_split``.

    With ``kl_margin`` and a DAB objective, its (trained) Gaussian heads give the ``"kl_margin"`` confidence;
    leave it off for an objective built afresh (its heads would be untrained).
    """
    dab = getattr(objective, "dab", None) if kl_margin else None
    uncertainty = RetrievalUncertainty.from_identifier(
        objective.identifier(), kl_cost=None if dab is None else _dab_kl_cost(dab)
    )
    return uncertainty.fit(model, val_split, config, device=device, planted_types=planted_types)


def _dab_kl_cost(dab: Any) -> Any:
    """The DAB heads' query-to-video KL cost, as :class:`RetrievalUncertainty` takes it."""

    def kl_cost(queries: torch.Tensor, videos: Any) -> torch.Tensor:
        return dab.alignment.cost(queries, videos.frame, videos.frame_mask)

    return kl_cost


def _fmt(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{scale * value:.{digits}f}"


def format_uncertainty_tables(rows: dict[str, dict[str, Any]]) -> str:
    """Two plain-text tables: identification (the paper's rule over the whole gallery and over the top-k opinions,
    and the thresholds fitted on val) and selective retrieval per confidence.

    ``rows`` maps a model name to its evaluation dict (with ``"selective"`` and ``"gallery_identification"``);
    rows without them are skipped.
    """
    ident_rows = [["model", "macro-F1 paper rule", "macro-F1 batch rule", "macro-F1 fitted", "P/R prec.", "P/R poly.",
                   "P/R under."]]
    sel_rows = [["model", "confidence", "AURC", "E-AURC", "AUGRC", "R@1@50%", "R@1@80%"]]
    for name, res in rows.items():
        ident, sel = res.get("gallery_identification"), res.get("selective")
        if not ident or not sel:
            continue
        fitted = ident["fitted"]
        paper_rule = (res.get("identification") or {}).get("macro_f1")
        cells = [name, _fmt(paper_rule, digits=3), _fmt(ident["batch_rule"]["macro_f1"], digits=3),
                 _fmt(fitted["macro_f1"], digits=3)]
        for t in ("precise", "polysemous", "underdetermined"):
            m = fitted["per_type"][t]
            cells.append(f"{_fmt(m['precision'], 100, 0)}/{_fmt(m['recall'], 100, 0)}")
        ident_rows.append(cells)
        for conf, m in sel.items():
            mark = "*" if conf == ident.get("chosen_confidence") else ""
            sel_rows.append([name, conf + mark, _fmt(m["AURC"], digits=4), _fmt(m["E-AURC"], digits=4),
                             _fmt(m["AUGRC"], digits=4), _fmt(m["R@1@50%"]), _fmt(m["R@1@80%"])])
    if len(ident_rows) == 1:
        return ""
    return "\n".join([
        "query identification on the evaluated split (paper rule: Eq. 10-14 with the whole gallery as the batch; "
        "batch rule: the same rule on the top-k opinions; fitted: thresholds fitted on val; P/R in %):",
        _table(ident_rows),
        "selective retrieval (higher confidence answered first; * = evidential confidence with the lowest AURC "
        "on val):",
        _table(sel_rows),
    ])


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    fmt = lambda r: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([fmt(rows[0]), fmt(["-" * w for w in widths]), *map(fmt, rows[1:])])
