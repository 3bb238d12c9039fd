"""``index``: a folder of videos (and, optionally, captions) -> a gallery that ``search`` answers from.

What is written, and where, is :mod:`reference_models.videos.gallery`'s layout; nothing is written outside
``--out``. The steps:

1. **Scan** the folder: every video file (by suffix), its id (the file name without its suffix) and its
   content digest (SHA-256; a file whose size and modification time are those recorded keeps its recorded
   digest, as ``rsync`` does). A second file with the same id is a problem.
2. **Encode** the videos whose digest no part holds yet (:func:`encode_videos`: decoding with PyAV in
   ``--workers`` processes beside the encoder, frames encoded in batches), writing a part file atomically every
   ``--part-videos`` videos. An interrupted run loses at most the videos of the part in progress; the same
   command again encodes only what no part holds. A file that cannot be decoded is a problem (one line, one
   report entry) and is remembered with its digest, so that it is not decoded again until it changes.
3. **Assemble** the gallery from the parts: the MS-SL layout (``feature.hdf5``, ``frame_times.json``; with
   captions the caption files and token features, a caption's features kept while its sentence is unchanged)
   that ``holmes train`` reads, and ``videos.json``. A video that left the folder leaves the gallery; a part
   whose videos all left is deleted.
4. **Update the zero-shot search index** (:mod:`reference_models.videos.saved_index`): the windows of the new
   and changed videos are added, those of the removed ones dropped, the others kept as saved, and the
   calibration on the held-out captions (the ``val`` split) is fitted again.

:func:`encode_videos` is the per-video work: it takes a list of videos and writes parts. Under ``torchrun``
the same steps run in several processes (:mod:`reference_models.videos.sharding`): the digests to read and the
videos to encode are shared out by size, every process writes its parts into the one ``parts`` folder, and
rank 0 alone assembles the gallery (step 3) and updates the search index (step 4).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reference_models import engine
from reference_models.holmes.data.layout import SPLITS
from reference_models.videos.captions_input import InputCaption, assign_splits, read_caption_input
from reference_models.videos.clip_encoder import ClipEncoder, EncoderSpec
from reference_models.videos.decoding import VIDEO_SUFFIXES, SampledVideo, decode_video
from reference_models.videos.gallery import (
    ENCODER_CONFIG,
    GALLERY_FILE,
    PARTS_DIR,
    REPORT_FILE,
    EncodedVideo,
    GalleryFiles,
    file_digest,
    part_catalogue,
    part_contents,
    read_part,
)
from reference_models.videos.sharding import RankSummary, balanced_shares

__all__ = ["IndexSettings", "IndexReport", "VideoFile", "ListedVideo", "Sampling", "list_videos", "scan_videos",
           "file_digest", "encode_videos", "run_index", "gallery_record"]

#: The ``format`` of ``gallery.json``.
GALLERY_FORMAT = 1


@dataclass(frozen=True)
class Sampling:
    """How frames are taken from a video: ``fps`` per second, at most ``max_frames`` over all of it."""

    fps: float = 1.0
    max_frames: int = 128


@dataclass(frozen=True)
class IndexSettings:
    """The ``index`` flags (see ``prvr-videos index --help``)."""

    videos: Path
    out: Path
    model: str
    pretrained: str
    captions: Path | None = None
    collection: str = "videos"
    visual_feature: str | None = None  # default: clip_<model>
    sampling: Sampling = Sampling()
    batch_size: int = 64
    workers: int = 2
    part_videos: int = 16
    device: str = "cpu"
    seed: int = 0
    strict: bool = False

    @property
    def feature_name(self) -> str:
        return self.visual_feature or "clip_" + re.sub(r"[^A-Za-z0-9._-]", "_", Path(self.model).stem)


@dataclass(frozen=True)
class VideoFile:
    """One video of the folder: its id, file and content digest."""

    video_id: str
    path: Path
    digest: str


@dataclass
class IndexReport:
    """What ``index`` did: counts, and one entry per problem (also ``index_report.json``)."""

    problems: list[dict[str, Any]] = field(default_factory=list)
    encoded: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    videos: int = 0
    captions: dict[str, int] = field(default_factory=dict)
    videos_without_captions: list[str] = field(default_factory=list)
    dropped_captions: list[str] = field(default_factory=list)
    ignored_files: int = 0
    frames: int = 0
    seconds: float = 0.0
    video_seconds: float = 0.0  # of ``seconds``: decoding and encoding the new videos
    search_index: dict[str, Any] = field(default_factory=dict)
    processes: list[dict[str, Any]] = field(default_factory=list)  # each rank's counts (RankSummary.to_dict)

    def add(self, kind: str, video: str, detail: str, **where: Any) -> None:
        self.problems.append({"kind": kind, "video": video, "detail": detail, **where})
        engine.print_line("problem", f"{video or '?'}: {detail}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ListedVideo:
    """One video file of the folder as listed: id, file, size, modification time, and its content digest when
    the previous ``videos.json`` records this very file (same name, size and time), else ``None`` (to be read)."""

    video_id: str
    path: Path
    size: int
    mtime_ns: int
    digest: str | None

    def entry(self, digest: str) -> dict[str, Any]:
        """Its ``videos.json`` entry, with ``digest``."""
        return {"file": self.path.name, "digest": digest, "size": self.size, "mtime_ns": self.mtime_ns}


def list_videos(folder: Path, report: IndexReport, known: dict[str, dict[str, Any]] | None = None) -> list[ListedVideo]:
    """The video files of ``folder``, sorted by name, without reading their content.

    ``known``: the previous ``videos.json``; a file whose name, size and modification time it records keeps
    its recorded digest, as ``rsync`` decides. A repeated id is a problem (the first file in name order stays).
    """
    known = known or {}
    listed: dict[str, ListedVideo] = {}
    for path in sorted(folder.iterdir()):
        if not path.is_file() or path.suffix.lower() not in VIDEO_SUFFIXES:
            report.ignored_files += int(path.is_file())
            continue
        if path.stem in listed:
            report.add("duplicate_video_id", path.stem, f"duplicate video id: {path.name} and "
                       f"{listed[path.stem].path.name} (the second is skipped)", file=path.name)
            continue
        stat = path.stat()
        before = known.get(path.stem, {})
        same = (before.get("file") == path.name and before.get("size") == stat.st_size
                and before.get("mtime_ns") == stat.st_mtime_ns and "digest" in before)
        listed[path.stem] = ListedVideo(path.stem, path, stat.st_size, stat.st_mtime_ns,
                                        before["digest"] if same else None)
    return list(listed.values())


def scan_videos(folder: Path, report: IndexReport, known: dict[str, dict[str, Any]] | None = None
                ) -> tuple[dict[str, VideoFile], dict[str, dict[str, Any]]]:
    """The videos of ``folder`` by id (sorted) and each one's ``videos.json`` entry (without a problem yet):
    :func:`list_videos`, then the content digest (SHA-256) of each file whose digest is not known."""
    files: dict[str, VideoFile] = {}
    entries: dict[str, dict[str, Any]] = {}
    for video in list_videos(folder, report, known):
        digest = video.digest if video.digest is not None else file_digest(video.path)
        files[video.video_id] = VideoFile(video.video_id, video.path, digest)
        entries[video.video_id] = video.entry(digest)
    return files, entries


class _VideoFrames(torch.utils.data.Dataset):
    """The sampled frames of a list of video files, one :class:`SampledVideo` per item (decoded in a worker)."""

    def __init__(self, files: list[Path], sampling: Sampling, size: int) -> None:
        self.files, self.sampling, self.size = list(files), sampling, size

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> SampledVideo:
        return decode_video(self.files[index], fps=self.sampling.fps, max_frames=self.sampling.max_frames,
                            size=self.size)


def _collate_one(item: Any) -> Any:  # batch_size=None: one video per item, as the dataset gave it
    return item


def _problem_kind(problem: str) -> str:
    if problem == "empty file":
        return "empty_file"
    return "no_frames" if problem in ("no video frames", "no video stream") else "unreadable"


def _write_part(parts: Path, encoded: list[EncodedVideo]) -> Path:
    """One part file holding ``encoded``, written atomically; named by a digest of its videos' digests."""
    name = hashlib.sha256("\n".join(v.digest for v in encoded).encode()).hexdigest()[:24]
    offsets = np.cumsum([0] + [len(v.features) for v in encoded]).astype(np.int64)
    arrays: dict[str, Any] = {
        "video_ids": np.array([v.video_id for v in encoded]), "digests": np.array([v.digest for v in encoded]),
        "offsets": offsets, "features": np.concatenate([v.features for v in encoded]).astype(np.float32),
        "times": np.concatenate([v.times for v in encoded]).astype(np.float64),
        "rates": np.array([v.rate for v in encoded], dtype=np.float64),
        "durations": np.array([v.duration for v in encoded], dtype=np.float64)}
    path = parts / f"part-{name}.npz"
    engine.atomic_write(path, lambda handle: np.savez(handle, **arrays))
    return path


