"""Map each cluster back to the lines of the user's source it replaces.

Reads an ``Analysis`` (cluster nodes, their ``SourceLoc``s, the FX graph) and
the user's files; writes one ``SourceMapping`` per cluster. A cluster is
``exact`` when its nodes sit in one function (or in calls from it that the cluster runs
whole: those stand at the call's line), the statements covering them (``span.py``
finds them) compute the cluster and nothing else (``match.py`` checks; other calls of
the same lines aside: those are the clusters it shares the lines with), every input has
a source expression at the top of the range, and no name the range assigns is read
afterwards. Otherwise it is a ``pointer`` (file and line range, no diff) with
the reason in words. A cluster that does not map as it is may map without a callee's
trailing dropout (``peeled.py``); a sum one kernel leaves unstored and another recomputes, on
one statement, maps as one edit of both (``joint.py``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from ..analysis.types import Cluster
from ..ir.spelling import said
from ..names import kernel_name
from ..pipeline import Analysis
from . import sequential
from .alone import check_alone
from .comments import keep_comments
from .consistent import consistent, size_ones
from .frames import Frames, frames_of
from .guard import guarded_text
from .joint import match_joint, recomputer
from .match import Found, Piece, self_name_of, self_path_of, unify, unify_part, unify_parts
from .paired import partners, read_after
from .parts import around, free_inputs, nest_parts, replace_part_results, stale_around
from .peeled import peeled
from .pysource import SourceFile, read_later, stored_names
from .served import Part, parts_on
from .source_mapping import EXACT, POINTER, ServedPart, SourceMapping
from .span import PointerOnly, Span, as_stored, locate


def _disk_bytes(path: str) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None


def _check_dead(span: Span, targets: tuple[str, ...],
                after: tuple[SourceMapping, ...] = ()) -> None:
    """Names the range assigns on the way (not the results' names) must not be read later
    (`after`: edits written with this one, whose lines read as their replacements)."""
    kept = stored_names(span.stmts[-1].node) | set(targets)
    assigned = set().union(*(stored_names(s.node) for s in span.stmts[:-1])) - kept
    hit = None if not assigned else (
        read_after(span, assigned, after) if after else read_later(span.scope, span.stmts,
                                                                    assigned))
    if hit is not None:
        raise PointerOnly(f"`{hit[0]}`, assigned inside the range, is read again at line {hit[1]}")


def _replacement(span: Span, call: str, targets: tuple[str, ...]) -> str:
    src, first, last = span.src, span.stmts[0], span.stmts[-1].node
    line = src.line_text(first.start)
    indent = line[:len(line) - len(line.lstrip())]
    if isinstance(last, ast.Return):
        return f"{indent}return {call}"
    if isinstance(last, ast.AnnAssign):
        return f"{indent}{src.segment(last.target)}: {src.segment(last.annotation)} = {call}"
    # `result += input`: the kernel computes the sum, which the edit binds (unify.py checks
    # that no one else held the tensor the add wrote into).
    target = last.target if isinstance(last, ast.AugAssign) else last.targets[0]
    names = ", ".join((*targets, src.segment(target)))
    return f"{indent}{names} = {call}"


def _match(analysis: Analysis, span: Span, cs: list[Cluster], served: dict[int, Part],
           frames: Frames, unserved: Mapping[int, str] | None = None
           ) -> tuple[list[Piece], set[str]]:
    """The clusters' matches to the lines, grouped by the part of the statement each call
    replaces, and the code kept around the fused calls; raises ``PointerOnly``."""
    try:
        return [(cs, [unify(analysis, c, span) for c in cs])], set()
    except PointerOnly:
        # Under an `if`, a part only where the lines are spelled layer by layer or joined
        # (`otherwise` set): the inner kernels' calls go inside the outer one's arguments.
        if span.guard is not None and span.guard.otherwise is None:
            raise
        why: list[PointerOnly] = []
        part = unify_part(analysis, span, cs, why)
        split = unify_parts(analysis, span, cs) if part is None else None
        if part is None and split is None:
            if why:  # a part stops at a container call: that, not the code around it
                raise why[0] from None
            if unserved is not None:  # None: a part's trial, whose refusal names no stray
                # Its reason names the stray code first; code computing an input from
                # outside the cluster could stay as an argument, so it is not the cause.
                check_alone(analysis, span, cs, frames, free_inputs(analysis, cs),
                            unserved=unserved)
            raise
    pieces = [(cs, part)] if part is not None else split
    if any(all(id(c) in served for c in p_cs) for p_cs, _ in pieces):
        raise PointerOnly("another call's ops on these lines form a part of their own")
    return pieces, around(analysis, span, cs)


def _map_group(analysis: Analysis, span: Span, group: list[Cluster], frames: Frames,
               parts: tuple[Part, ...] = (), after: tuple[SourceMapping, ...] = ()
               ) -> list[SourceMapping]:
    """The group's mappings; `parts` (served.py): other calls' ops on the lines, each kept
    when it matches the lines as the group's clusters do, which the edit computes but does
    not apply. A refused part's reason goes into the reason its ops give for the group."""
    base = dict(file=span.src.path, start=span.start, end=span.end,
                function=span.scope.qualname, digest=span.src.digest)
    others = {c.index: tuple(o.index for o in group if o is not c) for c in group}
    served = {id(p.cluster): p for p in parts}  # by identity: parts share holders' indices
    unserved: dict[int, str] = {}
    try:
        every = list(group)
        pieces, kept_around = _match(analysis, span, every, served, frames, unserved)
        for p in parts:
            try:
                trial = _match(analysis, span, [*every, p.cluster], served, frames)
                for cs, found in trial[0]:
                    consistent(analysis, cs, found, served)
            except PointerOnly as e:
                unserved.setdefault(p.cluster.index, e.reason)
                continue
            every.append(p.cluster)
            pieces, kept_around = trial
        kept = frozenset().union(*(f.inlined for _, found in pieces for f in found))
        check_alone(analysis, span, every, frames, kept, kept_around, unserved=unserved)
        for cs, found in pieces:
            consistent(analysis, cs, found, served)
        _check_dead(span, tuple(t for _, found in pieces for t in found[0].targets), after)
        withins = [f[0].within for _, f in pieces if f[0].within is not None]
        stale = withins and stale_around(span, withins, {t for _, f in pieces
                                                         for t in f[0].targets})
        if stale:
            raise PointerOnly(stale)
    except PointerOnly as p:
        if p.file is not None:  # the cause lies at another line (the caller's): point there
            base = base | dict(file=p.file, start=p.start, end=p.end)
        return [SourceMapping(c.index, POINTER, reason=p.reason, shared_with=others[c.index],
                              **base) for c in group]
    calls = [(kernel_name(cs[0].index), found[0]) for cs, found in pieces]
    texts = nest_parts(span.src, [(f.within, f"{name}({', '.join(f.args)})", f.targets)
                                  for name, f in calls])
    within, call, targets = texts[0]
    text = _replacement(span, call, targets) if within is None else (
        replace_part_results(span, texts))
    text = text if span.guard is None else guarded_text(span.src, span.guard, span.start, text)
    original = "".join(span.src.lines[span.start - 1:span.end])
    names = tuple(name for name, _ in calls) if len(calls) > 1 else ()
    serves = tuple(ServedPart(c, name, served[id(c)].site)
                   for (cs, _), (name, _) in zip(pieces, calls, strict=True)
                   for c in cs if id(c) in served)
    imports = tuple(dict.fromkeys(i for _, f in calls for i in f.imports))
    return [SourceMapping(c.index, EXACT, replacement=text, call=name, args=f.args,
                          shared_with=others[c.index], original=original, baked=f.baked,
                          calls=names, serves=serves, imports=imports,
                          needs=tuple(sorted({e.cluster_index for e in after})), **base)
            for (cs, _), (name, f) in zip(pieces, calls, strict=True)
            for c in cs if id(c) not in served]


def map_clusters(analysis: Analysis) -> tuple[SourceMapping, ...]:
    """One mapping per cluster, in cluster order.

    The model file's lines are those it was imported from (``Analysis.source``), not
    what the disk holds now: a file saved again during the run maps as imported, and
    ``--apply`` then refuses to overwrite the newer file.
    """
    files: dict[str, SourceFile] = {}
    if analysis.source is not None:
        files[analysis.source.path] = SourceFile(analysis.source.path, analysis.source.data)
    changed = frozenset(p for p, f in files.items() if _disk_bytes(p) != f.data)
    frames = frames_of(analysis, files)  # every cluster's call sites, read once
    spans: dict[int, Span] = {}
    out: dict[int, SourceMapping] = {}
    borrowed: dict[int, Cluster] = {}  # clusters that may join a group `span.as_stored`
    as_peeled: dict[int, Cluster] = {}  # clusters mapped without leading aliases (peeled.py)
    for c in analysis.clusters:
        try:
            spans[c.index] = locate(analysis, c, frames, changed)
        except PointerOnly as p:
            digest = files[p.file].digest if p.file in files else None
            out[c.index] = SourceMapping(c.index, POINTER, p.file, p.start, p.end, p.reason,
                                         digest=digest)
            bare = peeled(analysis, c)  # a callee's trailing dropout: the call's result
            if bare is not None:
                try:
                    spans[c.index] = locate(analysis, bare, frames, changed)
                    as_peeled[c.index] = bare
                    continue
                except PointerOnly as q:  # what still stands in the way, dropout aside
                    digest = files[q.file].digest if q.file in files else None
                    out[c.index] = SourceMapping(c.index, POINTER, q.file, q.start, q.end,
                                                 q.reason, digest=digest)
            stored = as_stored(analysis, c)
            if stored is not None:
                try:
                    spans[c.index] = locate(analysis, stored, frames, changed, stored=True)
                    borrowed[c.index] = stored
                except PointerOnly:
                    pass
    groups: dict[tuple[str, int, int], list[Cluster]] = {}
    for c in analysis.clusters:
        if c.index in spans and c.index not in borrowed:
            groups.setdefault(spans[c.index].key, []).append(as_peeled.get(c.index, c))
    for i, stored in borrowed.items():  # never a group's first: its kernel is not the rep's
        if spans[i].key in groups:
            groups[spans[i].key].append(stored)
    for group in groups.values():
        group.sort(key=lambda c: (c.index in borrowed, size_ones(analysis, c)))  # stable
        parts = parts_on(analysis, spans[group[0].index], group, frames)
        own = [c for c in group if c.index not in borrowed]
        mapped = _map_spans(analysis, spans, group, parts, frames)
        if any(c.index in borrowed for c in group) and not mapped[0].exact:
            # Refused with the borrowed ones: map as before, they keep their own reason.
            mapped = _map_spans(analysis, spans, own, parts, frames)
        for m in mapped:
            out[m.cluster_index] = m
    _join_nested(analysis, spans, [g for g in groups.values()
                                   if not any(c.index in borrowed for c in g)], out, frames)
    for c in analysis.clusters:  # a sum another kernel recomputes: with that kernel's edit
        pair = partners(analysis, c, out) if not out[c.index].exact else None
        if pair is None:
            continue
        try:
            span = locate(analysis, c, frames, changed, paired=pair[0])
        except PointerOnly:
            continue
        (m,) = _map_group(analysis, span, [c], frames, after=tuple(pair[1]))
        if m.exact:
            out[c.index] = m
    for c in analysis.clusters:  # a sum one kernel drops and another recomputes: one edit
        other = recomputer(analysis, c, out) if not out[c.index].exact else None
        try:
            b = as_peeled.get(other[1].index, other[1]) if other else None
            if other is None or b is None:
                continue
            joint = match_joint(analysis, locate(analysis, c, frames, changed, paired=other[0]),
                                locate(analysis, b, frames, changed), c, b)
            if joint is not None:
                out.update((m.cluster_index, m) for m in _joint_edit(analysis, frames, *joint,
                                                                     c, b))
        except PointerOnly:
            continue
    return tuple(keep_comments(m) for m in _note_served(
        analysis, _no_overlaps(out[c.index] for c in analysis.clusters)))


def _join_nested(analysis: Analysis, spans: dict[int, Span], groups: list[list[Cluster]],
                 out: dict[int, SourceMapping], frames: Frames) -> None:
    """Exact edits inside another's lines (`result = self.block(input)` holds clusters, the
    block's last one adds `result + input` a line below) mapped again as one edit, the inner
    kernels' calls inside the outer one's arguments; kept when that edit is exact (else
    `_no_overlaps` makes them pointers, as one edit cannot rewrite the other's lines)."""
    exact = [g for g in groups if all(out[c.index].exact for c in g)]
    joined: set[int] = set()
    for outer in sorted(exact, key=lambda g: spans[g[0].index].start - spans[g[0].index].end):
        big = spans[outer[0].index]
        inside = [g for g in exact if g is not outer and g[0].index not in joined and (
            (s := spans[g[0].index]).src.path == big.src.path and s.scope.start
            == big.scope.start and big.start <= s.start and s.end <= big.end)]
        if not inside or outer[0].index in joined:
            continue
        both = [*outer, *(c for g in inside for c in g)]
        here = spans if big.guard is None else _else_runs(spans, outer, inside, out)
        mapped = _map_spans(analysis, here, both, parts_on(analysis, big, both, frames), frames)
        if all(m.exact for m in mapped):
            out.update((m.cluster_index, m) for m in mapped)
            joined.update(c.index for c in both)


def _joint_edit(analysis: Analysis, frames: Frames, span: Span, fa: Found, fb: Found,
                above: tuple[str, ...], a: Cluster, b: Cluster) -> list[SourceMapping]:
    """One edit of `span` computing `b` around `a`'s call (joint.py), after the lines
    `above`; raises PointerOnly."""
    kept = fa.inlined | fb.inlined  # the lines `above` among them
    check_alone(analysis, span, [b, a], frames, kept, around(analysis, span, [b, a]))
    _check_dead(span, fb.targets)
    name_a, name_b = kernel_name(a.index), kernel_name(b.index)
    text = _replacement(span, f"{name_b}({', '.join(fb.args)})", fb.targets)
    indent = text[:len(text) - len(text.lstrip())]
    text = "".join(f"{indent}{line}\n" for line in above) + text
    base = dict(file=span.src.path, start=span.start, end=span.end,
                function=span.scope.qualname, digest=span.src.digest,
                original="".join(span.src.lines[span.start - 1:span.end]),
                replacement=text, calls=(name_b, name_a),
                imports=tuple(dict.fromkeys((*fa.imports, *fb.imports))))
    return [SourceMapping(a.index, EXACT, call=name_a, args=fa.args, shared_with=(b.index,),
                          baked=fa.baked, **base),
            SourceMapping(b.index, EXACT, call=name_b, args=fb.args, shared_with=(a.index,),
                          baked=fb.baked, **base)]


def _else_runs(spans: dict[int, Span], outer: list[Cluster], inside: list[list[Cluster]],
               out: dict[int, SourceMapping]) -> dict[int, Span]:
    """The outer edit ends in an `if` on a module setting (MobileNet's `if
    self.use_res_connect: result += input`): where the inner edit rewrites the lines above
    it, the `else` branch runs that edit, so the calls where the condition fails keep it."""
    big, inner = spans[outer[0].index], out[inside[0][0].index]
    guard = big.guard
    if guard is None or len(inside) != 1 or (inner.start, inner.end) != (
            big.start, guard.node.lineno - 1) or inner.replacement is None:
        return spans
    return {**spans, outer[0].index: replace(big, guard=replace(
        guard, otherwise=inner.replacement))}


def _map_spans(analysis: Analysis, spans: dict[int, Span], group: list[Cluster],
               parts: list[Part], frames: Frames) -> list[SourceMapping]:
    # The lifted calls of every cluster of the group: the same lines, other nodes.
    calls = (*(call for c in group for call in spans[c.index].calls),
             *(call for p in parts for call in p.calls))
    span = replace(spans[group[0].index], calls=calls)
    mapped = _map_group(analysis, span, group, frames, tuple(parts))
    if mapped[0].exact:
        return mapped
    # `x = self.stem(x)` runs the cluster's layers of a Sequential and others: matched
    # again with the call spelled layer by layer, which the edit then writes.
    paths = [self_path_of(analysis, c, span.scope) for c in group]
    if None in paths:
        return mapped
    unrolled = sequential.unrolled(analysis, span, group, paths, self_name_of(span.scope))
    if unrolled is None:
        return mapped
    if isinstance(unrolled, str):  # the calls of the line hold the clusters in other layers
        return mapped if mapped[0].file != span.src.path else [
            replace(m, reason=unrolled) for m in mapped]
    again = _map_group(analysis, unrolled.span, group, frames, tuple(parts))
    real = dict(digest=span.src.digest)
    if again[0].exact:
        return [replace(m, original="".join(span.src.lines[m.start - 1:m.end]), **real)
                for m in again]
    if again[0].file != span.src.path or again[0].start is None:
        return mapped  # the cause lies at another line (the caller's): as before
    return [replace(m, reason=unrolled.reason(a.reason or ""), **real)
            for m, a in zip(mapped, again, strict=True)]


def _no_overlaps(mappings: Iterable[SourceMapping]) -> list[SourceMapping]:
    """Of exact edits whose ranges overlap (one keeps code the other fuses), --apply can
    write only one: each is valid alone (it was mapped against the file as written), so the
    one serving the most clusters is kept (the earlier on a tie) and the others become
    pointers naming it."""
    maps = list(mappings)
    edits = sorted((m for m in maps if m.exact),
                   key=lambda m: (-len(m.shared_with) - len(m.serves), m.start))
    kept: list[SourceMapping] = []
    clash: dict[int, SourceMapping] = {}
    for a in edits:
        other = next((b for b in kept if a.cluster_index in b.shared_with
                      or (a.file == b.file and a.start <= b.end and b.start <= a.end)), None)
        if other is None:
            kept.append(a)
        elif a.cluster_index not in other.shared_with:
            clash[a.cluster_index] = other
    return [m if m.cluster_index not in clash else SourceMapping(
        m.cluster_index, POINTER, m.file, m.start, m.end,
        f"its lines overlap cluster {clash[m.cluster_index].cluster_index}'s edit (one keeps "
        "code the other fuses), which is written instead: one edit cannot rewrite both",
        function=m.function, shared_with=m.shared_with, digest=m.digest) for m in maps]


def _note_served(analysis: Analysis, maps: list[SourceMapping]) -> list[SourceMapping]:
    """A pointer's reason says which of its ops other clusters' edits run (served.py) and
    which stay unfused."""
    g = analysis.graph
    notes: dict[int, dict[str, None]] = {}  # holder -> notes, each once per edit
    ran: dict[int, set[str]] = {}
    for m in maps:
        for s in m.serves if m.exact else ():
            lines = f"line {m.start}" if m.start == m.end else f"lines {m.start}-{m.end}"
            names = ", ".join(str(i) for i in sorted((m.cluster_index, *m.shared_with)))
            notes.setdefault(s.part.index, {})[
                f"the edit of {lines} (cluster{'s' if m.shared_with else ''} {names}) runs "
                f"its {' → '.join(s.part.ops)} in the call {s.site}"] = None
            ran.setdefault(s.part.index, set()).update(s.part.nodes)
    out = []
    for m in maps:
        if m.cluster_index not in notes or m.exact or not m.reason:
            out.append(m)
            continue
        rest = [n for n in analysis.clusters[m.cluster_index].nodes
                if n not in ran[m.cluster_index] and not g[n].copy_of]
        left = ", ".join(said(g, n) for n in rest[:3]) + (", …" if len(rest) > 3 else "")
        said_notes = "; ".join(notes[m.cluster_index]) + (
            f", leaving {left} unfused" if left else "")
        out.append(replace(m, reason=f"{m.reason}; {said_notes}"))
    return out
