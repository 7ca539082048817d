"""The parts of a source range a rewrite keeps: un-fused code around or inside the call.

Reads an ``Analysis`` and a mapped statement run (``span.Span``); writes
nothing. Answers which sub-expressions of the run's last statement may hold a
cluster, which graph nodes the kept code computes (so the "nothing else on these
lines" check lets them be), and the last statement with one part replaced.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from ..analysis.types import Cluster
from ..pipeline import Analysis
from .augmented import is_augmented
from .callsite import site_line
from .mismatch import Mismatch, whole_value
from .pyexpr import values_call
from .pysource import SourceFile, loaded_names, local_names, stored_names
from .span import Span


def feeding(analysis: Analysis, inlined: frozenset[str],
            answered: frozenset[str] = frozenset()) -> set[str]:
    """The inlined inputs and every node they are computed from, not walking past the reads
    in `answered`."""
    fx_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
    seen: set[str] = set()
    todo = [n for n in inlined if n in fx_nodes]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            if name not in answered:
                todo.extend(i.name for i in fx_nodes[name].all_input_nodes)
    return seen


def free_inputs(analysis: Analysis, group: list[Cluster]) -> frozenset[str]:
    """The group's inputs each computed from nothing its own cluster computes
    (`self.emb(ids)`): code the rewrite may keep as a fused call's argument, so never by
    itself why there is none. Another call's cluster on these lines may feed it (a later
    block's `q @ k` reads the stream an earlier block's kernel wrote): the argument is
    computed in its own call. A read of a group value's shape, dtype or device that the
    group's inputs answer counts as nothing (`arange(h.shape[-1], device=h.device)`): read
    from an input, it can stay."""
    members = {n for c in group for n in c.nodes}
    answered = frozenset(r.read for c in group for r in (*c.shape_reads, *c.metadata_reads)
                         if r.of in c.nodes)
    return frozenset(i for c in group for i in c.inputs if i not in members
                     and set(c.nodes).isdisjoint(feeding(analysis, frozenset({i}), answered)))


def parts(span: Span) -> list[ast.expr]:
    """Calls and operators inside the last statement's value, outermost first; the values
    of a max (`x.max(1).values`, `torch.max(x, 1)[0]`) whole, before the call."""
    try:
        value = whole_value(span.stmts[-1].node)
    except Mismatch:
        return []
    out, todo = [], [value]
    while todo:
        e = todo.pop(0)
        if e is not value and (isinstance(e, (ast.Call, ast.BinOp, ast.UnaryOp))
                               or values_call(e) is not None):
            out.append(e)
        todo.extend(n for n in ast.iter_child_nodes(e) if isinstance(n, ast.expr))
    return out


def around(analysis: Analysis, span: Span, group: list[Cluster]) -> set[str]:
    """Nodes on the last statement's lines that consume the clusters' results: the code
    kept around the fused call."""
    fx_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
    last = span.stmts[-1]
    seen: set[str] = set()
    todo = [o for c in group for o in c.outputs]
    while todo:
        for user in fx_nodes[todo.pop()].users:
            if user.op == "output" or user.name in seen:
                continue
            # At its own line, or at the line that called the module or helper it ran in.
            line = site_line(analysis.graph[user.name].source, span.src, span.scope)
            if line is not None and last.start <= line <= last.end:
                seen.add(user.name)
                todo.append(user.name)
    return seen


def replace_parts(span: Span, texts: Sequence[tuple[ast.expr, str]]) -> str:
    """The last statement, indented as the range's first line, with each part (disjoint)
    replaced by its text."""
    src, last = span.src, span.stmts[-1].node
    line = src.line_text(span.start)
    indent = line[: len(line) - len(line.lstrip())]
    if len(texts) == 1 and is_augmented(last, texts[0][0]):  # `result += input`, fused whole
        return f"{indent}{src.segment(last.target)} = {texts[0][1]}"  # type: ignore[attr-defined]

    def at(lineno: int, col: int) -> int:  # ast columns count UTF-8 bytes
        before = sum(len(t) for t in src.lines[: lineno - 1])
        return before + len(src.lines[lineno - 1].encode()[:col].decode())

    out, pos = [], at(last.lineno, last.col_offset)
    for part, text in sorted(texts, key=lambda t: (t[0].lineno, t[0].col_offset)):
        lo = at(part.lineno, part.col_offset)
        out += [src.text[pos:lo], text]
        pos = at(part.end_lineno, part.end_col_offset)
    out.append(src.text[pos:at(last.end_lineno, last.end_col_offset)])
    return indent + "".join(out)


def replace_part_results(span: Span, pieces: Sequence[tuple[ast.expr, str, tuple[str, ...]]]
                         ) -> str:
    """The last statement with each piece's part replaced by its fused call, or, for a
    cluster with several results, by a fresh name a line above assigns with the others:
    `x, fused = cluster2(...)` then `h = self.up(fused)`."""
    used = {n.id for n in ast.walk(span.scope.node) if isinstance(n, ast.Name)} | set(
        local_names(span.scope.node))
    fresh = (n for n in ("fused", *(f"fused{i}" for i in range(1, len(used) + len(pieces) + 2)))
             if n not in used)
    line = span.src.line_text(span.start)
    indent = line[:len(line) - len(line.lstrip())]
    above, texts = [], []
    for part, call, targets in pieces:
        if not targets:
            texts.append((part, call))
            continue
        name = next(fresh)
        above.append(f"{indent}{', '.join((*targets, name))} = {call}\n")
        texts.append((part, name))
    return "".join(above) + replace_parts(span, texts)


def nesting(segments: Sequence[str], args: Sequence[Sequence[str]]) -> dict[int, int]:
    """Piece k → the piece whose arguments hold k's part (its source text) in exactly one
    place; the nearest when several do: `cluster1(self.block[1][0](<cluster 0's part>))`
    holds cluster 0's part before cluster 2 does, whose argument holds cluster 1's."""
    if len(set(segments)) < len(segments):  # one text, two parts: no telling which
        return {}

    def count(seg: str, h: int) -> int:
        return sum(a.count(seg) for a in args[h])

    out = {}
    for k, seg in enumerate(segments):
        hs = [h for h in range(len(segments)) if h != k and count(seg, h) == 1]
        near = [h for h in hs if not any(g != h and count(segments[g], h) for g in hs)]
        if len(near) == 1:
            out[k] = near[0]
    return out


def fold_order(nest: dict[int, int]) -> list[int] | None:
    """The nested pieces, each after those it holds; None on a cycle."""
    order: list[int] = []
    pending = set(nest)
    while pending:
        ready = sorted(k for k in pending if not any(nest[j] == k for j in pending))
        if not ready:
            return None
        order += ready
        pending -= set(ready)
    return order


def nest_parts(src: SourceFile, pieces: Sequence[tuple[ast.expr, str, tuple[str, ...]]]
               ) -> list[tuple[ast.expr, str, tuple[str, ...]]]:
    """Pieces whose part lies in another piece's argument (`self.block[1][0](<part>)` with
    the block spelled layer by layer, or a line above, inlined there; ``match.unify_parts``
    checked it) written into that call, innermost first; the outermost pieces remain."""
    out = list(pieces)
    if len(out) < 2 or any(part is None for part, _, _ in out):  # a whole statement's call
        return out
    segments = [src.segment(part) for part, _, _ in out]
    nest = nesting(segments, [[call] for _, call, _ in out])
    for k in fold_order(nest) or ():
        outer, text, targets = out[nest[k]]
        out[nest[k]] = (outer, text.replace(segments[k], out[k][1], 1), targets)
    return [p for k, p in enumerate(out) if k not in nest]


def stale_around(span: Span, parts: Sequence[ast.expr], targets: set[str]) -> str | None:
    """Why the code kept around the parts would read another value: a name an earlier
    statement of the range assigns (the edit drops it; `targets`, the results' names, it
    assigns again), read outside the parts (`return (z2, z0.sum(-1))` after `z2 = ...`)."""
    assigned = {name: st.start for st in span.stmts[:-1] for name in stored_names(st.node)}
    last = span.stmts[-1].node
    read = sorted(loaded_names(last, skip=parts) & set(assigned) - targets)
    if not read:
        return None
    return (f"`{read[0]}` in line {span.stmts[-1].start} (`{span.src.segment(last)}`), kept "
            f"around the fused call, is assigned at line {assigned[read[0]]}, which the edit "
            "would drop")