def encode_videos(videos: Sequence[VideoFile], encoder: ClipEncoder, parts: Path, *, sampling: Sampling = Sampling(),
                  batch_size: int = 64, workers: int = 2, part_videos: int = 16,
                  on_problem: Callable[[VideoFile, str], None] | None = None,
                  progress: Callable[[int], None] | None = None) -> list[Path]:
    """Decode and encode ``videos`` and write their features into part files in ``parts``; returns the parts.

    The per-video work of ``index``, on any list of videos: decoding runs in ``workers`` ``DataLoader``
    processes beside the encoder (0: in this process), frames are encoded in batches of ``batch_size``, and
    every ``part_videos`` encoded videos (and at the end) one part file is written atomically, named by a digest
    of its videos' content digests, so that processes given disjoint lists can write into one ``parts``
    folder. A video that cannot be decoded is passed to ``on_problem`` with the problem and written nowhere.
    """
    if part_videos < 1:
        raise ValueError(f"part_videos must be >= 1, got {part_videos}")
    parts.mkdir(parents=True, exist_ok=True)
    by_path = {v.path: v for v in videos}
    dataset = _VideoFrames([v.path for v in videos], sampling, encoder.image_size)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, collate_fn=_collate_one, num_workers=workers,
                                         prefetch_factor=2 if workers else None)
    written: list[Path] = []
    pending: list[EncodedVideo] = []
    for index, video in enumerate(loader):
        source = by_path[dataset.files[index]]
        if video.problem is not None or video.frames is None:
            if on_problem is not None:
                on_problem(source, str(video.problem))
        else:
            frames = torch.from_numpy(video.frames)
            features = torch.cat([encoder.encode_frames(frames[i : i + batch_size])
                                  for i in range(0, len(frames), batch_size)]).cpu().numpy()
            pending.append(EncodedVideo(source.video_id, source.digest, features, video.times, video.rate,
                                        video.duration))
            if len(pending) >= part_videos:
                written.append(_write_part(parts, pending))
                pending = []
        if progress is not None:
            progress(1)
    if pending:
        written.append(_write_part(parts, pending))
    return written


