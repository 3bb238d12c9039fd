"""Retrieval-time uncertainty of the reference model: fit on val, selective metrics, identification report."""

from __future__ import annotations

import json
import math

import pytest
import torch

from evidential_prvr import GalleryUncertainty
from evidential_prvr.functional import macro_f1
from reference_models.holmes.model import Similarities
from reference_models.holmes.selective import (
    TYPE_CODES,
    RetrievalUncertainty,
    format_uncertainty_tables,
    selective_metrics,
)

TYPES = list(TYPE_CODES)


def _split(seed: int, n_videos: int = 20, per_video: int = 3):
    """Scores with planted structure: precise queries match one video, polysemous three, under-determined none."""
    gen = torch.Generator().manual_seed(seed)
    n = n_videos * per_video
    gt = torch.arange(n) // per_video
    kinds = [TYPES[int(i)] for i in torch.randint(0, 3, (n,), generator=gen)]
    base = 0.2 * torch.rand(n, n_videos, generator=gen)
    for q, kind in enumerate(kinds):
        if kind != "underdetermined":
            base[q, gt[q]] += 0.5
        if kind == "polysemous":
            base[q, (gt[q] + 1) % n_videos] += 0.45
            base[q, (gt[q] + 2) % n_videos] += 0.45
    norms = torch.where(torch.tensor([k == "underdetermined" for k in kinds]), 2.0, 4.0)
    queries = torch.randn(n, 8, generator=gen)
    queries = queries / queries.norm(dim=-1, keepdim=True) * norms[:, None]
    sims = Similarities(clip=base, frame=base + 0.02 * torch.rand(n, n_videos, generator=gen), score=base)
    return sims, queries, gt, kinds


def test_selective_metrics_match_a_hand_computed_case():
    # answered in order 0.9 (hit), 0.7 (miss), 0.5 (hit), 0.3 (miss), 0.1 (hit): risks 0, 1/2, 1/3, 1/2, 2/5
    conf = torch.tensor([0.9, 0.3, 0.5, 0.7, 0.1])
    correct = torch.tensor([True, False, True, False, True])
    m = selective_metrics(conf, correct)
    assert set(m) == {"AURC", "E-AURC", "AUGRC", "R@1@50%", "R@1@80%"}
    aurc_hand = (0.5 + 5 / 6 + 5 / 6 + 0.9) / 10  # trapezoids of width 1/5 between the five points
    optimal = (0.25 + 0.65) / 10  # hits first: risks 0, 0, 0, 1/4, 2/5
    assert m["AURC"] == pytest.approx(aurc_hand) and m["E-AURC"] == pytest.approx(aurc_hand - optimal)
    assert m["AUGRC"] == pytest.approx((0.2 + 0.4 + 0.6 + 0.8) / 10)  # errors / 5 from (0, 0): 0, 1/5, 1/5, 2/5, 2/5
    assert [m["R@1@50%"], m["R@1@80%"]] == pytest.approx([60.0, 50.0])  # 1.5 hits of 2.5; 2 of 4


def test_fit_on_val_and_evaluate_on_test():
    uncertainty = RetrievalUncertainty(GalleryUncertainty(k=5, tau=0.05, tanh_scaling="outside"), grid=9)
    with pytest.raises(RuntimeError, match="fit"):
        uncertainty.opinion(*_split(0)[:3])
    sims, queries, gt, kinds = _split(0)
    uncertainty.fit_scores(sims, queries, gt, kinds)
    assert uncertainty.fit_criterion.startswith("macro-F1") and uncertainty.reference_norm == pytest.approx(
        float(queries.norm(dim=-1).mean()))
    test = _split(1)
    result = uncertainty.evaluate(*test)
    sel = result["selective"]
    assert set(sel) == {"neg_u", "top_belief", "margin", "neg_xi", "max_score"}
    ident = result["gallery_identification"]
    fitted = ident["fitted"]
    assert set(fitted["per_type"]) == set(TYPES) and fitted["thresholds"] == uncertainty.thresholds.to_dict()
    analysed = uncertainty.analyse(*test)
    truth = torch.tensor([TYPE_CODES[k] for k in test[3]])
    assert fitted["macro_f1"] == pytest.approx(macro_f1(analysed.identified, truth))
    assert fitted["macro_f1"] > 0.9  # the planted structure is easy to read off the opinions
    assert ident["chosen_confidence"] == uncertainty.chosen_confidence in ("neg_u", "top_belief", "neg_xi")
    json.dumps(result)  # JSON-ready (NaN aside, which the CLI turns into null)
    table = format_uncertainty_tables({"toy": result})
    assert "toy" in table and "max_score" in table and "macro-F1 fitted" in table
    assert "macro-F1 paper rule" in table.splitlines()[1] and " - " in table.splitlines()[3]  # no whole-gallery run
    with_paper_rule = format_uncertainty_tables({"toy": {**result, "identification": {"macro_f1": 0.2684}}})
    assert with_paper_rule.splitlines()[3].split()[:2] == ["toy", "0.268"]


def test_without_types_the_fit_uses_correctness_and_reports_nan():
    sims, queries, gt, _ = _split(2)
    uncertainty = RetrievalUncertainty(GalleryUncertainty(k=5), use_query_norm=False)
    uncertainty.fit_scores(sims, queries, gt, [None] * len(gt))
    assert uncertainty.fit_criterion.startswith("Youden")
    result = uncertainty.evaluate(sims, queries, gt, [None] * len(gt))
    assert math.isnan(result["gallery_identification"]["fitted"]["macro_f1"])
    assert format_uncertainty_tables({"run": {"recall": {}}}) == ""
