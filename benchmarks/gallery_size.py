"""Do retrieval-time thresholds carry over to a larger gallery? Top-k opinions against whole-gallery ones.

For a trained run of the embedded benchmark (``demo`` writes ``<dir>/data`` and ``<dir>/{holmes,baseline}``)
the identification thresholds are fitted on the ``val`` split (its 120 videos), then the ``test`` queries are
identified against galleries of growing size: the test videos alone, then with the val videos, then with the
train videos added as distractors (their concepts are independent of the test queries', so the planted
types stay valid). Opinions over the top-``k`` candidates are compared with opinions over the whole gallery
(``k = V``, the in-batch form of the paper). Reported per gallery: R@1, identification macro-F1 and the AURC
of the evidential confidence chosen on val (lowest AURC there) and of the max score.

Usage::

    python benchmarks/gallery_size.py --run-dir /tmp/demo0 [--model holmes] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evidential_prvr import GalleryUncertainty  # noqa: E402
from evidential_prvr.metrics import recall_at_k  # noqa: E402
from reference_models.engine.checkpoint import load_checkpoint  # noqa: E402
from reference_models.holmes.config import HolmesConfig  # noqa: E402
from reference_models.holmes.data import load_split, make_video_loader, read_planted_types  # noqa: E402
from reference_models.holmes.factory import build_model  # noqa: E402
from reference_models.holmes.model import VideoEmbeddings  # noqa: E402
from reference_models.holmes.objective import HolmesObjective  # noqa: E402
from reference_models.holmes.scoring import encode_all_videos, score_matrix  # noqa: E402
from reference_models.holmes.selective import RetrievalUncertainty  # noqa: E402


def _concat(parts: list[VideoEmbeddings]) -> VideoEmbeddings:
    frames = max(p.frame.shape[1] for p in parts)
    pad = lambda x, value: torch.cat([x, x.new_full((x.shape[0], frames - x.shape[1], *x.shape[2:]), value)], 1)  # noqa: E731
    return VideoEmbeddings(torch.cat([p.clip for p in parts]), torch.cat([pad(p.frame, 0.0) for p in parts]),
                           torch.cat([pad(p.frame_mask, False) for p in parts]))


def measure(run_dir: Path, model_name: str, k: int, device: str) -> list[dict]:
    """Rows of (k, gallery size, R@1, macro-F1, AURC of the chosen evidential confidence, AURC of the max score)."""
    state = load_checkpoint(run_dir / model_name / "best.pt", map_location=device)
    cfg = HolmesConfig.from_dict(state["config"])
    model = build_model(cfg, state["visual_dim"], state["text_dim"], state["n_clips"], state["n_frames"]).to(device)
    model.load_state_dict(state["model"])
    data = run_dir / "data"
    splits = {s: load_split(data, "embedded", "synthetic", s, max_query_len=cfg.model.max_query_len)
              for s in ("train", "val", "test")}
    planted = read_planted_types(data, "embedded")
    identifier = HolmesObjective(cfg, cfg.model.hidden_size).identifier()
    test = splits["test"]
    types = [planted.get(c) for c in test.caption_ids]
    rows = []
    with torch.no_grad():
        videos = {s: encode_all_videos(model, make_video_loader(sp, cfg.optim.eval_video_batch), device)
                  for s, sp in splits.items()}
        for k_used in (k, None):
            uncertainty = RetrievalUncertainty(GalleryUncertainty(k=k_used, tau=identifier.tau,
                                                                  tanh_scaling=identifier.tanh_scaling))
            uncertainty.fit(model, splits["val"], cfg, device=device, planted_types=planted)
            _, queries, _ = uncertainty.encode(model, test, cfg, device)
            for names in (("test",), ("test", "val"), ("test", "val", "train")):
                gallery = _concat([videos[n] for n in names])
                sims = score_matrix(model, gallery, queries, query_chunk=cfg.optim.score_chunk)
                gt = test.caption_video_index.to(device)
                result = uncertainty.evaluate(sims, queries, gt, types)
                ident, sel = result["gallery_identification"], result["selective"]
                chosen = ident["chosen_confidence"]
                rows.append({"k": "V" if k_used is None else k_used, "gallery": len(gallery),
                             "R@1": recall_at_k(sims.score, gt, ks=(1,))["R@1"],
                             "macro_f1": ident["fitted"]["macro_f1"], "evidential_confidence": chosen,
                             "aurc_evidential": sel[chosen]["AURC"], "aurc_max_score": sel["max_score"]["AURC"]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True, help="output folder of a demo run")
    parser.add_argument("--model", default="holmes", help="sub-folder of the run (default: holmes)")
    parser.add_argument("--k", type=int, default=10, help="candidates of the top-k opinions (default: 10)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args()
    torch.set_num_threads(max(1, min(torch.get_num_threads(), 2)))
    rows = measure(args.run_dir, args.model, args.k, args.device)
    print(f"{'k':>3} {'videos':>7} {'R@1':>6} {'macro-F1':>9} {'AURC evid.':>11} {'AURC max':>9}")
    for r in rows:
        print(f"{r['k']:>3} {r['gallery']:>7} {r['R@1']:6.1f} {r['macro_f1']:9.3f} {r['aurc_evidential']:11.4f} "
              f"{r['aurc_max_score']:9.4f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
