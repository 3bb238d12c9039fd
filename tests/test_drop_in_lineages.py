"""The lineage drop-in guides (docs/guide/drop_in_*.rst) work on models shaped like each codebase.

Each guide shows the swap as a diff of the codebase's real call site. These tests take the added lines of
that diff out of the guide and run them, so a guide that drifts from the library fails here: one
training step of a tiny model with the same outputs as MS-SL (``HuiGuanLab/ms-sl``: 32 clips pooled into
528 multi-scale proposals, a key-clip-guided frame branch, one query encoding), GMMFormer
(``huangmozhi9527/GMMFormer``: one pooled frame vector per video) and HLFormer
(``lijun2005/ICCV25-HLFormer``: max over 128 padded frames, a ten-entry output list).

The library side of the same swap follows: the Eq. 1 scoring helper against a brute-force loop, errors that tell
the fix, a visible schedule and data sets of one's own.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import evidential_prvr
from evidential_prvr import HolmesCriterion, functional
from evidential_prvr.presets import CAPTIONS_PER_VIDEO, closest_dataset, holmes_settings

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide"
N_CLIPS, N_FRAMES, VISUAL_DIM, TEXT_DIM, DIM = 32, 20, 12, 10, 16


# --- the guide's diff, as code --------------------------------------------------------------------------
def diff_block(page: str) -> list[str]:
    """The lines of the first ``.. code-block:: diff`` of a guide page, dedented."""
    lines = (GUIDE / page).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == ".. code-block:: diff") + 1
    body = []
    for line in lines[start:]:
        if line.strip() and not line.startswith("   "):
            break
        body.append(line[3:])
    return body


def added_statements(page: str, path: str) -> list[str]:
    """The Python statements the diff of ``page`` adds to the file ``path`` (continuation lines joined)."""
    statements, current_file, pending = [], None, ""
    for line in diff_block(page):
        if line.startswith("+++ "):
            current_file = line[4:].strip().removeprefix("b/")
            continue
        if current_file != path or not line.startswith("+"):
            continue
        pending = f"{pending} {line[1:].strip()}".strip()
        if pending.count("(") + pending.count("[") + pending.count("{") == \
                pending.count(")") + pending.count("]") + pending.count("}"):
            statements.append(pending)
            pending = ""
    assert statements, f"{page}: the diff adds nothing to {path}"
    return statements


def run_swap(page: str, path: str, namespace: dict) -> dict:
    """Run the added lines of the guide's diff: imports, the criterion, ``set_epoch``, then the training step."""

    def order(statement: str) -> int:
        if statement.startswith(("from ", "import ")):
            return 0
        return 1 if "from_preset" in statement else 2 if "set_epoch" in statement else 3

    for statement in sorted(added_statements(page, path), key=order):
        exec(statement, namespace)  # noqa: S102 - the guide's own code
    return namespace


def changed_lines(page: str) -> int:
    """``+``/``-`` lines of the guide's diff (file headers and ``...`` elisions excluded)."""
    return sum(1 for line in diff_block(page) if re.match(r"^[+-](?![+-]{2} )", line))


def stated_count(page: str) -> int:
    """The number of changed lines the guide states (``**N changed lines**``)."""
    match = re.search(r"\*\*(\d+) changed lines\*\*", (GUIDE / page).read_text(encoding="utf-8"))
    assert match, f"{page} states no '**N changed lines**'"
    return int(match.group(1))


