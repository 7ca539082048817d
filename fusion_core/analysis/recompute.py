"""Recompute or store: which escaping values a consumer's kernel should recompute.

Reads a ``FusionGraph`` and the clusters detection found; returns ``Recompute``
pairs (value, consumer). A cluster whose value escapes to pointwise consumers
outside it (the residual ``h = x + attn`` feeding both an RMSNorm inside and the
block's last ``add`` outside) stores that value once and each consumer reads it
back. When the value is one pointwise op over tensors the cluster reads anyway,
each consumer can instead recompute it from those inputs, and the cluster stops
storing it -- Inductor's default for pointwise producers. Per consumer this moves
the value's operands instead of one write plus one read of the value; it is chosen
when that is no more bytes (at a tie it still frees the value's buffer).
A value is never recomputed past an op that may write a tensor in place: the copy
would read its operands after the write.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..ir.graph import FusionGraph, OpKind
from .group import escaping, outside_users
from .types import Cluster


@dataclass(frozen=True)
class Recompute:
    value: str  # the node a cluster would otherwise store
    consumer: str  # the outside node that computes its own copy


# An in-place call the registry does not know: `.copy_()`, aten's `add_.Tensor`.
_INPLACE_NAME = re.compile(r"[A-Za-z0-9]_(\.|\(|$)")


def _writes(g: FusionGraph) -> list[int]:
    """Positions of nodes that may write a tensor in place (which one is not tracked)."""
    return [i for i, n in enumerate(g.nodes) if n.kind is OpKind.INPLACE
            or (n.kind is OpKind.OPAQUE and _INPLACE_NAME.search(n.target))]


def _written_between(writes: list[int], start: int, end: int) -> bool:
    return bisect.bisect_right(writes, start) < bisect.bisect_left(writes, end)


def recompute_plan(g: FusionGraph, clusters: Sequence[Cluster]) -> tuple[Recompute, ...]:
    plan: list[Recompute] = []
    writes = _writes(g)
    for c in clusters:
        inside = set(c.nodes)
        for v in escaping(g, inside):
            node = g[v]
            outside = outside_users(g, inside, v)
            if not (node.kind.is_pointwise and node.meta is not None and not node.copy_of):
                continue
            if any(r in inside for r in node.refs):
                continue  # a cone inside the cluster: its intermediates would escape instead
            if not all(g[u].kind.is_pointwise for u in outside):
                continue  # the output, a view or an opaque op needs the stored value
            if any(_written_between(writes, g.position(v), g.position(u)) for u in outside):
                continue  # an operand may change before the consumer runs
            operands = sum(g[r].meta.nbytes for r in set(node.refs) if g[r].meta is not None)
            store = node.meta.nbytes * (1 + len(outside))
            if operands * len(outside) <= store:
                plan += [Recompute(v, u) for u in outside]
    return tuple(plan)