def _write_hdf5(path: Path, entries: dict[str, np.ndarray], attrs: dict[str, dict[str, str]] | None = None) -> None:
    import h5py

    def fill(handle: Any) -> None:
        with h5py.File(handle, "w") as f:
            for key, value in entries.items():
                dataset = f.create_dataset(key, data=value)
                for name, text in (attrs or {}).get(key, {}).items():
                    dataset.attrs[name] = text

    engine.atomic_write(path, fill)


def _progress_bar(total: int, show: bool) -> tuple[Callable[[int], None], Callable[[], None]]:
    if not show or not sys.stderr.isatty() or total == 0:
        return (lambda n: None), (lambda: None)
    from tqdm import tqdm

    bar = tqdm(total=total, unit="video", desc="index", file=sys.stderr)
    return bar.update, bar.close


def gallery_record(settings: IndexSettings, spec: EncoderSpec) -> dict[str, Any]:
    """The content of ``gallery.json`` for these settings and this encoder."""
    return {"format": GALLERY_FORMAT, "collection": settings.collection, "visual_feature": settings.feature_name,
            "text_feature": settings.feature_name, "encoder": spec.to_dict(),
            "videos_folder": str(Path(settings.videos).resolve()), "sampling": asdict(settings.sampling),
            "split_seed": settings.seed,
            "layout": "MS-SL: FeatureData/<visual_feature>/feature.hdf5, "
                      "TextData/<text_feature>_<collection>_query_feat.hdf5 (read with --text-feature)"}