# --- models shaped like each codebase ------------------------------------------------------------------
class TinyMSSL(nn.Module):
    """MS-SL's shape: clips pooled to windows 1..C (C(C+1)/2 proposals), frames scored by key-clip attention."""

    def __init__(self) -> None:
        super().__init__()
        self.clip_proj, self.frame_proj = nn.Linear(VISUAL_DIM, DIM), nn.Linear(VISUAL_DIM, DIM)
        self.query_proj = nn.Linear(TEXT_DIM, DIM)
        self.key, self.value = nn.Linear(DIM, DIM, bias=False), nn.Linear(DIM, DIM, bias=False)

    def encode_context(self, clip_video_feat, frame_video_feat, video_mask):
        clips = self.clip_proj(clip_video_feat).transpose(1, 2)  # [V, d, C]
        proposals = torch.cat([F.avg_pool1d(clips, w, stride=1) for w in range(1, clips.shape[-1] + 1)], dim=-1)
        return self.frame_proj(frame_video_feat), proposals.transpose(1, 2)  # [V, F, d], [V, C(C+1)/2, d]

    def encode_query(self, query_feat, query_mask):
        weights = query_mask / query_mask.sum(1, keepdim=True)
        return torch.einsum("ql,qld->qd", weights, self.query_proj(query_feat))

    def get_pred_from_raw_query(self, query_feat, query_mask, query_labels, proposals, frames, frame_mask):
        """MS-SL's inference path: [Q, V] clip scores (max over proposals) and key-clip-guided frame scores."""
        query = self.encode_query(query_feat, query_mask)
        cos = torch.einsum("qd,vmd->vmq", F.normalize(query, dim=-1), F.normalize(proposals, dim=-1))
        clip_scores, key_clip = cos.max(dim=1)  # [V, Q]
        key_feat = proposals[torch.arange(len(proposals))[:, None], key_clip]  # [V, Q, d]
        att = torch.einsum("vfd,vqd->vfq", self.key(frames), key_feat).masked_fill(~frame_mask.bool()[..., None], -1e9)
        frame_feat = torch.einsum("vfq,vfd->vqd", att.softmax(dim=1), self.value(frames))
        frame_scores = (F.normalize(frame_feat, dim=-1) * F.normalize(query, dim=-1)[None]).sum(-1)
        return clip_scores.t(), frame_scores.t()


class TinyGMMFormer(nn.Module):
    """GMMFormer's shape: 32 clips, frames pooled to one vector per video, a second query encoding last."""

    def __init__(self, n_outputs: int = 7) -> None:
        super().__init__()
        self.clip_proj, self.frame_proj = nn.Linear(VISUAL_DIM, DIM), nn.Linear(VISUAL_DIM, DIM)
        self.frame_pool = nn.Linear(DIM, 1)
        self.query_proj, self.dropout = nn.Linear(TEXT_DIM, DIM), nn.Dropout(0.2)
        self.n_outputs = n_outputs

    def encode_query(self, batch):
        return self.dropout(self.query_proj(batch["text_feat"]).mean(1))

    def forward(self, batch):
        clips = self.clip_proj(batch["clip_video_features"])  # [V, 32, d]
        frames = self.frame_proj(batch["frame_video_features"])
        pooled = torch.einsum("vf,vfd->vd", self.frame_pool(frames).squeeze(-1).softmax(-1), frames)  # [V, d]
        query = self.encode_query(batch)
        clip_cos = torch.einsum("qd,vcd->qvc", F.normalize(query, dim=-1), F.normalize(clips, dim=-1)).amax(-1)
        clip_raw = torch.einsum("qd,vcd->qvc", query, clips).amax(-1)
        frame_cos = F.normalize(query, dim=-1) @ F.normalize(pooled, dim=-1).t()
        frame_raw = query @ pooled.t()
        second_query = self.encode_query(batch)  # GMMFormer encodes the queries again for L_div
        if self.n_outputs == 7:  # GMMFormer after the guide's one-line change: clips appended as entry 6
            return [clip_cos, clip_raw, {}, frame_cos, frame_raw, second_query, clips]
        # HLFormer after its one-line change: the Lorentz entries 5-7, the clips as entry 8 (was None), the query last
        return [clip_cos, clip_raw, {}, frame_cos, frame_raw, None, None, None, clips, second_query]


def lineage_batch(n_videos: int = 4, captions: int = 3, seed: int = 0) -> dict:
    """A collated batch in the lineage's layout (``collate_train``): videos, flat captions, ``text_labels``."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.ones(n_videos, N_FRAMES)
    mask[0, 15:] = 0  # a shorter video, padded
    n_queries = n_videos * captions
    return dict(clip_video_features=torch.randn(n_videos, N_CLIPS, VISUAL_DIM, generator=gen),
                frame_video_features=torch.randn(n_videos, N_FRAMES, VISUAL_DIM, generator=gen), videos_mask=mask,
                text_feat=torch.randn(n_queries, 6, TEXT_DIM, generator=gen), text_mask=torch.ones(n_queries, 6),
                text_labels=[q // captions for q in range(n_queries)])


def train_step(model: nn.Module, loss: torch.Tensor) -> dict[str, float]:
    """One optimiser step; the gradient norm of every parameter."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    optimizer.zero_grad()
    loss.backward()
    grads = {name: float(p.grad.norm()) if p.grad is not None else 0.0 for name, p in model.named_parameters()}
    optimizer.step()
    return grads


