r"""Calibration on held-out captions: the evidence temperature, the confidence, the query types and a probability.

A gallery's held-out captions (its ``val`` split) are queries whose video is known. Searched against the
whole gallery, as a user's queries are, they give everything a search needs to be read by a person:

**The evidence temperature and the confidence** (:func:`choose_evidence`). Each query's opinion over its top
:data:`OPINION_K` videos is Holmes Eq. 3-5 (evidence from the scores, a Dirichlet, its belief and uncertainty
masses; :class:`evidential_prvr.GalleryUncertainty`). A zero-shot encoder's cosines are not on the scale of a
trained Holmes model's (a CLIP's lie within a few hundredths of each other, around an offset), so the
temperature is chosen on the held-out captions, as temperature scaling chooses a classifier's (Guo et al.,
2017): every evidence form of Eq. 3 (``"inside"``, the paper's :math:`\exp(\tanh(s/\tau))`, and
``"outside"``, the release's :math:`\exp(\tanh(s)/\tau)`) and every ``tau`` of :data:`TEMPERATURES` is tried,
and the pair kept is the one of lowest negative log-likelihood of "the top video is the caption's" under the
opinion's own probability of its top video, the Dirichlet mean :math:`\alpha_1 / S = b_1 + u / K` (Eq. 4-5),
the first in the grid's order on a tie. A likelihood, unlike a ranking figure, is not indifferent to an
evidence so saturated that every query gets the same opinion. Then the evidential confidence (``neg_u``,
``top_belief``, ``neg_xi``; :func:`evidential_prvr.functional.selective_confidence`) of lowest AURC of the top-1
error (:func:`evidential_prvr.metrics.aurc`) at that evidence is the one that decides. A trained checkpoint
keeps the temperature and form it was trained with, and only the confidence is chosen.

**The query types** (Holmes Eq. 10-12 with fixed thresholds): :meth:`evidential_prvr.GalleryQueryIdentifier.fit`
on the held-out opinions (the sequential Youden fit on top-1 correctness).

**The probability that the right video is among the k shown** (:meth:`Calibration.probability`): an isotonic
regression (``scipy.optimize.isotonic_regression``, ties pooled, linear between the fitted points, flat
beyond them) of "the caption's video ranks ``<= k``" on the confidence, fitted when a ``k`` is first asked for.
:func:`expected_calibration_error` and :func:`reliability_bins` measure it on other captions.

**The decision at a risk** (:meth:`Calibration.threshold`): the lowest confidence whose accepted held-out
queries miss their video among the top ``k`` at most a share ``risk`` of the time
(:func:`threshold_at_risk`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from evidential_prvr import GalleryQueryIdentifier, GalleryUncertainty
from evidential_prvr.functional import selective_confidence
from evidential_prvr.metrics import aurc, risk_coverage
from evidential_prvr.search import SearchResult
from evidential_prvr.uncertainty import EVIDENTIAL_CONFIDENCES, GalleryOpinion, QueryTypeThresholds

__all__ = ["CALIBRATION_RULE", "OPINION_K", "TEMPERATURES", "TANH_FORMS", "EvidenceChoice", "Calibration", "search_opinion",
           "top_probability", "top1_nll", "choose_evidence", "fit_calibration",
           "isotonic_fit", "expected_calibration_error", "reliability_bins", "threshold_at_risk"]

#: The version of the calibration rule; a saved calibration of another is fitted again.
CALIBRATION_RULE = 2
#: Candidates of each query's opinion (the library's default ``k``: the opinion does not depend on the gallery's size).
OPINION_K = 10
#: The temperatures tried on the held-out captions, 25 values from 0.001 to 10 evenly spaced in log.
TEMPERATURES: tuple[float, ...] = tuple(float(t) for t in np.logspace(-3, 1, 25))
#: The evidence forms of Holmes Eq. 3 tried, the paper's and the official release's.
TANH_FORMS: tuple[str, ...] = ("inside", "outside")


@dataclass(frozen=True)
class EvidenceChoice:
    """The chosen evidence form, temperature and confidence, with the negative log-likelihood of top-1 correctness
    and the confidence's AURC of the top-1 error that they gave on the held-out captions."""

    temperature: float
    tanh_scaling: str
    confidence_kind: str
    nll: float
    aurc: float


def search_opinion(result: SearchResult, temperature: float, *, k: int = OPINION_K, tanh_scaling: str = "inside",
                   query_scale: torch.Tensor | None = None) -> GalleryOpinion:
    """Each query's opinion over its top ``k`` videos (Holmes Eq. 3-5, 16; :class:`evidential_prvr.GalleryUncertainty`)."""
    uncertainty = GalleryUncertainty(k=k, tau=temperature, tanh_scaling=tanh_scaling)  # type: ignore[arg-type]
    return uncertainty.search_opinion(result, query_scale=query_scale)


def top_probability(opinion: GalleryOpinion) -> torch.Tensor:
    """``[Q]`` the opinion's probability of its top video: the Dirichlet mean :math:`b_1 + u / K` (Eq. 4-5)."""
    return opinion.fused.top_belief + opinion.fused.uncertainty / opinion.k


