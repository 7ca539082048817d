"""A sum kept under its own name and recomputed by another kernel: both edits together.

`r = x + h` then `h2 = s.c3(F.silu(s.n3(r)))` then `return r + h2`: the analysis fuses the
sum into the norm's kernel without storing it, and the add → add kernel recomputes it from
`x` and `h` (its edit reads them at its own line: ``recomputed.py``). Alone, an edit of the
first two lines would drop `r`, which line 3 reads; written with the add → add edit, which
no longer reads it, it drops nothing. ``mapping.py`` maps such a cluster once every kernel
recomputing its value maps exactly, and its mapping ``needs`` their edits: ``--apply``
writes it only with them.

Reads an ``Analysis``, the mappings made so far and a ``Span``; writes nothing.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Mapping, Sequence

from ..analysis.types import Cluster
from ..pipeline import Analysis
from .pysource import enclosing_loop, loaded_names, read_later, stored_names
from .source_mapping import SourceMapping
from .span import Span


def partners(analysis: Analysis, c: Cluster, out: Mapping[int, SourceMapping]
             ) -> tuple[frozenset[str], list[SourceMapping]] | None:
    """`c`'s values other kernels recompute and those kernels' exact edits, when every such
    kernel has one; None when `c` stores all it computes or one of them has none."""
    if c.recomputes or any(analysis.graph[n].copy_of for n in c.nodes):
        return None
    values = frozenset(v for o in analysis.clusters for v in o.recomputes) & set(c.nodes)
    if not values:
        return None
    edits = [out[o.index] for o in analysis.clusters if values & set(o.recomputes)]
    if not edits or not all(m.exact and m.replacement for m in edits):
        return None
    return values, edits


def read_after(span: Span, names: set[str], edits: Sequence[SourceMapping]
               ) -> tuple[str, int] | None:
    """``read_later``, the statements another edit replaces read as its replacement: the
    first read of `names` after the run that may see the run's value, with its line."""
    last = span.stmts[-1]
    if enclosing_loop(span.scope, span.stmts[0]) is not None or (
            last.body is not span.scope.node.body):
        return read_later(span.scope, span.stmts, names)  # straight-line code alone
    live = set(names)
    for st in last.body[last.index + 1:]:
        end = st.end_lineno or st.lineno
        edit = next((e for e in edits if e.start <= st.lineno and end <= (e.end or 0)), None)
        written = ast.parse(textwrap.dedent(edit.replacement)).body if edit else [st]
        hit = sorted(set().union(*(loaded_names(w) for w in written)) & live)
        if hit:
            return hit[0], st.lineno
        for w in written:
            if isinstance(w, (ast.Assign, ast.AnnAssign)):
                live -= stored_names(w)
        if not live:
            return None
    return None