# --- MS-SL -------------------------------------------------------------------------------------------
def msl_step(epoch: int, n_epoch: int = 10, **extra) -> tuple[dict, dict]:
    torch.manual_seed(0)
    model, batch = TinyMSSL(), lineage_batch()
    opt = SimpleNamespace(dset_name="tvr", n_epoch=n_epoch)
    ns = run_swap("drop_in_msl.rst", "method/train.py", dict(model=model, batch=batch, opt=opt, epoch_i=epoch, **extra))
    return ns, train_step(model, ns["loss"])


def test_msl_swap_trains_the_clip_and_key_clip_frame_branches_in_the_second_stage():
    ns, grads = msl_step(epoch=9)
    assert ns["proposals"].shape == (4, N_CLIPS * (N_CLIPS + 1) // 2, DIM)  # 528 proposals from 32 clips
    assert ns["frame_sim"].shape == ns["clip_sim"].shape == (12, 4)
    assert ns["opt"].criterion.stage == 2 and torch.isfinite(ns["loss"])
    assert ns["loss_dict"] == {"loss_overall": ns["loss"].item()}
    for name in ("clip_proj.weight", "frame_proj.weight", "query_proj.weight", "key.weight", "value.weight"):
        assert grads[name] > 0, name  # MS-SL's own key-clip frame scale is trained, not bypassed


def test_msl_swap_runs_l_intra_on_the_clips_only(monkeypatch):
    """The swap passes the first C proposals (window 1: the clips) to L_intra, not all 528."""
    seen = []
    forward = evidential_prvr.IntraVideoEvidentialLoss.forward

    def recording_forward(self, sim, *args, **kwargs):
        seen.append(tuple(sim.shape))
        return forward(self, sim, *args, **kwargs)

    monkeypatch.setattr(evidential_prvr.IntraVideoEvidentialLoss, "forward", recording_forward)
    ns, _ = msl_step(epoch=9)
    assert seen == [(4, 3, N_CLIPS)]  # [videos, captions per video, clips]
    model, batch = ns["model"], ns["batch"]
    _, proposals = model.encode_context(batch["clip_video_features"], batch["frame_video_features"], batch["videos_mask"])
    torch.testing.assert_close(proposals[:, :N_CLIPS], model.clip_proj(batch["clip_video_features"]))


def test_msl_clip_scores_are_max_similarity_over_the_proposals():
    """MS-SL's clip scale is Holmes Eq. 1 over its proposals: the helper reproduces it (brute force below)."""
    ns, _ = msl_step(epoch=0)
    query, proposals = ns["query"], ns["proposals"]
    brute = torch.stack([torch.stack([max(F.cosine_similarity(q, p, dim=0) for p in video) for video in proposals])
                         for q in query[:3]])
    torch.testing.assert_close(evidential_prvr.max_similarity(query[:3], proposals), brute)
    torch.testing.assert_close(evidential_prvr.max_similarity(query, proposals), ns["clip_sim"])


def test_msl_training_scores_are_refused_with_the_fix_named():
    """MS-SL's own training matrix is caption x caption; the error points to max_similarity."""
    ns, _ = msl_step(epoch=0)
    query, frames = ns["query"], ns["frames"]
    square = F.normalize(query, dim=-1) @ F.normalize(query, dim=-1).t()  # [Q, Q], as model.forward builds it
    with pytest.raises(ValueError, match="max_similarity"):
        ns["opt"].criterion(square, ns["clip_sim"], ns["batch"]["text_labels"], query_emb=query)
    with pytest.raises(ValueError, match=r"transpos"):
        ns["opt"].criterion(ns["frame_sim"].t(), ns["clip_sim"].t(), ns["batch"]["text_labels"], query_emb=query)
    assert frames.shape[:2] == (4, N_FRAMES)


def test_msl_schedule_follows_the_run_length_and_logs_the_stage_change(caplog):
    """``total_epochs=opt.n_epoch`` maps the release's switches (epoch 20 of 100) onto a 10-epoch run, visibly."""
    ns, _ = msl_step(epoch=0, n_epoch=10)
    criterion, stages = ns["opt"].criterion, []
    with caplog.at_level(logging.INFO, logger="evidential_prvr"):
        for epoch in range(10):
            criterion.set_epoch(epoch)
            stages.append(criterion.stage)
    assert stages == [1, 1] + [2] * 8  # 20 / 100 of 10 epochs: the second stage from epoch 2
    assert criterion.hard_negative_epoch == 2
    assert any("stage" in record.getMessage().lower() for record in caplog.records)


# --- GMMFormer and HLFormer ---------------------------------------------------------------------------
@pytest.mark.parametrize(("page", "n_outputs", "dataset"), [("drop_in_gmmformer.rst", 7, "tvr"),
                                                            ("drop_in_hlformer.rst", 10, "act")])
def test_main_py_swap_one_training_step(page, n_outputs, dataset):
    torch.manual_seed(0)
    model, batch = TinyGMMFormer(n_outputs), lineage_batch()
    cfg = {"dataset_name": dataset, "n_epoch": 100, "hard_negative_start_epoch": 30}
    ns = dict(model=model, batch=batch, cfg=cfg, epoch=25)
    ns["input_list"] = model(batch)
    run_swap(page, "src/main.py", ns)
    criterion = ns["criterion"]
    assert isinstance(criterion, HolmesCriterion) and criterion.stage == 2 and criterion.hard_negatives
    grads = train_step(model, ns["loss"])
    assert torch.isfinite(ns["loss"]) and all(
        grads[name] > 0 for name in ("clip_proj.weight", "frame_proj.weight", "query_proj.weight"))


@pytest.mark.parametrize("page", ["drop_in_gmmformer.rst", "drop_in_hlformer.rst"])
def test_main_py_swap_keeps_its_own_hard_negative_switch_when_asked(page):
    """The guide's mapping of ``hard_negative_start_epoch`` (30 in GMMFormer) through ``hard_negative_epoch=``."""
    text = (GUIDE / page).read_text(encoding="utf-8")
    assert "hard_negative_start_epoch" in text and "hard_negative_epoch=" in text
    cfg = {"hard_negative_start_epoch": 30}
    criterion = HolmesCriterion.from_preset("release", "tvr", warmup_stage_epochs=20,
                                            hard_negative_epoch=cfg["hard_negative_start_epoch"])
    criterion.set_epoch(29)
    assert criterion.stage == 2 and not criterion.hard_negatives
    criterion.set_epoch(30)
    assert criterion.hard_negatives


# --- what the guides state --------------------------------------------------------------------------------
@pytest.mark.parametrize(("page", "limit"), [("drop_in_msl.rst", 15), ("drop_in_gmmformer.rst", 15),
                                             ("drop_in_hlformer.rst", 15)])
def test_guide_states_its_diff_size_and_keeps_within_the_promise(page, limit):
    assert stated_count(page) == changed_lines(page) <= limit


def test_the_index_page_links_every_lineage_guide():
    index = (GUIDE / "drop_in.rst").read_text(encoding="utf-8")
    for page in ("drop_in_msl", "drop_in_gmmformer", "drop_in_hlformer"):
        assert f":doc:`{page}`" in index or f"<{page}>`" in index, page
    assert "closest_dataset" in index and "total_epochs=" in index


def test_intra_cost_benchmark_runs():
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "lineage_intra_cost.py"), "--videos", "3",
                          "--captions", "2", "--clips", "4", "--dim", "8", "--repeats", "1", "--warmup", "0"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ratio proposals / clips" in run.stdout and "10 per video" in run.stdout


