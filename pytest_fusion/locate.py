"""Find a baseline's ops again in the model as it is now.

Reads a baseline ``ClusterRec`` or ``RejectionRec`` and the current ``Snapshot`` (its
op index); returns ``Located``: the baseline's ops found in the current graph (as
current ``OpRec``s, in baseline order), the ops no longer there, and the lines the
found ops are on now. Ops are found by site (module path, op and its order there:
``blocks.0.attn:softmax#0``), so a renamed node or lines moved by an edit elsewhere
find the same op; a baseline written before sites were recorded falls back to node
names with the same op. Messages quote ``Located.lines``, never the recorded lines
as if they were current.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .snapshot import ClusterRec, OpRec, RejectionRec, Snapshot
from .snapshot_build import line_runs


@dataclass(frozen=True)
class Located:
    found: tuple[OpRec, ...]
    missing: tuple[tuple[str, str], ...]  # (op, site or node name) of ops no longer there
    # Found ops the baseline cluster held as a recomputed copy: the analyzer may as well
    # read the stored value now, so they do not decide what became of the cluster.
    recomputed: tuple[OpRec, ...] = ()
    # The baseline's views found again, each with the op it was then (`view`): where they
    # are now, and what a changed one became (`.permute()`). Views move nothing, so they
    # take no part in deciding which current cluster holds the baseline's ops.
    views: tuple[tuple[str, OpRec], ...] = ()
    # Per missing op, the nearest found ops before and after it in the baseline's order (by
    # node; None at an end): where an op that took its place must sit now.
    gaps: tuple[tuple[str | None, str | None], ...] = ()

    @property
    def own(self) -> tuple[OpRec, ...]:
        """The found ops the cluster computed as their original (all, if only copies)."""
        return tuple(o for o in self.found if o not in self.recomputed) or self.found

    @property
    def nodes(self) -> set[str]:
        return {o.node for o in self.found}

    @property
    def lines(self) -> str:
        """`blocks.py:47-48, 50`: where the found ops and views are now; "" when none was
        found."""
        return lines_of([*self.found, *(v for _, v in self.views)])

    @property
    def changed_views(self) -> tuple[tuple[str, OpRec], ...]:
        """Views now another view op than the baseline's (`view` → `.permute()`)."""
        return tuple((op, v) for op, v in self.views if v.op != op)


def lines_of(ops: tuple[OpRec, ...] | list[OpRec]) -> str:
    spots = [o.line.rsplit(":", 1) for o in ops if o.line != "?"]
    if not spots:
        return ""
    file = Counter(f for f, _ in spots).most_common(1)[0][0]
    lines = [int(n) for f, tail in spots if f == file for n in _numbers(tail)]
    return f"{file}:{line_runs(lines)}"


def _numbers(tail: str) -> list[int]:
    """The line numbers `15-16, 29` names."""
    out: list[int] = []
    for part in tail.split(","):
        a, _, b = part.strip().partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


def unprimed(site: str) -> str:
    """A recomputed copy's site names its original's place."""
    return site.rstrip("'")


def site_module(site: str) -> str | None:
    """The module path a site names (`blocks.0.attn`); None for a node name (no site)."""
    return unprimed(site).split(":")[0] if ":" in site else None


def locate(rec: ClusterRec | RejectionRec, cur: Snapshot) -> Located:
    found: list[OpRec] = []
    missing: list[tuple[str, str]] = []
    recomputed: list[OpRec] = []
    views: list[tuple[str, OpRec]] = []
    gaps: list[tuple[str | None, str | None]] = []
    if rec.sites:
        by_site = cur.by_site
        hits: list[OpRec | None] = []  # per baseline op: found again (a view: None)
        for op, site in zip(rec.ops, rec.sites, strict=False):
            hits.append(None)
            if not site:  # a view: no place of its own; found below by its neighbours
                continue
            where, _, nth = unprimed(site).rpartition("#")
            # An op now written in place (`F.relu(inplace=True)`) is the same op, at its
            # own site: `relu_`.
            hit = by_site.get(unprimed(site)) or by_site.get(f"{where}_#{nth}")
            if hit is not None and hit.op.rstrip("_") == op.rstrip("_"):
                hits[-1] = hit
                if hit not in found:
                    found.append(hit)
                if site.endswith("'"):
                    recomputed.append(hit)
            else:
                missing.append((op, site))
        views = _views(rec, hits, cur)
        gaps = _gaps(hits, list(rec.sites), {s for _, s in missing})
    else:  # written before sites: the same node name holding the same op
        by_node = {o.node: o for o in cur.ops}
        view_ops = {o.op for o in cur.ops if o.kind == "view"}
        for op, node in zip(rec.ops, rec.nodes, strict=False):
            if op in view_ops:  # a view: it decides nothing, as on the site path
                view = by_node.get(node)
                if view is not None and view.kind == "view":
                    views.append((op, view))
                continue
            hit = by_node.get(node)
            if hit is not None and hit.op.rstrip("_") == op.rstrip("_"):
                found.append(hit)
            else:
                missing.append((op, node))
    return Located(tuple(found), tuple(missing), tuple(recomputed), tuple(views), tuple(gaps))


def _gaps(hits: list[OpRec | None], sites: list[str], missing: set[str]
          ) -> list[tuple[str | None, str | None]]:
    """For each missing op (by site), the found ops around it in baseline order."""
    out: list[tuple[str | None, str | None]] = []
    for i, site in enumerate(sites):
        if site and site in missing:
            before = next((h.node for h in reversed(hits[:i]) if h is not None), None)
            after = next((h.node for h in hits[i + 1:] if h is not None), None)
            out.append((before, after))
    return out


def _views(rec: ClusterRec | RejectionRec, hits: list[OpRec | None], cur: Snapshot
           ) -> list[tuple[str, OpRec]]:
    """Each baseline view (no site) as the current view that reads the op found before it
    or feeds the one found after it, both where one does (the first in graph order)."""
    free = [o for o in cur.ops if o.kind == "view"]
    out: list[tuple[str, OpRec]] = []
    for i, (op, site) in enumerate(zip(rec.ops, rec.sites, strict=False)):
        if site:
            continue
        before = next((h for h in reversed(hits[:i]) if h is not None), None)
        after = next((h for h in hits[i + 1:] if h is not None), None)
        score = [(before is not None and before.node in v.reads)
                 + (after is not None and after.node in v.feeds) for v in free]
        if max(score, default=0):
            v = free.pop(score.index(max(score)))
            out.append((op, v))
    return out
