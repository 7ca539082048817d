"""What a chain of view steps does to a value, seen from the kernel's iteration space.

Pure helpers of ``indexing.py``: the stride-0 expansion a broadcast operand needs before a
reshape (``expanded``), what a chain does to a dense tensor (``effective``), and what a load
through a chain reads (``read_through``: sizes, strides, start and cat pieces), which tells
two reads of one input apart.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..ir.views import Merge, Narrow, Piece, Reshape, Step, Strided, Unflatten, ViewError, apply


def expanded(shape: tuple[int, ...], out: tuple[int, ...], chain: Sequence[Step]
              ) -> tuple[tuple[Step, ...], tuple[Step, ...]]:
    """(steps before `chain`, `chain`) for a broadcast operand of `shape` read through the
    chain of its result (of shape `out`). Where the chain reshapes, a reshape regroups
    elements, so the operand is made the result's full extent first (stride 0 along its
    size-1 dims: BatchNorm statistics of (B*N, C) viewed back as (B, N, C)), unless it
    broadcasts through the chain as it is (``_broadcast_chain``)."""
    chain = tuple(chain)
    if shape == out or not any(isinstance(s, (Reshape, Merge, Unflatten)) for s in chain):
        return (), chain
    kept = _broadcast_chain(shape, out, chain)
    if kept is not None:
        return (), kept
    dims = tuple((k, 1) if d == o else (-1, 0) for k, (d, o) in enumerate(zip(shape, out,
                                                                          strict=True)))
    return (Strided(out, dims, (0,) * len(shape)),), chain


def _broadcast_chain(shape: tuple[int, ...], out: tuple[int, ...],
                     chain: tuple[Step, ...]) -> tuple[Step, ...] | None:
    """The chain for the operand itself where its reshapes touch none of its broadcast dims
    (a bias of the merged dim, read where the kernel splits that dim) or only split them
    (a scalar or a (1, T, 1) bias of heads merged, ``regroup_space.py``: a split of a
    size-1 dim is size-1 dims, as ``views.Split`` has it): through it the operand still
    broadcasts to the result's view, so no expansion fixes the other dims' sizes in the
    launcher. None where it does not, or where a cat's piece follows (``cat_bounds`` reads
    an operand full size along the cat dim)."""
    if _broadcasts_through(shape, out, chain):
        return chain
    if any(isinstance(s, Piece) for s in chain):
        return None
    steps = []
    small, big = shape, out
    skip = False
    for k, s in enumerate(chain):
        if skip or (k + 1 < len(chain) and _undone(s, chain[k + 1], big)):
            skip = not skip  # the merge, then its split
            continue
        own = s
        if isinstance(s, Unflatten) and small[s.dim] == 1 and big[s.dim] != 1:
            own = Unflatten(s.dim, (1,) * len(s.sizes))
        steps.append(own)
        try:
            small = tuple(own.apply(torch.empty(small, device="meta")).shape)
            big = tuple(s.apply(torch.empty(big, device="meta")).shape)
        except (ViewError, RuntimeError):  # a merge of a size-1 dim, a fixed reshape
            return None
    return tuple(steps) if _broadcasts(small, big) else None


def _undone(m: Step, u: Step, shape: tuple[int, ...]) -> bool:
    """`m` is a merge that `u` splits again as it was (a reshape's merge, then the split
    ``regroup_space`` adds): nothing to a tensor of `shape`, while a size-1 operand dim
    would merge with its neighbour's."""
    return (isinstance(m, Merge) and isinstance(u, Unflatten) and u.dim == m.first
            and u.shape(m.shape(shape)) == shape)


def _broadcasts_through(shape: tuple[int, ...], out: tuple[int, ...],
                        chain: Sequence[Step]) -> bool:
    """The chain as it is takes the operand to a shape that broadcasts to the result's."""
    try:
        small = apply(chain, torch.empty(shape, device="meta")).shape
        big = apply(chain, torch.empty(out, device="meta")).shape
    except (ViewError, RuntimeError):  # a split of a size-1 dim, a fixed reshape
        return False
    return _broadcasts(tuple(small), tuple(big))


def _broadcasts(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
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
    # a Narrow's check at another length too: `x[:, :1]` of a length-1 dim reads as `x`
    return (effective(steps, shape, rank), offset,
            tuple(s for s in steps if isinstance(s, Piece | Narrow)))