# --- max_similarity (Holmes Eq. 1) ----------------------------------------------------------------------------------
def _brute_force(query, video, mask, normalize=True):
    out = torch.empty(query.shape[0], video.shape[0], dtype=torch.float64)
    for i in range(query.shape[0]):
        for j in range(video.shape[0]):
            best = -float("inf")
            for m in range(video.shape[1]):
                if mask is not None and not bool(mask[j, m]):
                    continue
                q, t = query[i].double(), video[j, m].double()
                value = float(q @ t / (q.norm() * t.norm())) if normalize else float(q @ t)
                best = max(best, value)
            out[i, j] = best
    return out


@settings(max_examples=40, deadline=None)
@given(q=st.integers(1, 5), v=st.integers(1, 5), m=st.integers(1, 6), chunk=st.one_of(st.none(), st.integers(1, 6)),
       normalize=st.booleans(), seed=st.integers(0, 2**16))
def test_max_similarity_matches_a_brute_force_loop(q, v, m, chunk, normalize, seed):
    g = torch.Generator().manual_seed(seed)
    query, video = torch.randn(q, 4, generator=g, dtype=torch.float64), torch.randn(v, m, 4, generator=g,
                                                                                  dtype=torch.float64)
    mask = torch.rand(v, m, generator=g) < 0.6
    mask[torch.arange(v), torch.randint(0, m, (v,), generator=g)] = True
    out = functional.max_similarity(query, video, mask, normalize=normalize, chunk_size=chunk)
    torch.testing.assert_close(out, _brute_force(query, video, mask, normalize))
    assert out.shape == (q, v)


