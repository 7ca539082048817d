"""What a changed test's page marks: how each baseline cluster fared, op by op.

Reads the baseline ``Snapshot``, the current one and the current ``FusionGraph``; returns a
``PageDiff``: a status per cluster on each side, the nodes each baseline cluster is drawn
on, the nodes to mark on each pane, and the baseline's nodes the current graph lacks
(``Ghost``s) or has only now (recompute copies).

Clusters pair by identity (ops, module, function, ordinal; ops and lines, then ops, only
for a schema-1 baseline, which records no identity): a paired cluster is kept. An unpaired
baseline cluster is traced op by op into the current graph: its ops in one larger cluster
grew (merged, when that cluster also holds another baseline cluster's ops), in one smaller
one shrunk, in several split, in none lost. Tracing goes by node name, which is sound
within one graph's lineage but not across renames, with two corrections:

- a name the current graph gives a different op, or a recompute copy feeding none of the
  cluster's members, is not the baseline's node;
- a baseline member with no current node of its own is a recompute copy (named ``add_5``
  like any node, see ``fusion_core/ir/duplicate.py``) when one of the cluster's members
  reads a current node of the same op: the copy recomputed that node for that member. Else
  the op is gone from the graph (an edit replaced it).

A copy is identified by its original and the member reading it, never by its name, so a
cluster that held a copy is not drawn as if it held only the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fusion_core import Ghost

from .snapshot import ClusterId, ClusterRec, Snapshot

if TYPE_CHECKING:
    from fusion_core.ir.graph import FusionGraph

# How the comparison pairs clusters; after the identity, only for clusters without one.
PAIRING = (lambda c: c.ident, lambda c: (c.ops, c.lines), lambda c: c.ops)
# A current cluster that several baseline clusters reach takes the most telling status.
PRIORITY = ("split", "shrunk", "merged", "grown", "kept")
GHOST = "{} (baseline)"  # a ghost's drawn name; FX names hold no space, so none collides


@dataclass(frozen=True)
class Change:
    """One cluster's side of the comparison."""

    status: str  # baseline: kept grown merged shrunk split lost; current: those or new
    nodes: tuple[str, ...]  # drawn on (a baseline cluster: current names or ghosts)
    parts: tuple[int, ...] = ()  # the other side's clusters paired with or holding its ops
    lost: tuple[str, ...] = ()  # a baseline cluster's ops now in no cluster, described
    new: tuple[str, ...] = ()  # a current cluster's ops no baseline cluster held


@dataclass(frozen=True)
class PageDiff:
    baseline: tuple[Change, ...]
    current: tuple[Change, ...]
    # pane (`base`, `current`) -> drawn node -> (mark, why): lost, outside, gone or new
    marks: Mapping[str, Mapping[str, tuple[str, str]]] = field(default_factory=dict)
    ghosts: tuple[Ghost, ...] = ()
    current_only: frozenset[str] = frozenset()  # current recompute copies the baseline lacked


@dataclass(frozen=True)
class _Member:
    drawn: str  # node name on the page; "" when it cannot be drawn
    key: str  # what it is: a node name, `original>reader` for a copy, `gone:name`
    op: str
    ghost: Ghost | None = None


def _copy_key(graph: FusionGraph, name: str) -> str:
    readers = graph.users[name]
    return f"{graph[name].copy_of}>{readers[0] if readers else ''}"


def _current_key(graph: FusionGraph, name: str) -> str:
    return _copy_key(graph, name) if graph[name].copy_of else name


def _place(c: ClusterRec, graph: FusionGraph) -> list[_Member]:
    """The members of a baseline cluster, on the current graph (module docstring)."""
    names = set(c.nodes)
    out: dict[int, _Member] = {}
    for i, (name, op) in enumerate(zip(c.nodes, c.ops, strict=True)):
        node = graph[name] if name in graph else None
        if node is None or node.op != op:
            continue
        if not node.copy_of:
            out[i] = _Member(name, name, op)
        elif names & set(graph.users[name]):
            out[i] = _Member(name, _copy_key(graph, name), op)
    real = [m.drawn for m in out.values()]
    for i, (name, op) in enumerate(zip(c.nodes, c.ops, strict=True)):
        if i in out:
            continue
        taken = {m.key for m in out.values()}
        hit = next(((r, m) for m in real for r in dict.fromkeys(graph[m].refs)
                    if graph[r].op == op and not graph[r].copy_of and r not in names
                    and f"{r}>{m}" not in taken), None)
        if hit is not None:
            ghost = Ghost(GHOST.format(name), op, anchor=hit[1], copy_of=hit[0])
            out[i] = _Member(ghost.name, f"{hit[0]}>{hit[1]}", op, ghost)
            continue
        after = [out[j].drawn for j in sorted(out) if j > i and not out[j].ghost]
        before = [out[j].drawn for j in sorted(out) if j < i and not out[j].ghost]
        anchor = (after or before[-1:] or [""])[0]
        ghost = Ghost(GHOST.format(name), op, anchor=anchor) if anchor else None
        out[i] = _Member(ghost.name if ghost else "", f"gone:{name}", op, ghost)
    return [out[i] for i in range(len(c.nodes))]


