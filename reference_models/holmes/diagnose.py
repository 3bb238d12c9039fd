"""``python -m reference_models.holmes diagnose``: an HTML report of what a trained model is unsure about.

For a checkpoint and a data root in the MS-SL layout it fits the retrieval-time uncertainty on the
``val`` split (:mod:`reference_models.holmes.selective`), analyses the evaluated split and writes into
``--output-dir``:

``index.html``
    the page: summary, identification and selective-retrieval tables, the figures, and the queries the
    model is most and least sure of with their top-5 videos;
``uncertainty_space.png``
    the u-c-ξ space coloured by planted type where known, else by identified type (Holmes Fig. 2b), and the
    u-ξ plane with the fitted thresholds;
``transport.png``
    standard OT against flexible OT with its dustbin for sample videos (Holmes Fig. 4), computed with
    :class:`evidential_prvr.FlexibleOT` on each video's caption-clip cosine similarities;
``risk_coverage.png``
    the risk-coverage curve of every confidence;
``type_recall.png``
    R@1 per planted and per identified type;
``training.png``
    losses and validation recall per epoch, from ``last.pt``'s history or ``train.log`` next to the checkpoint;
``diagnose.json``
    the numbers behind the page.

Bad paths (checkpoint, data root, output folder) end with a one-line message and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from evidential_prvr import FlexibleOT
from evidential_prvr.metrics import recall_at_k, risk_coverage
from reference_models.engine import finite_or_none, load_checkpoint
from reference_models.holmes import report
from reference_models.holmes.config import HolmesConfig
from reference_models.holmes.data import load_split, read_planted_events, read_planted_types
from reference_models.holmes.data.layout import CollectionPaths, read_captions
from reference_models.holmes.evaluate import TYPE_CODES, TYPE_NAMES
from reference_models.holmes.factory import build_model
from reference_models.holmes.objective import HolmesObjective
from reference_models.holmes.selective import QueryUncertainty, RetrievalUncertainty

__all__ = ["add_diagnose_parser", "run_diagnose", "read_history"]

EXIT_BAD_INPUT = 2


def add_diagnose_parser(
    sub: Any, data_args: Callable[[argparse.ArgumentParser], None], device_type: Callable[[str], str] = str
) -> argparse.ArgumentParser:
    """Register the ``diagnose`` subcommand on the CLI's sub-parsers (``data_args`` adds the data options,
    ``device_type`` parses ``--device`` and refuses devices this machine lacks)."""
    p = sub.add_parser("diagnose", help="HTML report: uncertainty space, transport plans, risk-coverage, "
                                        "per-type recall, training curves, most/least sure queries")
    p.add_argument("--checkpoint", type=Path, required=True, help="best.pt or last.pt of a run")
    data_args(p)
    p.add_argument("--split", choices=("val", "test"), default="test", help="split to analyse (default: test)")
    p.add_argument("--output-dir", type=Path, default=Path("report"), help="where index.html and the PNGs go")
    p.add_argument("--device", type=device_type, default="cuda" if torch.cuda.is_available() else "cpu",
                   help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--k", type=int, default=10, help="candidates per query of the opinions (default: 10)")
    p.add_argument("--num-queries", type=int, default=8, help="rows of the most/least-sure tables (default: 8)")
    p.add_argument("--num-videos", type=int, default=3, help="videos in the transport figure (default: 3)")
    return p


def _fail(message: str) -> int:
    print(f"error: {message}".splitlines()[0], file=sys.stderr)
    return EXIT_BAD_INPUT


def read_history(checkpoint: Path) -> list[dict[str, Any]]:
    """Per-epoch history of the run holding ``checkpoint``: ``last.pt``'s ``history``, else parsed ``train.log``."""
    last = checkpoint.with_name("last.pt")
    if last.is_file():
        try:
            history = load_checkpoint(last).get("history")
            if history:
                return [dict(h) for h in history]
        except (RuntimeError, OSError, ValueError, KeyError, AttributeError):
            pass
    log = checkpoint.with_name("train.log")
    if not log.is_file():
        return []
    by_epoch: dict[int, dict[str, Any]] = {}
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        match = re.search(r"\bepoch (\d+) ((?:\S+=\S+ ?)+)", line)
        if not match:
            continue
        record: dict[str, Any] = {"epoch": int(match.group(1)) - 1}
        for token in match.group(2).split():
            key, _, value = token.partition("=")
            try:
                record[key] = float(value)
            except ValueError:
                continue
        by_epoch[record["epoch"]] = record
    return [by_epoch[e] for e in sorted(by_epoch)]


