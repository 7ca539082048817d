"""Traffic estimation: DRAM bytes for a group, unfused (eager) and fused (one kernel).

unfused = Σ over ops that move data: each distinct tensor operand read at its own
          size + the result written; a view moves nothing, except a strided one that an
          eager norm or softmax copies to contiguous memory first (read + write);
fused   = each external tensor input read once (only the part its slices reach,
          ``read_parts.py``) + each escaping value written once
          (a value smaller than the kernel's domain, other than a per-row reduction
          result, is written by every program: costed at the domain's size; the domain
          is ``group.iteration_shape``, the code generator's anchor).
An upper bound with no cache model: every eager op round-trips through DRAM.
"""

from __future__ import annotations

import math
from collections.abc import Collection

from ..ir.graph import FusionGraph, OpKind
from ..ir.reductions import node_reduced_dims
from .group import escaping, external_inputs, iteration_shape, members, moves_data, value_bytes
from .read_parts import read_bytes
from .types import TrafficEstimate


def estimate_traffic(g: FusionGraph, group: Collection[str], copies: bool = True
                     ) -> TrafficEstimate:
    """`copies=False` leaves recompute copies out of the unfused bytes: the model computes
    each such value once, at the original (what the report compares against). A split
    that runs a copy on its own does pay for it (multi_output's cost model)."""
    group = members(group)
    unfused = 0
    for name in group:
        if not moves_data(g, name) or (g[name].copy_of and not copies):
            continue  # eager returns an alias (or never runs the copy): no bytes move
        operands = dict.fromkeys(g[name].refs)
        unfused += sum(value_bytes(g, r) for r in operands) + value_bytes(g, name)
    fused = sum(read_bytes(g, group, external_inputs(g, group)))  # a slice's part only
    domain = iteration_shape(g, group)
    fused += sum(store_bytes(g, group, n, domain) for n in escaping(g, group))
    return TrafficEstimate(unfused_bytes=unfused, fused_bytes=fused)


def _row_width(g: FusionGraph, reduction: str, domain: tuple[int, ...]) -> int:
    """Elements one row of the kernel reduces: the sizes of the reduction's dims."""
    dims = node_reduced_dims(g[reduction], len(domain)) or (len(domain) - 1,)
    return math.prod(domain[d] for d in dims if d < len(domain)) if domain else 0


def store_bytes(g: FusionGraph, group: Collection[str], name: str,
                domain: tuple[int, ...]) -> int:
    """Bytes one kernel iterating `domain` writes for the escaping value `name`."""
    meta = g[name].meta
    if meta is None:
        return 0
    size = 1
    for d in domain:
        size *= d
    reds = [n for n in group if g[n].kind is OpKind.REDUCTION]
    width = _row_width(g, min(reds, key=g.position), domain) if reds else 0
    rows = size // width if width else size
    per_row = meta.numel == rows and bool(reds)
    return meta.nbytes if meta.numel >= size or per_row else size * meta.itemsize
