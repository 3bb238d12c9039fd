"""``extract``: a folder of videos and their captions -> the MS-SL layout that ``train``, ``evaluate``,
``validate`` and ``search`` read.

Written under ``--out`` (nothing outside it)::

    ROOT/extraction.json                       collection, feature name, encoder, sampling (read by the other commands)
    ROOT/extraction_report.json                every problem met, and what was extracted or skipped
    ROOT/<collection>/FeatureData/<feature>/feature.hdf5      one [n_frames, D] dataset per video
    ROOT/<collection>/FeatureData/<feature>/frame_times.json  each sampled frame's time in seconds, the file
    ROOT/<collection>/TextData/roberta_<collection>_query_feat.hdf5   [L, D] token features per caption id
    ROOT/<collection>/TextData/<collection>{train,val,test}.caption.txt
    ROOT/.extract/frames/<video>.npz           one file per finished video (what a rerun skips)

Each video's features are written atomically as soon as it is encoded, so an interrupted run loses at most
the videos in flight; a rerun with the same settings skips the finished ones, and a rerun with other
settings is refused. The HDF5 files, caption files and JSON files are assembled at the end, each written
to a temporary file and renamed. (The text-feature file keeps the lineage's name, ``roberta_...``, so that
the loaders find it; it holds CLIP token features.)
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reference_models import engine
from reference_models.holmes.data.layout import SPLITS, CollectionPaths
from reference_models.holmes.videos.captions_input import assign_splits, read_caption_input
from reference_models.holmes.videos.clip_encoder import ClipEncoder, EncoderSpec
from reference_models.holmes.videos.decoding import VIDEO_SUFFIXES, SampledVideo, decode_video

__all__ = ["ExtractionSettings", "ExtractionReport", "run_extraction", "read_extraction", "EXTRACTION_FILE",
           "REPORT_FILE"]

EXTRACTION_FILE = "extraction.json"
REPORT_FILE = "extraction_report.json"
_SHARDS = Path(".extract") / "frames"


@dataclass(frozen=True)
class ExtractionSettings:
    """The ``extract`` flags (see ``python -m reference_models.holmes extract --help``)."""

    videos: Path
    captions: Path
    out: Path
    model: str
    pretrained: str
    collection: str = "videos"
    visual_feature: str | None = None  # default: clip_<model>
    fps: float = 1.0
    max_frames: int = 128
    batch_size: int = 64
    workers: int = 2
    device: str = "cpu"
    seed: int = 0
    strict: bool = False

    @property
    def feature_name(self) -> str:
        return self.visual_feature or "clip_" + re.sub(r"[^A-Za-z0-9._-]", "_", Path(self.model).stem)


@dataclass
class ExtractionReport:
    """What ``extract`` did: counts, and one entry per problem (also ``extraction_report.json``)."""

    problems: list[dict[str, Any]] = field(default_factory=list)
    extracted: list[str] = field(default_factory=list)
    skipped_done: list[str] = field(default_factory=list)
    captions: dict[str, int] = field(default_factory=dict)
    videos_without_captions: list[str] = field(default_factory=list)
    dropped_captions: list[str] = field(default_factory=list)
    ignored_files: int = 0
    frames: int = 0
    seconds: float = 0.0
    video_seconds: float = 0.0  # of ``seconds``: decoding and encoding the videos (the rest: setup and writing)

    def add(self, kind: str, video: str, detail: str, **where: Any) -> None:
        self.problems.append({"kind": kind, "video": video, "detail": detail, **where})
        engine.print_line("problem", f"{video or '?'}: {detail}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _scan_videos(folder: Path, report: ExtractionReport) -> dict[str, Path]:
    """Video id (file stem) -> file, sorted; a repeated stem is a problem (the first file in name order stays)."""
    files: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if not path.is_file() or path.suffix.lower() not in VIDEO_SUFFIXES:
            report.ignored_files += int(path.is_file())
            continue
        if path.stem in files:
            report.add("duplicate_video_id", path.stem, f"duplicate video id: {path.name} and "
                       f"{files[path.stem].name} (the second is skipped)", file=path.name)
            continue
        files[path.stem] = path
    return files


def _settings_record(settings: ExtractionSettings, spec: EncoderSpec) -> dict[str, Any]:
    return {"collection": settings.collection, "visual_feature": settings.feature_name, "encoder": spec.to_dict(),
            "videos_folder": str(Path(settings.videos).resolve()),
            "sampling": {"fps": settings.fps, "max_frames": settings.max_frames}, "split_seed": settings.seed,
            "layout": "MS-SL (FeatureData/<feature>/feature.hdf5, TextData/roberta_<collection>_query_feat.hdf5)"}


def read_extraction(root: str | Path) -> dict[str, Any] | None:
    """The ``extraction.json`` record of a data root that ``extract`` wrote, or ``None``."""
    path = Path(root) / EXTRACTION_FILE
    if not path.is_file():
        return None
    return engine.read_json_file(path, "--data-root")


def _check_same_settings(out: Path, record: dict[str, Any]) -> None:
    previous = read_extraction(out)
    if previous is None:
        return
    keys = ("collection", "visual_feature", "encoder", "sampling")
    as_written = json.loads(json.dumps(record))  # tuples as the JSON file holds them: lists
    differ = [k for k in keys if previous.get(k) != as_written[k]]
    if differ:
        raise engine.UserError(f"--out {out} holds an extraction with other settings ({', '.join(differ)}); "
                               "extract into a new --out, or remove it first")


def _write_shard(path: Path, video: SampledVideo, features: np.ndarray) -> None:
    """One finished video's features, frame times, rate and duration, in one file written atomically."""
    engine.atomic_write(path, lambda handle: np.savez(handle, features=features, times=video.times,
                                                      rate=np.float64(video.rate), duration=np.float64(video.duration)))