def _load(args: argparse.Namespace):
    """Checkpoint, config, model and the val / evaluated splits; a string on bad input."""
    if not args.checkpoint.is_file():
        return f"checkpoint {args.checkpoint} does not exist"
    try:
        state = load_checkpoint(args.checkpoint, map_location=args.device)
        cfg = HolmesConfig.from_dict(state["config"])
        dims = (state["visual_dim"], state["text_dim"], state["n_clips"], state["n_frames"])
    except Exception as exc:  # unreadable file, foreign pickle, missing keys: all one line, exit 2
        return f"{args.checkpoint}: not a checkpoint of the reference model ({type(exc).__name__}: {exc})"
    load = lambda name: load_split(args.data_root, args.collection, args.visual_feature, name,  # noqa: E731
                                   text_feature=args.text_feature,
                                   max_query_len=cfg.model.max_query_len, n_clips=dims[2], n_frames=dims[3])
    val = load("val")
    test_file = CollectionPaths(args.data_root, args.collection, args.visual_feature).caption_file("test")
    if args.split == "test" and not test_file.exists():
        # as train and evaluate: only a missing test file (MS-SL's TVR has none) falls back to val, loudly
        print(f"warning: no test caption file {test_file}: the val split is reported in place of test",
              file=sys.stderr)
        evaluated = val
    else:
        evaluated = load(args.split) if args.split != "val" else val
    if (val.visual_dim, val.text_dim) != dims[:2]:
        return (f"checkpoint expects (D_v, D_t) = {dims[:2]}, data {args.data_root}/{args.collection} has "
                f"({val.visual_dim}, {val.text_dim})")
    model = build_model(cfg, *dims).to(args.device)
    model.load_state_dict(state["model"])
    model.eval()
    return cfg, model, val, evaluated


def _transport_examples(split, queries, videos, count: int, events: dict[str, Any]) -> list[report.TransportExample]:
    order = sorted(range(split.num_videos), key=lambda v: (-len(split.video_caption_indices[v]), v))
    chosen = [v for v in order if len(split.video_caption_indices[v]) >= 2][:count]
    fot = FlexibleOT.from_preset("release", "tvr")  # the release's transport is the same for every data set
    ot = fot.without_dustbin()
    examples = []
    for v in chosen:
        rows = torch.as_tensor(split.video_caption_indices[v], device=queries.device)
        sim = F.normalize(queries[rows], dim=-1) @ F.normalize(videos.clip[v], dim=-1).T  # [Mq, Mc]
        flexible, plain = fot(sim[None]), ot(sim[None])
        ids = [split.caption_ids[int(i)] for i in rows.tolist()]
        spans = None
        if all(c in events for c in ids):
            n_clips = sim.shape[1]
            spans = [(events[c]["span"][0] * n_clips / events[c]["video_length"],
                      events[c]["span"][1] * n_clips / events[c]["video_length"]) for c in ids]
        examples.append(report.TransportExample(
            split.video_ids[v], plain.plan[0].cpu().numpy(), flexible.plan[0].cpu().numpy(),
            flexible.dustbin[0].cpu().numpy(), [c.split("#", 1)[-1] for c in ids], spans))
    return examples


def _query_rows(order: list[int], result: QueryUncertainty, confidence: torch.Tensor, split, sentences,
                sims) -> list[report.QueryRow]:
    gt = split.caption_video_index
    top = torch.topk(sims.score, min(5, sims.score.shape[1]), dim=1)
    correct = result.opinion.correct
    assert correct is not None  # the opinion of a split with its ground truth
    rows = []
    for i in order:
        videos = [(split.video_ids[int(v)], float(s), int(v) == int(gt[i]))
                  for v, s in zip(top.indices[i].tolist(), top.values[i].tolist())]
        rows.append(report.QueryRow(
            split.caption_ids[i], sentences.get(split.caption_ids[i], ""), result.types[i] or "unknown",
            TYPE_NAMES[int(result.identified[i])], float(confidence[i]), bool(correct[i]), videos))
    return rows


