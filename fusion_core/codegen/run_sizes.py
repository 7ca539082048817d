"""Views sized at run time: do their sizes restate their index steps at any input size?

A generated launcher recomputes a view from its operand with the view's steps
(``ir/views.py``: a merge or split of dims, size-generic), never from the sizes the user's
code read (`b, t, c = x.shape; h.view(b, t, 4, c // 4)`, kept as ``ir/sizes.py``
expressions). The two agree at every input size when each size the user's code computes
equals, as a formula of the group inputs' dims, the size the steps give: the group's
shapes are propagated symbolically (one sympy symbol per input dim; pointwise ops
broadcast, reductions drop or keep their dims, views apply their steps), and the view's
sizes evaluated on them. One size may stay unproven (a `-1`, or the size a run-time split
leaves): both calls keep the element count, so it is forced. A view holding sizes of its
own (a split, a reshape's target) is checked where it stands, before a later broadcast could
unify the inputs' dims with them; one that only regroups its operand's dims (`o.transpose(1,
2).reshape(B, T, C)`) after the whole group, where the residual add with `x` ties `x`'s dims
to the merged ones (the launcher refuses inputs that do not broadcast so). Anything else
raises a ``LoweringError`` naming the line that computed the size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy

from ..ir.graph import FusionGraph, Node, OpKind
from ..ir.reductions import node_reduced_dims
from ..ir.sizes import SIZES, Infer, Size, evaluate, spelled, tensors
from ..ir.spelling import said
from ..ir.views import INDEX_STEPS, Merge, Permute, Squeeze, Unsqueeze, shape_after
from .layout import LoweringError

Shape = tuple[Any, ...]  # sympy expressions
_REGROUPING = (Permute, Merge, Squeeze, Unsqueeze)  # steps whose result sizes are the operand's


def _fixes_sizes(node: Node) -> bool:
    """Whether the view's steps hold a size of their own (a split's, a reshape's target),
    rather than only regrouping its operand's dims (`transpose(1, 2).reshape(B, T, C)`)."""
    steps = node.param(INDEX_STEPS)
    return steps is None or not all(isinstance(s, _REGROUPING) for s in steps)


class SymbolicShapes:
    """Symbolic shapes of a group's values, in terms of its inputs' dims."""

    def __init__(self, g: FusionGraph, nodes: Sequence[str], inputs: Sequence[str],
                 on_view: Callable[[str, SymbolicShapes], None] | None = None) -> None:
        self.g = g
        self.shapes: dict[str, Shape | None] = {}
        self.alias: dict[Any, Any] = {}  # a symbol broadcasting proved equal to another
        deferred: list[str] = []
        for name in inputs:
            meta = g[name].meta
            self.shapes[name] = None if meta is None else tuple(
                sympy.Symbol(f"{name}.shape[{k}]", integer=True, positive=True)
                for k in range(len(meta.shape)))
        for name in sorted(nodes, key=g.position):
            self.shapes[name] = self._of(g[name])
            if on_view is not None and g[name].kind is OpKind.VIEW and g[name].param(SIZES):
                if _fixes_sizes(g[name]):
                    # Checked now: a later broadcast against this view's result would unify
                    # the inputs' dims with the view's fixed sizes, "proving" them.
                    on_view(name, self)
                else:  # its result's dims are the inputs': a later broadcast proves them
                    deferred.append(name)
        for name in deferred:
            on_view(name, self)

    def shape(self, name: str) -> Shape | None:
        shape = self.shapes.get(name)
        return None if shape is None else tuple(self.resolve(d) for d in shape)

    def resolve(self, e: Any) -> Any:
        return sympy.sympify(e).xreplace(self.alias) if self.alias else sympy.sympify(e)

    def _of(self, node: Node) -> Shape | None:
        if node.meta is None or any(self.shapes.get(r) is None for r in node.refs):
            return None
        if node.kind is OpKind.VIEW:
            steps, src = node.param(INDEX_STEPS), self.shape(node.refs[0])
            return None if steps is None or src is None else shape_after(steps, src)
        if node.kind is OpKind.REDUCTION:
            return self._reduced(node, node.inputs[0].name)
        if node.kind.is_pointwise and node.kind is not OpKind.GENERATOR and node.refs:
            return self._broadcast(node.refs, len(node.meta.shape))
        return None

    def _reduced(self, node: Node, src: str) -> Shape | None:
        shape, real = self.shape(src), self.g[src].meta
        if shape is None or real is None:
            return None
        out, dims = tuple(node.meta.shape), node_reduced_dims(node, len(shape)) or ()
        if len(out) == len(shape):  # kept: a softmax's full size, or keepdim's 1
            return tuple(1 if k in dims and out[k] != real.shape[k] else d
                         for k, d in enumerate(shape))
        if len(out) == len(shape) - len(dims):
            return tuple(d for k, d in enumerate(shape) if k not in dims)
        return None

    def _broadcast(self, refs: Sequence[str], rank: int) -> Shape:
        result = []
        for k in range(rank):
            at = [(self.g[r].meta.shape[k - rank + len(s)], s[k - rank + len(s)])
                  for r in dict.fromkeys(refs)
                  if len(s := self.shape(r)) >= rank - k]
            sized = [d for real, d in at if real != 1]
            if not sized:  # all 1 when analysed: any of them may grow, the largest wins
                result.append(sympy.Max(*(d for _, d in at)) if at else sympy.Integer(1))
                continue
            for d in sized[1:]:  # broadcasting needs them equal at any size
                self._unify(sized[0], d)
            result.append(self.resolve(sized[0]))
        return tuple(result)

    def _unify(self, a: Any, b: Any) -> None:
        a, b = self.resolve(a), self.resolve(b)
        if a == b:
            return
        if isinstance(b, sympy.Symbol):
            self.alias[b] = a
        elif isinstance(a, sympy.Symbol):
            self.alias[a] = b
        self.alias = {k: sympy.sympify(v).xreplace(self.alias) for k, v in self.alias.items()}


