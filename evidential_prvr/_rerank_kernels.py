"""Max-similarity (Holmes Eq. 1) of (query, candidate video) pairs, the inner step of
:func:`evidential_prvr.search.rerank_candidates`.

Two ways to score ``P`` pairs against a gallery of ``V`` videos of ``M`` tokens each:

* **gather** (:func:`gathered_max`) copies every pair's ``M`` tokens next to each other and takes one
  batched matrix-vector product. It moves ``P · M · d`` numbers twice (the copy, then the product), which is
  cheap for a few pairs and dominates when every query re-ranks a hundred videos.
* **sweep** (:func:`swept_max`) walks the gallery once in blocks of videos; for each video it stacks the
  queries that hold it as a candidate into a small matrix and multiplies it with the video's tokens in
  place (a batched matrix-matrix product). It reads each video at most once, ``V · M · d`` numbers, however
  many queries share it.

:func:`pair_max` picks the sweep when the pairs would make the gather move more than the gallery, or hold
more than the caller's memory budget.
"""

from __future__ import annotations

import torch

__all__ = ["gathered_max", "swept_max", "pair_max"]

_LANE = 64
"""Most queries stacked against one video in one product (a video with more gets several lanes)."""


def _finish(dots: torch.Tensor, *, norms: torch.Tensor | None, valid: torch.Tensor | None, fill: float | None,
            token_dim: int) -> torch.Tensor:
    """Divide by the token norms, mask invalid tokens, then max over the token dimension ``token_dim``."""
    if norms is not None:
        dots = dots / norms
    if valid is not None:
        dots = dots.masked_fill(~valid, torch.finfo(dots.dtype).min if fill is None else fill)
    return dots.amax(dim=token_dim)


def gathered_max(
    queries: torch.Tensor, tokens: torch.Tensor, candidates: torch.Tensor, *, norms: torch.Tensor | None = None,
    mask: torch.Tensor | None = None, fill: float | None = None, dtype: torch.dtype, buffer: list[torch.Tensor],
) -> torch.Tensor:
    """``[q, C]`` max over the tokens of each query's own candidate videos (a batched matrix-vector product;
    the gathered tokens are divided by their norms after the product, not normalised one by one).

    ``candidates`` is ``int64 [q, C]``; ``-1`` entries are scored as video 0 (the caller masks them).
    ``buffer`` holds the gather's destination from one call to the next: a fresh multi-MB allocation per
    step costs more in page faults than the copy itself.
    """
    rows, count = candidates.shape
    videos, positions, dim = tokens.shape
    flat = candidates.clamp_min(0).reshape(-1).to(tokens.device)
    if not buffer or buffer[0].shape[0] < flat.shape[0]:
        buffer[:] = [tokens.new_empty(flat.shape[0], positions * dim)]
    picked = torch.index_select(tokens.reshape(videos, positions * dim), 0, flat, out=buffer[0][: flat.shape[0]])
    picked = picked.to(device=queries.device, dtype=dtype).view(rows, count * positions, dim)
    dots = torch.bmm(picked, queries.unsqueeze(2)).view(rows, count, positions)
    selected_norms = None if norms is None else norms.index_select(0, flat).to(queries.device, dtype)
    valid = None if mask is None else mask.index_select(0, flat).to(queries.device).view(rows, count, positions)
    return _finish(dots, norms=None if selected_norms is None else selected_norms.view(rows, count, positions),
                   valid=valid, fill=fill, token_dim=2)


