"""Why ops a user named do not fuse together: the cause, one line each, for the pytest
plugin's ``assert_fused`` failure.

Reads an ``Analysis`` and the op names asked for (as the report's `ops` column spells them);
returns lines in the user's spelling, each op at its line: an op no cluster holds and the
reason fusion-advisor left it (the legality check that pruned it, the opaque layers it sits
alone between, a "Left unfused" note); two ops in different clusters and what separates
them (a barrier on the path between them, an op between them no cluster holds, a rejected
candidate holding both, the one-region-per-reduction cut); ops that fuse in another order
than asked. Every cause comes from the analysis' own results (``find_barriers``, the
rejections, ``reduction_regions``, ``left_unfused``): nothing is decided a second time.
"""

from __future__ import annotations

import difflib
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING

from ..analysis.barriers import Barrier, find_barriers
from ..analysis.detect import candidates
from ..analysis.group import components
from ..analysis.multi_output import reduction_regions
from ..analysis.types import Cluster, LineSpan, Rejection
from ..ir.data_dependent import UNSIZED
from ..ir.graph import FusionGraph, OpKind
from ..ir.spelling import said
from .left_unfused import left_unfused

if TYPE_CHECKING:
    from ..pipeline import Analysis

# Ops no user names: the graph's plumbing, and calls fusion-advisor keeps whole.
_NOT_NAMED = {"input", "constant", "output", "opaque", "meta", UNSIZED}


def why_apart(analysis: Analysis, ops: Sequence[str]) -> tuple[str, ...]:
    """One line per cause that keeps `ops` out of one cluster in this order (module
    docstring); () when they do fuse so, or nothing is known."""
    g, clusters = analysis.graph, analysis.clusters
    unknown = _unknown(g, ops)
    if unknown:
        return tuple(unknown)  # the rest is moot while a name matches nothing
    short = [f"`{op}` is named {times} times, but {g.name} computes it "
             f"{_times(len(nodes))}" + (f": {', '.join(said(g, n) for n in nodes)}" if nodes
                                         else "")
             for op, times in Counter(ops).items()
             if times > len(nodes := _op_nodes(g, op))]
    if short:
        return tuple(short)
    chain = _chain(g, ops)
    causes = _Causes(g, clusters, analysis.rejections)
    # The asked order runs along the graph: what parts it is the cause. Else the order is
    # the cause where one cluster holds every named op.
    if not causes.linked(chain):
        reordered = _reordered(g, clusters, ops)
        if reordered:
            return (reordered,)
    return tuple(causes.of(chain))


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _op_nodes(g: FusionGraph, op: str) -> list[str]:
    """Nodes computing `op` as the user names it; a recomputed copy is its original's."""
    return [n.name for n in g.nodes if n.op == op and not n.copy_of]


def _unknown(g: FusionGraph, ops: Sequence[str]) -> list[str]:
    """A named op no cluster can hold: a call fusion-advisor keeps opaque (`topk`), one
    sized by a tensor's values, or a name the graph has no op for (`SiLU` for `silu`)."""
    known = {n.op for n in g.nodes} - _NOT_NAMED
    notes, sized = [], []
    for op in dict.fromkeys(ops):
        if op in known:
            continue
        call = next((n for n in g.nodes if n.op in ("opaque", UNSIZED)
                     and n.target.rsplit(".", 1)[-1].removesuffix("()") == op), None)
        if call is not None and call.op == UNSIZED:
            sized.append(said(g, call.name))
        elif call is not None:
            notes.append(f"`{op}` is no op fusion-advisor fuses: {said(g, call.name)} "
                         "stays a call of its own")
        elif layer := _layer_named(g, op):
            notes.append(layer)
        else:
            close = difflib.get_close_matches(op.lower(), sorted(known), n=1, cutoff=0.6)
            kept = [i.note for i in left_unfused(g, os.path.basename)
                    if i.kind == "autocast-block"]
            notes.append(f"`{op}` names no op of {g.name}: " + (
                f"did you mean `{close[0]}`?" if close else
                f"its ops may be inside a call nobody analyses: {kept[0]}" if kept else
                "name ops as the report's `ops` column prints them"))
    if sized:  # one note covers every op sized by a tensor's values
        note = next((i.note for i in left_unfused(g, os.path.basename)
                     if i.kind == "sized-by-value"), "")
        notes.insert(0, f"{', '.join(sized)} {'is' if len(sized) == 1 else 'are'} in no "
                        "cluster" + (f"; the report's note: {note}" if note else ""))
    return notes


