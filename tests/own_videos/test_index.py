"""Own videos, indexing: decoding at a stated rate, the encoders (the bundled one's file and digest), the windows,
index (bad input, resume, nothing outside --out, MS-SL caption files), and the incremental index: new, changed and
removed videos, the saved search index and its FAISS candidates updated in place."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av", reason="the video extra (av) is not installed")
open_clip = pytest.importorskip("open_clip", reason="the video extra (open_clip_torch) is not installed")

import torch  # noqa: E402

from reference_models.videos.decoding import decode_video  # noqa: E402
from reference_models.videos.generated import write_generated_collection  # noqa: E402
from tests.own_videos.helpers import ROOT, problem_lines, videos_cli  # noqa: E402


# --- decoding -------------------------------------------------------------------------------------
def test_decode_samples_at_the_stated_rate(tmp_path: Path) -> None:
    coll = write_generated_collection(tmp_path, n_videos=3, events_per_video=2, event_seconds=2.0, fps=8, size=48)
    video = decode_video(coll.videos_dir / "video0000.mp4", fps=2.0, max_frames=100, size=32)
    assert video.problem is None and video.frames is not None
    # 4 s of video at 2 samples per second: 8 frames, at 0, 0.5, ..., 3.5 s (the file's frames are 1/8 s apart)
    assert video.frames.shape == (8, 32, 32, 3) and video.frames.dtype == np.uint8
    np.testing.assert_allclose(video.times, np.arange(8) * 0.5, atol=1 / 8)
    assert video.duration == pytest.approx(4.0, abs=0.2)
    capped = decode_video(coll.videos_dir / "video0000.mp4", fps=8.0, max_frames=5, size=32)
    assert capped.frames is not None and len(capped.frames) == 5
    assert capped.times[0] == pytest.approx(0.0) and capped.times[-1] > 3.0  # spread over the whole video


def test_decode_colour_matches_what_was_written(tmp_path: Path) -> None:
    # A frame of one flat colour survives the MPEG-4 round trip within the codec's error.
    path = tmp_path / "flat.mp4"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=4)
        stream.width = stream.height = 64
        stream.pix_fmt = "yuv420p"
        for _ in range(4):
            frame = av.VideoFrame.from_ndarray(np.full((64, 64, 3), (200, 40, 40), dtype=np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    video = decode_video(path, fps=4.0, max_frames=10, size=16)
    assert video.frames is not None
    np.testing.assert_allclose(video.frames.reshape(-1, 3).mean(0), (200, 40, 40), atol=12)


def test_decode_reports_bad_files_without_raising(tmp_path: Path) -> None:
    (tmp_path / "empty.mp4").write_bytes(b"")
    (tmp_path / "noise.mp4").write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    assert decode_video(tmp_path / "empty.mp4", fps=1, max_frames=4, size=16).problem == "empty file"
    noise = decode_video(tmp_path / "noise.mp4", fps=1, max_frames=4, size=16)
    assert noise.frames is None and noise.problem is not None and noise.problem.startswith("unreadable")
    with pytest.raises(ValueError, match="fps must be a positive number"):
        decode_video(tmp_path / "empty.mp4", fps=0, max_frames=4, size=16)


def test_the_generated_world_has_twins_and_every_caption_kind(tmp_path: Path) -> None:
    coll = write_generated_collection(tmp_path, n_videos=24, seed=3)
    truth = json.loads(coll.truth_json.read_text())
    assert all(coll.captions_per_kind[k] > 0 for k in ("appearance", "motion", "order", "generic"))
    twins = [(v, e["twin"]) for v, e in truth["videos"].items() if e["twin"]]
    assert twins
    for vid, twin in twins:
        mine, theirs = truth["videos"][vid]["events"], truth["videos"][twin["video"]]["events"]
        if twin["kind"] == "order_twin":  # the same events in the other order
            assert [(e["colour"], e["shape"]) for e in mine] == [(e["colour"], e["shape"]) for e in theirs][::-1]
        else:  # the same events, every motion reversed
            assert [(e["colour"], e["shape"]) for e in mine] == [(e["colour"], e["shape"]) for e in theirs]
            assert all(a["motion"] != b["motion"] for a, b in zip(mine, theirs))
    splits = {c["video"]: c["split"] for c in truth["captions"]}  # a video and its twin share a split
    assert all(splits.get(v) == splits.get(t["video"]) for v, t in twins if v in splits and t["video"] in splits)


# --- the encoders ---------------------------------------------------------------------------------
def test_token_features_end_with_open_clips_sentence_embedding(tiny_model: Path) -> None:
    from reference_models.videos.clip_encoder import ClipEncoder

    encoder = ClipEncoder(str(tiny_model), "none", seed=3)
    sentences = ["a red circle moves left", "something is moving on the screen"]
    tokens = encoder.encode_tokens(sentences)
    ids = encoder.tokenizer(sentences)
    assert [t.shape for t in tokens] == [(int((row != 0).sum()), 64) for row in ids]  # start .. end token
    with torch.no_grad():
        pooled = encoder.model.encode_text(ids)  # open_clip's own sentence embedding
    np.testing.assert_allclose(np.stack([t[-1] for t in tokens]), pooled.numpy(), rtol=1e-5, atol=1e-5)
    sentence = encoder.encode_sentences(sentences)
    np.testing.assert_allclose(sentence.numpy(), torch.nn.functional.normalize(pooled, dim=-1).numpy(), atol=1e-6)
    again = ClipEncoder(str(tiny_model), "none", seed=3)
    assert again.spec == encoder.spec  # the same seed draws the same weights
    other = ClipEncoder(str(tiny_model), "none", seed=4)
    assert other.spec.weights_sha256 != encoder.spec.weights_sha256
    with pytest.raises(ValueError, match="weights_sha256"):
        other.check_matches(encoder.spec)


def test_the_bundled_encoder_is_the_recorded_file_and_loads_offline() -> None:
    from safetensors.torch import load_file

    from reference_models.videos.clip_encoder import BUNDLED_MODEL, BUNDLED_WEIGHTS, ClipEncoder, bundled_files

    files = bundled_files()
    record = json.loads(files["record"].read_text(encoding="utf-8"))
    data = files["weights"].read_bytes()
    assert len(data) <= 10 * 2**20 and record["weights_bytes"] == len(data)
    assert hashlib.sha256(data).hexdigest() == record["weights_sha256"]
    guide = (ROOT / "docs" / "guide" / "own_videos.rst").read_text(encoding="utf-8")
    assert record["weights_sha256"] in guide  # the digest the guide states is the file's
    assert {"temperature", "confidence_kind", "thresholds", "source"} <= set(record["zero_shot"])
    state = load_file(files["weights"])  # no code runs when the weights are read
    encoder = ClipEncoder(BUNDLED_MODEL, BUNDLED_WEIGHTS)
    assert set(state) == set(encoder.model.state_dict())
    loaded = encoder.model.state_dict()
    assert all(torch.equal(loaded[k].float(), state[k].float()) for k in state)
    with pytest.raises(ValueError, match="the bundled weights are those of --model prvr-tiny"):
        ClipEncoder("ViT-B-32", BUNDLED_WEIGHTS)


def test_windows_cover_the_video_at_several_widths() -> None:
    from reference_models.videos.windows import MAX_UNITS, video_windows, window_count, window_layout

    assert window_count() == 42 and len(window_layout(MAX_UNITS)) == 42
    for units in range(1, 40):
        layout = window_layout(min(units, MAX_UNITS))
        assert all(0 <= s and s + w <= min(units, MAX_UNITS) for s, w in layout)
        assert (0, min(units, MAX_UNITS)) in layout  # the whole video is a window
        assert {s for s, w in layout if w == 1} == set(range(min(units, MAX_UNITS)))  # every unit alone
    g = torch.Generator().manual_seed(0)
    features = torch.randn(5, 8, generator=g)
    times = np.arange(5) * 0.5
    windows, spans = video_windows(features.numpy(), times, duration=2.5, rate=2.0)
    assert windows.shape == (42, 8) and spans.shape == (42, 2)
    unit = torch.nn.functional.normalize(features, dim=-1)
    # a window is the normalised mean of its frames' normalised features, and its span is theirs
    layout = window_layout(5)
    for i, (s, w) in enumerate(layout):
        expected = torch.nn.functional.normalize(unit[s : s + w].mean(0), dim=0)
        torch.testing.assert_close(windows[i], expected)
        assert spans[i].tolist() == pytest.approx([times[s], times[s + w - 1] + 0.5])
    # the padding repeats the first window: the best window of any query is a real one
    torch.testing.assert_close(windows[len(layout):], windows[:1].expand(42 - len(layout), -1))


# --- index: bad input, resume, nothing outside --out --------------------------------------------
def test_index_reports_each_bad_input_once_and_resumes(tmp_path: Path, tiny_model: Path) -> None:
    coll = write_generated_collection(tmp_path / "coll", n_videos=6, events_per_video=2, event_seconds=1.0, fps=8,
                                      size=48)
    videos = coll.videos_dir
    (videos / "empty.mp4").write_bytes(b"")
    (videos / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(2000))
    shutil.copy(videos / "video0001.mp4", videos / "video0001.mkv")  # a duplicate video id
    (videos / "notes.txt").write_text("not a video", encoding="utf-8")
    captions = coll.captions_csv.read_text(encoding="utf-8").splitlines()
    captions += ["ghost,a caption for a missing video,train", "broken,a caption of the broken file,val"]
    csv_file = tmp_path / "captions.csv"
    csv_file.write_text("\n".join(captions) + "\n", encoding="utf-8")
    out = tmp_path / "root"
    args = ("index", "--videos", str(videos), "--captions", str(csv_file), "--out", str(out), "--model",
            str(tiny_model), "--pretrained", "none", "--fps", "4", "--workers", "1", "--part-videos", "4",
            "--no-progress")
    before = sorted(p.name for p in tmp_path.iterdir())
    first = videos_cli(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    lines = problem_lines(first.stderr)
    assert len(lines) == 4, first.stderr  # empty, broken, duplicate id, missing video: one line each
    report = json.loads((out / "index_report.json").read_text())
    kinds = sorted(p["kind"] for p in report["problems"])
    assert kinds == ["duplicate_video_id", "empty_file", "missing_video", "unreadable"]
    assert sorted(report["encoded"]) == [f"video{i:04d}" for i in range(6)]
    assert report["ignored_files"] == 1
    assert len(list((out / "parts").glob("part-*.npz"))) == 2  # 4 videos, then 2
    assert sorted(p.name for p in tmp_path.iterdir()) == before + ["root"]  # nothing outside --out
    # the layout holmes train/validate read, found from the data root alone
    from tests.own_videos.helpers import holmes_cli

    check = holmes_cli("validate", "--data-root", str(out))
    assert check.returncode == 0, check.stderr
    import h5py

    with h5py.File(out / "videos" / "FeatureData" / "clip_tiny-clip" / "feature.hdf5", "r") as f:
        assert sorted(f.keys()) == [f"video{i:04d}" for i in range(6)]
        assert f["video0000"].shape == (8, 64)  # 2 s at 4 frames per second, 64-d
    assert (out / "videos" / "TextData" / "clip_tiny-clip_videos_query_feat.hdf5").is_file()
    assert not list((out / "videos" / "TextData").glob("roberta*"))
    # a rerun encodes nothing, reports the unchanged broken files again without decoding them, and --strict
    # turns the problems into exit status 2
    second = videos_cli(*args, "--strict", cwd=tmp_path)
    assert second.returncode == 2, second.stderr
    report = json.loads((out / "index_report.json").read_text())
    assert report["encoded"] == [] and len(report["unchanged"]) == 6
    assert second.stderr.strip().splitlines()[-1].startswith("error: --strict: 4 problems")
    assert sum("unchanged since the last index" in line for line in problem_lines(second.stderr)) == 2
    # other settings in the same --out are refused in one line
    other_rate = tuple("2" if a == "4" and args[i - 1] == "--fps" else a for i, a in enumerate(args))
    third = videos_cli(*other_rate, cwd=tmp_path)
    assert third.returncode == 2 and "holds a gallery indexed with other settings (sampling)" in third.stderr


def test_index_reads_ms_sl_caption_files_and_refuses_bad_flags(tmp_path: Path, tiny_model: Path) -> None:
    coll = write_generated_collection(tmp_path / "coll", n_videos=4, events_per_video=1, event_seconds=1.0, fps=8,
                                      size=48)
    lines = [f"video{i:04d}#enc#0 a caption of video {i}" for i in range(4)] + ["video0000#enc#0 a duplicate id"]
    (tmp_path / "caps.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "root"
    run = videos_cli("index", "--videos", str(coll.videos_dir), "--captions", str(tmp_path / "caps.txt"), "--out",
                     str(out), "--model", str(tiny_model), "--pretrained", "none", "--workers", "0", "--no-progress")
    assert run.returncode == 0, run.stderr
    report = json.loads((out / "index_report.json").read_text())
    assert [p["kind"] for p in report["problems"]] == ["duplicate_caption_id"]
    assert sum(report["captions"].values()) == 4
    for extra, message in (
            (("--model", "no-such-model", "--pretrained", "none"), "error: --model no-such-model: not an open_clip model"),
            (("--model", "ViT-B-32"), "error: --pretrained is required for --model ViT-B-32"),
            (("--model", "prvr-tiny", "--captions", str(tmp_path / "none.csv")), "--captions")):
        bad = videos_cli("index", "--videos", str(coll.videos_dir), "--out", str(tmp_path / "x"), *extra)
        assert bad.returncode == 2 and message in bad.stderr, (extra, bad.stderr)
        assert not problem_lines(bad.stderr) and "Traceback" not in bad.stderr  # refused before any video was read
        assert not (tmp_path / "x").exists()


def test_the_version_two_commands_are_refused_with_their_successor() -> None:
    from tests.own_videos.helpers import holmes_cli

    for old, new in (("extract", "prvr-videos index"), ("search", "prvr-videos search"),
                     ("serve", "prvr-videos serve")):
        run = holmes_cli(old, "--help")
        assert run.returncode == 2 and f"error: {old} moved in version 3.0: run {new}" in run.stderr


# --- the incremental index ------------------------------------------------------------------------
def test_index_again_encodes_only_new_and_changed_videos_and_drops_removed_ones(tmp_path: Path) -> None:
    from reference_models.videos.answers import Answerer

    coll = write_generated_collection(tmp_path / "coll", n_videos=12, seed=5)
    folder = tmp_path / "videos"
    shutil.copytree(coll.videos_dir, folder)
    extra = write_generated_collection(tmp_path / "extra", n_videos=3, seed=6)
    out = tmp_path / "gallery"
    args = ("index", "--videos", str(folder), "--captions", str(coll.captions_csv), "--out", str(out), "--model",
            "prvr-tiny", "--fps", "2", "--workers", "0", "--part-videos", "4", "--no-progress")
    assert videos_cli(*args).returncode == 0
    exact = Answerer(out)
    faiss = Answerer(out, index="faiss")  # builds and saves the FAISS candidates
    before = {v: exact.saved.rows["windows"][i].clone() for i, v in enumerate(exact.video_ids)}
    # one new video, one changed (other content under the same name), one removed
    shutil.copy(extra.videos_dir / "video0000.mp4", folder / "newcomer.mp4")
    shutil.copy(extra.videos_dir / "video0001.mp4", folder / "video0003.mp4")
    (folder / "video0007.mp4").unlink()
    run = videos_cli(*args)
    assert run.returncode == 0, run.stderr
    report = json.loads((out / "index_report.json").read_text())
    assert report["encoded"] == ["newcomer", "video0003"] and report["removed"] == ["video0007"]
    assert report["changed"] == ["video0003"] and len(report["unchanged"]) == 10
    assert report["search_index"]["added"] == 2 and report["search_index"]["removed"] == 2
    assert report["search_index"]["kept"] == 10
    after = Answerer(out)
    assert after.saved.changes["added"] == 0  # index brought it up to date already
    ids = after.video_ids
    assert "video0007" not in ids and "newcomer" in ids and len(ids) == 12
    for i, v in enumerate(ids):  # the kept videos' rows are the saved ones, bit for bit
        if v in before and v != "video0003":
            assert torch.equal(after.saved.rows["windows"][i], before[v])
    assert not torch.equal(after.saved.rows["windows"][ids.index("video0003")], before["video0003"])
    # the FAISS candidates were updated in place (remove_ids / add_with_ids) and give the exact top-k
    faiss = Answerer(out, index="faiss")
    assert faiss.saved.candidates is not None and faiss.saved.candidates.index.ntotal == 12 * 42
    queries = ["a red circle", "a blue square moves up", "a green bar, then a yellow ring"]
    top = [[h.video for h in a.results] for a in after.answer(queries, k=5)]
    assert [[h.video for h in a.results] for a in faiss.answer(queries, k=5)] == top
    # a part whose videos all left the folder is deleted; the parts hold exactly the gallery's videos
    from reference_models.videos.gallery import part_catalogue, read_gallery

    held = set(part_catalogue(out / "parts"))
    assert held == set(read_gallery(out).encoded_videos().values())
