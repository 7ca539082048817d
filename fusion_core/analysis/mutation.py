"""Legality: no in-place op outside a group may mutate what the group reads mid-way.

Reads the graph (in-place nodes left by ``ir/functionalize.py``, or calls the registry lacks
that ``ir/inplace_writes.py`` marks, as item assignments export; views, positions)
and a group; returns ``None`` or a ``Failure`` under the ``aliasing`` check. One
kernel reads its inputs at one moment, so an outside in-place op that runs between
the group's first and last node and writes a value the group computes or reads
(directly or through a view) would be seen by the eager model but not by the
kernel: FX records ``y.relu_(); z * y`` as ``z * y`` reading the old ``y``.
Culprits are the group's nodes on the smaller side of the mutation (the later side on a
tie); the other side may still fuse.
"""

from __future__ import annotations

from collections.abc import Collection

from ..ir.graph import FusionGraph, OpKind
from ..ir.spelling import said
from .group import members
from .types import Failure

_ALIASING = (OpKind.VIEW, OpKind.INPLACE)
# Layers kept as one call that return a view of their input.
_VIEW_LAYERS = frozenset({"Flatten", "Unflatten", "Identity"})


def _is_alias(node) -> bool:
    return node.kind in _ALIASING or (node.kind is OpKind.OPAQUE and node.op in _VIEW_LAYERS)
# Per graph (by identity): positions of its in-place nodes, and each one's alias set.
_CACHE: dict[int, tuple[FusionGraph, tuple[tuple[int, str, frozenset[str]], ...]]] = {}


def _aliases(g: FusionGraph, name: str) -> frozenset[str]:
    """`name` and every value sharing its memory through views or in-place results."""
    seen, todo = {name}, [name]
    while todo:
        n = todo.pop()
        node = g[n]
        linked = list(node.refs[:1]) if _is_alias(node) else []
        linked += [u for u in g.users[n] if _is_alias(g[u]) and g[u].refs[:1] == (n,)]
        for m in linked:
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return frozenset(seen)


def _mutations(g: FusionGraph) -> tuple[tuple[int, str, frozenset[str]], ...]:
    hit = _CACHE.get(id(g))
    if hit is None or hit[0] is not g:
        if len(_CACHE) > 64:
            _CACHE.clear()
        found = tuple((i, n.name, _aliases(g, n.refs[0])) for i, n in enumerate(g.nodes)
                      if n.kind is OpKind.INPLACE and n.refs)
        hit = _CACHE[id(g)] = (g, found)
    return hit[1]


def check_mutation(g: FusionGraph, group: Collection[str]) -> Failure | None:
    mutations = _mutations(g)
    if not mutations:
        return None
    inside = members(group)
    positions = sorted(g.position(n) for n in inside)
    lo, hi = positions[0], positions[-1]
    touched = set(inside).union(*(g[n].refs for n in inside))
    for pos, name, written in mutations:
        if not lo < pos < hi or name in inside or not written & touched:
            continue
        ordered = sorted(inside, key=g.position)
        after = tuple(n for n in ordered if g.position(n) > pos)
        before = tuple(n for n in ordered if g.position(n) < pos)
        # Drop the smaller side (the later one on a tie); the other may still fuse.
        culprits = before if len(before) < len(after) else after
        m = g[name]
        value = g[min(written & touched, key=g.position)]
        via = f" through {said(g, m.refs[0])}" if value.name != m.refs[0] else ""
        return Failure("aliasing", culprits,
                       f"{said(g, name)} mutates {said(g, value.name)}{via} in place between "
                       f"the group's ops (before {said(g, after[0])}); one kernel would "
                       "read it before the mutation, the model after it")
    return None
