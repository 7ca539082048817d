"""Carry timings and identities from one snapshot to the next through matched clusters.

Reads two ``Snapshot``s and the (baseline, current) identity pairs a ``Comparison``
made; returns measurements re-keyed to the other side's identities. Timings follow
their cluster wherever the comparison found it (moved lines, a schema-1 baseline
without identities), so rewriting a baseline on a machine without a GPU keeps
every other machine's timings of clusters that still exist. ``same_content`` says
whether a rewrite would change anything but provenance and lines; ``refresh_lines``
brings a baseline's lines up to date without taking anything else from the run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from .schema import to_data
from .snapshot import ClusterId, Measured, Snapshot


def _rekey(m: Measured, mapping: dict[ClusterId, ClusterId]) -> Measured:
    return replace(m, clusters=tuple(replace(t, cluster=mapping[t.cluster])
                                     for t in m.clusters if t.cluster in mapping))


def carry_timings(old: Snapshot, new: Snapshot,
                  pairs: Iterable[tuple[ClusterId, ClusterId]]) -> dict[str, Measured]:
    """`new`'s measurements plus `old`'s for other hardware, keyed to `new`'s clusters."""
    forward = dict(pairs)
    kept = {k: _rekey(m, forward) for k, m in old.measured.items() if k not in new.measured}
    return {**kept, **new.measured}


def attach_timings(base: Snapshot, current: Snapshot, hw_key: str,
                   pairs: Iterable[tuple[ClusterId, ClusterId]]) -> Snapshot:
    """`base` with `current`'s timings on `hw_key`, for the clusters the two share.

    A baseline of schema 1 takes the identities of its matched clusters from
    `current`, so the file written next records them.
    """
    pairs = list(pairs)
    cur = {c.ident: c for c in current.clusters}
    adopted = {b: cur[c] for b, c in pairs}
    clusters = tuple(replace(b, module=adopted[b.ident].module,
                             function=adopted[b.ident].function, nth=adopted[b.ident].nth)
                     if b.module is None and b.ident in adopted else b for b in base.clusters)
    renamed = {b.ident: n.ident for b, n in zip(base.clusters, clusters, strict=True)}
    measured = {k: _rekey(m, renamed) for k, m in base.measured.items()}
    back = {c: renamed[b] for b, c in pairs}
    measured[hw_key] = _rekey(current.measured[hw_key], back)
    return replace(base, clusters=clusters, measured=measured)


def _without_lines(s: Snapshot) -> Snapshot:
    return replace(s, clusters=tuple(replace(c, lines="") for c in s.clusters),
                   rejections=tuple(replace(r, lines="") for r in s.rejections))


def same_content(a: Snapshot, b: Snapshot, lines: bool = False) -> bool:
    """Equal as written, but for provenance (and source lines unless `lines`)."""
    a, b = replace(a, provenance={}), replace(b, provenance={})
    if not lines:
        a, b = _without_lines(a), _without_lines(b)
    return to_data(a) == to_data(b)


def refresh_lines(base: Snapshot, cur: Snapshot,
                  pairs: Iterable[tuple[ClusterId, ClusterId]]) -> Snapshot:
    """`base` with the informational fields of its paired clusters (lines, node names,
    sites) and of its rejections found by identity taken from `cur`; nothing else."""
    now = {c.ident: c for c in cur.clusters}
    back = {b: now[c] for b, c in pairs if c in now}
    rejections = {r.ident: r for r in cur.rejections}

    def fresh(rec, new):
        return replace(rec, lines=new.lines, nodes=new.nodes, sites=new.sites) if new else rec

    return replace(base,
                   clusters=tuple(fresh(c, back.get(c.ident)) for c in base.clusters),
                   rejections=tuple(fresh(r, rejections.get(r.ident))
                                    for r in base.rejections))