def test_padded_tokens_never_win():
    query = torch.tensor([[1.0, 0.0]])
    video = torch.tensor([[[0.0, 1.0], [1.0, 0.0]]])  # the padded token is the exact match
    assert float(evidential_prvr.max_similarity(query, video, torch.tensor([[True, False]]))) == 0.0
    assert float(evidential_prvr.max_similarity(query, video)) == 1.0
    assert evidential_prvr.max_similarity is functional.max_similarity


def test_max_similarity_gradcheck():
    g = torch.Generator().manual_seed(0)
    query = torch.randn(3, 5, dtype=torch.float64, generator=g, requires_grad=True)
    video = torch.randn(2, 4, 5, dtype=torch.float64, generator=g, requires_grad=True)
    mask = torch.tensor([[True, True, False, True], [False, True, True, False]])
    assert torch.autograd.gradcheck(lambda a, b: functional.max_similarity(a, b, mask, chunk_size=1), (query, video))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_max_similarity_under_autocast_is_finite(dtype):
    query = torch.randn(4, 8, requires_grad=True)
    video = torch.randn(3, 5, 8) * 1e4
    video[0, 1] = 0.0  # a zero (padding-like) token that is valid
    with torch.autocast("cpu", dtype=dtype):
        out = functional.max_similarity(query, video)
    out.sum().backward()
    assert out.dtype == torch.float32 and torch.isfinite(out).all() and torch.isfinite(query.grad).all()
    assert (out.abs() <= 1.01).all()


