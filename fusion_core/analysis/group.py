"""Facts about a candidate group that every analysis pass reads (the bottom module).

Reads a ``FusionGraph`` and a group (node names); answers what the group reads and
writes (``external_inputs``, ``escaping``), the shape one kernel iterates over, how many
ops in it move data, whether it is convex, and how a node set falls apart into
weakly connected components. Legality, traffic, multi-output and detection import
these; nothing here imports them, so ``analysis/`` has no import cycle.
"""

from __future__ import annotations

from collections.abc import Collection

import torch

from ..ir.graph import FusionGraph, OpKind, Ref
from ..ir.iteration import anchor
from ..ir.reductions import node_reduced_dims
from ..ir.registry import SPECS
from ..ir.run_scalars import run_scalar
from ..ir.spelling import place, said
from ..ir.upsample import factors_of
from ..ir.views import INDEX_STEPS
from .metadata_reads import baked, metadata_source
from .types import Failure, ShapeRead

MIN_OPS = 2  # a group needs two compute ops that move data to save anything


def members(group: Collection[str]) -> set[str] | frozenset[str]:
    """`group` as a set: membership tests on a tuple would make the checks quadratic."""
    return group if isinstance(group, (set, frozenset)) else set(group)


def escaping(g: FusionGraph, group: Collection[str]) -> list[str]:
    """Group values read outside the group (by another node or the graph output); a read of
    a value's shape that ``shape_sources`` answers from outside values is no read of it."""
    inside = members(group)
    return [n for n in ordered(g, inside) if outside_users(g, inside, n)]


def outside_users(g: FusionGraph, group: Collection[str], name: str) -> list[str]:
    """Nodes outside `group` that read group value `name`'s data (or a shape only the
    value itself can tell)."""
    group = members(group)
    return [u for u in g.users[name] if u not in group and not answered(g, group, u, name)
            and not unread_tuple(g, u)]


def unread_tuple(g: FusionGraph, name: str) -> bool:
    """`name` is a `chunk`/`split` call whose pieces all read its source directly
    (``ir/split_views.py``): the tuple itself is read by nothing."""
    node = g[name]
    return node.kind is OpKind.VIEW and node.meta is None and not g.users[name]


def answered(g: FusionGraph, group: Collection[str], user: str, name: str) -> bool:
    """`user` reads only the shape of group value `name`, and values outside the group tell
    that shape (``shape_sources``), or only its dtype or device, which an input has
    (``metadata_source``), or a dtype only group ops take (``baked``)."""
    if g[user].metadata_of == name:
        return metadata_source(g, group, user, name) is not None or baked(g, group, user)
    return (g[user].shape_of == name and name not in g[user].refs[1:]
            and shape_sources(g, group, name) is not None)


# Reductions whose result has their first operand's shape (a norm's weight broadcasts).
_SAME_SHAPE = frozenset({"softmax", "log_softmax", "layer_norm", "rms_norm"})


def shape_reads(g: FusionGraph, group: Collection[str]) -> tuple[ShapeRead, ...]:
    """Reads of a group value's shape outside the group that outside values answer."""
    group = members(group)
    out = []
    for n in ordered(g, group):
        for u in g.users[n]:
            if u not in group and g[u].shape_of == n and answered(g, group, u, n):
                sources, via = _shape_walk(g, group, n) or ((), ())
                out.append(ShapeRead(u, n, sources, via))
    return tuple(out)


def shape_sources(g: FusionGraph, group: Collection[str], name: str) -> tuple[str, ...] | None:
    """Values outside `group` whose shapes tell group value `name`'s at any input size:
    pointwise ops broadcast their operands, a softmax or norm keeps its input's shape, a
    view (`reshape`, `permute`) maps its input's shape by its own arguments, which are
    outside values or constants. `h.shape` then needs no `h`, so `h` need not be stored
    (``validate/subgraph.py`` points the read at these values). None when another
    reduction or an opaque op decides the shape, or the propagated shapes disagree with
    the rule."""
    walk = _shape_walk(g, group, name)
    return None if walk is None else walk[0]