def _check_same_settings(out: Path, record: dict[str, Any]) -> None:
    path = out / GALLERY_FILE
    if not path.is_file():
        if (out / "extraction.json").is_file():
            raise engine.UserError(f"--out {out} holds an extraction of version 2 (extraction.json); index into a "
                                   "new --out (version 3 keeps videos by content digest)")
        return
    previous = engine.read_json_file(path, "--out")
    keys = ("format", "collection", "visual_feature", "text_feature", "encoder", "sampling")
    as_written = json.loads(json.dumps(record))  # tuples as the JSON file holds them: lists
    differ = [k for k in keys if previous.get(k) != as_written[k]]
    if differ:
        raise engine.UserError(f"--out {out} holds a gallery indexed with other settings ({', '.join(differ)}); "
                               "index into a new --out, or remove it first")


def _captions(settings: IndexSettings, files: dict[str, VideoFile], gallery: GalleryFiles,
              report: IndexReport) -> list[InputCaption]:
    """This run's captions: those of ``--captions`` (checked, split), else the ones the gallery was given before."""
    if settings.captions is None:
        return [InputCaption(c["caption_id"], c["video"], c["sentence"], c["split"]) for c in gallery.captions()]
    captions, problems = read_caption_input(settings.captions, set(files))
    for p in problems:
        kind = "missing_video" if p.problem.startswith("caption for a missing video") else (
            "duplicate_caption_id" if p.problem.startswith("duplicate") else "bad_caption")
        report.add(kind, p.video_id, f"{settings.captions} line {p.line}: {p.problem}", line=p.line)
    return assign_splits(captions, settings.seed)


def _text_features(path: Path, usable: list[InputCaption], encoder: ClipEncoder) -> None:
    """The token features of every caption, kept from ``path`` for a caption whose sentence is unchanged."""
    import h5py

    digest = {c.caption_id: hashlib.sha256(c.sentence.encode("utf-8")).hexdigest() for c in usable}
    kept: dict[str, np.ndarray] = {}
    if path.is_file():
        with h5py.File(path, "r") as f:
            for c in usable:
                if c.caption_id in f and f[c.caption_id].attrs.get("sentence_sha256") == digest[c.caption_id]:
                    kept[c.caption_id] = f[c.caption_id][()]
    new = [c for c in usable if c.caption_id not in kept]
    for c, tokens in zip(new, encoder.encode_tokens([c.sentence for c in new]) if new else []):
        kept[c.caption_id] = tokens
    _write_hdf5(path, {c.caption_id: kept[c.caption_id] for c in usable},
                {c.caption_id: {"sentence_sha256": digest[c.caption_id]} for c in usable})


def _drop_stale_parts(parts: Path, wanted: set[str]) -> None:
    """Delete the parts whose videos all left the gallery (or changed); write the others that hold such videos
    again without them (the new part first, then the old one goes)."""
    for part, digests in part_contents(parts).items():
        if all(d in wanted for d in digests):
            continue
        kept = [v for v in read_part(part) if v.digest in wanted]
        if kept and _write_part(parts, kept) == part:
            continue
        part.unlink()


