"""Multi-process training with ``torch.distributed``: gathers with gradient, batch offsets, and how the
losses of this package see the global batch under ``DistributedDataParallel``.

The Holmes losses are batch-level (the medians of Eq. 11, the in-batch negatives of L_base and
L_inter), so under DDP each rank must see the *global* batch. The calling convention (see
:doc:`/guide/distributed`): every rank gathers the video embeddings of the global batch with
:func:`gather_with_grad`, scores **its own queries against every video** (``[Q_r, V_global]``), labels
them with **global** video indices (:func:`rank_offset` gives its first video's index) and passes the
loss (built with ``distributed=True``) those scores, its queries' embeddings and its own videos' clip
embeddings.

Contract of every ``distributed=True`` loss: the value returned on every rank is the single-process
loss of the concatenated batch, and the gradient each rank's inputs receive is ``world_size`` times
their single-process gradient, so that DDP's mean over the ranks gives the single-process gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = ["is_distributed", "gather_sizes", "rank_offset", "gather_with_grad"]

def is_distributed(group: ProcessGroup | None = None) -> bool:
    """Whether ``torch.distributed`` is initialised with more than one process (in ``group``).

    Examples
    --------
    >>> from evidential_prvr.distributed import is_distributed
    >>> is_distributed()  # a plain Python process
    False
    """
    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


def gather_sizes(size: int, device: torch.device | str = "cpu", group: ProcessGroup | None = None) -> list[int]:
    """The ``size`` of every rank, in rank order: one ``all_gather`` of one integer (a host
    synchronisation). Without a process group: ``[size]``.

    Examples
    --------
    >>> from evidential_prvr.distributed import gather_sizes
    >>> gather_sizes(5)
    [5]
    """
    if not is_distributed(group):
        return [int(size)]
    local = torch.tensor([int(size)], dtype=torch.long, device=device)
    out = [torch.empty_like(local) for _ in range(dist.get_world_size(group))]
    dist.all_gather(out, local, group=group)
    return [int(v) for v in torch.cat(out).tolist()]


def rank_offset(sizes: Sequence[int], rank: int | None = None, group: ProcessGroup | None = None) -> int:
    """Index of this rank's (or ``rank``'s) first row in the global batch: the sum of the ``sizes`` of
    the lower ranks (e.g. add it to local video indices to get the global labels).

    Examples
    --------
    >>> from evidential_prvr.distributed import rank_offset
    >>> rank_offset([5, 3], rank=1)
    5
    """
    if rank is None:
        rank = dist.get_rank(group) if is_distributed(group) else 0
    if not 0 <= rank < len(sizes):
        raise ValueError(f"rank must be in [0, {len(sizes) - 1}] (one size per rank), got {rank}")
    return int(sum(sizes[:rank]))


# PyTorch 2.13 renamed the single-tensor collectives (the old names warn); older releases have only the old ones
_ALL_GATHER_SINGLE = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER_SINGLE = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class _GatherPadded(torch.autograd.Function):
    """All ranks' equally sized ``[n, ...]`` blocks stacked along dim 0; the backward pass hands each rank
    the sum over the ranks of the gradient of its block (a reduce-scatter; gloo, which has none, sums the
    whole gradient and keeps its block)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: ProcessGroup | None) -> torch.Tensor:
        ctx.group = group
        out = tensor.new_empty((dist.get_world_size(group) * tensor.shape[0], *tensor.shape[1:]))
        _ALL_GATHER_SINGLE(out, tensor.contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        world, rank = dist.get_world_size(ctx.group), dist.get_rank(ctx.group)
        grad = grad.contiguous()
        block = grad.shape[0] // world
        if dist.get_backend(ctx.group) == dist.Backend.NCCL:
            own = grad.new_empty((block, *grad.shape[1:]))
            _REDUCE_SCATTER_SINGLE(own, grad, group=ctx.group)
            return own, None
        dist.all_reduce(grad, group=ctx.group)
        return grad[rank * block:(rank + 1) * block], None


def _all_gather_padded(tensor: torch.Tensor, sizes: Sequence[int], group: ProcessGroup | None) -> torch.Tensor:
    """All ranks' ``tensor`` (dim 0 of length ``sizes[rank]``) concatenated along dim 0, differentiable
    when ``tensor`` requires a gradient. Uneven sizes are padded to the largest and cut back."""
    longest = max(sizes)
    padded = tensor
    if tensor.shape[0] < longest:
        padded = torch.cat([tensor, tensor.new_zeros((longest - tensor.shape[0], *tensor.shape[1:]))])
    if tensor.requires_grad:
        stacked = _GatherPadded.apply(padded, group)
    else:
        wire = padded.to(torch.uint8) if padded.dtype == torch.bool else padded.contiguous()
        stacked = wire.new_empty((len(sizes) * longest, *wire.shape[1:]))
        _ALL_GATHER_SINGLE(stacked, wire, group=group)
        stacked = stacked.to(torch.bool) if padded.dtype == torch.bool else stacked
    return torch.cat([stacked[rank * longest:rank * longest + size] for rank, size in enumerate(sizes)])


def gather_with_grad(tensor: torch.Tensor, dim: int = 0, *, sizes: Sequence[int] | None = None,
                     group: ProcessGroup | None = None) -> torch.Tensor:
    """Every rank's ``tensor`` concatenated along ``dim`` in rank order, differentiable.

    The backward pass returns to each rank the sum over the ranks of the gradient of its slice (what
    ``torch.distributed.nn.functional.all_gather`` does, deprecated in recent PyTorch releases); ranks may hold different sizes along ``dim`` (the
    tensor is padded to the largest and the padding cut off; the sizes are gathered first, one host
    synchronisation, unless given as ``sizes``). Without a process group it returns ``tensor``.

    Parameters
    ----------
    tensor : torch.Tensor
        This rank's part (e.g. its videos' frame embeddings ``[V_r, M, d]``).
    dim : int
        The batch dimension.
    sizes : sequence of int, optional
        ``tensor.shape[dim]`` of every rank, when known (from :func:`gather_sizes`).
    group : optional
        The process group (default: the world).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.distributed import gather_with_grad
    >>> gather_with_grad(torch.ones(2, 3)).shape  # one process: the tensor itself
    torch.Size([2, 3])
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if not -tensor.dim() <= dim < max(tensor.dim(), 1):
        raise ValueError(f"dim must be in [{-tensor.dim()}, {tensor.dim() - 1}] for a tensor of shape "
                         f"{tuple(tensor.shape)}, got {dim}")
    if not is_distributed(group):
        return tensor
    moved = tensor.movedim(dim, 0)
    if sizes is None:
        sizes = gather_sizes(moved.shape[0], tensor.device, group)
    world = dist.get_world_size(group)
    if len(sizes) != world or sizes[dist.get_rank(group)] != moved.shape[0]:
        raise ValueError(f"sizes must give tensor.shape[dim] of each of the {world} ranks (this rank's is "
                         f"{moved.shape[0]}), got {list(sizes)}")
    return _all_gather_padded(moved, sizes, group).movedim(0, dim)
