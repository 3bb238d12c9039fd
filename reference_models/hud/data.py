"""Composed video retrieval data as the CoVR codebase lays it out, on precomputed video embeddings.

A data root (the default layout; every path can be pointed elsewhere, as CoVR's ``configs/data/*.yaml`` do)::

    ROOT/annotation/{train,val,test}.csv     columns pth1 (reference id), pth2 (target id), edit, [scores], [edit_type]
    ROOT/embeddings/<id>.pth                 one float tensor [frames, dim] or [frames, tokens, dim] per video
    ROOT/embeddings.h5                       alternative: one HDF5 dataset per id, same tensors

Ids may hold one ``/`` (a subfolder, as WebVid's ``<page>/<video>``). Every video of a data set must have the
same ``[frames, tokens, dim]`` shape (``[frames, dim]`` is read as one token per frame). The edit texts are raw
strings, tokenised by a :class:`Vocabulary` built from the training annotations; precomputed text-token
features (an HDF5 file with one ``[words, dim]`` dataset per CSV row, keyed by the row number) are the option.

Every problem is a :class:`~reference_models.engine.DataValidationError`: one line naming the file, the
row and the id.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reference_models.engine import DataValidationError

__all__ = [
    "SPLITS",
    "REQUIRED_COLUMNS",
    "EDIT_TYPES",
    "SplitPaths",
    "Triplet",
    "Vocabulary",
    "CVRSplit",
    "CVRBatch",
    "TripletLoader",
    "read_annotations",
    "EmbeddingStore",
    "load_cvr_split",
    "validate_cvr_root",
    "classify_edit",
]

SPLITS = ("train", "val", "test")
REQUIRED_COLUMNS = ("pth1", "pth2", "edit")
EDIT_TYPES = ("pronoun", "explicit", "key_detail")
AMBIGUOUS_PRONOUNS = frozenset({"it", "them", "its", "their", "they"})
_WORD = re.compile(r"[a-z0-9']+")


def tokenize(text: str) -> list[str]:
    """Lower-cased words of an edit text (what the vocabulary and the pronoun rule see)."""
    return _WORD.findall(text.lower())


def classify_edit(edit: str) -> str:
    """``"pronoun"`` when the edit holds an ambiguous pronoun (HUD Table 1: "it", "them"), else ``"explicit"``.

    Used when a CSV has no ``edit_type`` column; the embedded benchmark writes the column (it also knows which
    edits concern a key detail).
    """
    return "pronoun" if AMBIGUOUS_PRONOUNS.intersection(tokenize(edit)) else "explicit"


@dataclass(frozen=True)
class SplitPaths:
    """Where one split's files are: its annotation CSV, its embeddings and (optionally) its text features."""

    annotation: Path
    embeddings: Path
    text_features: Path | None = None

    @classmethod
    def default(cls, root: str | Path, split: str) -> SplitPaths:
        """``ROOT/annotation/<split>.csv`` with ``ROOT/embeddings/`` (or ``ROOT/embeddings.h5`` when that exists)."""
        root = Path(root)
        embeddings = root / "embeddings"
        if not embeddings.exists() and (root / "embeddings.h5").exists():
            embeddings = root / "embeddings.h5"
        return cls(root / "annotation" / f"{split}.csv", embeddings)


@dataclass(frozen=True)
class Triplet:
    """One CSV row: reference id, target id, edit text, its edit type and its row number (1 = first data row)."""

    reference: str
    target: str
    edit: str
    edit_type: str
    row: int


def _check_id(value: str, path: Path, row: int, column: str) -> str:
    where = f"row {row} ({column} {value!r})"
    if not value:
        raise DataValidationError(path, f"row {row}: empty {column}")
    parts = value.split("/")
    if value.startswith(("/", "\\")) or "\\" in value or ".." in parts or "." in parts or len(parts) > 2 or "" in parts:
        raise DataValidationError(
            path, f"{where}: an id is a name or 'folder/name' without '..', '.', '\\' or a leading '/'"
        )
    return value