def _type_recall(correct: torch.Tensor, types: list[str | None], identified: torch.Tensor) -> dict[str, dict]:
    out: dict[str, dict[str, float]] = {}
    groups: dict[str, list[str | None]] = {"identified": [TYPE_NAMES[int(t)] for t in identified.tolist()]}
    if any(t is not None for t in types):
        groups = {"planted": types, **groups}
    for group, labels in groups.items():
        out[group] = {}
        for name in TYPE_CODES:
            rows = torch.tensor([t == name for t in labels], dtype=torch.bool)
            if bool(rows.any()):
                out[group][name] = 100.0 * float(correct.cpu()[rows].float().mean())
    return out


def run_diagnose(args: argparse.Namespace) -> int:
    """Entry point of the subcommand; returns the exit status."""
    start = time.perf_counter()
    for name in ("k", "num_queries", "num_videos"):
        if getattr(args, name) < 1:
            return _fail(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    loaded = _load(args)
    if isinstance(loaded, str):
        return _fail(loaded)
    cfg, model, val, split = loaded
    out = Path(args.output_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / ".write_test").write_text("", encoding="utf-8")
        (out / ".write_test").unlink()
    except OSError as exc:
        return _fail(f"cannot write to output folder {out}: {exc.strerror or exc}")
    planted = None
    try:
        planted = read_planted_types(args.data_root, args.collection)
    except (FileNotFoundError, ValueError):
        pass
    try:
        events = read_planted_events(args.data_root, args.collection)
    except FileNotFoundError:
        events = {}

    objective = HolmesObjective(cfg, cfg.model.hidden_size)
    uncertainty = RetrievalUncertainty.from_identifier(objective.identifier(), k=args.k)
    with torch.no_grad():
        _, val_queries, val_sims = uncertainty.encode(model, val, cfg, args.device)
        val_types: list[str | None] = ([planted.get(c) for c in val.caption_ids] if planted
                                       else [None] * val.num_captions)
        uncertainty.fit_scores(val_sims, val_queries, val.caption_video_index, val_types)
        videos, queries, sims = uncertainty.encode(model, split, cfg, args.device)
        types: list[str | None] = ([planted.get(c) for c in split.caption_ids] if planted
                                   else [None] * split.num_captions)
        gt = split.caption_video_index.to(sims.score.device)
        result = uncertainty.analyse(sims, queries, gt, types, videos)
        summary = uncertainty.summarise(result)
        examples = _transport_examples(split, queries, videos, args.num_videos, events)
    recall = recall_at_k(sims.score, gt)
    correct = result.opinion.correct
    assert correct is not None
    best = summary["gallery_identification"]["chosen_confidence"]  # lowest AURC on val
    sentences = {c.caption_id: c.sentence for c in read_captions(
        CollectionPaths(Path(args.data_root), args.collection, args.visual_feature).caption_file(split.split))}

    op = result.opinion
    identified_names = [TYPE_NAMES[int(t)] for t in result.identified.tolist()]
    known = any(t is not None for t in types)
    colour_types = [t or "unknown" for t in types] if known else identified_names
    fitted = summary["gallery_identification"]["fitted"]
    report.plot_uncertainty_space(out / "uncertainty_space.png", op.fused.uncertainty.cpu().numpy(),
                                  op.fused.consistency.cpu().numpy(), op.fused.aleatoric.cpu().numpy(),
                                  op.fused.runner_up_consistency.cpu().numpy(),
                                  colour_types, identified_names, fitted["thresholds"],
                                  "planted" if known else "identified")
    report.plot_transport(out / "transport.png", examples)
    curves = {}
    for name, conf in result.confidences.items():
        cov, risk = risk_coverage(conf, correct)
        curves[name] = (cov.cpu().numpy(), risk.cpu().numpy(), summary["selective"][name]["AURC"])
    ideal = correct.double() + torch.linspace(0, 1e-3, len(correct), dtype=torch.float64, device=correct.device)
    oracle_cov, oracle_risk = risk_coverage(ideal, correct)  # every right answer before every wrong one
    report.plot_risk_coverage(out / "risk_coverage.png", curves, (oracle_cov.cpu().numpy(), oracle_risk.cpu().numpy()))
    type_recall = _type_recall(correct, types, result.identified)
    report.plot_type_recall(out / "type_recall.png", type_recall)
    history = read_history(args.checkpoint)
    figures = [
        ("Uncertainty space", "uncertainty_space.png",
         "Each query of the split at its fused epistemic uncertainty u, label-free consistency c and aleatoric "
         "uncertainty ξ (Holmes Fig. 2b); middle and right: u against ξ and against the consistency r with the "
         "runner-up, coloured by the identified type, with the thresholds fitted on val."),
        ("Transport plans", "transport.png",
         "Caption-clip transport of sample videos: standard OT (left) and flexible OT with its dustbin row Z "
         "(right), each row scaled to its maximum; outlines mark annotated events (Holmes Fig. 4)."),
        ("Risk-coverage", "risk_coverage.png",
         "Top-1 error among the answered queries when only the most confident ones are answered, per confidence."),
        ("Recall per query type", "type_recall.png", "R@1 over the queries of each planted / identified type."),
    ]
    if history:
        report.plot_training(out / "training.png", history)
        figures.append(("Training curves", "training.png", "Mean losses and validation recall per epoch of the run."))
    confidence = result.confidences[best].cpu()
    order = torch.argsort(confidence, descending=True, stable=True).tolist()
    n = min(args.num_queries, len(order))
    most = _query_rows(order[:n], result, confidence, split, sentences, sims)
    least = _query_rows(order[::-1][:n], result, confidence, split, sentences, sims)

    ident_tables = []
    for label, key in (("fitted thresholds", "fitted"), ("paper's in-batch rule", "batch_rule")):
        rep = summary["gallery_identification"][key]
        ident_tables.append([label, _num(rep["macro_f1"], digits=3)] + [
            f"{_num(rep['per_type'][t]['precision'], 100, 0)} / {_num(rep['per_type'][t]['recall'], 100, 0)}"
            for t in TYPE_CODES])
    sel_rows = [[name, *(_num(m[k], digits=4) for k in ("AURC", "E-AURC", "AUGRC")), _num(m["R@1@50%"]),
                 _num(m["R@1@80%"])] for name, m in summary["selective"].items()]
    thresholds = fitted["thresholds"]
    seconds = time.perf_counter() - start
    report.write_html(
        out / "index.html",
        title=f"Uncertainty diagnosis: {cfg.name} on {args.collection} ({split.split})",
        summary=[
            ("checkpoint", str(args.checkpoint)),
            ("queries / videos", f"{split.num_captions} / {split.num_videos}"),
            ("R@1 / R@5 / R@10 / R@100 / SumR", " / ".join(f"{recall[k]:.1f}" for k in
                                                             ("R@1", "R@5", "R@10", "R@100", "SumR"))),
            ("opinion", f"top-{args.k} candidates, τ = {uncertainty.gallery.tau} ({uncertainty.gallery.tanh_scaling}),"
                        f" temperature scaled by query norm / {uncertainty.reference_norm:.3g}"),
            ("thresholds (fitted on val, " + (uncertainty.fit_criterion or "") + ")",
             f"β_u = {thresholds['uncertainty']:.3g}, β_p = {thresholds['consistency']:.3g}, "
             f"β_r = {thresholds['runner_up']:.3g}, β_ξ = {thresholds['aleatoric']:.3g}"),
            ("most/least-sure tables ranked by", f"{best} (the evidential confidence with the lowest AURC on val)"),
            ("report time", f"{seconds:.1f} s"),
        ],
        figures=figures,
        tables=[
            ("Query identification" + ("" if known else " (no planted types: precision/recall undefined)"),
             ["rule", "macro-F1", "precise P / R (%)", "polysemous P / R (%)", "under-determined P / R (%)"],
             ident_tables),
            ("Selective retrieval", ["confidence", "AURC", "E-AURC", "AUGRC", "R@1 @ 50 %", "R@1 @ 80 %"], sel_rows),
        ],
        most_sure=most,
        least_sure=least,
        confidence_name=best,
    )
    payload = {"recall": recall, **summary, "type_recall": type_recall, "seconds": time.perf_counter() - start}
    (out / "diagnose.json").write_text(json.dumps(finite_or_none(payload), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"report written to {out / 'index.html'} ({time.perf_counter() - start:.1f}s)")
    return 0


def _num(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{scale * value:.{digits}f}"
