"""Where a cluster's several results go in the source: the names earlier lines assign them
to, or the elements of the `return` that hands them all back.

Reads a cluster, its mapped range (``span.Span``) and the node each statement's value is
(``unify.Match.values``); writes the names, or the (element, result) pairs the unifier
matches; raises ``PointerOnly`` naming the line that takes a result nowhere.
"""

from __future__ import annotations

import ast

from ..analysis.types import Cluster
from ..ir.spelling import said
from ..pipeline import Analysis
from .pysource import loaded_names, stored_names
from .span import PointerOnly, Span


def assigned_to(analysis: Analysis, c: Cluster, span: Span,
                values: tuple[str | None, ...], within: ast.expr | None = None
                ) -> tuple[str, ...]:
    """For a cluster with several results: the name each earlier result is assigned to.
    With `within` (the part of the last statement the fused call replaces) the edit keeps
    that statement, which may assign the name again after its kept code reads it
    (`x = x + self.mlp(self.ln_2(x))` after `x = x + attn`: the edit assigns `x` and the
    part's result on a line above it). A name nothing reads before it is assigned again
    would be a result no code sees (an in-place write to the caller's tensor that export
    made a value of its own)."""
    names = []
    same = {m: v for call in span.calls for m, v in call.passes}
    for out in c.outputs[:-1]:
        js = [j for j, v in enumerate(values) if v is not None and v in (out, same.get(out))]
        if not js:
            raise PointerOnly(f"the cluster also writes {said(analysis.graph, out)}, which no line "
                              "of the range assigns to a name")
        name = span.stmts[js[-1]].node.targets[0].id
        last = span.stmts[-1]
        kept_reads = within is not None and (  # `x += ...` reads `x` too
            name in loaded_names(last.node, skip=[within])
            or isinstance(last.node, ast.AugAssign) and isinstance(last.node.target, ast.Name)
            and last.node.target.id == name)
        later = [s for s in span.stmts[js[-1] + 1:] if name in stored_names(s.node)
                 and not (kept_reads and s is last)]
        if later:
            raise PointerOnly(f"`{name}` holds the cluster's result "
                              f"{said(analysis.graph, out)} but line {later[0].start} "
                              "reassigns it")
        names.append(name)
    return tuple(names)


def results(analysis: Analysis, c: Cluster) -> str:
    """`amax` (line 13), then `sum` (line 14): the kernel's results, as the user wrote them."""
    return ", then ".join(said(analysis.graph, o) for o in c.outputs)


def returned_tuple(c: Cluster, span: Span) -> tuple[tuple[ast.expr, str], ...]:
    """`return a, b` of as many values as the cluster writes: each element with the result
    it must be, in order (the kernel returns its results as a tuple in that order)."""
    last = span.stmts[-1].node
    if not (len(c.outputs) > 1 and isinstance(last, ast.Return)
            and isinstance(last.value, ast.Tuple) and len(last.value.elts) == len(c.outputs)
            and not any(isinstance(e, ast.Starred) for e in last.value.elts)):
        return ()
    return tuple(zip(last.value.elts, c.outputs, strict=True))
