"""Reads of a group value's dtype or device that the group's inputs answer.

Hugging Face's RMSNorm reads `hidden_states.dtype` of the residual sum it normalizes, its
rotary embedding `torch.arange(..., device=hidden_states.device)`; a mask is moved with
`mask.to(x.device)`. Under FX such a read is a graph node reading the value (marked
`dtype_of` / `device_of`), under torch.export a constant already. Like a shape read
(``group.shape_sources``), it needs no stored value when an input of the group answers it,
by the rule ``SOURCES`` holds for its attribute: the patched graph (``validate/subgraph.py``)
reads that input's attribute instead. A dtype only the group's own ops take (``baked``)
needs neither. Imports only the IR, so ``group.py`` (the bottom of
``analysis/``) can use it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from ..ir.graph import READ_BY, FusionGraph, Node, OpKind
from .types import MetadataRead


def _outside_sources(g: FusionGraph, group: Collection[str], name: str,
                     keeps: Callable[[Node], bool], picks: Callable[[Node], bool]) -> list[str]:
    """Values outside `group` that group value `name` is computed from through group ops,
    walking back only through nodes that `keeps` (the read attribute's value) and stopping
    at a group op that `picks` the attribute itself."""
    found: list[str] = []
    todo, seen = [name], set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        node = g[n]
        if not keeps(node):
            continue
        if n not in group:
            found.append(n)
        elif not picks(node):
            todo.extend(node.refs)
    return found


def dtype_source(g: FusionGraph, group: Collection[str], name: str) -> str | None:
    """The earliest value outside `group` whose dtype group value `name` has, reached from
    `name` through group ops of that dtype that pick no dtype of their own (a cast, a
    `mean(dtype=…)` or a generator decides it from a constant, not from its operand)."""
    meta = g[name].meta
    if meta is None:
        return None
    found = _outside_sources(
        g, group, name, keeps=lambda n: n.meta is not None and n.meta.dtype == meta.dtype,
        picks=lambda n: n.param("dtype") is not None or n.kind is OpKind.GENERATOR)
    return min(found, key=g.position, default=None)


def device_source(g: FusionGraph, group: Collection[str], name: str) -> str | None:
    """The earliest tensor outside `group` that group value `name` is computed from: all the
    tensors of one kernel live on one device, so every op on the way keeps it."""
    found = _outside_sources(g, group, name, keeps=lambda n: n.meta is not None,
                             picks=lambda n: False)
    # torch lets a 0-d CPU tensor join a CUDA op as a scalar: any other input answers first.
    return min(found, key=lambda n: (g[n].meta.shape == (), g.position(n)), default=None)


# One source rule per attribute of ``ir.graph.METADATA_ATTRS``.
SOURCES: dict[str, Callable[[FusionGraph, Collection[str], str], str | None]] = {
    "dtype": dtype_source, "device": device_source}


def metadata_source(g: FusionGraph, group: Collection[str], user: str, name: str
                    ) -> str | None:
    """The value outside `group` that answers `user`'s read of group value `name`'s dtype
    or device; None when `user` reads no such attribute of `name`, or no input answers."""
    attr, of = g[user].metadata_read
    return SOURCES[attr](g, group, name) if of == name else None


def baked(g: FusionGraph, group: Collection[str], user: str) -> bool:
    """`user` reads a dtype only group ops take (`(h > 0).to(h.dtype)` inside the group):
    the kernel compiles that dtype in, as every dtype of the group, so it needs no stored
    value, nor an input to answer it (the patched graph drops the read with the group's
    ops, ``validate/subgraph.py``). A device stays answered only by an input: an input-less
    kernel is launched on the device its generator was given."""
    takers = g[user].param(READ_BY, ())
    return g[user].metadata_read[0] == "dtype" and bool(takers) and all(
        u in group for u in takers)


def metadata_reads(g: FusionGraph, group: Collection[str]) -> tuple[MetadataRead, ...]:
    """Reads of a group value's dtype or device outside the group that an input answers."""
    out = []
    for n in sorted(group, key=g.position):
        for u in g.users[n]:
            if u not in group and (source := metadata_source(g, group, u, n)) is not None:
                out.append(MetadataRead(g[u].metadata_read[0], u, n, source))
    return tuple(out)
