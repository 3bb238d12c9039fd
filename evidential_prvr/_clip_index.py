"""FAISS candidate generation over the clip embeddings of a gallery (public through :mod:`evidential_prvr.search`).

FAISS is optional: install the ``faiss`` extra (``pip install "evidential-prvr[faiss]"``, which brings
``faiss-cpu``) or ``faiss-gpu``. The index holds one L2-normalised vector per clip; a query's candidate
videos are the distinct videos of its nearest clips by inner product, in the order of their best clip,
which :func:`evidential_prvr.search.rerank_candidates` then scores exactly.
"""

from __future__ import annotations

import math
import os
import pickle
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from evidential_prvr._checks import check_choice, check_positive_int, check_tensor
from evidential_prvr._gallery_search import SearchScoring, _scoring, rerank_candidates, token_norms
from evidential_prvr._numerics import normalize_rows

INDEX_TYPES = ("flat", "ivf", "ivfpq", "hnsw")
"""FAISS index kinds: ``"flat"`` (exact inner product), ``"ivf"`` (inverted lists), ``"ivfpq"`` (inverted
lists of 4-bit product-quantised codes), ``"hnsw"`` (graph)."""

_INSTALL = 'pip install "evidential-prvr[faiss]" (faiss-cpu), or faiss-gpu for CUDA'
_ADD_BLOCK = 1 << 16  # clips normalised and added at a time (bounds the temporary copy)
_GPU_MAX_K = 2048  # the most neighbours a FAISS GPU index returns per query
_FILE_FORMAT = "evidential-prvr ClipIndex 1"  # the first entry of a saved index (ClipIndex.save)


def _import_faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:
        raise ImportError(f"ClipIndex needs FAISS, which is not installed: {_INSTALL}") from exc
    return faiss


@dataclass(frozen=True)
class IndexSpec:
    """Kind and parameters of a :class:`ClipIndex`.

    Attributes
    ----------
    kind : {"flat", "ivf", "ivfpq", "hnsw"}
        Exact inner product; inverted lists over k-means cells (``IndexIVFFlat``); the same cells holding
        product-quantised codes of 4 bits per sub-vector, scanned with FAISS's SIMD "fast scan"
        (``IndexIVFPQFastScan``: ``d / 8`` bytes per clip at the default ``pq_m``); a navigable small-world
        graph (``IndexHNSWFlat``). ``flat``, ``ivf`` and ``hnsw`` store the vectors uncompressed. The
        approximate kinds only choose the candidates: :meth:`ClipIndex.search` scores them exactly.
    nlist : int or None
        IVF cells (default :math:`\\lceil\\sqrt{N}\\rceil` for ``N`` clips).
    nprobe : int
        IVF cells visited per query.
    pq_m : int or None
        ``ivfpq`` sub-quantisers, a divisor of ``d`` (default the largest divisor up to ``d / 4``: one 4-bit
        code per 4 dimensions when 4 divides ``d``).
    m : int
        HNSW neighbours per node.
    ef_search, ef_construction : int
        HNSW beam widths at search and build time.
    train_size : int or None
        Clips the IVF k-means is trained on (a seeded random sample; default ``min(N, 50 * nlist)``).

    Examples
    --------
    >>> from evidential_prvr.search import IndexSpec
    >>> IndexSpec.parse("ivf:nlist=256,nprobe=8")
    IndexSpec(kind='ivf', nlist=256, nprobe=8, pq_m=None, m=32, ef_search=64, ef_construction=40, train_size=None)
    >>> IndexSpec.parse("hnsw").kind
    'hnsw'

    References
    ----------
    Johnson, Douze, Jégou, "Billion-scale similarity search with GPUs" (FAISS), IEEE Trans. Big Data 2019;
    Malkov, Yashunin, "Efficient and robust approximate nearest neighbor search using Hierarchical Navigable
    Small World graphs", IEEE TPAMI 2018; Holmes (ICML 2026), Eq. 1 (the clip scores indexed).
    """

    kind: str = "flat"
    nlist: int | None = None
    nprobe: int = 16
    pq_m: int | None = None
    m: int = 32
    ef_search: int = 64
    ef_construction: int = 40
    train_size: int | None = None

    def __post_init__(self) -> None:
        check_choice(self.kind, "kind", INDEX_TYPES)
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "kind" and value is not None:
                check_positive_int(value, f.name)

    @classmethod
    def parse(cls, text: str) -> IndexSpec:
        """``"KIND"`` or ``"KIND:key=value,key=value"`` (keys: the integer attributes), e.g. ``"ivf:nprobe=32"``."""
        if not isinstance(text, str):
            raise TypeError(f"index spec must be a str, got {type(text).__name__}")
        kind, _, rest = text.partition(":")
        check_choice(kind, "index type", INDEX_TYPES)
        params: dict[str, int] = {}
        names = [f.name for f in fields(cls) if f.name != "kind"]
        for item in filter(None, rest.split(",")):
            key, sep, value = item.partition("=")
            if not sep or key not in names:
                raise ValueError(f"index spec {text!r}: expected key=value with key one of {', '.join(names)}, "
                                 f"got {item!r}")
            try:
                params[key] = int(value)
            except ValueError:
                raise ValueError(f"index spec {text!r}: {key} must be an integer, got {value!r}") from None
        return cls(kind=kind, **params)


