"""Where a recomputing cluster's copy of a value is spelled: the statement that computed the
original, when the source still holds it for its other user (`r = x + h` … `return r + h2`).

Reads the mapped range's statements and the graph's copies (``analysis/recompute.py``); hands
``unify.py`` the original's expression (`x + h`) to match against the copy, so the fused
call of the range reads that expression's operands (`x`, `h`) instead of `r`. The original
line stays: the value still exists for its other user. ``same_value`` says when a slice's
copy and its original, both in the kernel, are the one variable the range assigns.
"""

from __future__ import annotations

import ast
from collections.abc import Collection

from ..ir.graph import FusionGraph, OpKind
from ..ir.spelling import said
from ..ir.views import INDEX_STEPS
from .pysource import SourceFile, Statement, is_plain_access, loaded_names


class CopyMismatch(Exception):
    """The copy's original cannot be re-read at the range's top; `str()` says why."""


def _stored(st: ast.stmt) -> dict[str, int]:
    """Names `st` (or any block inside it) assigns, with the line of each."""
    return {n.id: n.lineno for n in ast.walk(st)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def copied_expr(src: SourceFile, stmts: list[Statement], graph: FusionGraph, name: ast.Name,
                copy: str) -> ast.expr:
    """The expression that computed `copy`'s original, for `name` (which holds it) at the
    range `stmts`: a statement earlier in the same block assigning `name` alone, whose
    operands nothing reassigns before the range, so the fused call may read them there."""
    original = graph[graph[copy].copy_of]
    what = said(graph, original.name)
    loc, top = original.source, stmts[0]
    earlier = [i for i, st in enumerate(top.body[:top.index])
               if loc is not None and loc.file == src.path
               and st.lineno <= loc.line <= (st.end_lineno or st.lineno)]
    first = top.body[earlier[0]] if earlier else None
    if first is None or not (isinstance(first, ast.Assign) and len(first.targets) == 1
                             and isinstance(first.targets[0], ast.Name)
                             and first.targets[0].id == name.id):
        raise CopyMismatch(
            f"`{name.id}` at line {name.lineno} holds {what}, which this kernel recomputes "
            f"from its operands, but no earlier line of the same block assigns it as "
            f"`{name.id} = <expression>`: write it so, above line {top.start}, for the edit "
            "to read that expression's operands")
    if not is_plain_access(first.value):  # re-read as the fused call's argument, it would run again
        raise CopyMismatch(
            f"this kernel recomputes {what} from `{src.segment(first.value)}` (line "
            f"{first.lineno}), whose calls the edit would run a second time at line "
            f"{top.start}; to apply it, assign each call's result to a name of its own first")
    for st in top.body[earlier[0]:top.index]:
        for n, line in _stored(st).items():
            if n in loaded_names(first.value):
                raise CopyMismatch(
                    f"this kernel recomputes {what} (`{src.segment(first.value)}`) at line "
                    f"{top.start}, but `{n}` is reassigned at line {line} in between; to "
                    f"apply it, give what line {line} computes a new name, so `{n}` still "
                    f"holds its value at line {top.start}")
    return first.value


def same_value(graph: FusionGraph | None, cluster: Collection[str], a: str, b: str) -> bool:
    """`a` and `b` are one value the kernel computes twice, a slice's copy of its producer
    and the original (``analysis/slice_recompute.py``), a cat's repeated operand and its
    source (``ir/cat_repeats.py``: an alias, of a copy where the kernel recomputes it), or the
    `chunk` calls whose pieces it computes: the source computes it once, on the range's
    lines."""
    g = graph
    if g is None or a not in g or b not in g or original_value(g, a) != original_value(g, b):
        return False
    return all(n in cluster or (g[n].kind is OpKind.VIEW and g[n].meta is None) for n in (a, b))


def original_value(g: FusionGraph, name: str) -> str:
    """The value `name` holds: through views that move nothing (an alias), to the original
    of a copy."""
    while g[name].kind is OpKind.VIEW and g[name].param(INDEX_STEPS) == () and g[name].refs:
        name = g[name].refs[0]
    return g[name].copy_of or name
