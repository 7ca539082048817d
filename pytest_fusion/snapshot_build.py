"""A test's ``Snapshot`` made from the analysis of its model.

Reads an ``Analysis`` (its graph, clusters and rejections; optional measurements and
kernels) and the rootdir; writes a ``Snapshot`` (``snapshot.py``) whose source paths are
rootdir-relative, so a baseline made on one checkout applies to every other.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .snapshot import (
    BarrierRec,
    ClusterRec,
    Measured,
    OpRec,
    RejectionRec,
    Snapshot,
    Totals,
    numbered,
)


def relative_file(path: str, rootdir: Path) -> str:
    """A source path relative to the rootdir (POSIX), so baselines are portable."""
    p = Path(path)
    if not p.is_absolute():
        return p.as_posix()
    p, root = p.resolve(), rootdir.resolve()
    # An installed library (a venv inside the project, as CI makes) is not project code.
    if p.is_relative_to(root) and not {"site-packages", "dist-packages"} & set(p.parts):
        return p.relative_to(root).as_posix()
    return "…/" + "/".join(p.parts[-2:])  # outside the project: keep it short and stable


def line_runs(lines: Iterable[int]) -> str:
    """`15-16, 29` for lines 15, 16 and 29."""
    runs: list[list[int]] = []
    for n in sorted(set(lines)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def where(graph: Any, names: Iterable[str], rootdir: Path) -> str:
    """`blocks.py:15-16, 29`: the lines the nodes come from, in the file most of them do
    (a span from 15 to 29 would quote the class between); "?" when none has a source."""
    locs = [graph[n].source for n in names if graph[n].source is not None]
    if not locs:
        return "?"
    file = Counter(loc.file for loc in locs).most_common(1)[0][0]
    return f"{relative_file(file, rootdir)}:{line_runs(x.line for x in locs if x.file == file)}"


def from_analysis(analysis: Any, test: str, rootdir: Path,
                  measured: dict[str, Measured] | None = None,
                  provenance: dict[str, str] | None = None,
                  kernels: dict[int, tuple[str | None, str]] | None = None,
                  target: str = "cpu") -> Snapshot:
    """`kernels`: cluster index -> (kernel kind or None, lowering error); `target`: the
    device the analysis was made for.

    Clusters keep the analysis' order, so `clusters[c.index]` is cluster `c`.
    """
    import fusion_core

    kernels = kernels or {}
    graph = analysis.graph
    sites = fusion_core.op_sites(graph)
    clusters = []
    for c in analysis.clusters:
        scope = fusion_core.scope_of(graph, c.nodes)
        clusters.append(ClusterRec(
            ops=tuple(c.ops), lines=where(graph, c.nodes, rootdir), category=c.category,
            nodes=tuple(c.nodes), unfused_bytes=int(c.traffic.unfused_bytes),
            fused_bytes=int(c.traffic.fused_bytes),
            kernel=kernels.get(c.index, (None, ""))[0],
            kernel_error=kernels.get(c.index, (None, ""))[1],
            module=scope.module, function=scope.function,
            sites=tuple(sites.get(n, "") for n in c.nodes)))
    rejections = []
    for r in analysis.rejections:
        scope = fusion_core.scope_of(graph, r.nodes)
        rejections.append(RejectionRec(
            check=r.check, ops=tuple(r.ops), lines=where(graph, r.nodes, rootdir),
            nodes=tuple(r.nodes), culprits=tuple(r.culprits), reason=r.reason,
            module=scope.module, function=scope.function,
            sites=tuple(sites.get(n, "") for n in r.nodes)))
    barriers = tuple(BarrierRec(
        node=b.node, op=b.op, target=b.target or b.op, inplace=b.inplace,
        lines=where(graph, [b.node], rootdir),
        before=tuple((n, graph[n].op) for n in b.before),
        after=tuple((n, graph[n].op) for n in b.after), reason=b.reason)
        for b in fusion_core.find_barriers(graph, analysis.clusters))
    totals = fusion_core.model_totals(graph, analysis.clusters)
    return Snapshot(test=test, model=analysis.model_name,
                    inputs=tuple(str(s) for s in analysis.inputs),
                    clusters=tuple(numbered(clusters, lambda c: c.ident)),
                    rejections=tuple(numbered(rejections, lambda r: r.ident)),
                    provenance=dict(provenance or {}), measured=dict(measured or {}),
                    frontend=graph.frontend, target=target, barriers=barriers,
                    # fusion_core names the file as imported: shown rootdir-relative here.
                    fallback=getattr(analysis, "capture_fallback", "").replace(
                        f"{rootdir.resolve()}/", ""),
                    totals=Totals(totals.kernels, totals.traffic_bytes),
                    op_index=op_index(graph, sites, rootdir,
                                      fusion_core.split_biases(analysis.graph_module)))


_KINDS = {"opaque": "opaque", "inplace": "inplace", "view": "view"}


def op_index(graph: Any, sites: dict[str, str], rootdir: Path, biases: dict[str, str]
             ) -> tuple[OpRec, ...]:
    """Every op with a site, and every view (site ""), in graph order. `biases`: split-off
    bias adds -> their layer (`fusion_core.split_biases`)."""
    feeds: dict[str, list[str]] = {}
    reads = {n.name: _reads(graph, n.name, sites, feeds) for n in graph.nodes
             if n.name in sites or n.kind.value == "view"}
    return tuple(OpRec(node=n.name, op=n.op, site=sites.get(n.name, ""), target=_target(n),
                       kind=_KINDS.get(n.kind.value, "compute"), module=n.module,
                       line=where(graph, [n.name], rootdir),
                       synthetic=f"bias of {biases[n.name]}" if n.name in biases else "",
                       reads=reads[n.name], feeds=tuple(feeds.get(n.name, ())))
                 for n in graph.nodes if n.name in reads)


def _target(node: Any) -> str:
    """What the user wrote for `node`: a subscript (`y.chunk(1, dim=0)[0]`) as its line
    writes it, not FX's `operator.getitem`."""
    if node.target == "operator.getitem" and node.source is not None:
        import fusion_core  # here, as in from_analysis: a run without fusion tests loads none

        return fusion_core.subscript_written(node.source.code) or node.target
    return node.target


def _reads(graph: Any, name: str, sites: dict[str, str], feeds: dict[str, list[str]]
           ) -> tuple[str, ...]:
    """The ops (nodes with a site) whose values `name` reads, looking through views; an op
    with a site is added to `feeds` of each view it looks through."""
    found: list[str] = []
    todo, seen = list(graph[name].refs), set()
    while todo:
        ref = todo.pop()
        if ref in seen:
            continue
        seen.add(ref)
        if ref in sites:
            found.append(ref)
        elif graph[ref].kind.value == "view":
            if name in sites:
                feeds.setdefault(ref, []).append(name)
            todo += graph[ref].refs
    return tuple(found)