def _read_shard(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


class _VideoFrames(torch.utils.data.Dataset):
    """The sampled frames of a list of video files, one :class:`SampledVideo` per item (decoded in a worker)."""

    def __init__(self, files: list[Path], *, fps: float, max_frames: int, size: int) -> None:
        self.files = list(files)
        self.fps, self.max_frames, self.size = fps, max_frames, size

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> SampledVideo:
        return decode_video(self.files[index], fps=self.fps, max_frames=self.max_frames, size=self.size)


def _collate_one(item: Any) -> Any:  # batch_size=None: one video per item, as the dataset gave it
    return item


def _encode_videos(pending: list[Path], encoder: ClipEncoder, settings: ExtractionSettings, shards: Path,
                   report: ExtractionReport, progress: Callable[[int], None]) -> None:
    """Decode (in ``settings.workers`` processes) and encode every pending video; write each one's shard."""
    dataset = _VideoFrames(pending, fps=settings.fps, max_frames=settings.max_frames, size=encoder.image_size)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, collate_fn=_collate_one,
                                         num_workers=settings.workers, prefetch_factor=2 if settings.workers else None)
    for video in loader:
        if video.problem is not None or video.frames is None:
            kind = "empty_file" if video.problem == "empty file" else (
                "no_frames" if video.problem in ("no video frames", "no video stream") else "unreadable")
            report.add(kind, video.video_id, str(video.problem))
            progress(1)
            continue
        frames = torch.from_numpy(video.frames)
        parts = [encoder.encode_frames(frames[i : i + settings.batch_size])
                 for i in range(0, len(frames), settings.batch_size)]
        features = torch.cat(parts).cpu().numpy().astype(np.float32)
        _write_shard(shards / f"{video.video_id}.npz", video, features)
        report.extracted.append(video.video_id)
        report.frames += len(features)
        progress(1)


def _write_hdf5(path: Path, entries: dict[str, np.ndarray]) -> None:
    import h5py

    def fill(handle: Any) -> None:
        with h5py.File(handle, "w") as f:
            for key, value in entries.items():
                f.create_dataset(key, data=value)

    engine.atomic_write(path, fill)