def _pair(base: Snapshot, cur: Snapshot,
          pairs: Iterable[tuple[ClusterId, ClusterId]] | None = None) -> dict[int, int]:
    """Baseline cluster -> current cluster: the comparison's `pairs` when given (so the
    page and the messages agree), else by identity (see PAIRING)."""
    if pairs is not None:
        bi = {c.ident: i for i, c in enumerate(base.clusters)}
        ci = {c.ident: i for i, c in enumerate(cur.clusters)}
        return {bi[b]: ci[c] for b, c in pairs if b in bi and c in ci}
    rest = list(range(len(cur.clusters)))
    paired: dict[int, int] = {}
    for stage, key in enumerate(PAIRING):
        for bi, b in enumerate(base.clusters):
            if bi in paired or (stage and b.module is not None):
                continue
            hit = next((i for i in rest if key(cur.clusters[i]) == key(b)), None)
            if hit is not None:
                paired[bi] = hit
                rest.remove(hit)
    return paired


def _describe(m: _Member) -> str:
    if m.key.startswith("gone:"):
        return f"{m.op} (not in the current graph)"
    if ">" in m.key:
        original, reader = m.key.split(">")
        return f"{m.op} (a recompute of {original} for {reader})"
    return m.op


def page_diff(base: Snapshot, cur: Snapshot, graph: FusionGraph,
              pairs: Iterable[tuple[ClusterId, ClusterId]] | None = None) -> PageDiff:
    """Compare `base` with `cur`, whose clusters are those of `graph`'s analysis in order;
    `pairs`: the comparison's (baseline, current) identities."""
    members = [_place(c, graph) for c in base.clusters]
    base_keys = [{m.key for m in ms} for ms in members]
    cur_keys = [{_current_key(graph, n) for n in c.nodes} for c in cur.clusters]
    everywhere = set().union(*base_keys)
    paired = _pair(base, cur, pairs)
    base_out: list[Change] = []
    reached: dict[int, list[str]] = {}  # current cluster -> statuses of unpaired baselines
    marks: dict[str, dict[str, tuple[str, str]]] = {"base": {}, "current": {}}
    for bi, (ms, keys) in enumerate(zip(members, base_keys, strict=True)):
        drawn = tuple(m.drawn for m in ms if m.drawn)
        if bi in paired:  # the same cluster; a recompute copy it held may be read now
            gone = [m for m in ms if ">" in m.key and m.key not in cur_keys[paired[bi]]]
            for m in gone:
                _mark_lost(marks, m, bi)
            base_out.append(Change("kept", drawn, (paired[bi],), tuple(map(_describe, gone))))
            continue
        parts = tuple(i for i, ks in enumerate(cur_keys) if keys & ks)
        status = _status(keys, [cur_keys[i] for i in parts],
                         [k for j, k in enumerate(base_keys) if j != bi])
        for i in parts:
            reached.setdefault(i, []).append(status)
        held = set().union(*(cur_keys[i] for i in parts))
        lost = [m for m in ms if m.key not in held]
        for m in lost:
            _mark_lost(marks, m, bi)
        base_out.append(Change(status, drawn, parts, tuple(map(_describe, lost))))
    mine = {i: bi for bi, i in paired.items()}
    cur_out = []
    for i, c in enumerate(cur.clusters):
        if i in mine:
            cur_out.append(Change("kept", tuple(c.nodes), (mine[i],)))
            continue
        statuses = reached.get(i, [])
        status = min(statuses, key=PRIORITY.index) if statuses else "new"
        new = [n for n in c.nodes if _current_key(graph, n) not in everywhere]
        for n in new:
            why = f"in current cluster #{i}; in no baseline cluster"
            marks["current"].setdefault(n, ("new", why))
            marks["base"].setdefault(n, ("new", why))  # drawn there even if only now a copy
        parts = tuple(bi for bi, ks in enumerate(base_keys) if ks & cur_keys[i])
        cur_out.append(Change(status, tuple(c.nodes), parts,
                              new=tuple(graph[n].op for n in new)))
    matched = {m.drawn for ms in members for m in ms if not m.ghost and ">" in m.key}
    copies = {n.name for n in graph.nodes if n.copy_of}
    return PageDiff(tuple(base_out), tuple(cur_out), marks,
                    tuple(m.ghost for ms in members for m in ms if m.ghost),
                    frozenset(copies - matched))


def _status(keys: set[str], parts: Sequence[set[str]], others: Sequence[set[str]]) -> str:
    if not parts:
        return "lost"
    if len(parts) > 1:
        return "split"
    (part,) = parts
    if not keys <= part:
        return "shrunk"
    if part == keys:
        return "kept"  # the same ops, under another identity (a renamed module)
    return "merged" if any(part & k for k in others) else "grown"


def _mark_lost(marks: dict[str, dict[str, tuple[str, str]]], m: _Member, bi: int) -> None:
    """A baseline member now in no cluster: lost on the baseline's pane; on the current one
    outside (the node itself, or for a copy its original, now read from memory) or gone."""
    if m.key.startswith("gone:"):
        why = f"in baseline cluster #{bi}; not in the current graph"
        if m.drawn:
            marks["base"].setdefault(m.drawn, ("lost", why))
            marks["current"].setdefault(m.drawn, ("gone", why))
    elif ">" in m.key:
        original, reader = m.key.split(">")
        marks["base"].setdefault(m.drawn, (
            "lost", f"baseline cluster #{bi} recomputed {original} for {reader}; no current "
                    "cluster does"))
        marks["current"].setdefault(original, (
            "outside", f"baseline cluster #{bi} recomputed it for {reader}, which now reads "
                       "it from memory"))
    else:
        why = f"in baseline cluster #{bi}; now outside every cluster"
        marks["base"].setdefault(m.drawn, ("lost", why))
        marks["current"].setdefault(m.key, ("outside", why))
