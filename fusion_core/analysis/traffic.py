"""Traffic estimation: DRAM bytes for a group, unfused (eager) and fused (one kernel).

unfused = Σ over ops that move data: each distinct tensor operand read at its own
          size + the result written;
fused   = each external tensor input read once + each escaping value written once
          (a value smaller than the kernel's domain, other than a per-row reduction
          result, is written by every program: costed at the domain's size).
An upper bound with no cache model: every eager op round-trips through DRAM.
"""

from __future__ import annotations

from collections.abc import Collection

from ..ir.graph import FusionGraph, OpKind
from ..ir.registry import SPECS
from .legality import escaping, iteration_shape, members
from .types import TrafficEstimate


def _bytes(g: FusionGraph, name: str) -> int:
    meta = g[name].meta
    return meta.nbytes if meta is not None else 0


def _same_dtype_cast(g: FusionGraph, name: str) -> bool:
    """`x.float()` / `x.to(x.dtype)` on a value already of that dtype returns `x` itself."""
    node = g[name]
    if node.op != "to" or not node.refs or node.meta is None:
        return False
    src = g[node.refs[0]].meta
    return src is not None and src.dtype == node.meta.dtype


def moves_data(g: FusionGraph, name: str) -> bool:
    """False for ops eager runs as an alias (dropout in eval, a same-dtype cast)."""
    spec = SPECS.get(g[name].op.rstrip("_"))
    return not ((spec is not None and not spec.moves_data) or _same_dtype_cast(g, name))


def n_working_ops(g: FusionGraph, group: Collection[str]) -> int:
    """Compute ops that move data: a group needs two of them to save anything."""
    return sum(g[n].kind.is_compute and moves_data(g, n) for n in group)


def external_inputs(g: FusionGraph, group: Collection[str]) -> tuple[str, ...]:
    """Values the group reads from outside, in order of first use."""
    seen: dict[str, None] = {}
    group = members(group)
    for name in sorted(group, key=g.position):
        for r in g[name].refs:
            if r not in group:
                seen.setdefault(r)
    return tuple(seen)


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
        unfused += sum(_bytes(g, r) for r in dict.fromkeys(g[name].refs)) + _bytes(g, name)
    fused = sum(_bytes(g, r) for r in external_inputs(g, group))
    domain = iteration_shape(g, group)
    fused += sum(store_bytes(g, group, n, domain) for n in escaping(g, group))
    return TrafficEstimate(unfused_bytes=unfused, fused_bytes=fused)


def store_bytes(g: FusionGraph, group: Collection[str], name: str,
                domain: tuple[int, ...]) -> int:
    """Bytes one kernel iterating `domain` writes for the escaping value `name`."""
    meta = g[name].meta
    if meta is None:
        return 0
    size = 1
    for d in domain:
        size *= d
    rows = size // domain[-1] if domain and domain[-1] else size
    per_row = meta.numel == rows and any(g[n].kind is OpKind.REDUCTION for n in group)
    return meta.nbytes if meta.numel >= size or per_row else size * meta.itemsize