def _assemble(gallery: GalleryFiles, files: dict[str, VideoFile], entries: dict[str, dict[str, Any]],
              captions: list[InputCaption], encoder: ClipEncoder, report: IndexReport) -> None:
    paths = gallery.collection
    catalogue = part_catalogue(gallery.parts)
    present = [vid for vid in files if files[vid].digest in catalogue]
    loaded: dict[Path, dict[str, EncodedVideo]] = {}
    encoded: dict[str, EncodedVideo] = {}
    for vid in present:
        part = catalogue[files[vid].digest]
        if part not in loaded:
            loaded[part] = {v.digest: v for v in read_part(part)}
        encoded[vid] = loaded[part][files[vid].digest]
    _drop_stale_parts(gallery.parts, {files[v].digest for v in present})
    if not encoded:
        raise engine.UserError(f"--videos: no video could be encoded ({len(report.problems)} problems, see "
                               f"{gallery.root / REPORT_FILE})")
    _write_hdf5(paths.feature_hdf5, {vid: v.features for vid, v in encoded.items()})
    engine.write_json(paths.feature_dir / "frame_times.json",
                      {vid: {"times": v.times.tolist(), "rate": v.rate, "duration": v.duration,
                             "file": files[vid].path.name} for vid, v in encoded.items()})
    report.videos = len(encoded)
    usable = [c for c in captions if c.video_id in encoded]
    report.dropped_captions = [c.caption_id for c in captions if c.video_id not in encoded]
    if captions or gallery.captions_file.is_file():
        engine.write_json(gallery.captions_file, {"captions": [
            {"caption_id": c.caption_id, "video": c.video_id, "sentence": c.sentence, "split": c.split} for c in usable]})
        _text_features(paths.text_features, usable, encoder)
        for split in SPLITS:
            lines = [f"{c.caption_id} {c.sentence}\n" for c in usable if c.split == split]
            report.captions[split] = len(lines)
            target = paths.caption_file(split)
            if lines:
                engine.write_text(target, "".join(lines))
            elif target.exists():
                target.unlink()
    described = {c.video_id for c in usable}
    report.videos_without_captions = [vid for vid in encoded if vid not in described]


@dataclass
class _Plan:
    """What rank 0 learns before any video is read: its encoder, the gallery, the files listed."""

    encoder: ClipEncoder
    record: dict[str, Any]
    gallery: GalleryFiles
    known: dict[str, dict[str, Any]]
    listed: list[ListedVideo]


def _plan(settings: IndexSettings, report: IndexReport) -> _Plan:
    """Rank 0's checks, in the order that fails before anything is read or written: the flags, the encoder (a
    misspelt --model or --pretrained), the gallery's settings; then the folder listed."""
    if not Path(settings.videos).is_dir():
        raise engine.UserError(f"--videos {settings.videos}: not a folder")
    if settings.captions is not None and not Path(settings.captions).is_file():
        raise engine.UserError(f"--captions {settings.captions}: no such file")
    encoder = _encoder(settings)
    record = gallery_record(settings, encoder.spec)
    _check_same_settings(Path(settings.out), record)
    gallery = GalleryFiles(Path(settings.out), record)
    known = gallery.videos()
    return _Plan(encoder, record, gallery, known, list_videos(Path(settings.videos), report, known))


def _encoder(settings: IndexSettings) -> ClipEncoder:
    return ClipEncoder(settings.model, settings.pretrained, device=settings.device, seed=settings.seed)


def _read_digests(listed: list[tuple[str, str, int]], run: engine.DistributedRun, summary: RankSummary
                  ) -> dict[str, str]:
    """This rank's share (by size) of the files whose digest is not known yet, read: video id -> digest."""
    share = set(balanced_shares({vid: size for vid, _, size in listed}, run.world_size)[run.rank])
    digests = {vid: file_digest(Path(path)) for vid, path, _ in listed if vid in share}
    summary.digests_read = len(digests)
    return digests


