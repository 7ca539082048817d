"""Recompute per slice: a computed value read in slices gets a copy of its producer per slice.

Reads a ``FusionGraph`` and the clusters a first detection found; returns ``SliceRecompute``
entries (slice, the cone to copy for it). `h = x * w + b; a, g = h[..., :d], h[..., d:]`
reads `h` through two index maps: one kernel holds a computed value over one map
(``codegen/indexing.py``), so `h`'s cluster stops at the slices and `h` makes a round trip
through memory. Inductor instead inlines the cheap pointwise producer into each consumer,
loading `x` at the slice's coordinates. Here each slice reads its own copy of the producer's
cone (``ir/duplicate.copy_cone``): the copies live over the slice's map, the original over
the whole value's, and detection runs again. A copy no kernel takes is undone
(``pipeline._unused_copies``).

The cone is the value's pointwise producers that feed nothing else (at most ``_MAX_CONE``
ops); a slice is a view whose steps are all ``Narrow`` (a subscript with plain bounds, or a
piece of `chunk`/`split`), or the alias standing for a cat's repeated operand
(``ir/cat_repeats.py``: `cat((f, f))` reads the whole value at a second piece). It is
chosen when that moves no more bytes: per slice the cone's operands are read at the slice's
part instead of the slice itself, and the value is no longer written where nothing else
reads it from memory; where it is still written (a model output,
a reader in another kernel) only a strict saving counts, as Inductor then reads the buffer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..ir.graph import FusionGraph, OpKind
from ..ir.views import INDEX_STEPS, Narrow
from .recompute import _writes, _written_between
from .types import Cluster

_MAX_CONE = 8  # ops copied per slice: a longer producer is no longer cheap to repeat
# Ops computed from their operands alone: a generator (`arange`) is made from the index.
_COPIED = frozenset({OpKind.POINTWISE_UNARY, OpKind.POINTWISE_BINARY})


@dataclass(frozen=True)
class SliceRecompute:
    slice: str  # the view that reads its own copy
    cone: tuple[str, ...]  # the producer's nodes to copy, in graph order; the last is the value


def narrows(g: FusionGraph, name: str) -> tuple[Narrow, ...] | None:
    """The steps of view `name` when they are all plain slices, () for a cat's repeated
    operand (``ir/cat_repeats.py``: the whole value at another piece); else None."""
    node = g[name]
    steps = node.param(INDEX_STEPS) if node.kind is OpKind.VIEW else None
    if steps is not None and not steps and _repeated(g, name):
        return ()
    if not steps or not all(isinstance(s, Narrow) for s in steps):
        return None
    return tuple(steps)


def _repeated(g: FusionGraph, alias: str) -> bool:
    """`alias` (a view with no steps) stands for a cat's repeated operand: every reader is a
    cat that reads its source too."""
    src = g[alias].refs[0] if g[alias].refs else None
    users = g.users[alias]
    return bool(users) and all(g[u].kind is OpKind.CONCAT and src in g[u].refs for u in users)


def cone_of(g: FusionGraph, value: str) -> tuple[str, ...] | None:
    """`value` and the pointwise producers that feed only it, in graph order; None when
    `value` is no pointwise op of operands or the cone passes ``_MAX_CONE``."""
    node = g[value]
    if node.kind not in _COPIED or node.meta is None or node.copy_of:
        return None
    cone, todo = {value}, [value]
    while todo:
        for r in g[todo.pop()].refs:
            feeder = g[r]
            if (r not in cone and feeder.kind in _COPIED and feeder.meta is not None
                    and not feeder.copy_of and set(g.users[r]) <= cone):
                cone.add(r)
                todo.append(r)
    if len(cone) > _MAX_CONE:
        return None
    return tuple(sorted(cone, key=g.position))


def part_bytes(g: FusionGraph, name: str, steps: Sequence[Narrow], out_rank: int) -> int:
    """Bytes of value `name` read at the part `steps` select of a result of rank `out_rank`
    it broadcasts to: a dim it has size 1 (or lacks) is read whole."""
    meta = g[name].meta
    if meta is None:
        return 0
    size = meta.nbytes
    shape = (1,) * (out_rank - len(meta.shape)) + tuple(meta.shape)
    for s in steps:
        if shape[s.dim] == s.size and s.size:
            size = size * s.length // s.size
    return size


def slice_recompute_plan(g: FusionGraph, clusters: Sequence[Cluster]
                         ) -> tuple[SliceRecompute, ...]:
    owner = {n: c.index for c in clusters for n in c.nodes}
    writes = _writes(g)
    plan: list[SliceRecompute] = []
    for node in g.nodes:
        if not (node.kind in _COPIED and any(narrows(g, u) is not None
                                             for u in g.users[node.name])):
            continue
        cone = cone_of(g, node.name)
        if cone is None:
            continue
        value, home = node.name, owner.get(node.name)
        # A slice already in the value's kernel reads it over that kernel's map.
        slices = [u for u in g.users[value] if narrows(g, u) is not None
                  and (home is None or owner.get(u) != home)
                  and not _written_between(writes, g.position(cone[0]), g.position(u))]
        # The `chunk` call itself is a tuple no kernel reads: its pieces are the readers;
        # `h.shape[-1] // 2` for the bounds (or `h.dtype`, `h.device`) reads no data.
        others = [u for u in g.users[value] if u not in slices
                  and not (g[u].kind is OpKind.VIEW and g[u].meta is None)
                  and g[u].shape_of != value and g[u].metadata_of != value]
        if not slices or (not others and len(slices) == 1):
            continue  # one slice alone reads the value over its own map already
        # Inductor keeps the buffer where something else reads it from memory. A value
        # computed alone may join its other readers' kernel once the slices have copies.
        kernels = {owner.get(u) for u in others}
        stored = any(g[u].kind is OpKind.OUTPUT for u in others) or (
            len(kernels) > 1 or None in kernels if home is None else kernels - {home})
        leaves = list(dict.fromkeys(r for n in cone for r in g[n].refs if r not in cone))
        rank = len(g[value].meta.shape)  # type: ignore[union-attr]  (cone_of checked it)
        recompute = sum(part_bytes(g, r, narrows(g, s) or (), rank)
                        for s in slices for r in leaves)
        store = sum(g[s].meta.nbytes for s in slices if g[s].meta is not None)
        if not stored:  # the value's write goes, and its own pass when only slices read it
            store += g[value].meta.nbytes  # type: ignore[union-attr]
            store += 0 if others else sum(part_bytes(g, r, (), rank) for r in leaves)
        cheaper = recompute < store if stored else recompute <= store
        if cheaper:  # with no other reader the original serves the first slice
            plan += [SliceRecompute(s, cone) for s in (slices if others else slices[1:])]
    return tuple(plan)
