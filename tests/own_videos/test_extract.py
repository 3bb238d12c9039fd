"""Own videos: decoding at a stated rate, the encoder's token features, and extract (bad input, resume, nothing
outside --out, MS-SL caption files)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av", reason="the video extra (av) is not installed")
open_clip = pytest.importorskip("open_clip", reason="the video extra (open_clip_torch) is not installed")

import torch  # noqa: E402
from reference_models.holmes.videos.decoding import decode_video  # noqa: E402
from reference_models.holmes.videos.generated import write_generated_collection  # noqa: E402

from tests.own_videos.helpers import cli, problem_lines  # noqa: E402


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


# --- the encoder ----------------------------------------------------------------------------------
def test_token_features_end_with_open_clips_sentence_embedding(tiny_model: Path) -> None:
    from reference_models.holmes.videos.clip_encoder import ClipEncoder

    encoder = ClipEncoder(str(tiny_model), "none", seed=3)
    sentences = ["a red circle moves left", "something is moving on the screen"]
    tokens = encoder.encode_tokens(sentences)
    ids = encoder.tokenizer(sentences)
    assert [t.shape for t in tokens] == [(int((row != 0).sum()), 64) for row in ids]  # start .. end token
    with torch.no_grad():
        pooled = encoder.model.encode_text(ids)  # open_clip's own sentence embedding
    np.testing.assert_allclose(np.stack([t[-1] for t in tokens]), pooled.numpy(), rtol=1e-5, atol=1e-5)
    again = ClipEncoder(str(tiny_model), "none", seed=3)
    assert again.spec == encoder.spec  # the same seed draws the same weights
    other = ClipEncoder(str(tiny_model), "none", seed=4)
    assert other.spec.weights_sha256 != encoder.spec.weights_sha256
    with pytest.raises(ValueError, match="weights_sha256"):
        other.check_matches(encoder.spec)


# --- extract: bad input, resume, nothing outside --out --------------------------------------------
def test_extract_reports_each_bad_input_once_and_resumes(tmp_path: Path, tiny_model: Path) -> None:
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
    args = ("extract", "--videos", str(videos), "--captions", str(csv_file), "--out", str(out), "--model",
            str(tiny_model), "--pretrained", "none", "--fps", "4", "--workers", "1", "--no-progress")
    before = sorted(p.name for p in tmp_path.iterdir())
    first = cli(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    lines = problem_lines(first.stderr)
    assert len(lines) == 4, first.stderr  # empty, broken, duplicate id, missing video: one line each
    report = json.loads((out / "extraction_report.json").read_text())
    kinds = sorted(p["kind"] for p in report["problems"])
    assert kinds == ["duplicate_video_id", "empty_file", "missing_video", "unreadable"]
    assert sorted(report["extracted"]) == [f"video{i:04d}" for i in range(6)]
    assert report["ignored_files"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before + ["root"]  # nothing outside --out
    # the layout train/validate read, found from the data root alone
    check = cli("validate", "--data-root", str(out))
    assert check.returncode == 0, check.stderr
    import h5py

    with h5py.File(out / "videos" / "FeatureData" / "clip_tiny-clip" / "feature.hdf5", "r") as f:
        assert sorted(f.keys()) == [f"video{i:04d}" for i in range(6)]
        assert f["video0000"].shape == (8, 64)  # 2 s at 4 frames per second, 64-d
    # a rerun skips every finished video; --strict turns the problems into exit status 2
    second = cli(*args, "--strict", cwd=tmp_path)
    assert second.returncode == 2, second.stderr
    report = json.loads((out / "extraction_report.json").read_text())
    assert report["extracted"] == [] and len(report["skipped_done"]) == 6
    assert second.stderr.strip().splitlines()[-1].startswith("error: --strict: 4 problems")
    # other settings in the same --out are refused in one line
    other_rate = tuple("2" if a == "4" and args[i - 1] == "--fps" else a for i, a in enumerate(args))
    third = cli(*other_rate, cwd=tmp_path)
    assert third.returncode == 2 and "holds an extraction with other settings (sampling)" in third.stderr


def test_extract_reads_ms_sl_caption_files_and_refuses_bad_flags(tmp_path: Path, tiny_model: Path) -> None:
    coll = write_generated_collection(tmp_path / "coll", n_videos=4, events_per_video=1, event_seconds=1.0, fps=8,
                                      size=48)
    lines = [f"video{i:04d}#enc#0 a caption of video {i}" for i in range(4)] + ["video0000#enc#0 a duplicate id"]
    (tmp_path / "caps.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "root"
    run = cli("extract", "--videos", str(coll.videos_dir), "--captions", str(tmp_path / "caps.txt"), "--out",
               str(out), "--model", str(tiny_model), "--pretrained", "none", "--workers", "0", "--no-progress")
    assert run.returncode == 0, run.stderr
    report = json.loads((out / "extraction_report.json").read_text())
    assert [p["kind"] for p in report["problems"]] == ["duplicate_caption_id"]
    assert sum(report["captions"].values()) == 4
    bad = cli("extract", "--videos", str(coll.videos_dir), "--captions", str(tmp_path / "caps.txt"), "--out",
               str(tmp_path / "x"), "--model", "no-such-model", "--pretrained", "none")
    assert bad.returncode == 2 and "error: --model no-such-model: not an open_clip model" in bad.stderr
    assert not problem_lines(bad.stderr)  # refused before any video or caption was read
    assert not (tmp_path / "x").exists()


