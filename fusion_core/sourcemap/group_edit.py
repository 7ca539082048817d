"""One edit of a span's lines computing a group of clusters, or the reason it is a pointer.

Reads an ``Analysis``, the ``Span`` the group's clusters share (``span.py``), their
``Frames`` and the other calls' parts on those lines (``served.py``); returns one
``SourceMapping`` per cluster. The group is ``exact`` when the statements compute the
clusters and nothing else (``match.py``, ``alone.py``, ``consistent.py``), every input has
a source expression at the top of the range, and no name the range assigns is read
afterwards: the mapping then holds the replacement text. Otherwise it is a ``pointer``
(file and line range, no diff) with the reason in words. ``joint_edit`` writes one edit of
two clusters a sum joins (``joint.py``); ``mapping.py`` decides which clusters form a group.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..analysis.types import Cluster
from ..names import kernel_name
from ..pipeline import Analysis
from .alone import check_alone
from .consistent import consistent
from .frames import Frames
from .guard import guarded_text
from .match import Found, Piece, unify, unify_part, unify_parts
from .paired import read_after
from .parts import around, free_inputs, nest_parts, replace_part_results, stale_around
from .pysource import read_later, stored_names
from .selected import OtherCall, Selection, select_by_skipped, select_instances
from .served import Part
from .skipped import skipped_condition
from .source_mapping import EXACT, POINTER, ServedPart, SourceMapping
from .span import PointerOnly, Span


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
                # outside the cluster could stay as an argument, so it is not the cause, nor
                # are other calls' ops on the lines (no part has been tried yet).
                check_alone(analysis, span, cs, frames, free_inputs(analysis, cs),
                            unserved=unserved, other_calls=False)
            raise
    pieces = [(cs, part)] if part is not None else split
    if any(all(id(c) in served for c in p_cs) for p_cs, _ in pieces):
        raise PointerOnly("another call's ops on these lines form a part of their own")
    return pieces, around(analysis, span, cs)


def _alone(analysis: Analysis, span: Span, every: list[Cluster], frames: Frames,
           kept: frozenset[str], kept_around: set[str], unserved: Mapping[int, str],
           after: tuple[SourceMapping, ...], select: bool = False,
           skipped: Sequence[ast.expr] = ()) -> Selection | None:
    """``check_alone``; where other calls run the lines otherwise, the condition that leaves
    them to the lines as written (selected.py), or the refusal when there is none. With
    `select` (one kernel's clusters of lines that form others in other calls) the condition
    is required: the other calls' ops need not show up as stray code on the lines."""
    stray: OtherCall | None = None
    if not select:  # with `select`, the other calls' ops are not looked at: they run as written
        try:
            check_alone(analysis, span, every, frames, kept, kept_around, unserved=unserved)
            return None
        except OtherCall as e:
            if after or span.guard is not None:
                raise
            stray = e
    # an `if` the kernel's calls skip and the others run tells them apart (skipped.py)
    selection = select_by_skipped(analysis, span, every, skipped) or select_instances(
        analysis, span, every)
    if isinstance(selection, str):
        if stray is None:
            raise PointerOnly(f"the lines form other kernels in other calls, and {selection}")
        told = stray.unfused or stray.reason.endswith("not supported yet")
        raise PointerOnly(f"{stray.reason}; {selection}" if told else stray.reason) from None
    check_alone(analysis, span, every, frames, kept, kept_around, unserved=unserved,
                as_written=selection.as_written)
    return selection


def _condition(span: Span, selection: Selection | None, skipped: Sequence[ast.expr]
               ) -> str | None:
    """Where the edit runs its kernel: the instances `selection` tells apart, with every `if`
    the lines hold and the kernel's calls skipped False (skipped.py)."""
    tests = [skipped_condition(span.src, skipped)] if skipped else []
    if selection is not None and selection.condition not in tests:
        tests.insert(0, selection.condition)
    return " and ".join(tests) or None


def map_group(analysis: Analysis, span: Span, group: list[Cluster], frames: Frames,
              parts: tuple[Part, ...] = (), after: tuple[SourceMapping, ...] = ()
              ) -> list[SourceMapping]:
    """The group's mappings (``_map_one``). Where the lines form different kernels in
    different calls (a norm's ReLU in some blocks, its Hardswish in others) and no edit
    serves them all, each kernel's clusters are mapped apart, the other calls left to the
    lines as written (selected.py), and the exact ones become one edit of `if` / `elif`
    branches, one per kernel (``_one_edit``). If none is exact, the group's reason stands."""
    whole = _map_one(analysis, span, group, frames, parts, after)
    kinds = list(dict.fromkeys(c.ops for c in group))
    if len(kinds) < 2 or whole[0].exact or after or span.guard is not None:
        return whole
    split = [m for ops in kinds for m in _map_one(
        analysis, span, [c for c in group if c.ops == ops], frames, parts, after, select=True)]
    if not any(m.exact for m in split) or any(m.exact and m.condition is None for m in split):
        return whole  # an edit of one kernel's clusters runs in every call unless told apart
    return _one_edit(sorted(split, key=lambda m: not m.exact))


def _one_edit(split: list[SourceMapping]) -> list[SourceMapping]:
    """The exact edits of one range, each running its kernel under its own layer-class
    condition, as one edit of `if` / `elif` branches (the edit serving most calls first)."""
    by_branch: dict[tuple[str | None, str | None], list[SourceMapping]] = {}
    for m in split:
        if m.exact:
            by_branch.setdefault((m.condition, m.replacement), []).append(m)
    if len(by_branch) < 2 or any(c is None for c, _ in by_branch):
        return split
    order = sorted(by_branch.items(), key=lambda kv: -len(kv[1]))
    branches = tuple((str(c), str(t)) for (c, t), _ in order)
    calls = tuple(dict.fromkeys(call for _, ms in order for call in ms[0].edit_calls))
    members = [m.cluster_index for _, ms in order for m in ms]
    serves = tuple(s for _, ms in order for s in ms[0].serves)
    imports = tuple(dict.fromkeys(i for _, ms in order for i in ms[0].imports))
    return [replace(m, condition=None, branches=branches, calls=calls, serves=serves,
                    imports=imports, shared_with=tuple(i for i in members
                                                       if i != m.cluster_index))
            if m.exact else m for m in split]


def _map_one(analysis: Analysis, span: Span, group: list[Cluster], frames: Frames,
             parts: tuple[Part, ...] = (), after: tuple[SourceMapping, ...] = (),
             select: bool = False) -> list[SourceMapping]:
    """The group's mappings as one edit; `parts` (served.py): other calls' ops on the
    lines, each kept when it matches the lines as the group's clusters do, which the edit
    computes but does not apply. A refused part's reason goes into the reason its ops give
    for the group."""
    base = dict(file=span.src.path, start=span.first_line, end=span.end,
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
        skipped = list(dict.fromkeys(t for _, found in pieces for f in found for t in f.skipped))
        selection = _alone(analysis, span, every, frames, kept, kept_around, unserved, after,
                           select, skipped)
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
    text = text if span.guard is None else guarded_text(span.src, span.guard, span.first_line,
                                                        span.end, text)
    original = "".join(span.src.lines[span.first_line - 1:span.end])
    names = tuple(name for name, _ in calls) if len(calls) > 1 else ()
    serves = tuple(ServedPart(c, name, served[id(c)].site)
                   for (cs, _), (name, _) in zip(pieces, calls, strict=True)
                   for c in cs if id(c) in served)
    imports = tuple(dict.fromkeys(i for _, f in calls for i in f.imports))
    return [SourceMapping(c.index, EXACT, replacement=text, call=name, args=f.args,
                          shared_with=others[c.index], original=original, baked=f.baked,
                          calls=names, serves=serves, imports=imports,
                          needs=tuple(sorted({e.cluster_index for e in after})),
                          condition=_condition(span, selection, skipped), **base)
            for (cs, _), (name, f) in zip(pieces, calls, strict=True)
            for c in cs if id(c) not in served]

def joint_edit(analysis: Analysis, frames: Frames, span: Span, fa: Found, fb: Found,
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
    base = dict(file=span.src.path, start=span.first_line, end=span.end,
                function=span.scope.qualname, digest=span.src.digest,
                original="".join(span.src.lines[span.first_line - 1:span.end]),
                replacement=text, calls=(name_b, name_a),
                imports=tuple(dict.fromkeys((*fa.imports, *fb.imports))))
    return [SourceMapping(a.index, EXACT, call=name_a, args=fa.args, shared_with=(b.index,),
                          baked=fa.baked, **base),
            SourceMapping(b.index, EXACT, call=name_b, args=fb.args, shared_with=(a.index,),
                          baked=fb.baked, **base)]
