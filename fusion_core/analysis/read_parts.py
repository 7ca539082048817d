"""Which part of a value a group reads: a kernel loads only the elements its slices reach.

Reads a ``FusionGraph`` and a group; returns, for a value the group reads from memory, the
bytes a kernel loads of it. `relu(x[..., :d])` loads half of `x`; a slice's recomputed
producer (``slice_recompute.py``) loads its operands at the slice's part only, and both
halves together load all of it. The part needed of each value spreads back from what the
group writes (all of it) through pointwise ops (an operand broadcast along a dim is read
whole there) and plain slices (``Narrow`` steps shift it); anything else needs its operands
whole. A part is a set of intervals along one dim; parts along two dims count as the whole
(an upper bound, as the rest of the traffic model).
"""

from __future__ import annotations

from collections.abc import Collection

from ..ir.graph import FusionGraph, OpKind
from ..ir.views import INDEX_STEPS, Narrow
from .group import members, ordered, outside_users

# None: the whole value; else (dim counted from the end, its size, intervals [start, end)).
Part = tuple[int, int, frozenset[tuple[int, int]]] | None


def _union(a: Part, b: Part) -> Part:
    if a is None or b is None or a[:2] != b[:2]:
        return None
    return a[0], a[1], a[2] | b[2]


def _covered(part: tuple[int, int, frozenset[tuple[int, int]]]) -> int:
    """Elements along the part's dim that its intervals cover (overlaps once)."""
    total, end = 0, 0
    for lo, hi in sorted(part[2]):
        lo = max(lo, end)
        if hi > lo:
            total, end = total + hi - lo, hi
    return total


def _rank(g: FusionGraph, name: str) -> int:
    meta = g[name].meta
    return len(meta.shape) if meta is not None else 0


def _through_view(g: FusionGraph, view: str, part: Part) -> Part:
    """The part of the view's source that `part` of the view reads; None unless the view is
    plain slices."""
    node = g[view]
    steps = node.param(INDEX_STEPS) if node.kind is OpKind.VIEW else None
    if not steps or not all(isinstance(s, Narrow) for s in steps):
        return None
    rank = _rank(g, node.refs[0])
    for s in reversed(steps):
        dim = s.dim - rank if s.dim >= 0 else s.dim
        if part is None:
            part = (dim, s.size, frozenset({(s.start, s.start + s.length)}))
        elif part[0] == dim:
            part = (dim, s.size, frozenset((lo + s.start, hi + s.start) for lo, hi in part[2]))
        else:
            return None
    return part


def _operand_part(g: FusionGraph, user: str, operand: str, part: Part) -> Part:
    """What `user`, needed at `part`, reads of `operand`."""
    node = g[user]
    if node.kind is OpKind.VIEW:
        return _through_view(g, user, part) if node.refs[:1] == (operand,) else None
    if part is None or not node.kind.is_pointwise:
        return None
    meta = g[operand].meta
    if meta is None or -part[0] > len(meta.shape) or meta.shape[part[0]] != part[1]:
        return None  # broadcast along the part's dim: every element is read
    return part


def read_bytes(g: FusionGraph, group: Collection[str], names: Collection[str]) -> list[int]:
    """Bytes one kernel loads of each of `names`, values `group` reads from memory."""
    group = members(group)
    need: dict[str, Part] = {}
    for n in reversed(ordered(g, group)):
        need[n] = None if outside_users(g, group, n) else _needed(g, group, n, need)
    out = []
    for name in names:
        meta = g[name].meta
        part = _needed(g, group, name, need)
        out.append(0 if meta is None else meta.nbytes if part is None or not part[1]
                   else meta.nbytes * _covered(part) // part[1])
    return out


def _needed(g: FusionGraph, group: Collection[str], name: str, need: dict[str, Part]) -> Part:
    """The union of what `name`'s readers in `group` read of it."""
    parts = [_operand_part(g, u, name, need[u]) for u in g.users[name] if u in group]
    part = parts[0] if parts else None
    for p in parts[1:]:
        part = _union(part, p)
    return part