def _layer_named(g: FusionGraph, name: str) -> str:
    """A note for a layer's attribute name given as an op (`proj1`, `self.blocks[0].ln`):
    what the layer runs, by the names `assert_fused` takes; "" when no layer is so named."""
    path = name.removeprefix("self.").replace("[", ".").replace("]", "")
    nodes = [n for n in g.nodes if n.module and (n.module == path or n.module.endswith(
        "." + path)) and n.kind not in (OpKind.INPUT, OpKind.CONSTANT, OpKind.OUTPUT)]
    if not nodes:
        return ""
    first = said(g, nodes[0].name)
    if all(n.kind is OpKind.OPAQUE for n in nodes):
        return (f"`{name}` is a layer, not an op: {first}, a {nodes[0].op}, runs as a kernel "
                "of its own, so no cluster holds it")
    ops = ", ".join(f"`{op}`" for op in dict.fromkeys(n.op for n in nodes))
    return f"`{name}` is a layer, not an op: {first} runs {ops}; name those"


def _ordered(c: Cluster, ops: Sequence[str]) -> list[str] | None:
    """The cluster's nodes of the named ops, in cluster order, where it holds them all."""
    want = Counter(ops)
    if want - Counter(c.ops):
        return None
    taken: Counter[str] = Counter()
    out = []
    for node, op in zip(c.nodes, c.ops, strict=True):
        if taken[op] < want[op]:
            taken[op] += 1
            out.append(node)
    return out


def _reordered(g: FusionGraph, clusters: Iterable[Cluster], ops: Sequence[str]) -> str:
    """`…` fuse in cluster 0 in the order found, where one cluster holds all named ops."""
    for c in clusters:
        found = _ordered(c, ops)
        if found is not None and [g[n].op for n in found] != list(ops):
            order = ", ".join(f'"{g[n].op}"' for n in found)
            return (f"`{' → '.join(ops)}` fuse in cluster {c.index} `{c.chain}`, in another "
                    f"order: {' → '.join(said(g, n) for n in found)}; to assert that order: "
                    f"assert_fused([{order}])")
    return ""


def _chain(g: FusionGraph, ops: Sequence[str]) -> list[str]:
    """One node per named op, each feeding the next where the graph allows: of every
    chain started at a node of the first op, the one with the most links along the graph's
    paths, then the shortest span."""
    reach: dict[str, set[str]] = {}

    def reaches(a: str, b: str) -> bool:
        if a not in reach:
            reach[a] = _descendants(g, a)
        return b in reach[a]

    best: tuple[tuple[int, int], list[str]] | None = None
    for start in _op_nodes(g, ops[0]):
        chain = [start]
        for op in ops[1:]:
            free = [n for n in _op_nodes(g, op) if n not in chain]
            if not free:
                break
            last = chain[-1]
            at = g.position(last)
            # reached from the previous op first, then later in the graph, then nearest
            chain.append(min(free, key=lambda n, last=last, at=at: (
                not reaches(last, n), g.position(n) < at, abs(g.position(n) - at))))
        links = sum(reaches(a, b) for a, b in pairwise(chain))
        span = max(map(g.position, chain)) - min(map(g.position, chain))
        if best is None or (-links, span) < best[0]:
            best = ((-links, span), chain)
    return best[1] if best else []