def _check_scores(text: str, path: Path, row: int, reference: str) -> None:
    if not text.strip():
        return
    try:
        scores = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise DataValidationError(path, f"row {row} (pth1 {reference!r}): scores is not a list of numbers: {text[:60]!r}") from None
    if not isinstance(scores, (list, tuple)) or not all(
        isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) for s in scores
    ):
        raise DataValidationError(path, f"row {row} (pth1 {reference!r}): scores must be a list of finite numbers")


def read_annotations(path: str | Path) -> list[Triplet]:
    """The triplets of a CoVR annotation CSV (columns ``pth1``, ``pth2``, ``edit``; optional ``scores``, ``edit_type``)."""
    path = Path(path)
    if not path.is_file():
        raise DataValidationError(path, "missing file")
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            columns = tuple(reader.fieldnames or ())
            missing = [c for c in REQUIRED_COLUMNS if c not in columns]
            if missing:
                raise DataValidationError(
                    path, f"missing column(s) {', '.join(missing)}; a CoVR annotation needs pth1, pth2 and edit "
                    f"(found: {', '.join(columns) or 'no header'})"
                )
            triplets = []
            for row, record in enumerate(reader, start=1):
                if None in record:
                    raise DataValidationError(path, f"row {row}: more fields than the header's {len(columns)}")
                reference = _check_id((record["pth1"] or "").strip(), path, row, "pth1")
                target = _check_id((record["pth2"] or "").strip(), path, row, "pth2")
                edit = (record["edit"] or "").strip()
                if not tokenize(edit):
                    raise DataValidationError(path, f"row {row} (pth1 {reference!r}): empty edit text")
                if "scores" in record and record["scores"] is not None:
                    _check_scores(record["scores"], path, row, reference)
                edit_type = (record.get("edit_type") or "").strip() or classify_edit(edit)
                if edit_type not in EDIT_TYPES:
                    raise DataValidationError(
                        path, f"row {row} (pth1 {reference!r}): edit_type must be one of {', '.join(EDIT_TYPES)}, "
                        f"got {edit_type!r}"
                    )
                triplets.append(Triplet(reference, target, edit, edit_type, row))
    except UnicodeDecodeError as exc:
        raise DataValidationError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except csv.Error as exc:
        raise DataValidationError(path, f"malformed CSV ({exc})") from None
    if not triplets:
        raise DataValidationError(path, "no triplets (the CSV has a header but no rows)")
    return triplets


