"""Legality checks for a candidate fusion group, run in order; the first failure wins.

Each check reads the graph and a group (node names) and returns ``None`` or a
``Failure`` naming the culprit nodes -- the ones the detector's greedy pruning
drops before it retries -- and the reason in words. ``CHECKS`` are the checks of the graph
alone; the pipeline (``fusion_core/pipeline.py``) appends the code generator's own
(a dry run of lowering), the way Inductor's scheduler asks its backend whether it can
fuse, so nothing here imports the code generator.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from ..ir.graph import FusionGraph, Node, OpKind, Ref
from ..ir.reductions import axes_said, dims_said, node_reduced_dims
from ..ir.registry import SPECS
from ..ir.run_scalars import run_scalar
from ..ir.spelling import place, return_loc, said, said_all
from .devices import check_device
from .group import (
    READ_IT_EARLIER,
    check_convexity,
    escaping,
    has_views,
    iteration_shape,
    numel,
    ordered,
    outside_users,
    reduced_shape,
    sibling_reductions,
)
from .multi_output import store_verdict
from .mutation import check_mutation
from .types import Failure

Check = Callable[[FusionGraph, Collection[str]], "Failure | None"]


def check_fan_out(g: FusionGraph, group: Collection[str]) -> Failure | None:
    failure = _single_output_failure(g, group)
    if failure is None:
        return None
    # One kernel may store several results when that moves fewer bytes than the split.
    verdict = store_verdict(g, group, failure.culprits)
    return None if verdict.pays else replace(failure, reason=f"{failure.reason}; {verdict}")


def _single_output_failure(g: FusionGraph, group: Collection[str]) -> Failure | None:
    out = escaping(g, group)
    # Fan-out is a value that escapes *and* feeds the group: the diamond
    # `x * 2.0 + x` keeps `x` in registers, its users are all inside.
    inner = [n for n in out if any(u in group for u in g.users[n])]
    if inner:
        n = inner[0]
        outside = outside_users(g, group, n)
        hint = READ_IT_EARLIER if any(g[u].op == "meta" for u in outside) else ""
        return Failure("fan-out", tuple(inner), f"{said(g, n)} {_also(g, outside)}{hint}")
    if len(out) > 1:
        forks = _forks(g, group, out)
        if forks:
            return Failure("fan-out", forks,
                           f"the group has {len(out)} results ({said_all(g, out)}); one kernel "
                           f"writes one, and {said_all(g, forks[-1:])} feeds more than one of "
                           "them")
        # No node inside forks: sibling reductions of one outside value; the split computes
        # each alone.
        siblings = sibling_reductions(g, group)
        later = tuple(n for s in siblings for n in s[1:])
        shared = g[siblings[0][0]].refs[0] if siblings else ""
        return Failure("fan-out", later,
                       f"the group has {len(out)} results ({said_all(g, out)}); one kernel "
                       f"writes one, and {said_all(g, [s for ss in siblings for s in ss])} "
                       f"reduce the same {said(g, shared) if shared else '`?`'} side by side")
    return None


def _also(g: FusionGraph, outside: Collection[str]) -> str:
    """What else reads a group value: ops outside the group, the model's `return`, or both
    (the graph's `output` node is no op the user wrote)."""
    ops = [u for u in outside if g[u].kind is not OpKind.OUTPUT]
    ret = next((return_loc(g, g[u].refs) for u in outside if g[u].kind is OpKind.OUTPUT),
               None)
    returned = "one of the model's results" + (f", returned at {place(g, ret)}" if ret else "")
    if len(ops) == len(outside):
        return f"is also used by {said_all(g, ops)} outside the group"
    if not ops:
        return f"is also {returned}"
    return f"is also used by {said_all(g, ops)} outside the group, and is {returned}"


_MANY = object()


def _forks(g: FusionGraph, group: Collection[str], out: list[str]) -> tuple[str, ...]:
    """Group nodes from which more than one result is reachable inside the group.

    Dropping them leaves pieces with one result each (relu feeding {mul, add} and
    a layer_norm loses relu, not the mul/add tail). One reverse sweep: a node's
    reach is one result name, or _MANY.
    """
    results = set(out)
    reach: dict[str, object] = {}
    for name in reversed(ordered(g, group)):
        seen: set[object] = {name} if name in results else set()
        for u in g.users[name]:
            if u in group and reach.get(u) is not None:
                seen.add(reach[u])
        reach[name] = (_MANY if len(seen) > 1 or _MANY in seen
                       else next(iter(seen)) if seen else None)
    return tuple(n for n in ordered(g, group) if reach[n] is _MANY)


def _fits(shape: tuple[int, ...], domain: tuple[int, ...],
          per_row: Collection[tuple[int, ...]] = ()) -> bool:
    # Broadcasts to exactly `domain` (plain Python: torch.broadcast_shapes costs ~0.1 ms).
    tail = tuple(domain[len(domain) - len(shape):]) if len(shape) <= len(domain) else None
    if tail is not None and all(s in (d, 1) for s, d in zip(shape, tail, strict=True)):
        return True
    # A per-row value after a reduction without keepdim.
    return tuple(shape) == tuple(domain[:-1]) or tuple(shape) in per_row


def _row_shapes(g: FusionGraph, group: Collection[str], domain: tuple[int, ...]
                ) -> set[tuple[int, ...]]:
    """`domain` without the dims a reduction of the group reduces: its per-row results'
    shape without keepdim."""
    out = set()
    for name in group:
        node = g[name]
        if node.kind is OpKind.REDUCTION:
            dims = node_reduced_dims(node, len(domain))
            if dims:
                out.add(tuple(d for k, d in enumerate(domain) if k not in dims))
    return out


def _from_shapes(g: FusionGraph, name: str) -> bool:
    """Python value `name` is computed from shape reads and constants alone (`x.shape[-1] **
    -0.5`), not from a tensor's values (`x.max().item()`): `__init__` can compute it."""
    todo, seen = [name], set()
    while todo:
        n = todo.pop()
        if n in seen or g[n].shape_of:
            continue
        seen.add(n)
        if g[n].op != "meta":
            return False
        todo.extend(g[n].refs)
    return True


def python_value_read(g: FusionGraph, user: str, value: str) -> str:
    """Why `user` cannot be fused while it reads Python value `value`, at their lines."""
    source = g[value].source
    at = f" at {place(g, source)} (`{source.code}`)" if source else f" ({said(g, value)})"
    fix = ("compute it once in `__init__`" if _from_shapes(g, value) else
           "keep it a tensor (it depends on a tensor's values: drop `.item()`)")
    return (f"{said(g, user)} reads a Python value computed at run time{at}, not a "
            f"tensor: a kernel takes tensors and constants, so {fix} and the ops can fuse")


def check_shapes(g: FusionGraph, group: Collection[str]) -> Failure | None:
    """Every value broadcasts to the group's iteration shape. A group with views is the
    lowering check's: its index maps (``codegen/indexing.py``) decide, and name the node to
    drop when there are none."""
    if has_views(g, group):
        return None
    domain = iteration_shape(g, group)
    per_row = _row_shapes(g, group, domain)
    for name in ordered(g, group):
        node = g[name]
        for r in node.refs:
            meta = g[r].meta
            if meta is None and node.kind.is_pointwise and run_scalar(g, r) is not None:
                continue  # a number of sizes alone: the kernel takes it as a scalar
            if meta is None:
                return Failure("shapes", (name,), python_value_read(g, name, r))
            if not _fits(meta.shape, domain, per_row):
                return Failure("shapes", (name,),
                               f"{said(g, name)} reads {said(g, r)} of shape "
                               f"{tuple(meta.shape)}, which does not broadcast to the "
                               f"group's {tuple(domain)}")
        if node.meta is not None and not _fits(node.meta.shape, domain, per_row):
            return Failure("shapes", (name,),
                           f"{said(g, name)} produces shape {tuple(node.meta.shape)}, which "
                           f"does not broadcast to the group's {tuple(domain)}")
    return _cross_row_broadcast(g, group, domain)


def _cross_row_broadcast(g: FusionGraph, group: Collection[str],
                         domain: tuple[int, ...]) -> Failure | None:
    """A reduction result without keepdim read next to full-size values.

    Broadcasting right-aligns it with the *last* axis, so element (i, j) pairs with row
    j's result (legal in torch only when the shape is square, e.g. `x.sum(-1) + x` on
    8x8); a row-per-program kernel holds only its own row's result.
    """
    per_row: set[str] = set()  # reduced without keepdim, and values computed at that rank
    for name in ordered(g, group):
        node = g[name]
        meta = node.meta
        if meta is None or len(meta.shape) >= len(domain):
            continue
        if node.kind is OpKind.REDUCTION or any(r in per_row for r in node.refs):
            per_row.add(name)
    for name in ordered(g, group):
        node = g[name]
        if name in per_row or node.kind is OpKind.REDUCTION:
            continue  # a second reduction is the reduction check's to report
        for r in node.refs:
            meta = g[r].meta
            if r in per_row and meta is not None and numel(meta.shape) != 1:
                return Failure("shapes", (name,),
                               f"{said(g, name)} broadcasts {said(g, r)} of shape "
                               f"{tuple(meta.shape)}, reduced without keepdim, against the "
                               f"group's {tuple(domain)}: it lines up with the last axis, not "
                               "the rows (keepdim=True keeps the reduced axis)")
    return None


def check_aliasing(g: FusionGraph, group: Collection[str]) -> Failure | None:
    """In-place ops, and results that alias an input. A view inside the group is a change of
    index map (``codegen/indexing.py``); outside in-place ops that mutate what the group reads
    are ``check_mutation``'s."""
    bad = [n for n in ordered(g, group) if g[n].kind is OpKind.INPLACE]
    if bad:
        return Failure("aliasing", tuple(bad),
                       f"{said(g, bad[0])} mutates its input in place; the graph records "
                       "dataflow, not memory order, so the kernel could read stale data")
    for name in escaping(g, group):
        root = name
        while g[root].kind is OpKind.VIEW and g[root].refs and g[root].refs[0] in group:
            root = g[root].refs[0]
        if g[root].kind is OpKind.VIEW:  # a view of an input escapes: eager's shares memory
            chain = [n for n in ordered(g, group) if _views_of(g, n, root)]
            return Failure("aliasing", tuple(chain),
                           f"{said(g, name)} is a view of the group's input "
                           f"{said(g, g[root].refs[0])} read outside the group; eager's "
                           "result shares the input's memory, a kernel's would be a copy")
    return None


def _views_of(g: FusionGraph, name: str, root: str) -> bool:
    """`name` is `root` or a view reached from it through views only."""
    while name != root:
        node = g[name]
        if node.kind is not OpKind.VIEW or not node.refs:
            return False
        name = node.refs[0]
    return True


def check_reduction(g: FusionGraph, group: Collection[str]) -> Failure | None:
    """Every reduction names dims its rule can reduce, and several reduce the same dims of
    the same shape (one kernel walks one set of rows)."""
    reds = [n for n in ordered(g, group) if g[n].kind is OpKind.REDUCTION]
    other = [n for n in reds[1:] if reduced_shape(g, n) != reduced_shape(g, reds[0])]
    if other:
        return Failure("reduction", tuple(other),
                       f"{len(reds)} reductions ({said_all(g, reds)}) over different rows; a "
                       "row-per-program kernel reduces one set of rows")
    found: dict[str, tuple[int, ...]] = {}
    for name in reds:
        node = g[name]
        src = g[node.inputs[0].name].meta if isinstance(node.inputs[0], Ref) else None
        dims = node_reduced_dims(node, len(src.shape)) if src is not None else None
        if not dims:
            return Failure("reduction", (name,),
                           f"{said(g, name)} names no dims the kernel can reduce "
                           f"({axes_said(dict(node.params))})")
        found[name] = dims
    differ = [n for n in reds[1:] if found[n] != found[reds[0]]]
    if differ:
        # Each reduction with its own dims, the differing ones grouped by the dims they take.
        by_dims: dict[tuple[int, ...], list[str]] = {}
        for n in differ:
            by_dims.setdefault(found[n], []).append(n)
        theirs = "; ".join(f"{said_all(g, names)} {_reduces(g, names)} {dims_said(dims)}"
                           for dims, names in by_dims.items())
        return Failure("reduction", tuple(differ),
                       f"{theirs} where {said(g, reds[0])} reduces "
                       f"{dims_said(found[reds[0]])}; one kernel reduces one set of dims")
    return None


def _reduces(g: FusionGraph, names: Sequence[str]) -> str:
    """The verb agreeing with the values `said_all` names (one phrase: `reduces`)."""
    return "reduces" if len(dict.fromkeys(said(g, n) for n in names)) == 1 else "reduce"


def has_lowering(node: Node) -> bool:
    spec = SPECS.get(node.op)
    if spec is None or spec.lower is None:
        return False
    if not callable(spec.lower):  # a reduction rule
        return True
    args = tuple(str(a) if isinstance(a, Ref) else repr(a) for a in node.inputs)
    if node.kind is OpKind.GENERATOR:
        args = ("index",)  # a generator's one operand is the element's own index
    return spec.lower(args, dict(node.params)) is not None


def check_lowering(g: FusionGraph, group: Collection[str]) -> Failure | None:
    """Every op has a lowering rule for its arguments (the registry's). Whether the code
    generator plans the group is the pipeline's dry run (module docstring)."""
    bad = [n for n in ordered(g, group) if g[n].kind.is_compute and not has_lowering(g[n])]
    if bad:
        return Failure("lowering", tuple(bad),
                       f"no Triton lowering rule for {said_all(g, bad)} with these arguments")
    return None


CHECKS: tuple[tuple[str, Check], ...] = (
    ("device", check_device),  # first: no other answer matters for ops on the CPU
    ("fan-out", check_fan_out),
    ("convexity", check_convexity),
    ("shapes", check_shapes),
    ("aliasing", check_aliasing),
    ("aliasing", check_mutation),
    ("reduction", check_reduction),
    ("lowering", check_lowering),
)


def first_failure(g: FusionGraph, group: Collection[str],
                  checks: Sequence[tuple[str, Check]] = CHECKS) -> Failure | None:
    for _, check in checks:
        failure = check(g, group)
        if failure is not None:
            return failure
    return None
