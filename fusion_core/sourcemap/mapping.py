"""Map each cluster back to the lines of the user's source it replaces.

Reads an ``Analysis`` (cluster nodes, their ``SourceLoc``s, the FX graph) and
the user's files; writes one ``SourceMapping`` per cluster. Here the clusters are grouped by
the statements covering them (``span.py`` finds them; other calls of the same lines are the
clusters a group shares its lines with) and each group is mapped as one edit
(``group_edit.py``: ``exact`` when the lines compute the group and nothing else, otherwise
a ``pointer`` with the reason in words). A cluster that does not map as it is may map
without a callee's trailing dropout (``peeled.py``); a sum one kernel leaves unstored and
another recomputes, on one statement, maps as one edit of both (``joint.py``); of edits
whose lines overlap, one is written; an edit of BatchNorm or dropout runs in eval mode only
(``train_mode.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from ..analysis.types import Cluster
from ..pipeline import Analysis
from . import sequential
from .comments import keep_comments
from .consistent import size_ones
from .frames import Frames, frames_of
from .group_edit import joint_edit, map_group
from .joint import match_joint, recomputer
from .match import self_name_of, self_path_of
from .paired import partners
from .peeled import peeled
from .pysource import SourceFile
from .served import Part, note_served, parts_on
from .source_mapping import POINTER, SourceMapping
from .span import PointerOnly, Span, locate
from .train_mode import train_guarded
from .unstored import as_stored


def _disk_bytes(path: str) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None



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
        (m,) = map_group(analysis, span, [c], frames, after=tuple(pair[1]))
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
                out.update((m.cluster_index, m) for m in joint_edit(analysis, frames, *joint,
                                                                     c, b))
        except PointerOnly:
            continue
    edits = train_guarded(analysis, _no_overlaps(out[c.index] for c in analysis.clusters),
                          frames.files)
    return tuple(keep_comments(m) for m in note_served(analysis, edits))


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


def _else_runs(spans: dict[int, Span], outer: list[Cluster], inside: list[list[Cluster]],
               out: dict[int, SourceMapping]) -> dict[int, Span]:
    """The outer edit ends in an `if` on a module setting (MobileNet's `if
    self.use_res_connect: result += input`): where the inner edit rewrites the lines above
    it, the `else` branch runs that edit, so the calls where the condition fails keep it."""
    big, inner = spans[outer[0].index], out[inside[0][0].index]
    guard = big.guard
    if guard is None or guard.tail or len(inside) != 1 or (inner.start, inner.end) != (
            big.start, guard.node.lineno - 1) or inner.replacement is None or (
            inner.condition is not None or inner.branches):  # its text lacks its `if` yet
        return spans
    return {**spans, outer[0].index: replace(big, guard=replace(
        guard, otherwise=inner.replacement))}


def _map_spans(analysis: Analysis, spans: dict[int, Span], group: list[Cluster],
               parts: list[Part], frames: Frames) -> list[SourceMapping]:
    # The lifted calls of every cluster of the group: the same lines, other nodes.
    calls = (*(call for c in group for call in spans[c.index].calls),
             *(call for p in parts for call in p.calls))
    span = replace(spans[group[0].index], calls=calls)
    mapped = map_group(analysis, span, group, frames, tuple(parts))
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
    again = map_group(analysis, unrolled.span, group, frames, tuple(parts))
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
        m.cluster_index, POINTER, m.file, m.start, m.end, _clash(m, clash[m.cluster_index]),
        function=m.function, shared_with=m.shared_with, digest=m.digest) for m in maps]


def _clash(m: SourceMapping, kept: SourceMapping) -> str:
    if m.condition is not None and kept.condition is not None:
        # the same lines, a kernel per layer class (selected.py)
        return (f"cluster {kept.cluster_index}'s edit of overlapping lines runs its kernel "
                f"where `{kept.condition}` and is written instead; calls where "
                f"`{m.condition}` run the lines as written")
    return (f"its lines overlap cluster {kept.cluster_index}'s edit (one keeps code the "
            "other fuses), which is written instead: one edit cannot rewrite both")