class EmbeddingStore:
    """Reads one video's embedding: ``<dir>/<id>.pth`` (``torch.load(weights_only=True)``) or an HDF5 dataset per id."""

    def __init__(self, location: str | Path) -> None:
        self.location = Path(location)
        self.is_hdf5 = self.location.is_file() and self.location.suffix in (".h5", ".hdf5")
        if not self.is_hdf5 and not self.location.is_dir():
            raise DataValidationError(self.location, "missing embedding folder (or .h5 file)")
        self._handle: Any = None  # the open h5py.File, once read

    def file_of(self, video_id: str) -> Path:
        """The file an id is read from (the ``.pth`` file, or the HDF5 file)."""
        return self.location if self.is_hdf5 else self.location / f"{video_id}.pth"

    def read(self, video_id: str, where: str) -> torch.Tensor:
        """The ``float32 [frames, tokens, dim]`` embedding of ``video_id``; ``where`` names the CSV row asking."""
        source = self.file_of(video_id)
        if self.is_hdf5:
            array = self._read_hdf5(video_id, where)
            tensor = torch.from_numpy(np.asarray(array))
        else:
            if not source.is_file():
                raise DataValidationError(source, f"missing embedding of {where}")
            try:
                tensor = torch.load(source, map_location="cpu", weights_only=True)
            except Exception as exc:  # noqa: BLE001 - any unreadable file is a data error, said in one line
                raise DataValidationError(source, f"cannot read the embedding of {where} ({type(exc).__name__})") from None
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            kind = type(tensor).__name__ if not isinstance(tensor, torch.Tensor) else f"{tensor.dtype} tensor"
            raise DataValidationError(source, f"the embedding of {where} must be a float tensor, got a {kind}")
        if tensor.dim() == 2:
            tensor = tensor.unsqueeze(1)
        if tensor.dim() != 3 or tensor.numel() == 0:
            raise DataValidationError(
                source, f"the embedding of {where} must be a non-empty [frames, dim] or [frames, tokens, dim] "
                f"tensor, got shape {tuple(tensor.shape)}"
            )
        tensor = tensor.float()
        finite = torch.isfinite(tensor)
        if not bool(finite.all()):
            frame = int((~finite).nonzero()[0, 0])
            raise DataValidationError(source, f"the embedding of {where} holds NaN or inf values (frame {frame})")
        return tensor

    def _read_hdf5(self, video_id: str, where: str) -> np.ndarray:
        import h5py

        if self._handle is None:
            try:
                self._handle = h5py.File(self.location, "r")
            except OSError as exc:
                raise DataValidationError(self.location, f"cannot open HDF5 file ({exc})") from None
        obj = self._handle.get(video_id)
        if obj is None:
            raise DataValidationError(self.location, f"missing embedding of {where}")
        if not isinstance(obj, h5py.Dataset) or obj.dtype.kind != "f":
            raise DataValidationError(self.location, f"the embedding of {where} must be a float dataset")
        return obj[...]

    def close(self) -> None:
        """Close the HDF5 file (if one is open)."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None


PAD, UNK = "<pad>", "<unk>"


@dataclass
class Vocabulary:
    """Words of the training edits (lower-cased) with a padding and an unknown token; stored in checkpoints."""

    words: list[str]

    def __post_init__(self) -> None:
        if self.words[:2] != [PAD, UNK] or len(set(self.words)) != len(self.words):
            raise ValueError("a Vocabulary starts with '<pad>', '<unk>' and holds every word once")
        self.index = {w: i for i, w in enumerate(self.words)}

    @classmethod
    def build(cls, edits: list[str]) -> Vocabulary:
        """The vocabulary of ``edits``, words sorted (deterministic)."""
        return cls([PAD, UNK] + sorted({w for e in edits for w in tokenize(e)}))

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, edits: list[str], max_words: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``[N, max_words]`` word ids (unknown words -> 1, truncated) and the ``[N, max_words]`` bool mask."""
        ids = torch.zeros(len(edits), max_words, dtype=torch.int64)
        for i, edit in enumerate(edits):
            words = [self.index.get(w, 1) for w in tokenize(edit)[:max_words]]
            ids[i, : len(words)] = torch.tensor(words, dtype=torch.int64)
        return ids, ids != 0


@dataclass
class CVRSplit:
    """One split in memory: its triplets, the embeddings of its videos and the encoded edits.

    Attributes
    ----------
    triplets : list of Triplet
    video_ids : list of str
        Every video the split's triplets name (references and targets), in first-seen order.
    videos : torch.Tensor
        ``[V, frames, tokens, dim]`` embeddings, row ``i`` = ``video_ids[i]``.
    reference_index, target_index : torch.Tensor
        ``[N]`` rows of each triplet's reference and target in ``videos``.
    text_ids, text_mask : torch.Tensor
        ``[N, max_words]`` word ids and mask (or ``text_features [N, words, dim]`` with the mask, see below).
    text_features : torch.Tensor or None
        Precomputed ``[N, words, dim]`` text tokens when the split was read with text features.
    edit_types : list of str
    """

    name: str
    triplets: list[Triplet]
    video_ids: list[str]
    videos: torch.Tensor
    reference_index: torch.Tensor
    target_index: torch.Tensor
    text_ids: torch.Tensor
    text_mask: torch.Tensor
    text_features: torch.Tensor | None = None
    edit_types: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.triplets)

    @property
    def video_shape(self) -> tuple[int, int, int]:
        """``(frames, tokens, dim)`` of every video."""
        return tuple(self.videos.shape[1:])  # type: ignore[return-value]

    def fingerprint(self) -> dict[str, object]:
        """Sizes and a hash of the triplets and the embeddings (compared on resume)."""
        digest = hashlib.sha256()
        for t in self.triplets:
            digest.update(f"{t.reference}\t{t.target}\t{t.edit}\n".encode())
        digest.update(self.videos.numpy().tobytes())
        return {"triplets": len(self.triplets), "videos": len(self.video_ids), "sha256": digest.hexdigest()[:16]}