def test_max_similarity_errors_name_the_argument_and_the_shape():
    q, v = torch.randn(3, 4), torch.randn(2, 5, 4)
    with pytest.raises(ValueError, match=r"video_emb must be \[num_videos, num_tokens, d\] = \[2, 5, 4\]"):
        functional.max_similarity(q, torch.randn(2, 5, 6))
    with pytest.raises(ValueError, match="video_emb must be a 3-D"):
        functional.max_similarity(q, torch.randn(2, 4))
    with pytest.raises(ValueError, match=r"video_mask must have shape \(2, 5\)"):
        functional.max_similarity(q, v, torch.ones(5, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"video_mask must mark at least one valid token per video; videos \[1\]"):
        functional.max_similarity(q, v, torch.tensor([[True] * 5, [False] * 5]))
    with pytest.raises(TypeError, match="chunk_size"):
        functional.max_similarity(q, v, chunk_size=1.5)
    with pytest.raises(TypeError, match="query_emb"):
        functional.max_similarity(q.long(), v)


# --- errors that tell the fix ---------------------------------------------------------------------------------------
def _criterion(epoch=25):
    criterion = evidential_prvr.HolmesCriterion.from_preset("release", "tvr")
    criterion.set_epoch(epoch)
    return criterion


def test_transposed_scores_are_recognised():
    labels = torch.arange(128) // 4  # 128 captions, 32 videos
    sim = torch.rand(32, 128)  # videos × captions
    with pytest.raises(ValueError, match=r"frame_sim must have shape \[num_queries, num_videos\] = \[128, 32\], got "
                                         r"\(32, 128\): it looks transposed .*pass frame_sim\.T"):
        _criterion()(sim, sim, labels, query_emb=torch.randn(128, 8))
    for fn in (lambda s: functional.inter_video_loss(s, s, labels), lambda s: functional.identify(s, s, labels),
               lambda s: functional.triplet_ranking_loss(s, labels)):
        with pytest.raises(ValueError, match="transposed"):
            fn(sim)


def test_a_square_caption_by_caption_matrix_points_to_max_similarity():
    labels = torch.arange(128) // 4
    with pytest.raises(ValueError, match=r"frame_sim is square \(128, 128\).*\[num_queries, num_videos\] = \[128, 32\]"
                                         r".*evidential_prvr\.max_similarity"):
        _criterion()(torch.rand(128, 128), torch.rand(128, 32), labels, query_emb=torch.randn(128, 8))
    # both square, but clip_emb says the batch has 32 videos
    with pytest.raises(ValueError, match=r"square \(128, 128\) while clip_emb holds 32 videos.*max_similarity"):
        _criterion()(torch.rand(128, 128), torch.rand(128, 128), labels, query_emb=torch.randn(128, 8),
                     clip_emb=torch.randn(32, 8, 8))
    with pytest.raises(ValueError, match="max_similarity"):
        functional.inter_video_loss(torch.rand(128, 32), torch.rand(128, 128), labels)


def test_every_shape_error_states_the_expected_shape_with_the_numbers():
    labels = torch.tensor([0, 0, 1, 1, 2])
    with pytest.raises(ValueError, match=r"\[num_queries, num_videos\] = \[5, 3\].*got \(4, 3\)"):
        functional.inter_video_loss(torch.rand(4, 3), torch.rand(4, 3), labels)
    with pytest.raises(ValueError, match=r"\[num_queries, num_videos\] = \[5, 3\]"):
        functional.base_retrieval_loss(torch.rand(5, 3), torch.rand(4, 3), torch.randn(5, 8), labels)
    with pytest.raises(ValueError, match=r"clip_emb must be \[num_videos, Mc, d\] with num_videos = 3"):
        _criterion()(torch.rand(5, 3), torch.rand(5, 3), labels, query_emb=torch.randn(5, 8),
                     clip_emb=torch.randn(4, 8, 8))


def test_what_is_checked_about_swapped_frame_and_clip_scores():
    """Documented: frame_sim and clip_sim in each other's place have one shape and cannot be detected;
    a contradicting clip_emb count is (see test_every_shape_error_states_the_expected_shape_with_the_numbers)."""
    b = dict(query_emb=torch.randn(4, 8), clip_emb=torch.randn(2, 6, 8))
    frame, clip, labels = torch.rand(4, 2), torch.rand(4, 2), [0, 0, 1, 1]
    assert torch.isfinite(_criterion()(clip, frame, labels, **b))
    assert "cannot be detected" in evidential_prvr.HolmesCriterion.forward.__doc__


# --- the schedule is visible ----------------------------------------------------------------------------------------
def test_stage_changes_are_logged_once_each(caplog):
    criterion = evidential_prvr.HolmesCriterion.from_preset("release", "tvr", warmup_stage_epochs=2, hard_negative_epoch=3)
    with caplog.at_level(logging.INFO, logger="evidential_prvr"):
        for epoch in (0, 1, 1, 2, 2, 3, 4):
            criterion.set_epoch(epoch)
    lines = [r.getMessage() for r in caplog.records if r.name == "evidential_prvr"]
    assert len(lines) == 3
    assert "epoch 0 is in stage 1" in lines[0] and "stage 2 from epoch 2" in lines[0]
    assert "epoch 2 is in stage 2" in lines[1] and "negatives off" in lines[1]
    assert "epoch 3" in lines[2] and "negatives on" in lines[2]
    details = criterion.details(torch.rand(4, 2), torch.rand(4, 2), [0, 0, 1, 1], query_emb=torch.randn(4, 8),
                                clip_emb=torch.randn(2, 6, 8))
    assert details.stage == 2


def test_total_epochs_maps_the_release_switches_in_proportion():
    release = holmes_settings("release", "tvr").schedule
    assert (release.epochs, release.warmup_stage_epochs, release.hard_negative_epoch) == (100, 20, 20)
    for epochs, switch in ((6, 1), (30, 6), (50, 10), (100, 20), (12, 2), (200, 40)):
        criterion = evidential_prvr.HolmesCriterion.from_preset("release", "tvr", total_epochs=epochs)
        assert (criterion.warmup_stage_epochs, criterion.hard_negative_epoch) == (switch, switch)
        assert criterion.total_epochs == epochs
    with pytest.raises(ValueError, match="total_epochs must be an int >= 1"):
        evidential_prvr.HolmesCriterion.from_preset("release", total_epochs=0)


def test_the_switches_are_overrides_of_their_own():
    criterion = evidential_prvr.HolmesCriterion.from_preset("release", "act", warmup_stage_epochs=3,
                                                            hard_negative_epoch=5)
    assert (criterion.warmup_stage_epochs, criterion.hard_negative_epoch) == (3, 5)
    scaled = evidential_prvr.HolmesCriterion.from_preset("release", total_epochs=30, hard_negative_epoch=2)
    assert (scaled.warmup_stage_epochs, scaled.hard_negative_epoch) == (6, 2)  # the one not given is scaled
    with pytest.raises(TypeError, match="hard_negative_start_epoch"):
        evidential_prvr.HolmesCriterion.from_preset("release", hard_negative_start_epoch=5)
    with pytest.raises(TypeError, match="'schedule'"):  # version 3.0: total_epochs=, or the switches themselves
        evidential_prvr.HolmesCriterion.from_preset("release", schedule=6)


def test_a_switch_beyond_the_schedule_warns_once():
    with pytest.warns(UserWarning, match=r"stage 2 .* starts at epoch 8 .* beyond a schedule of 6 epochs") as record:
        criterion = evidential_prvr.HolmesCriterion.from_preset("release", total_epochs=6, warmup_stage_epochs=8)
        for epoch in range(6):
            criterion.set_epoch(epoch)
    assert len([w for w in record if issubclass(w.category, UserWarning)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        evidential_prvr.HolmesCriterion.from_preset("release", total_epochs=6)  # the scaled switches fit
    with pytest.warns(UserWarning, match="beyond a schedule of 1 epochs"):
        evidential_prvr.HolmesCriterion.from_preset("release", total_epochs=1)


# --- data sets of one's own -----------------------------------------------------------------------------------------
def test_closest_dataset_by_captions_per_video():
    assert CAPTIONS_PER_VIDEO == {"tvr": 5.0, "activitynet": 3.7, "charades": 2.4}  # Holmes §4.1
    assert [closest_dataset(x) for x in (1.0, 2.4, 3.0, 3.1, 3.7, 4.3, 4.4, 5.0, 20)] == [
        "charades", "charades", "charades", "activitynet", "activitynet", "activitynet", "tvr", "tvr", "tvr"]
    assert closest_dataset(4.0) == "activitynet"  # the drop-in test set: 4 captions per video
    assert isinstance(HolmesCriterion.from_preset("release", closest_dataset(4)), HolmesCriterion)
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="captions_per_video"):
            closest_dataset(bad)
    with pytest.raises(TypeError, match="captions_per_video"):
        closest_dataset("4")


def test_an_unknown_dataset_says_what_to_do():
    with pytest.raises(ValueError, match=r"'tvr', 'activitynet'.*got 'hiddenprvr'.*dataset=None.*closest_dataset"):
        evidential_prvr.HolmesCriterion.from_preset("release", dataset="hiddenprvr")
    default = evidential_prvr.HolmesCriterion.from_preset("release")
    assert repr(default) == repr(evidential_prvr.HolmesCriterion.from_preset("release", "tvr"))
    assert "TVR" in evidential_prvr.HolmesCriterion.from_preset.__doc__