def check_run_time_sizes(g: FusionGraph, nodes: Sequence[str], inputs: Sequence[str]) -> None:
    """LoweringError for the first view of the group whose run-time sizes do not follow from
    its steps at any input size (module docstring)."""
    if not any(g[n].kind is OpKind.VIEW and g[n].param(SIZES) is not None for n in nodes):
        return

    def check(name: str, shapes: SymbolicShapes) -> None:
        why = _unproven(g, shapes, g[name])
        if why is not None:
            raise LoweringError(f"{said(g, name)} {why}", (name,))
    SymbolicShapes(g, nodes, inputs, on_view=check)


def _unproven(g: FusionGraph, shapes: SymbolicShapes, node: Node) -> str | None:
    """Why the view's sizes may differ from its steps' at another input size; None if not."""
    sizes: tuple[Size, ...] = node.param(SIZES)
    src = shapes.shape(node.refs[0])
    if src is None:
        return _said_at(g, sizes, "reshapes a value whose shape the kernel does not follow "
                        "symbolically to sizes computed at run time")
    for value in tensors(sizes):
        if shapes.shape(value) is None:
            return _said_at(g, sizes, f"reads the shape of {said(g, value)}, which the kernel "
                            "neither takes nor computes, for sizes computed at run time")
    implied = shape_after(node.param(INDEX_STEPS), src)
    free = []
    for j, (s, want) in enumerate(zip(sizes, implied, strict=True)):
        got = None if isinstance(s, Infer) else evaluate(s, lambda v, k: shapes.shape(v)[k])
        if got is None or sympy.simplify(shapes.resolve(got) - shapes.resolve(want)) != 0:
            free.append(j)
    if len(free) <= 1:  # the element count forces the one left
        return None
    j = next(j for j in free if not isinstance(sizes[j], Infer))
    return _said_at(g, sizes, f"sizes dim {j} as `{spelled(sizes[j])}`, which need not be "
                    f"`{implied[j]}` (the size its reshape gives) at another input size")


def _said_at(g: FusionGraph, sizes: Sequence[Size], what: str) -> str:
    """`what`, with the user's line that read the shapes the sizes come from."""
    reads = (u for v in tensors(sizes) for u in g.users.get(v, ())
             if g[u].op == "meta" and g[u].shape_of == v and g[u].source is not None)
    made = next((g[u].source for u in reads), None)
    return what + (f"; its sizes are read at line {made.line} (`{made.code}`)" if made else "")