def _shape_walk(g: FusionGraph, group: Collection[str], name: str
                ) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(``shape_sources``, the group nodes to replay on shapes alone): the latter only when
    a view is on the way, since broadcasting the sources tells the shape otherwise."""
    out: dict[str, None] = {}
    todo, seen, via, views = [name], set(), [], False
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        node = g[n]
        if n not in group:
            if node.meta is None:
                return None
            out.setdefault(n)
            continue
        via.append(n)
        if node.kind is OpKind.VIEW:  # its other operands are sizes, read outside the group
            views = True
            if not node.refs or any(r in group for r in node.refs[1:]):
                return None
            todo.append(node.refs[0])
            continue
        if node.kind.is_pointwise and node.kind is not OpKind.GENERATOR:
            refs = node.refs
        elif node.op in _SAME_SHAPE:
            refs = node.refs[:1]
        else:
            return None
        shapes = [g[r].meta.shape for r in refs if g[r].meta is not None]
        if (not refs or len(shapes) < len(refs) or node.meta is None
                or _broadcast(shapes) != tuple(node.meta.shape)):
            return None
        todo.extend(refs)
    return (tuple(sorted(out, key=g.position)),
            tuple(ordered(g, via)) if views else ())


def _broadcast(shapes: Collection[tuple[int, ...]]) -> tuple[int, ...] | None:
    rank = max(len(s) for s in shapes)
    out = [1] * rank
    for s in shapes:
        for k, d in enumerate(s, start=rank - len(s)):
            if d != 1 and out[k] not in (1, d):
                return None
            out[k] = d if d != 1 else out[k]
    return tuple(out)


def ordered(g: FusionGraph, group: Collection[str]) -> list[str]:
    return sorted(group, key=g.position)


def check_convexity(g: FusionGraph, group: Collection[str]) -> Failure | None:
    reach = _outside_reach(g, group, through_meta=True)
    name = next((n for n in ordered(g, group) if any(r in reach for r in g[n].refs)), None)
    if name is None:
        return None
    # Name a path that leaves through an op when there is one: the advice to read a shape
    # earlier holds only when no such path re-enters at this node.
    plain = _outside_reach(g, group, through_meta=False)
    r = next((r for r in g[name].refs if r in plain), None)
    if r is None:
        r = next(r for r in g[name].refs if r in reach)
    src, first = plain[r] if r in plain else reach[r]
    return Failure("convexity", (name,),
                   f"path {said(g, src)} → {_outside_path(g, first, r)} → {said(g, name)} "
                   "leaves the group and re-enters" + _through_a_property(g, src, first))


def _outside_path(g: FusionGraph, first: str, last: str) -> str:
    """The outside stretch of the path: the op it leaves through, then the value read back
    in, unless that value is only a view of the op's result (`a, _ = self.mha(...)` reads
    `self.mha`, not the `getitem` that unpacks it)."""
    if first == last or g[first].op == "meta":
        return said(g, last)
    if g[last].kind is OpKind.VIEW and first in g[last].refs:
        return said(g, first)
    gap = " → " if first in g[last].refs else " → … → "
    return f"{said(g, first)}{gap}{said(g, last)}"


def _outside_reach(g: FusionGraph, group: Collection[str], through_meta: bool
                   ) -> dict[str, tuple[str, str]]:
    """Outside nodes reachable from the group, each with the group node it came from and
    the first outside node on the way (a group node reading one re-enters); `through_meta`:
    also along paths that leave through a shape, size or dtype read (a shape read the
    group's inputs answer is no use: ``outside_users``)."""
    group = members(group)
    outside_reach: dict[str, tuple[str, str]] = {}
    for name in ordered(g, group):
        for u in outside_users(g, group, name):
            if u not in outside_reach and (through_meta or g[u].op != "meta"):
                outside_reach[u] = (name, u)
    for node in g.nodes:  # graph order is topological: one sweep propagates
        if node.name in outside_reach:
            for u in g.users[node.name]:
                if u not in group:
                    outside_reach.setdefault(u, outside_reach[node.name])
    return outside_reach


def _through_a_property(g: FusionGraph, src: str, first: str) -> str:
    """Why a path that leaves through `x.shape[-1]` (or `.size()`, `.dtype`) re-enters: the
    property is known when the model is traced, but the graph still reads the value."""
    node = g[first]
    if node.op != "meta":
        return ""
    at = f" at {place(g, node.source)} (`{node.source.code}`)" if node.source else ""
    return (f"; it leaves through a shape, size or dtype read of the result of "
            f"{said(g, src)}{at}{READ_IT_EARLIER}")


# Verified on a mask sliced to `h.shape[-1]` (tests/test_legality.py): with the size read
# from the input instead, the whole chain fuses.
READ_IT_EARLIER = (", which counts as a use of it: read that property from a value computed "
                   "before the group (such as an input's `.shape`) and the ops can fuse")


def iteration_shape(g: FusionGraph, group: Collection[str]) -> tuple[int, ...]:
    """The shape one kernel iterates over, in the user's own dims: its anchor's shape
    (``ir/iteration.py``: a reduction's input, else the largest result); () if it has none."""
    order = ordered(g, group)
    # A reduction's source needs no outputs: only a group without one pays for `escaping`.
    name = anchor(g, order, ()) or anchor(g, order, escaping(g, order))
    meta = g[name].meta if name is not None else None
    return () if meta is None else tuple(meta.shape)


def has_views(g: FusionGraph, group: Collection[str]) -> bool:
    """A view or a concatenation inside: only lowering's index maps tell whether its values
    line up (a cat's operands are pieces of its result, smaller than it)."""
    return any(g[name].kind in (OpKind.VIEW, OpKind.CONCAT) for name in group)


def reduced_shape(g: FusionGraph, name: str) -> tuple[int, ...] | None:
    """The shape reduction `name` reduces (its input's): reductions over the same rows share
    it, and may share one kernel."""
    src = g[name].inputs[0] if g[name].inputs else None
    meta = g[src.name].meta if isinstance(src, Ref) else None
    return None if meta is None else tuple(meta.shape)


def numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def value_bytes(g: FusionGraph, name: str) -> int:
    meta = g[name].meta
    return meta.nbytes if meta is not None else 0


def _same_dtype_cast(g: FusionGraph, name: str) -> bool:
    """`x.float()` / `x.to(x.dtype)` on a value already of that dtype returns `x` itself."""
    node = g[name]
    if node.op != "to" or not node.refs or node.meta is None:
        return False
    src = g[node.refs[0]].meta
    return src is not None and src.dtype == node.meta.dtype


# Reductions whose eager kernel reads a contiguous copy of a non-contiguous input.
_COPY_STRIDED_INPUT = frozenset({"layer_norm", "rms_norm", "softmax", "log_softmax"})


# Reshapes eager runs as a copy where the source's strides allow no view.
_MAY_COPY = frozenset({"reshape", "flatten", "reshape_as"})


def _reshape_copies(g: FusionGraph, name: str) -> bool:
    """Reshape `name` of a value whose strides no view of its shape expresses (a permuted
    value's dims merged): eager's `reshape` copies it."""
    node = g[name]
    src = g[node.refs[0]].meta if node.refs else None
    if src is None:
        return False
    try:
        torch.empty_strided(src.shape, src.stride, device="meta").view(node.meta.shape)
    except RuntimeError:
        return True
    return False


def eager_copies(g: FusionGraph, name: str) -> bool:
    """View `name` is not contiguous and feeds a reduction that eager runs on a contiguous
    copy (`layer_norm` after ConvNeXt's permute), is the user's own `.contiguous()` of a
    value that is not, or a reshape eager copies (``_reshape_copies``): each copy is a pass
    a kernel saves."""
    node = g[name]
    if node.kind is not OpKind.VIEW or node.meta is None:
        return False
    if factors_of(tuple(node.param(INDEX_STEPS) or ())):
        return True  # an upsample: eager writes the repeated elements out (``ir/upsample.py``)
    if node.op == "contiguous":
        src = g[node.refs[0]].meta if node.refs else None
        return src is not None and not src.is_contiguous
    if node.op in _MAY_COPY:
        return _reshape_copies(g, name)
    return not node.meta.is_contiguous and any(
        g[u].op in _COPY_STRIDED_INPUT and g[u].refs[:1] == (name,) for u in g.users[name])


def moves_data(g: FusionGraph, name: str) -> bool:
    """False for ops eager runs as an alias (dropout in eval, a same-dtype cast, a view
    other than one eager copies)."""
    if g[name].kind is OpKind.VIEW:
        return eager_copies(g, name)
    spec = SPECS.get(g[name].op.rstrip("_"))
    return not ((spec is not None and not spec.moves_data) or _same_dtype_cast(g, name))


def n_working_ops(g: FusionGraph, group: Collection[str]) -> int:
    """Compute ops that move data: a group needs two of them to save anything. An in-place
    op counts: it would fuse if it were out of place, so its rejection gets reported."""
    return sum((g[n].kind.is_compute or g[n].kind is OpKind.INPLACE or eager_copies(g, n))
               and moves_data(g, n) for n in group)


def external_inputs(g: FusionGraph, group: Collection[str]) -> tuple[str, ...]:
    """Values the group reads from outside, in order of first use; Python numbers of sizes
    alone (``ir/run_scalars.py``) last, as the generated launcher takes them after its
    tensors."""
    seen: dict[str, None] = {}
    group = members(group)
    for name in sorted(group, key=g.position):
        for r in g[name].refs:
            if r not in group:
                seen.setdefault(r)
    return tuple(sorted(seen, key=lambda r: run_scalar(g, r) is not None))


def sibling_reductions(g: FusionGraph, nodes: Collection[str]) -> list[tuple[str, ...]]:
    """Reductions in `nodes` reading one value over the same dims, two or more per value:
    GPT-NeoX's parallel residual normalizes the same hidden states twice (`ln1(x)`,
    `ln2(x)`). One kernel reads the row once for all of them, as Inductor's does, so they
    count as connected even when the value they read is computed outside `nodes`."""
    by_row: dict[tuple[str, tuple[int, ...]], list[str]] = {}
    for n in sorted(nodes, key=g.position):
        node = g[n]
        src = node.inputs[0] if node.kind is OpKind.REDUCTION and node.inputs else None
        meta = g[src.name].meta if isinstance(src, Ref) else None
        dims = node_reduced_dims(node, len(meta.shape)) if meta is not None else None
        if dims is not None:
            by_row.setdefault((src.name, dims), []).append(n)
    return [tuple(v) for v in by_row.values() if len(v) > 1]


def components(g: FusionGraph, nodes: Collection[str], siblings: bool = False
               ) -> list[tuple[str, ...]]:
    """Weakly connected components of the subgraph induced by `nodes`, in graph order;
    with `siblings`, sibling reductions of one value (``sibling_reductions``) are
    connected too (one kernel may compute them)."""
    nodes = set(nodes)
    parent = {n: n for n in nodes}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for n in nodes:
        for r in g[n].refs:
            if r in nodes:
                parent[find(r)] = find(n)
    for row in sibling_reductions(g, nodes) if siblings else ():
        for n in row[1:]:
            parent[find(n)] = find(row[0])
    groups: dict[str, list[str]] = {}
    for n in sorted(nodes, key=g.position):
        groups.setdefault(find(n), []).append(n)
    return sorted((tuple(v) for v in groups.values()), key=lambda c: g.position(c[0]))


