"""``index`` with several processes: which process takes which video, and what each one reports.

``torchrun --nnodes M --nproc_per_node N -m reference_models.videos index ...`` starts ``M x N`` processes
(ranks). They meet in a gloo process group (:func:`reference_models.engine.process_group_from_environment`
on the CPU): what travels between them is small Python values only (the file list, each file's digest, each
rank's problems and counts), never features, so gloo serves on CUDA machines too, while each rank's encoder
runs on its own device (``cuda:LOCAL_RANK``; :func:`reference_models.engine.rank_device`). The steps of
:func:`reference_models.videos.indexing.run_index` under ``torchrun``:

1. Rank 0 checks the flags, its encoder and the gallery's settings, and lists the folder; a mistake there is one
   line from one process, and every other rank stops quietly. Then every rank creates its encoder.
2. The files whose content digest is not known yet (new, or changed since the last ``index``) are shared out by
   :func:`balanced_shares` over their sizes; each rank reads its share and sends the digests to rank 0.
3. Rank 0 decides what to encode (the videos whose digest no part holds), and the videos to encode are shared
   out again by size: each rank decodes and encodes its share on its device and writes its parts atomically
   into the one ``parts`` folder (:func:`~reference_models.videos.indexing.encode_videos`; a part is named by its
   videos' content digests, so ranks never write the same file).
4. Every rank sends its problems and counts (:class:`RankSummary`) to rank 0, the ranks meet once more and the
   process group ends; rank 0 alone then assembles the gallery and its search index from the parts, as one
   process does, and writes the report: every rank's problems (each with its ``rank``) and each rank's
   counts (``processes``).

A rank that dies (killed, out of memory) stops the run (``torchrun`` ends the others); its parts already
written stay, and the same command again encodes only what no part holds. With one process every step is the
one-process ``index``.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["balanced_shares", "RankSummary"]


def balanced_shares(sizes: Mapping[str, int], world_size: int) -> list[list[str]]:
    """Split the videos ``sizes`` (video id -> size, e.g. bytes) over ``world_size`` ranks, about equally by size.

    Greedy longest-first: the videos in order of decreasing size (ties by id) each go to the rank with the
    least size so far (ties: the lowest rank), which keeps the largest share within the largest video of the
    smallest. The result depends only on ``sizes`` and ``world_size``, so every rank computes the same
    shares; each share is sorted by id.

    >>> balanced_shares({"a": 5, "b": 4, "c": 3, "d": 3, "e": 1}, 2)
    [['a', 'd'], ['b', 'c', 'e']]
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    negative = [v for v, s in sizes.items() if s < 0]
    if negative:
        raise ValueError(f"sizes must be >= 0, got {sizes[negative[0]]!r} for {negative[0]!r}")
    shares: list[list[str]] = [[] for _ in range(world_size)]
    loads = [(0, rank) for rank in range(world_size)]  # a heap of (size so far, rank)
    for video in sorted(sizes, key=lambda v: (-sizes[v], v)):
        load, rank = heapq.heappop(loads)
        shares[rank].append(video)
        heapq.heappush(loads, (load + sizes[video], rank))
    return [sorted(share) for share in shares]


@dataclass
class RankSummary:
    """What one rank of ``index`` did with its share (``processes`` in ``index_report.json``).

    ``videos``: its share of the videos to encode; ``encoded``: those it encoded (the others had a problem);
    ``frames``: their frames; ``seconds``: its decoding and encoding time; ``bytes``: the size of its share's
    files; ``digests_read``: the files whose content it read to find their digest.
    """

    rank: int
    host: str
    device: str
    videos: int = 0
    encoded: list[str] = field(default_factory=list)
    frames: int = 0
    seconds: float = 0.0
    bytes: int = 0
    digests_read: int = 0
    problems: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The report's entry: the counts (the problems are listed in the report's own ``problems``)."""
        out = asdict(self)
        out["encoded"] = len(self.encoded)
        out["problems"] = len(self.problems)
        out["frames_per_second"] = self.frames / self.seconds if self.seconds > 0 else 0.0
        return out