def top1_nll(opinion: GalleryOpinion) -> float:
    """The mean negative log-likelihood of the ``correct`` flags under :func:`top_probability`."""
    assert opinion.correct is not None
    p = top_probability(opinion).double().clamp(1e-12, 1.0 - 1e-12)
    hit = opinion.correct.double()
    return float(-(hit * p.log() + (1.0 - hit) * (-p).log1p()).mean())


def choose_evidence(result: SearchResult, *, temperatures: tuple[float, ...] = TEMPERATURES,
                    forms: tuple[str, ...] = TANH_FORMS, k: int = OPINION_K,
                    query_scale: torch.Tensor | None = None) -> EvidenceChoice:
    """The evidence of lowest negative log-likelihood of top-1 correctness, and its confidence of lowest AURC.

    Parameters
    ----------
    result : SearchResult
        The held-out captions searched against the whole gallery, with ``target=`` (their videos) and
        ``k >= min(k, videos)``.
    temperatures, forms : tuple
        The temperatures and the evidence forms of Eq. 3 tried, in this order (a tie keeps the first).
    k : int
        Candidates of the opinion.
    query_scale : torch.Tensor, optional
        ``[Q]`` per-query inverse temperature (a trained model's query-norm scaling).
    """
    if result.target is None:
        raise ValueError("choose_evidence needs a search with target= (the held-out captions' videos)")
    best: tuple[float, str, float] | None = None
    for form in forms:
        for tau in temperatures:
            nll = top1_nll(search_opinion(result, tau, k=k, tanh_scaling=form, query_scale=query_scale))
            if best is None or nll < best[2] - 1e-12:
                best = (float(tau), form, nll)
    assert best is not None
    op = search_opinion(result, best[0], k=k, tanh_scaling=best[1], query_scale=query_scale)
    assert op.correct is not None
    kinds = [(float(aurc(selective_confidence(op, kind), op.correct)), kind) for kind in EVIDENTIAL_CONFIDENCES]
    value, kind = min(kinds, key=lambda pair: pair[0])  # the first of equal AURC
    return EvidenceChoice(best[0], best[1], kind, best[2], value)