def swept_max(
    queries: torch.Tensor, tokens: torch.Tensor, candidates: torch.Tensor, *, norms: torch.Tensor | None = None,
    mask: torch.Tensor | None = None, fill: float | None = None, dtype: torch.dtype, video_chunk: int = 256,
) -> torch.Tensor:
    """The scores of :func:`gathered_max`, computed by one sweep over the gallery's videos.

    The pairs are sorted by video; each block of ``video_chunk`` videos that holds pairs is moved to the
    queries' device once, and each of its videos is multiplied with the (at most ``_LANE``) queries stacked
    against it. Bounds: one block's tokens, and ``lanes × _LANE × d`` stacked queries.
    """
    rows, count = candidates.shape
    videos, positions, dim = tokens.shape
    device = queries.device
    video = candidates.clamp_min(0).reshape(-1).to(device)
    video, order = torch.sort(video, stable=True)
    query = torch.div(order, count, rounding_mode="floor")
    per_video = torch.bincount(video, minlength=videos)
    slot = torch.arange(video.shape[0], device=device) - (per_video.cumsum(0) - per_video)[video]
    lane, column = torch.div(slot, _LANE, rounding_mode="floor"), slot % _LANE
    # every video gets a lane, so that a block whose videos all fit one lane multiplies its tokens in place
    lanes_per_video = torch.div(per_video + _LANE - 1, _LANE, rounding_mode="floor").clamp_min(1)
    lane_end = lanes_per_video.cumsum(0)
    row = (lane_end - lanes_per_video)[video] + lane  # the pair's lane, numbered over the whole gallery
    num_blocks = -(-videos // video_chunk)
    edges = torch.arange(0, num_blocks + 1, device=device) * video_chunk
    widths = torch.zeros(num_blocks, dtype=torch.long, device=device).scatter_reduce(
        0, torch.div(video, video_chunk, rounding_mode="floor"), column + 1, reduce="amax")
    # the blocks' pair and lane ranges and product widths, moved to the host together: one synchronisation
    lane_bounds = torch.cat([lane_end.new_zeros(1), lane_end])[edges.clamp_max(videos)]
    bounds = torch.cat([torch.searchsorted(video, edges), lane_bounds, widths]).tolist()
    pair_edges, lane_edges = bounds[: num_blocks + 1], bounds[num_blocks + 1 : 2 * num_blocks + 2]
    widths_list = bounds[2 * num_blocks + 2 :]
    padded = torch.cat([queries.to(dtype), queries.new_zeros(1, dim, dtype=dtype)])  # row `rows`: padding
    result = torch.empty(video.shape[0], dtype=dtype, device=device)
    for block in range(num_blocks):
        p0, p1 = pair_edges[block], pair_edges[block + 1]
        if p0 == p1:
            continue
        v0, l0, l1 = block * video_chunk, lane_edges[block], lane_edges[block + 1]
        vb = min(video_chunk, videos - v0)
        stacked = torch.full((l1 - l0, widths_list[block]), rows, dtype=torch.long, device=device)
        stacked[row[p0:p1] - l0, column[p0:p1]] = query[p0:p1]
        block_tokens = tokens[v0 : v0 + vb].to(device=device, dtype=dtype)
        block_norms = None if norms is None else norms[v0 : v0 + vb].to(device, dtype)
        block_mask = None if mask is None else mask[v0 : v0 + vb].to(device)
        if l1 - l0 > vb:  # some video has more than one lane: give each lane its video's tokens
            owner = torch.repeat_interleave(torch.arange(vb, device=device), lanes_per_video[v0 : v0 + vb])
            block_tokens = block_tokens.index_select(0, owner)
            block_norms = None if block_norms is None else block_norms.index_select(0, owner)
            block_mask = None if block_mask is None else block_mask.index_select(0, owner)
        dots = torch.bmm(padded[stacked], block_tokens.transpose(1, 2))  # [lanes, width, M]
        best = _finish(dots, norms=None if block_norms is None else block_norms.unsqueeze(1),
                       valid=None if block_mask is None else block_mask.unsqueeze(1), fill=fill, token_dim=2)
        result[p0:p1] = best[row[p0:p1] - l0, column[p0:p1]]
    scores = torch.empty_like(result)
    scores[order] = result
    return scores.view(rows, count)


def pair_max(
    queries: torch.Tensor, tokens: torch.Tensor, candidates: torch.Tensor, *, norms: torch.Tensor | None = None,
    mask: torch.Tensor | None = None, fill: float | None = None, dtype: torch.dtype, buffer: list[torch.Tensor],
    memory_budget: int,
) -> torch.Tensor:
    """:func:`swept_max` when the pairs outnumber half the gallery's videos (the gather would then move more
    than one sweep reads) or their gathered tokens would exceed ``memory_budget`` bytes (the sweep holds one
    block of videos), else :func:`gathered_max`."""
    videos, positions, dim = tokens.shape
    gathered_bytes = candidates.numel() * positions * dim * tokens.element_size()
    if 2 * candidates.numel() >= videos or gathered_bytes > memory_budget:
        return swept_max(queries, tokens, candidates, norms=norms, mask=mask, fill=fill, dtype=dtype)
    return gathered_max(queries, tokens, candidates, norms=norms, mask=mask, fill=fill, dtype=dtype, buffer=buffer)