class _Causes:
    def __init__(self, g: FusionGraph, clusters: Sequence[Cluster],
                 rejections: Sequence[Rejection]) -> None:
        self.g, self.clusters, self.rejections = g, clusters, rejections
        self.cluster_of: dict[str, Cluster] = {}
        for c in clusters:
            for n in c.nodes:  # a recomputed copy stands for its original too
                self.cluster_of.setdefault(n, c)
                self.cluster_of.setdefault(g[n].copy_of or n, c)
        self.barriers = find_barriers(g, clusters)

    def linked(self, chain: list[str]) -> bool:
        """Each op of `chain` reaches the next along the graph."""
        return all(b in _descendants(self.g, a) for a, b in pairwise(chain))

    def of(self, chain: list[str]) -> list[str]:
        lines: list[str] = []
        for n in dict.fromkeys(chain):
            if n not in self.cluster_of:
                lines.append(f"{said(self.g, n)} is in no cluster: {self.unfused(n)}")
        seen: set[tuple[int, int]] = set()
        for a, b in pairwise(chain):
            ca, cb = self.cluster_of.get(a), self.cluster_of.get(b)
            if ca is None or cb is None or ca is cb or (ca.index, cb.index) in seen:
                continue
            seen.add((ca.index, cb.index))
            lines.append(f"{said(self.g, a)} is in cluster {ca.index} `{ca.chain}`, "
                         f"{said(self.g, b)} in cluster {cb.index} `{cb.chain}`")
            lines += self.between(a, b, ca, cb)
        return lines

    def unfused(self, n: str) -> str:
        """Why `n` is in no cluster: the check that pruned it, or its opaque neighbours."""
        r = next((r for r in self.rejections if n in r.culprits), None)
        if r is not None:
            return f"{r.check}, {_head(r.reason)}"
        g = self.g
        near = [m for m in (*_nearest(g, g[n].refs, lambda v: g[v].refs),
                            *_nearest(g, g.users[n], lambda v: g.users[v]))]
        if near and all(g[m].kind in (OpKind.OPAQUE, OpKind.INPLACE) for m in near):
            around = " and ".join(dict.fromkeys(said(g, m) for m in near))
            return (f"the ops beside it ({around}) run as kernels of their own, and a "
                    "cluster needs two ops")
        return "no neighbour fuses with it, and a cluster needs two ops that move data"

    def between(self, a: str, b: str, ca: Cluster, cb: Cluster) -> list[str]:
        """What separates `a` (in `ca`) from `b` (in `cb`), in the order a reader checks."""
        g = self.g
        first, second = sorted((a, b), key=g.position)
        path = _descendants(g, first) & _ancestors(g, second)
        sides = (set(ca.nodes), set(cb.nodes))
        lines, said_barriers = [], []
        for x in self.barriers:
            if x.node in path or any(set(x.before) & s and set(x.after) & t
                                     for s, t in (sides, sides[::-1])):
                lines.append(self._barrier(x))
                said_barriers.append(said(g, x.node))
        for n in sorted(path, key=g.position):
            if g[n].kind.is_compute and n not in self.cluster_of:
                lines.append(f"between them {said(g, n)} is in no cluster: {self.unfused(n)}")
        # Rejected candidates that held both ops, else ones that held ops of both clusters;
        # one about a barrier already named ("`.mul_()` (line 19) mutates …") says no more.
        holding = [r for r in self.rejections if {a, b} <= set(r.nodes)] or [
            r for r in self.rejections if set(r.nodes) & sides[0] and set(r.nodes) & sides[1]]
        said_rejections = set()
        for r in holding:
            key = (r.check, _head(r.reason))
            if key not in said_rejections and not any(s in r.reason for s in said_barriers):
                said_rejections.add(key)
                lines.append(f"fusion-advisor rejected `{' → '.join(r.ops)}`"
                             f"{_lines(g, r.lines)}: {r.check}, {_head(r.reason)}")
        if not lines:
            lines += self._cut(a, b)
        return lines or [f"fusion-advisor records no op, check or rule between "
                         f"{said(g, a)} and {said(g, b)}"]

    def _barrier(self, x: Barrier) -> str:
        what = said(self.g, x.node)
        if x.inplace:
            return (f"between them {what} writes in place: fusion-advisor cannot fuse across "
                    "an in-place op; write it out of place")
        layer = f", a {x.op}," if x.layer else ""
        # The barrier's own reason, as the CLI and the plugin's regressions give it.
        return f"between them {what}{layer} runs as a kernel of its own: {x.reason}"

    def _cut(self, a: str, b: str) -> list[str]:
        """The reduction rule: a component with reductions over different rows is cut into
        one region per reduction before any check runs, so no rejection names the cut."""
        g = self.g
        comp = next((c for c in components(g, candidates(g)) if a in c and b in c), None)
        if comp is None:
            return []
        regions = reduction_regions(g, comp)
        ra = next((r for r in regions if a in r), set())
        if b in ra:
            return []
        rb = next((r for r in regions if b in r), set())
        reds = [said(g, n) for r in (ra, rb) for n in sorted(r, key=g.position)
                if g[n].kind is OpKind.REDUCTION]
        return [f"{' and '.join(dict.fromkeys(reds))} reduce over different rows: "
                "fusion-advisor gives each reduction a kernel of its own (one region per "
                "reduction)"]


def _nearest(g: FusionGraph, start: Iterable[str], step) -> list[str]:
    """The nearest ops from `start` along `step`, through views (the graph's inputs,
    constants and output are no ops)."""
    found, todo, seen = [], list(start), set()
    while todo:
        v = todo.pop(0)
        if v in seen:
            continue
        seen.add(v)
        kind = g[v].kind
        if kind is OpKind.VIEW:
            todo += step(v)
        elif kind not in (OpKind.INPUT, OpKind.CONSTANT, OpKind.OUTPUT) and g[v].op != "meta":
            found.append(v)
    return found


def _descendants(g: FusionGraph, name: str) -> set[str]:
    return _walk(g, name, lambda n: g.users[n])


def _ancestors(g: FusionGraph, name: str) -> set[str]:
    return _walk(g, name, lambda n: g[n].refs)


def _walk(g: FusionGraph, name: str, step) -> set[str]:
    seen: set[str] = set()
    todo = list(step(name))
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo += step(n)
    return seen


def _head(reason: str) -> str:
    """The first clause of a legality reason (the part before the pruning details)."""
    return reason.split(";")[0].strip()


def _lines(g: FusionGraph, span: LineSpan | None) -> str:
    """` (lines 23-25)`, with the file where the model's ops span several."""
    if span is None:
        return ""
    tail = f"{span.start}" if span.start == span.end else f"{span.start}-{span.end}"
    word = "line" if span.start == span.end else "lines"
    if len(g.source_files) < 2 and span.file in g.source_files:
        return f" ({word} {tail})"
    return f" ({os.path.basename(span.file)}:{tail})"