def _read_text_features(path: Path, triplets: list[Triplet]) -> tuple[torch.Tensor, torch.Tensor]:
    import h5py

    if not path.is_file():
        raise DataValidationError(path, "missing text-feature file")
    arrays = []
    with h5py.File(path, "r") as handle:
        for t in triplets:
            key = str(t.row)
            obj = handle.get(key)
            if not isinstance(obj, h5py.Dataset) or obj.ndim != 2 or obj.shape[0] == 0 or obj.dtype.kind != "f":
                raise DataValidationError(path, f"row {t.row} (pth1 {t.reference!r}): needs a float [words, dim] dataset {key!r}")
            array = np.asarray(obj[...], dtype=np.float32)
            if not np.isfinite(array).all():
                raise DataValidationError(path, f"row {t.row} (pth1 {t.reference!r}): text features hold NaN or inf")
            arrays.append(torch.from_numpy(array))
    dims = {a.shape[1] for a in arrays}
    if len(dims) != 1:
        raise DataValidationError(path, f"text features have different dims {sorted(dims)}")
    longest = max(a.shape[0] for a in arrays)
    features = torch.zeros(len(arrays), longest, dims.pop())
    mask = torch.zeros(len(arrays), longest, dtype=torch.bool)
    for i, a in enumerate(arrays):
        features[i, : a.shape[0]], mask[i, : a.shape[0]] = a, True
    return features, mask


def load_cvr_split(
    name: str, paths: SplitPaths, vocabulary: Vocabulary | None, *, max_words: int = 12
) -> CVRSplit:
    """Read, validate and hold in memory one split; ``vocabulary=None`` needs ``paths.text_features``."""
    triplets = read_annotations(paths.annotation)
    store = EmbeddingStore(paths.embeddings)
    try:
        video_ids: list[str] = []
        row_of: dict[str, int] = {}
        tensors: list[torch.Tensor] = []
        shape = None
        for t in triplets:
            for column, video_id in (("pth1", t.reference), ("pth2", t.target)):
                if video_id in row_of:
                    continue
                where = f"{paths.annotation.name} row {t.row} ({column} {video_id!r})"
                tensor = store.read(video_id, where)
                if shape is None:
                    shape = tuple(tensor.shape)
                elif tuple(tensor.shape) != shape:
                    raise DataValidationError(
                        store.file_of(video_id), f"the embedding of {where} has shape {tuple(tensor.shape)}, "
                        f"but the first video of the split has {shape} (every video needs the same shape)"
                    )
                row_of[video_id] = len(video_ids)
                video_ids.append(video_id)
                tensors.append(tensor)
    finally:
        store.close()
    edits = [t.edit for t in triplets]
    if paths.text_features is not None:
        text_features, text_mask = _read_text_features(paths.text_features, triplets)
        text_ids = torch.zeros(text_mask.shape, dtype=torch.int64)
    else:
        if vocabulary is None:
            raise ValueError("load_cvr_split needs a vocabulary when the split has no text features")
        text_features = None
        text_ids, text_mask = vocabulary.encode(edits, max_words)
    return CVRSplit(
        name=name, triplets=triplets, video_ids=video_ids, videos=torch.stack(tensors),
        reference_index=torch.tensor([row_of[t.reference] for t in triplets]),
        target_index=torch.tensor([row_of[t.target] for t in triplets]),
        text_ids=text_ids, text_mask=text_mask, text_features=text_features,
        edit_types=[t.edit_type for t in triplets],
    )


