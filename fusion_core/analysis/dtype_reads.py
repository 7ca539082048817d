"""Reads of a group value's dtype (`input_dtype = x.dtype`) that the group's inputs answer.

Hugging Face's RMSNorm reads `hidden_states.dtype` of the residual sum it normalizes; under
FX that read is a graph node reading the sum, under torch.export a constant already. Like a
shape read (``group.shape_sources``), it needs no stored value when an input of the group
has the same dtype and every op on the way keeps it: the patched graph
(``validate/subgraph.py``) reads that input's dtype instead. Imports only the IR, so
``group.py`` (the bottom of ``analysis/``) can use it.
"""

from __future__ import annotations

from collections.abc import Collection

from ..ir.graph import FusionGraph, OpKind
from .types import DtypeRead


def dtype_source(g: FusionGraph, group: Collection[str], name: str) -> str | None:
    """The earliest value outside `group` whose dtype group value `name` has, reached from
    `name` through group ops of that dtype that pick no dtype of their own (a cast, a
    `mean(dtype=…)` or a generator decides it from a constant, not from its operand)."""
    meta = g[name].meta
    if meta is None:
        return None
    found: list[str] = []
    todo, seen = [name], set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        node = g[n]
        if node.meta is None or node.meta.dtype != meta.dtype:
            continue
        if n not in group:
            found.append(n)
            continue
        if node.param("dtype") is not None or node.kind is OpKind.GENERATOR:
            continue
        todo.extend(node.refs)
    return min(found, key=g.position, default=None)


def dtype_reads(g: FusionGraph, group: Collection[str]) -> tuple[DtypeRead, ...]:
    """Reads of a group value's dtype outside the group that an input of it answers."""
    out = []
    for n in sorted(group, key=g.position):
        for u in g.users[n]:
            if u not in group and g[u].dtype_of == n \
                    and (source := dtype_source(g, group, n)) is not None:
                out.append(DtypeRead(u, n, source))
    return tuple(out)