def _decide(settings: IndexSettings, plan: _Plan, digests: dict[str, str], report: IndexReport
            ) -> tuple[dict[str, VideoFile], dict[str, dict[str, Any]], list[InputCaption], list[VideoFile]]:
    """Rank 0, once every digest is known: the gallery's files and entries, the captions (checked), the
    gallery's record written, and the videos to encode (those whose digest no part holds)."""
    out, gallery, known = Path(settings.out), plan.gallery, plan.known
    files: dict[str, VideoFile] = {}
    entries: dict[str, dict[str, Any]] = {}
    for video in plan.listed:
        digest = video.digest if video.digest is not None else digests[video.video_id]
        files[video.video_id] = VideoFile(video.video_id, video.path, digest)
        entries[video.video_id] = video.entry(digest)
    try:
        captions = _captions(settings, files, gallery, report)
    except engine.DataValidationError as exc:
        raise engine.UserError(f"--captions: {exc}") from None
    out.mkdir(parents=True, exist_ok=True)
    if Path(settings.model).suffix == ".json":  # search re-creates the encoder from the gallery's own copy
        engine.write_text(out / ENCODER_CONFIG, Path(settings.model).read_text(encoding="utf-8"))
    engine.write_json(out / GALLERY_FILE, plan.record)
    gallery.parts.mkdir(parents=True, exist_ok=True)
    catalogue = part_catalogue(gallery.parts)
    failed = {vid: known[vid]["problem"] for vid, f in files.items()
              if "problem" in known.get(vid, {}) and known[vid].get("digest") == f.digest}
    for vid, problem in failed.items():  # unchanged since it failed: reported again, not decoded again
        report.add(_problem_kind(problem), vid, f"{problem} (unchanged since the last index)")
        entries[vid]["problem"] = problem
    pending = [f for vid, f in files.items() if f.digest not in catalogue and vid not in failed]
    report.unchanged = sorted(vid for vid, f in files.items() if f.digest in catalogue)
    report.removed = sorted(vid for vid in known if vid not in files)
    report.changed = sorted(vid for vid in known if vid in files and known[vid].get("digest") != files[vid].digest)
    return files, entries, captions, pending


def _encode_share(settings: IndexSettings, encoder: ClipEncoder, pending: list[tuple[str, str, str, int]],
                  run: engine.DistributedRun, summary: RankSummary, show_progress: bool) -> None:
    """Decode and encode this rank's share (by size) of the videos to encode, into the gallery's parts."""
    share = set(balanced_shares({vid: size for vid, _, _, size in pending}, run.world_size)[run.rank])
    mine = [VideoFile(vid, Path(path), digest) for vid, path, digest, _ in pending if vid in share]
    summary.videos = len(mine)
    summary.bytes = sum(size for vid, _, _, size in pending if vid in share)
    failed: set[str] = set()

    def on_problem(video: VideoFile, problem: str) -> None:
        failed.add(video.video_id)
        summary.problems.append({"kind": _problem_kind(problem), "video": video.video_id, "detail": problem})
        engine.print_line("problem", f"{video.video_id}: {problem}")

    update, close = _progress_bar(len(mine), show_progress and run.is_writer)
    started = time.perf_counter()
    try:
        written = encode_videos(mine, encoder, Path(settings.out) / PARTS_DIR, sampling=settings.sampling,
                                batch_size=settings.batch_size, workers=settings.workers,
                                part_videos=settings.part_videos, on_problem=on_problem, progress=update)
    finally:
        close()
    summary.seconds = time.perf_counter() - started
    summary.encoded = sorted(v.video_id for v in mine if v.video_id not in failed)
    summary.frames = sum(_part_frames(part) for part in written)


