"""Carry timings and identities from one snapshot to the next through matched clusters.

Reads two ``Snapshot``s and the (baseline, current) identity pairs a ``Comparison``
made; returns measurements re-keyed to the other side's identities. Timings follow
their cluster wherever the comparison found it (moved lines, a schema-1 baseline
without identities), so rewriting a baseline on a machine without a GPU keeps
every other machine's timings of clusters that still exist. ``same_content`` says
whether a rewrite would change anything but provenance and lines.
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
    return replace(s, provenance={}, clusters=tuple(replace(c, lines="") for c in s.clusters),
                   rejections=tuple(replace(r, lines="") for r in s.rejections))


def same_content(a: Snapshot, b: Snapshot) -> bool:
    """Equal as written, but for provenance and source lines (information only)."""
    return to_data(_without_lines(a)) == to_data(_without_lines(b))
