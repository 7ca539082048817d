"""The 2-D tiles of an elementwise kernel: whether it tiles, and which dims its columns cover.

Reads the kernel's iteration shape (the domain) and the broadcast ``Access`` of every input
and output (``layout.py``); returns ``tiled`` (``needs_tiles``) and ``col_dims``
(``column_dims``), which ``lower.py`` puts into the ``KernelPlan``. A tiled kernel
(``emit.py``) runs ``[ROWS, BLOCK]`` tiles: ``cols`` is the flat index over the domain's
last ``col_dims`` dims, ``rows`` over the others.

Where every tensor is contiguous along the last axis, the columns are that axis alone. A
tensor read (or written) through a permutation is contiguous along another dim instead:
its unit-stride dim `u` is not the last one. Making `u` the innermost row dim and every
dim after it a column gives each side of the tile its own contiguous direction: down the
rows for the permuted tensor, along the columns for the others, and Triton lays out each
load along its own direction. With several such tensors the one moving the most bytes
decides (ties: an output, then the first argument). ConvNeXt's channels-last ``y``
permuted back to NCHW, added to an NCHW ``x``: rows ``(N, C)``, columns ``(H, W)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .plan import Role, TensorArg


def needs_tiles(domain: tuple[int, ...], args: Sequence[TensorArg]) -> bool:
    """Some tensor spans the last axis through several index groups (a transposed or
    sliced view, or a broadcast over a middle dim): a flat index would need `offs // span`
    terms, which hide from Triton that neighbouring lanes read neighbouring addresses."""
    rank = len(domain)
    if rank < 2 or domain[-1] == 1:
        return False
    return any(len(t.access.groups) > 1 and t.access.spans_cols(rank) for t in args)


def unit_dim_against(arg: TensorArg, rank: int) -> int | None:
    """The domain dim along which `arg` has stride 1, where `arg` also varies along a later
    dim (a permuted read or write); None otherwise (contiguous along its innermost dim, or
    broadcast along every dim after its contiguous one)."""
    groups = arg.access.groups
    units = [g for g in groups if g.unit]
    if not units or units[-1] == groups[-1]:
        return None
    return units[-1].last - 1


def column_dims(domain: tuple[int, ...], args: Sequence[TensorArg]) -> int:
    """How many trailing domain dims a tile's columns cover (see the module docstring)."""
    rank = len(domain)
    against = [(math.prod(t.shape) * t.dtype.itemsize, t.role == Role.OUT, -k, u)
               for k, t in enumerate(args)
               if (u := unit_dim_against(t, rank)) is not None]
    if not against:
        return 1
    return rank - 1 - max(against)[3]
