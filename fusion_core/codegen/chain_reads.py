"""What a chain of view steps does to a value, seen from the kernel's iteration space.

Pure helpers of ``indexing.py``: the stride-0 expansion a broadcast operand needs before a
reshape (``expanded``), what a chain does to a dense tensor (``effective``), and what a load
through a chain reads (``read_through``: sizes, strides, start and cat pieces), which tells
two reads of one input apart.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..ir.views import Merge, Piece, Reshape, Step, Strided, Unflatten, ViewError, apply


def expanded(shape: tuple[int, ...], out: tuple[int, ...], chain: Sequence[Step]
              ) -> tuple[Step, ...]:
    """A broadcast operand made the result's full extent (stride 0 along its size-1 dims)
    when the chain reshapes: a reshape regroups elements, so it needs the full extent
    (BatchNorm statistics of (B*N, C) viewed back as (B, N, C)). () otherwise."""
    if shape == out or not any(isinstance(s, (Reshape, Merge, Unflatten)) for s in chain):
        return ()
    if _broadcasts_through(shape, out, chain):
        return ()
    dims = tuple((k, 1) if d == o else (-1, 0) for k, (d, o) in enumerate(zip(shape, out,
                                                                          strict=True)))
    return (Strided(out, dims, (0,) * len(shape)),)


def _broadcasts_through(shape: tuple[int, ...], out: tuple[int, ...],
                        chain: Sequence[Step]) -> bool:
    """The chain's reshapes touch none of the operand's broadcast dims (a bias of the merged
    dim, read where the kernel splits that dim): through the chain it still broadcasts to
    the result's view, so no expansion fixes the other dims' sizes in the launcher."""
    try:
        small = apply(chain, torch.empty(shape, device="meta")).shape
        big = apply(chain, torch.empty(out, device="meta")).shape
    except (ViewError, RuntimeError):  # a split of a size-1 dim, a fixed reshape
        return False
    return len(small) == len(big) and all(a in (b, 1) for a, b in zip(small, big, strict=True))


def effective(steps: Sequence[Step], shape: tuple[int, ...], rank: int
               ) -> tuple[tuple[int, int], ...] | None:
    """What a chain does to a dense tensor of `shape`, right-aligned to `rank` dims:
    (size, stride) per dim, size-1 dims as (1, 0). None if the chain cannot apply."""
    try:
        t = apply(steps, torch.empty(shape, device="meta"))
    except ViewError:
        return None
    pairs = [(s, st if s != 1 else 0) for s, st in zip(t.shape, t.stride(), strict=True)]
    while len(pairs) > rank and pairs[0] == (1, 0):
        pairs.pop(0)
    return tuple([(1, 0)] * (rank - len(pairs)) + pairs)


def read_through(steps: Sequence[Step], shape: tuple[int, ...], rank: int) -> tuple | None:
    """What a load through a chain reads: ``effective``'s sizes and strides, where it starts
    (two slices of one input differ there only: `q[..., h:]`, `q[..., :h]`) and the cat
    pieces that shift it."""
    try:
        offset = apply(steps, torch.empty(shape, device="meta")).storage_offset()
    except ViewError:
        offset = None
    return (effective(steps, shape, rank), offset,
            tuple(s for s in steps if isinstance(s, Piece)))