def _progress_bar(total: int, show: bool) -> tuple[Callable[[int], None], Callable[[], None]]:
    if not show or not sys.stderr.isatty() or total == 0:
        return (lambda n: None), (lambda: None)
    from tqdm import tqdm

    bar = tqdm(total=total, unit="video", desc="extract", file=sys.stderr)
    return bar.update, bar.close


def run_extraction(settings: ExtractionSettings, *, show_progress: bool = True) -> ExtractionReport:
    """Run ``extract`` (see the module documentation); returns the report (also written under ``--out``)."""
    start = time.perf_counter()
    report = ExtractionReport()
    if not Path(settings.videos).is_dir():
        raise engine.UserError(f"--videos {settings.videos}: not a folder")
    # the encoder first: a misspelt --model or --pretrained fails before anything is read or written
    encoder = ClipEncoder(settings.model, settings.pretrained, device=settings.device, seed=settings.seed)
    files = _scan_videos(Path(settings.videos), report)
    captions, caption_problems = read_caption_input(settings.captions, set(files))
    for p in caption_problems:
        kind = "missing_video" if p.problem.startswith("caption for a missing video") else (
            "duplicate_caption_id" if p.problem.startswith("duplicate") else "bad_caption")
        report.add(kind, p.video_id, f"{settings.captions} line {p.line}: {p.problem}", line=p.line)
    captions = assign_splits(captions, settings.seed)
    out = Path(settings.out)
    record = _settings_record(settings, encoder.spec)
    _check_same_settings(out, record)
    out.mkdir(parents=True, exist_ok=True)
    if Path(settings.model).suffix == ".json":  # search re-creates the encoder from the gallery's own copy
        engine.write_text(out / "encoder_config.json", Path(settings.model).read_text(encoding="utf-8"))
    engine.write_json(out / EXTRACTION_FILE, record)
    shards = out / _SHARDS
    shards.mkdir(parents=True, exist_ok=True)
    done = {p.stem for p in shards.glob("*.npz")}
    report.skipped_done = sorted(done & set(files))
    pending = [path for vid, path in files.items() if vid not in done]
    update, close = _progress_bar(len(pending), show_progress)
    started = time.perf_counter()
    try:
        _encode_videos(pending, encoder, settings, shards, report, update)
    finally:
        close()
    report.video_seconds = time.perf_counter() - started

    paths = CollectionPaths(out, settings.collection, settings.feature_name)
    written = [vid for vid in files if (shards / f"{vid}.npz").is_file()]
    shard_data = {vid: _read_shard(shards / f"{vid}.npz") for vid in written}
    _write_hdf5(paths.feature_hdf5, {vid: d["features"] for vid, d in shard_data.items()})
    engine.write_json(paths.feature_dir / "frame_times.json",
                      {vid: {"times": d["times"].tolist(), "rate": float(d["rate"]), "duration": float(d["duration"]),
                             "file": files[vid].name} for vid, d in shard_data.items()})
    usable = [c for c in captions if c.video_id in shard_data]
    # captions of a video that failed: listed with it, without a line of their own (the video had its line)
    report.dropped_captions = [c.caption_id for c in captions if c.video_id not in shard_data]
    tokens = encoder.encode_tokens([c.sentence for c in usable]) if usable else []
    _write_hdf5(paths.text_features, {c.caption_id: t for c, t in zip(usable, tokens)})
    for split in SPLITS:
        lines = [f"{c.caption_id} {c.sentence}\n" for c in usable if c.split == split]
        report.captions[split] = len(lines)
        target = paths.caption_file(split)
        if lines:
            engine.write_text(target, "".join(lines))
        elif target.exists():
            target.unlink()
    described = {c.video_id for c in usable}
    report.videos_without_captions = [vid for vid in written if vid not in described]
    report.seconds = time.perf_counter() - start
    engine.write_json(out / REPORT_FILE, report.to_dict())
    return report