def isotonic_fit(confidence: np.ndarray, hit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: the distinct confidences and the non-decreasing hit rate fitted at each (ties pooled)."""
    from scipy.optimize import isotonic_regression

    x, inverse = np.unique(np.asarray(confidence, dtype=np.float64), return_inverse=True)
    counts = np.bincount(inverse).astype(np.float64)
    rates = np.bincount(inverse, weights=np.asarray(hit, dtype=np.float64)) / counts
    fitted = isotonic_regression(rates, weights=counts, increasing=True).x
    return x, np.clip(fitted, 0.0, 1.0)


def expected_calibration_error(probability: np.ndarray, hit: np.ndarray, bins: int = 10) -> float:
    """ECE: the mean over equal-width probability bins of ``|mean probability - hit rate|``, weighted by counts."""
    mean_p, rate, count = reliability_bins(probability, hit, bins)
    used = count > 0
    return float(np.sum(count[used] * np.abs(mean_p[used] - rate[used])) / max(1, count.sum()))


def reliability_bins(probability: np.ndarray, hit: np.ndarray, bins: int = 10
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per equal-width bin of ``[0, 1]``: the mean probability, the hit rate (NaN when empty) and the count."""
    p = np.asarray(probability, dtype=np.float64)
    h = np.asarray(hit, dtype=np.float64)
    which = np.clip((p * bins).astype(np.int64), 0, bins - 1)
    count = np.bincount(which, minlength=bins).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.bincount(which, weights=p, minlength=bins) / count
        rate = np.bincount(which, weights=h, minlength=bins) / count
    return mean_p, rate, count


def threshold_at_risk(confidence: torch.Tensor, correct: torch.Tensor, risk: float) -> float | None:
    """The lowest confidence whose accepted queries have a selective risk of at most ``risk`` (``None``: none has).

    The operating points are :func:`evidential_prvr.metrics.risk_coverage`'s (ties accepted together).
    """
    if not 0.0 < risk < 1.0:
        raise ValueError(f"risk must be in (0, 1), got {risk!r}")
    _, risks = risk_coverage(confidence, correct)
    thresholds = torch.unique(confidence).flip(0)
    ok = (risks <= risk + 1e-12).nonzero()
    if len(ok) == 0:
        return None
    return float(thresholds[int(ok.max())])


@dataclass
class Calibration:
    """A search's calibration on a gallery's held-out captions (saved with its search index).

    Attributes
    ----------
    captions : int
        Held-out captions it was fitted on.
    temperature : float
        Evidence temperature of Eq. 3.
    temperature_source : str
        How it was chosen (``"chosen on N held-out captions"`` or ``"the checkpoint's training temperature"``).
    confidence_kind : str
        The evidential confidence of lowest AURC.
    aurc : float
        Its AURC of the top-1 error on the held-out captions.
    nll : float
        The negative log-likelihood of top-1 correctness under the opinion's probability of its top video.
    thresholds : dict
        The query types' thresholds (:class:`~evidential_prvr.uncertainty.QueryTypeThresholds` as a dict).
    confidence, ranks : torch.Tensor
        Each held-out caption's confidence and the 1-based rank of its video (ties counted against it).
    reference_norm : float or None
        The mean query-embedding norm of the held-out captions (a trained model's query scaling), or ``None``.
    tanh_scaling : str
        The evidence form of Eq. 3.
    """

    captions: int
    temperature: float
    temperature_source: str
    confidence_kind: str
    aurc: float
    thresholds: dict[str, float]
    confidence: torch.Tensor
    ranks: torch.Tensor
    reference_norm: float | None = None
    tanh_scaling: str = "inside"
    nll: float = float("nan")
    _fits: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    def opinion(self, result: SearchResult, queries: torch.Tensor) -> GalleryOpinion:
        """The opinions of a search of ``queries`` (``[Q, d]``, for the query scaling) at this calibration's evidence."""
        scale = None
        if self.reference_norm is not None:
            scale = queries.norm(dim=-1).to(result.scores.dtype) / self.reference_norm
        return search_opinion(result, self.temperature, tanh_scaling=self.tanh_scaling, query_scale=scale)

    def confidence_of(self, opinion: GalleryOpinion) -> torch.Tensor:
        """``[Q]`` the chosen confidence of ``opinion`` (higher: more trusted)."""
        return selective_confidence(opinion, self.confidence_kind)  # type: ignore[arg-type]

    def identifier(self) -> GalleryQueryIdentifier:
        """The query-type rule with the fitted thresholds."""
        return GalleryQueryIdentifier(thresholds=QueryTypeThresholds(**self.thresholds))

    def probability(self, confidence: torch.Tensor, k: int) -> np.ndarray:
        """The calibrated probability that the right video is among the top ``k`` at each ``confidence``."""
        if k not in self._fits:
            self._fits[k] = isotonic_fit(self.confidence.numpy(), (self.ranks <= k).numpy())
        x, y = self._fits[k]
        return np.interp(confidence.detach().cpu().double().numpy(), x, y)

    def threshold(self, k: int, risk: float) -> float | None:
        """The confidence threshold at ``risk`` for the top ``k`` (:func:`threshold_at_risk`)."""
        return threshold_at_risk(self.confidence, self.ranks <= k, risk)

    def to_dict(self) -> dict[str, Any]:
        return {"captions": self.captions, "temperature": self.temperature,
                "temperature_source": self.temperature_source, "confidence_kind": self.confidence_kind,
                "aurc": self.aurc, "thresholds": dict(self.thresholds), "confidence": self.confidence,
                "ranks": self.ranks, "reference_norm": self.reference_norm, "tanh_scaling": self.tanh_scaling,
                "nll": self.nll}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        return cls(int(data["captions"]), float(data["temperature"]), str(data["temperature_source"]),
                   str(data["confidence_kind"]), float(data["aurc"]), {k: float(v) for k, v in data["thresholds"].items()},
                   data["confidence"], data["ranks"],
                   None if data.get("reference_norm") is None else float(data["reference_norm"]),
                   str(data.get("tanh_scaling", "inside")), float(data.get("nll", float("nan"))))


def fit_calibration(result: SearchResult, queries: torch.Tensor, *, temperatures: tuple[float, ...] | None = None,
                    forms: tuple[str, ...] | None = None, temperature_source: str | None = None,
                    query_norm: bool = False) -> Calibration:
    """The :class:`Calibration` of a search of the held-out captions with ``target=`` (see the module documentation).

    ``temperatures`` and ``forms``: the grid to choose the evidence from (default :data:`TEMPERATURES` and
    :data:`TANH_FORMS`); one value of each keeps it (a trained checkpoint's), and ``temperature_source`` then says
    where it came from. ``query_norm``: scale each query's evidence by its embedding norm relative to the held-out
    captions' mean (a trained model's ``query_scale``; :mod:`reference_models.holmes.selective`).
    """
    norms = queries.norm(dim=-1).to(result.scores.dtype)
    reference_norm = float(norms.mean()) if query_norm else None
    query_scale = norms / reference_norm if reference_norm is not None else None
    choice = choose_evidence(result, temperatures=TEMPERATURES if temperatures is None else temperatures,
                             forms=TANH_FORMS if forms is None else forms, query_scale=query_scale)
    op = search_opinion(result, choice.temperature, tanh_scaling=choice.tanh_scaling, query_scale=query_scale)
    thresholds = GalleryQueryIdentifier().fit(op)
    confidence = selective_confidence(op, choice.confidence_kind).detach().cpu().double()  # type: ignore[arg-type]
    source = temperature_source or (f"chosen on {result.num_queries} held-out captions (lowest negative "
                                    "log-likelihood of top-1 correctness)")
    ranks = result.target_ranks().detach().cpu().long()
    ranks = torch.where(ranks < 1, torch.full_like(ranks, result.k + 1), ranks)  # not within the search: beyond it
    return Calibration(result.num_queries, choice.temperature, source, choice.confidence_kind, choice.aurc,
                       thresholds.to_dict(), confidence, ranks, reference_norm, choice.tanh_scaling, choice.nll)
