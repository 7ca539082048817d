"""A sum one kernel normalizes without storing it and another recomputes, on one statement:
both kernels in one edit, the first one's call inside the second one's argument.

`x = x + y` then `return x + self.mlp(self.norm(x))`: the analysis fuses the sum into the
norm's kernel (A) without storing it, and the residual add's kernel (B) recomputes it from
`x` and `y`. Neither edit stands alone (A's would drop `x`, which line 2 reads; B's reads
`x` and `y` after line 1 reassigned `x`), but the two lines together become
`return cluster2(x, y, self.mlp(cluster1(x, y, ...)))`: every argument is read where line 1
stood, before it assigned anything, and each kernel runs once.

Reads an ``Analysis``, the mappings made so far and the two clusters' ``Span``s; writes the
two matches (``Found``) or nothing. ``group_edit.py`` turns them into one edit.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import re
from collections.abc import Iterator, Mapping
from dataclasses import replace

from ..analysis.types import Cluster
from ..names import kernel_name
from ..pipeline import Analysis
from .match import Found, unify
from .parts import parts
from .pysource import local_names
from .source_mapping import SourceMapping
from .span import PointerOnly, Span


def recomputer(analysis: Analysis, c: Cluster, out: Mapping[int, SourceMapping]
               ) -> tuple[frozenset[str], Cluster] | None:
    """The values of `c` another cluster recomputes and that one cluster, when there is
    exactly one (its own edit, if any, is replaced by the joint one); None otherwise."""
    if c.recomputes or any(analysis.graph[n].copy_of for n in c.nodes):
        return None
    values = frozenset(v for o in analysis.clusters for v in o.recomputes) & set(c.nodes)
    others = [o for o in analysis.clusters if values & set(o.recomputes)]
    if not values or len(others) != 1 or out[others[0].index].shared_with:
        return None  # an edit serving other calls of its lines stays as it is
    return values, others[0]


def _fresh(span: Span, n: int) -> list[str]:
    used = {x.id for x in ast.walk(span.scope.node) if isinstance(x, ast.Name)} | set(
        local_names(span.scope.node))
    return [x for x in ("fused", *(f"fused{i}" for i in range(1, len(used) + n + 2)))
            if x not in used][:n]


def _named(f: Found, c: Cluster, names: Mapping[str, str]) -> Found:
    """`f` with the arguments of the inputs in `names` read from those names instead."""
    args = tuple(names.get(i, t) for i, t in zip(c.inputs, f.args, strict=True))
    return replace(f, args=args)


def _a_matches(analysis: Analysis, a: Cluster, joint: Span
               ) -> Iterator[tuple[tuple[ast.expr, ...], Found]]:
    """`a` matched to parts of the last statement: one part, or one per result (two norms of
    one sum: `self.attn(self.norm1(h)) + self.mlp(self.norm2(h))`), in source order."""
    candidates = parts(joint)
    if len(a.outputs) == 1:
        for part in candidates:
            with contextlib.suppress(PointerOnly):
                yield (part,), unify(analysis, a, joint, part)
        return
    if len(a.outputs) > 3:
        return
    for ps in itertools.permutations(candidates, len(a.outputs)):
        if any(x is not y and any(n is y for n in ast.walk(x)) for x in ps for y in ps):
            continue  # one inside another
        with contextlib.suppress(PointerOnly):
            yield ps, unify(analysis, a, joint, at=tuple(zip(ps, a.outputs, strict=True)))


def match_joint(analysis: Analysis, span: Span, b_span: Span, a: Cluster, b: Cluster
                ) -> tuple[Span, Found, Found, tuple[str, ...]] | None:
    """`a` (its range `span`, ending in the statement `b` alone covers, `b_span`) matched to
    parts of that statement and `b` to the whole of it, those parts read as `a`'s results;
    the joint range, both matches and the lines above `b`'s call (`fused = self.attn(h)`: an
    argument both calls read, computed once; `fused1, fused2 = cluster0(...)`: `a`'s results
    when there are several), or None."""
    last = span.stmts[-1]
    if span.guard is not None or b_span.guard is not None or len(span.stmts) < 2 or (
            (b_span.start, b_span.end) != (last.start, last.end)):
        return None
    joint = replace(span, calls=(*span.calls, *b_span.calls))
    for ps, fa in _a_matches(analysis, a, joint):
        # `h = x + self.attn(...)` read by both calls: assigned once, to a name of its own.
        shared = sorted(fa.inlined & set(b.inputs), key=a.inputs.index)
        fresh = _fresh(joint, len(shared) + (len(ps) if len(ps) > 1 else 0))
        names = dict(zip(shared, fresh, strict=False))
        texts = dict(zip(a.inputs, fa.args, strict=True))
        fa = _named(fa, a, names)
        call = f"{kernel_name(a.index)}({', '.join(fa.args)})"
        above = [f"{names[i]} = {texts[i]}" for i in shared]
        results = fresh[len(shared):] if len(ps) > 1 else [call]
        if len(ps) > 1:
            above.append(f"{', '.join(results)} = {call}")
        hidden = {id(p): (o, p, r) for p, o, r in zip(ps, a.outputs, results, strict=True)}
        try:
            fb = unify(analysis, b, joint, hidden=hidden)
        except PointerOnly:
            continue
        if any(dict(zip(b.inputs, fb.args, strict=True))[i] != texts[i] for i in shared) or (
                not all(re.search(rf"(?<![\w.]){re.escape(r)}(?!\w)", ", ".join(fb.args))
                        for r in results)):
            continue  # `b` must read every result of `a` through its arguments
        fb = _named(fb, b, names)
        if (fa.inlined & fb.inlined) - set(names):  # read by both calls: it would run twice
            continue
        return joint, fa, fb, tuple(above)
    return None