def validate_cvr_root(paths: dict[str, SplitPaths], *, max_words: int = 12) -> dict[str, dict[str, object]]:
    """Read every split (raising the first problem found); returns per split its sizes and edit-type counts.

    Also refuses test triplets whose reference video is a training video (test videos must be unseen).
    """
    train_triplets = read_annotations(paths["train"].annotation)
    vocabulary = Vocabulary.build([t.edit for t in train_triplets])
    report: dict[str, dict[str, object]] = {}
    splits = {}
    for name, split_paths in paths.items():
        split = load_cvr_split(name, split_paths, vocabulary, max_words=max_words)
        splits[name] = split
        counts = {kind: split.edit_types.count(kind) for kind in EDIT_TYPES}
        report[name] = {"triplets": len(split), "videos": len(split.video_ids), "video_shape": list(split.video_shape),
                        "edit_types": counts}
    if "test" in splits:
        seen = set(splits["train"].video_ids)
        for t in splits["test"].triplets:
            if t.reference in seen:
                raise DataValidationError(
                    paths["test"].annotation, f"row {t.row} (pth1 {t.reference!r}): the test reference video is also "
                    "a training video (test videos must be unseen)"
                )
    shapes = {tuple(s.video_shape) for s in splits.values()}
    if len(shapes) != 1:
        raise DataValidationError(paths["train"].embeddings, f"the splits' videos have different shapes {sorted(shapes)}")
    report["vocabulary"] = {"words": len(vocabulary)}
    return report


@dataclass
class CVRBatch:
    """A batch of triplets: reference and target embeddings, the edit tokens and the triplets' rows."""

    reference: torch.Tensor  # [B, frames, tokens, dim]
    target: torch.Tensor  # [B, frames, tokens, dim]
    text_ids: torch.Tensor  # [B, words]
    text_mask: torch.Tensor  # [B, words]
    text_features: torch.Tensor | None
    indices: torch.Tensor  # [B] rows in the split

    def to(self, device: torch.device) -> CVRBatch:
        """The batch on ``device``."""
        def move(x: torch.Tensor) -> torch.Tensor:
            return x.to(device, non_blocking=True)

        return CVRBatch(move(self.reference), move(self.target), move(self.text_ids), move(self.text_mask),
                        None if self.text_features is None else move(self.text_features), self.indices)


def make_batch(split: CVRSplit, indices: torch.Tensor) -> CVRBatch:
    """The :class:`CVRBatch` of the given triplet rows."""
    return CVRBatch(
        reference=split.videos[split.reference_index[indices]], target=split.videos[split.target_index[indices]],
        text_ids=split.text_ids[indices], text_mask=split.text_mask[indices],
        text_features=None if split.text_features is None else split.text_features[indices], indices=indices,
    )


class TripletLoader:
    """Shuffled training batches of triplets; the order depends only on ``(seed, epoch)`` (exact resume).

    With ``group_by_reference`` (the default) the reference videos are shuffled and a batch takes all triplets of
    consecutive references, so the other edits of a batch's reference videos are in-batch negatives (the hard
    negatives the test gallery holds); otherwise triplets are shuffled one by one.
    """

    def __init__(self, split: CVRSplit, batch_size: int, seed: int, *, drop_last: bool = True,
                 group_by_reference: bool = True) -> None:
        self.split, self.batch_size, self.seed = split, batch_size, seed
        self.drop_last = drop_last and len(split) >= batch_size  # a tiny split still gives one batch
        self.group_by_reference = group_by_reference
        groups: dict[int, list[int]] = {}
        for i, ref in enumerate(split.reference_index.tolist()):
            groups.setdefault(ref, []).append(i)
        self._groups = list(groups.values())
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the shuffle of ``epoch``."""
        self.epoch = int(epoch)

    def _order(self) -> torch.Tensor:
        rng = np.random.default_rng([self.seed, self.epoch])
        if not self.group_by_reference:
            return torch.from_numpy(rng.permutation(len(self.split)))
        return torch.tensor([i for g in rng.permutation(len(self._groups)) for i in self._groups[g]])

    def __len__(self) -> int:
        full, rest = divmod(len(self.split), self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def __iter__(self) -> Iterator[CVRBatch]:
        order = self._order()
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            if self.drop_last and len(chunk) < self.batch_size:
                break
            yield make_batch(self.split, chunk)