def _normalised_numpy(x: torch.Tensor) -> np.ndarray:
    return normalize_rows(x.detach().to("cpu", torch.float32), torch.float32).contiguous().numpy()


def _first_videos(videos: torch.Tensor, want: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``want`` distinct videos of each row of ``videos [R, n]`` in order of first appearance
    (``-1`` entries skipped, rows padded with ``-1``), and the number of distinct videos per row."""
    rows, n = videos.shape
    ordered, order = torch.sort(videos, dim=1, stable=True)
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    first &= ordered >= 0
    position = torch.where(first, order, torch.full_like(order, n)).sort(dim=1).values[:, :want]
    picked = videos.gather(1, position.clamp_max(n - 1)).masked_fill(position >= n, -1)
    if picked.shape[1] < want:
        picked = torch.cat([picked, picked.new_full((rows, want - picked.shape[1]), -1)], dim=1)
    return picked, first.sum(dim=1)


class ClipIndex:
    """A FAISS index over the clip embeddings of a gallery: candidate videos by best clip, then exact re-ranking.

    Parameters
    ----------
    clips : torch.Tensor
        ``[V, M_c, d]`` clip embeddings (any device; copied, normalised, into the index on the host). The
        tensor is kept (not copied) for :meth:`search`'s exact re-ranking.
    spec : str or IndexSpec
        ``"flat"``, ``"ivf"``, ``"hnsw"``, optionally with parameters (``"ivf:nlist=1024,nprobe=32"``;
        see :class:`IndexSpec`).
    seed : int
        Seed of the IVF training sample.

    Notes
    -----
    With queries on a CUDA device and a FAISS build with GPU support (``faiss-gpu``), the flat and IVF
    indexes are copied to that GPU on first use; IVF-PQ fast scan and HNSW always search on the host. Without FAISS the
    constructor raises ``ImportError`` naming the extra to install.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.search import ClipIndex, gallery_search
    >>> clips = torch.randn(40, 4, 16, generator=torch.Generator().manual_seed(0))
    >>> queries = torch.randn(5, 16, generator=torch.Generator().manual_seed(1))
    >>> index = ClipIndex(clips, "flat")
    >>> approx = index.search(queries, k=3, num_candidates=3)
    >>> bool((approx.indices == gallery_search(queries, clips, k=3).indices).all())
    True

    References
    ----------
    Holmes (ICML 2026), Eq. 1-2 (the re-ranking score); Johnson, Douze, Jégou, "Billion-scale similarity
    search with GPUs" (FAISS), IEEE Trans. Big Data 2019.
    """

    def __init__(self, clips: torch.Tensor, spec: str | IndexSpec = "flat", *, seed: int = 0) -> None:
        check_tensor(clips, "clips", ndim=3, floating=True)
        if 0 in clips.shape:
            raise ValueError(f"clips must be [num_videos, num_clips, d] with every size >= 1, got shape "
                             f"{tuple(clips.shape)}")
        if isinstance(spec, str):
            spec = IndexSpec.parse(spec)
        elif not isinstance(spec, IndexSpec):
            raise TypeError(f"spec must be a str or an IndexSpec, got {type(spec).__name__}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        self.faiss = _import_faiss()
        self._hold(clips, spec)
        self.index = self._build(clips.reshape(-1, self.dim), seed)

    def _hold(self, clips: torch.Tensor, spec: IndexSpec) -> None:
        """Keep the clips (for the exact re-ranking), their sizes and norms, and the spec."""
        self.spec = spec
        self.clips = clips
        self.num_videos, self.clips_per_video, self.dim = clips.shape
        self.num_clips = self.num_videos * self.clips_per_video
        self.clip_norms = token_norms(clips)
        self._gpu: dict[int, Any] = {}

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the index, its spec and the clips it re-ranks over to one file, atomically (a temporary file in
        the same folder, then a rename: an interrupted save leaves the previous file as it was).

        The file is read by :meth:`load` with ``torch.load(weights_only=True)``: FAISS's own serialisation as a
        ``uint8`` tensor, the spec as plain values and the clips as a tensor (on the host), so loading it runs
        no code from the file. Building an IVF or HNSW index over a large gallery takes minutes; loading
        takes the time of reading the file.

        Examples
        --------
        >>> import tempfile, torch
        >>> from pathlib import Path
        >>> from evidential_prvr.search import ClipIndex
        >>> clips = torch.randn(30, 4, 8, generator=torch.Generator().manual_seed(0))
        >>> queries = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
        >>> index = ClipIndex(clips, "ivf:nlist=4,nprobe=2")
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     index.save(Path(folder) / "gallery.index")
        ...     again = ClipIndex.load(Path(folder) / "gallery.index")
        >>> torch.equal(again.search(queries, k=5).indices, index.search(queries, k=5).indices)
        True
        """
        target = Path(path)
        data = {"format": _FILE_FORMAT, "spec": asdict(self.spec),
                "faiss": torch.from_numpy(self.faiss.serialize_index(self.index)), "clips": self.clips.detach().cpu()}
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(handle, "wb") as file:
                torch.save(data, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, device: str | torch.device = "cpu") -> ClipIndex:
        """The index :meth:`save` wrote to ``path``, with its clips on ``device`` (its searches return what the
        saved index returned). A file that is not a saved index raises ``ValueError`` naming it."""
        faiss = _import_faiss()
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
        except (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise ValueError(f"{os.fspath(path)} is not a saved ClipIndex (torch.load: {exc})") from exc
        if not isinstance(data, dict) or data.get("format") != _FILE_FORMAT:
            raise ValueError(f"{os.fspath(path)} is not a saved ClipIndex (expected the format entry "
                             f"{_FILE_FORMAT!r}, got {data.get('format') if isinstance(data, dict) else type(data).__name__!r})")
        spec = IndexSpec(**data["spec"])
        clips = data["clips"].to(device)
        index = faiss.deserialize_index(data["faiss"].numpy())
        if index.ntotal != clips.shape[0] * clips.shape[1] or index.d != clips.shape[2]:
            raise ValueError(f"{os.fspath(path)} is inconsistent: its FAISS index holds {index.ntotal} vectors of "
                             f"d = {index.d} but its clips are {tuple(clips.shape)}")
        loaded = cls.__new__(cls)  # the built index is read, not built again
        loaded.faiss = faiss
        loaded._hold(clips, spec)
        loaded.index = index
        return loaded

    def __repr__(self) -> str:
        return f"ClipIndex({self.spec}, videos={self.num_videos}, clips={self.num_clips}, d={self.dim})"

    def _build(self, flat: torch.Tensor, seed: int) -> Any:
        faiss, spec, dim = self.faiss, self.spec, self.dim
        if spec.kind == "flat":
            index = faiss.IndexFlatIP(dim)
        elif spec.kind == "hnsw":
            index = faiss.IndexHNSWFlat(dim, spec.m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = spec.ef_construction
            index.hnsw.efSearch = spec.ef_search
        else:
            nlist = min(spec.nlist or math.ceil(math.sqrt(self.num_clips)), self.num_clips)
            self.quantizer = faiss.IndexFlatIP(dim)
            if spec.kind == "ivf":
                index = faiss.IndexIVFFlat(self.quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
            else:
                # default: the largest divisor of d up to d / 4
                pq_m = spec.pq_m or max(m for m in range(1, max(1, dim // 4) + 1) if dim % m == 0)
                if dim % pq_m:
                    raise ValueError(f"pq_m must divide the embedding dimension {dim}, got {pq_m}")
                index = faiss.IndexIVFPQFastScan(self.quantizer, dim, nlist, pq_m, 4, faiss.METRIC_INNER_PRODUCT)
            size = min(self.num_clips, spec.train_size or 50 * nlist)
            sample = torch.randperm(self.num_clips, generator=torch.Generator().manual_seed(seed))[:size]
            index.train(_normalised_numpy(flat[sample.to(flat.device)]))
            index.nprobe = min(spec.nprobe, nlist)
        for start in range(0, self.num_clips, _ADD_BLOCK):
            index.add(_normalised_numpy(flat[start : start + _ADD_BLOCK]))
        return index

    def _index_for(self, device: torch.device) -> Any:
        """The index to search for queries on ``device``: a GPU copy where FAISS supports it, else the host one."""
        faiss = self.faiss
        gpu = (device.type == "cuda" and self.spec.kind in ("flat", "ivf") and hasattr(faiss, "StandardGpuResources")
               and faiss.get_num_gpus() > 0)
        if not gpu:
            return self.index
        ordinal = device.index if device.index is not None else torch.cuda.current_device()
        if ordinal not in self._gpu:
            resources = faiss.StandardGpuResources()
            self._gpu[ordinal] = (resources, faiss.index_cpu_to_gpu(resources, ordinal, self.index))
        return self._gpu[ordinal][1]

    def _check_queries(self, queries: object) -> torch.Tensor:
        check_tensor(queries, "queries", ndim=2, floating=True)
        assert isinstance(queries, torch.Tensor)
        if queries.shape[0] == 0 or queries.shape[1] != self.dim:
            raise ValueError(f"queries must be [num_queries >= 1, {self.dim}] (d of the indexed clips), got shape "
                             f"{tuple(queries.shape)}")
        return queries

    @torch.no_grad()
    def candidates(self, queries: torch.Tensor, num_candidates: int) -> torch.Tensor:
        """``int64 [Q, K']`` distinct candidate videos of each query, in order of their best indexed clip.

        The nearest ``n`` clips are searched and reduced to their videos. A flat index searches
        ``n = K' · M_c`` clips once (they always hold ``K'`` distinct videos), so its candidates are exactly
        the ``K'`` videos of highest clip score. IVF and HNSW start from ``n = K' · max(2, M_c / 8)`` and
        search rows with fewer than ``K'`` distinct videos again with ``4 n`` clips until the index has no
        more to return (IVF: the probed cells are exhausted; a GPU index: 2048 neighbours); the remaining
        slots are ``-1``.

        Parameters
        ----------
        queries : torch.Tensor
            ``[Q, d]`` query embeddings (normalised here); the result is on their device.
        num_candidates : int
            ``K'`` (capped at the number of videos).
        """
        queries = self._check_queries(queries)
        check_positive_int(num_candidates, "num_candidates")
        index = self._index_for(queries.device)
        want = min(num_candidates, self.num_videos)
        vectors = _normalised_numpy(queries)
        result = torch.full((queries.shape[0], want), -1, dtype=torch.long)
        pending = torch.arange(queries.shape[0])
        # GPU indexes return at most 2048 neighbours per query
        largest = self.num_clips if index is self.index else min(self.num_clips, _GPU_MAX_K)
        if self.spec.kind == "flat":
            # one scan: the nearest want * M clips always hold want distinct videos
            n = min(largest, want * self.clips_per_video)
        else:
            # graph and cell searches cost more with n: start with a few clips per wanted video, grow if short
            n = min(largest, want * max(2, self.clips_per_video // 8))
        while pending.numel():
            _, ids = index.search(vectors[pending.numpy()], n)
            ids_t = torch.from_numpy(ids)
            videos = torch.where(ids_t >= 0, ids_t // self.clips_per_video, torch.full_like(ids_t, -1))
            picked, distinct = _first_videos(videos, want)
            result[pending] = picked
            exhausted = (ids_t < 0).any(dim=1) | (n >= largest)
            pending = pending[(distinct < want) & ~exhausted]
            n = min(largest, 4 * n)
        return result.to(queries.device)

    def search(
        self,
        queries: torch.Tensor,
        k: int = 100,
        *,
        num_candidates: int | None = None,
        frames: torch.Tensor | None = None,
        frame_mask: torch.Tensor | None = None,
        scoring: SearchScoring | None = None,
        target: torch.Tensor | None = None,
        memory_budget: int = 64 * 2**20,
    ) -> Any:
        """Top-``k`` videos per query: :meth:`candidates`, then :func:`~evidential_prvr.search.rerank_candidates`.

        Parameters
        ----------
        queries : torch.Tensor
            ``[Q, d]`` query embeddings.
        k : int
            Videos returned per query.
        num_candidates : int, optional
            ``K' >= k`` candidate videos re-ranked per query (default ``k``).
        frames, frame_mask, target, memory_budget
            As in :func:`~evidential_prvr.search.rerank_candidates` (the frames of the same videos).
        scoring : SearchScoring, optional
            Branch weights and padded-frame score of Eq. 2 (default ``SearchScoring()``). Its ``normalize``
            must be ``True``: the index holds L2-normalised clips and chooses candidates by cosine, and the
            re-ranking divides by the index's clip norms.

        Returns
        -------
        SearchResult
        """
        check_positive_int(k, "k")
        scoring = _scoring(scoring)
        if not scoring.normalize:
            raise ValueError("ClipIndex.search needs scoring.normalize=True (cosine scores): the index holds "
                             "L2-normalised clips and chooses the candidates by cosine; for dot-product scores call "
                             "rerank_candidates(..., scoring=SearchScoring(normalize=False)) with your candidates")
        if num_candidates is None:
            num_candidates = k
        check_positive_int(num_candidates, "num_candidates")
        if num_candidates < k:
            raise ValueError(f"num_candidates must be >= k = {k} (the videos re-ranked per query), got {num_candidates}")
        candidates = self.candidates(queries, num_candidates)
        return rerank_candidates(
            queries, candidates, self.clips, frames, frame_mask, k=min(k, candidates.shape[1]),
            scoring=scoring, target=target, clip_norms=self.clip_norms, memory_budget=memory_budget,
            validate_args=False,
        )