def _part_frames(part: Path) -> int:
    with np.load(part, allow_pickle=False) as data:
        return int(data["offsets"][-1])


def _remove_leftover_temporaries(parts: Path) -> None:
    """The temporary files of parts whose writing was interrupted (a killed process); called once every rank is
    done, so that none is being written."""
    for path in parts.glob(".part-*.tmp"):
        path.unlink(missing_ok=True)


def run_index(settings: IndexSettings, *, show_progress: bool = True,
              run: engine.DistributedRun | None = None) -> IndexReport:
    """Run ``index`` (see the module documentation); returns the report (also written under ``--out``).

    ``run``: this process's place in a ``torchrun`` run (:mod:`reference_models.videos.sharding`: every rank
    calls this with its own; rank 0 returns the gallery's report, another rank a report of its own share);
    ``None``: one process. ``settings.device`` is this process's device.
    """
    from reference_models.videos.saved_index import update_zero_shot_index

    run = run if run is not None else engine.DistributedRun()
    start = time.perf_counter()
    report = IndexReport()
    # rank 0 checks everything that can be wrong first: a mistake is one line, from one process
    plan = run.on_writer(lambda: _plan(settings, report))
    encoder = run.on_every_rank(lambda: plan.encoder if plan is not None else _encoder(settings))
    summary = RankSummary(run.rank, socket.gethostname(), str(encoder.device))
    unread = None if plan is None else [(v.video_id, str(v.path), v.size) for v in plan.listed if v.digest is None]
    unread = run.broadcast_object(unread)
    assert unread is not None
    digests = run.on_every_rank(lambda: _read_digests(unread, run, summary))
    gathered = run.gather_to_writer(digests)
    decided = run.on_writer(lambda: _decide(settings, plan, {k: v for d in gathered for k, v in d.items()}, report)
                            if plan is not None and gathered is not None else None)
    pending = None if decided is None else [(f.video_id, str(f.path), f.digest, int(decided[1][f.video_id]["size"]))
                                            for f in decided[3]]
    pending = run.broadcast_object(pending)
    assert pending is not None
    started = time.perf_counter()
    run.on_every_rank(lambda: _encode_share(settings, encoder, pending, run, summary, show_progress))
    summaries = run.gather_to_writer(summary)
    run.close()  # every rank is done: rank 0 goes on alone, and the others may leave
    if summaries is None or plan is None or decided is None:  # not rank 0: the report of this rank's share
        report.encoded, report.frames, report.video_seconds = summary.encoded, summary.frames, summary.seconds
        report.problems = summary.problems
        report.processes = [summary.to_dict()]
        report.seconds = time.perf_counter() - start
        return report
    report.video_seconds = time.perf_counter() - started
    files, entries, captions, _ = decided
    for rank_summary in summaries:
        for problem in rank_summary.problems:
            entries[problem["video"]]["problem"] = problem["detail"]
            report.problems.append({**problem, "rank": rank_summary.rank} if run.is_distributed else problem)
    report.processes = [s.to_dict() for s in summaries]
    report.encoded = sorted(vid for s in summaries for vid in s.encoded)
    gallery = plan.gallery
    engine.write_json(gallery.videos_file, entries)
    _assemble(gallery, files, entries, captions, plan.encoder, report)
    report.frames = _frames_of(gallery, report.encoded)
    report.search_index = update_zero_shot_index(gallery, plan.encoder)
    _remove_leftover_temporaries(gallery.parts)
    report.seconds = time.perf_counter() - start
    engine.write_json(Path(settings.out) / REPORT_FILE, report.to_dict())
    return report


def _frames_of(gallery: GalleryFiles, video_ids: list[str]) -> int:
    """The frames of ``video_ids`` (the videos encoded in this run)."""
    if not video_ids:
        return 0
    times = engine.read_json_file(gallery.collection.feature_dir / "frame_times.json", "--out")
    return sum(len(times[vid]["times"]) for vid in video_ids if vid in times)

