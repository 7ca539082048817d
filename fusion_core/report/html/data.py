"""The data one HTML page shows: the laid-out graph and everything known per cluster.

Reads an ``Analysis`` and the typed results of the steps after it (``PageResults``,
``results.py``: source mappings, kernels, the validation report, the Inductor agreement, or
the pytest plugin's measurement); writes one JSON-able dict: drawn nodes with their
positions, edges with their bends, bands and collapsible groups, and per cluster its ops,
source lines, diff, generated Triton source, traffic, numerics and timings; the rejections;
Inductor's kernels we did not propose.
Parameters and shape queries are not drawn (they would triple the node count); a cluster's
detail lists its inputs instead. For a comparison page the graph also holds the baseline's
nodes the current graph lacks (``Ghost``), each node and edge only one graph has marked so.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...analysis.types import Cluster, LineSpan
from ...ir.graph import FusionGraph, Node, OpKind
from ...ir.registry import SPECS
from ...ir.spelling import said
from ...names import module_written, written
from ...pipeline import Analysis
from ..console import retried
from ..units import short_path
from .blocks import block_key, find_bands
from .layout import LayoutNode, layout
from .results import PageResults, inductor_view, missed, numerics_view

if TYPE_CHECKING:
    from ...sourcemap import SourceMapping
    from ...validate.kernels import KernelSet

KIND_CODE = {OpKind.POINTWISE_UNARY: "p", OpKind.POINTWISE_BINARY: "p", OpKind.GENERATOR: "p",
             OpKind.REDUCTION: "r", OpKind.CONCAT: "p",
             OpKind.OPAQUE: "o", OpKind.VIEW: "v", OpKind.INPLACE: "i", OpKind.INPUT: "in",
             OpKind.OUTPUT: "out"}
CHAR_WIDTH, PAD = 6.6, 16  # 11px monospace labels


def drawn(n: Node) -> bool:
    return n.kind is not OpKind.CONSTANT and n.op != "meta"


def call_label(target: str) -> str:
    """The short name of a call normalize.py spelled `target`: `matmul` for `operator.matmul`,
    `roll()` for `.roll()`, `cumprod` for an exported graph's `cumprod.default`; a library
    op keeps its library (`mylib::scale`)."""
    if "::" in target:
        return target
    if target.startswith(("torch.", "F.", "nn.", "operator.", ".")):
        return target.rsplit(".", 1)[-1]
    return target.split(".", 1)[0]  # `name.overload`: the overload says nothing here


def label(n: Node) -> str:
    if n.kind is OpKind.OPAQUE and n.op == "opaque":
        return call_label(n.target) or n.name
    if n.kind in (OpKind.INPUT, OpKind.OUTPUT):
        return n.name
    return n.op


def module_paths(analysis: Analysis) -> dict[str, str]:
    """Node -> the outermost module path that names an indexed block, else the innermost."""
    out = {}
    for fx_node in analysis.graph_module.graph.nodes:
        stack = fx_node.meta.get("nn_module_stack") or {}
        paths = [str(v[0]) for v in stack.values() if isinstance(v, tuple) and v]
        out[fx_node.name] = next((p for p in paths if block_key(p)), paths[-1] if paths else "")
    return out


def _where(span: LineSpan | None) -> str:
    if span is None:
        return ""
    tail = f"{span.start}" if span.start == span.end else f"{span.start}-{span.end}"
    return f"{short_path(span.file)}:{tail}"


def _shape(n: Node) -> str:
    if n.meta is None:
        return ""
    return "×".join(map(str, n.meta.shape)) + " " + str(n.meta.dtype).removeprefix("torch.")


class _Sources:
    """Source lines of the user's files, read once each."""

    def __init__(self) -> None:
        self.files: dict[str, list[str] | None] = {}

    def lines(self, span: LineSpan | None) -> list[tuple[int, str]]:
        if span is None:
            return []
        if span.file not in self.files:
            try:
                self.files[span.file] = Path(span.file).read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError):
                self.files[span.file] = None
        text = self.files[span.file] or []
        return [(i, text[i - 1]) for i in range(span.start, span.end + 1) if 0 < i <= len(text)]


@dataclass(frozen=True)
class Ghost:
    """A node of the baseline's graph that the current graph lacks (a comparison page).

    A recompute copy (`copy_of` names its original) reads what the original reads and feeds
    `anchor`, the cluster member that read it. An op the current graph lacks altogether sits
    just above `anchor`, the member after it in its cluster, with no edge drawn: the baseline
    records which ops a cluster held, not which one fed which.
    """

    name: str  # drawn name, unique in the graph: `add_5 (baseline)`
    op: str
    anchor: str  # a node of the current graph
    copy_of: str = ""


def _ghost_node(g: FusionGraph, ghost: Ghost) -> Node:
    anchor = g[ghost.anchor]
    if ghost.copy_of:
        original = g[ghost.copy_of]
        return replace(original, name=ghost.name, copy_of=ghost.copy_of, module=anchor.module)
    spec = SPECS.get(ghost.op.rstrip("_"))
    return Node(name=ghost.name, op=ghost.op,
                kind=spec.kind if spec is not None else OpKind.POINTWISE_UNARY,
                target="not in the current graph", module=anchor.module)


def _two_graphs(g: FusionGraph, ghosts: Sequence[Ghost], current_only: Collection[str]
                ) -> tuple[list[Node], dict[tuple[str, str], str]]:
    """The drawn nodes with the ghosts in (each just before its anchor), and which edges only
    one of the two graphs has: `base` (the ghosts' own, and an original read where only the
    current graph has a copy), `current` (the current-only copies' own, and an original read
    where the baseline had a copy), `layout` (placing an op the current graph lacks)."""
    made = {gh.name: _ghost_node(g, gh) for gh in ghosts}
    before: dict[str, list[Node]] = {}
    for ghost in ghosts:
        before.setdefault(ghost.anchor, []).append(made[ghost.name])
    nodes = [m for n in g.nodes if drawn(n) for m in (*before.get(n.name, ()), n)]
    only: dict[tuple[str, str], str] = {}
    for ghost in ghosts:
        if ghost.copy_of:
            only.update({(r, ghost.name): "base" for r in made[ghost.name].refs})
            only[(ghost.name, ghost.anchor)] = "base"
            only[(ghost.copy_of, ghost.anchor)] = "current"
        else:
            only[(ghost.name, ghost.anchor)] = "layout"
    for name in current_only:
        copy = g[name]
        only.update({(r, name): "current" for r in copy.refs})
        for user in g.users[name]:
            only[(name, user)] = "current"
            if copy.copy_of not in g[user].refs:  # without the copy it read the original
                only.setdefault((copy.copy_of, user), "base")
    return nodes, only


def graph_view(analysis: Analysis, ghosts: Sequence[Ghost] = (),
               current_only: Collection[str] = ()) -> dict[str, Any]:
    """Nodes, edges, bands and groups, laid out (see layout.py and blocks.py).

    A comparison page draws two graphs on one layout: `ghosts` only the baseline's,
    `current_only` (recompute copies) only the current one's; `only` lists their indices
    and an edge only one graph has carries `base` or `current` last.
    """
    g: FusionGraph = analysis.graph
    nodes, only = _two_graphs(g, ghosts, current_only)
    names = {n.name for n in nodes}
    cluster_of = {m: c.index for c in analysis.clusters for m in c.nodes}
    paths = module_paths(analysis)
    paths.update({gh.name: paths.get(gh.anchor, "") for gh in ghosts})
    bands = find_bands([n.name for n in nodes], paths, {n.name: n.op for n in nodes})
    band_of = bands.band_of()
    edges = [(r, n.name) for n in nodes for r in dict.fromkeys(n.refs) if r in names]
    known = set(edges)
    edges += [(u, v) for (u, v), side in only.items()
              if side != "current" and (u, v) not in known and u in names and v in names]
    has_input = {v for _, v in edges}
    lay = layout([LayoutNode(n.name, round(len(label(n)) * CHAR_WIDTH + PAD, 1),
                             band_of[n.name], cluster_of.get(n.name, -1),
                             sink=bool(n.copy_of) or (n.name not in has_input
                                                      and n.kind is not OpKind.INPUT))
                  for n in nodes], edges)
    index = {n.name: i for i, n in enumerate(nodes)}
    marks = {}
    for ri, r in enumerate(analysis.rejections):
        for m in r.nodes:
            marks.setdefault(m, ri)

    def side(u: str, v: str) -> list[str]:
        return [only[(u, v)]] if (u, v) in only else []

    return {
        "width": lay.width,
        # [name, label, kind, x, layer, width, cluster or -1, rejection or -1]
        "nodes": [[n.name, label(n), KIND_CODE.get(n.kind, "o"), lay.x[n.name],
                   lay.layer[n.name], round(len(label(n)) * CHAR_WIDTH + PAD, 1),
                   cluster_of.get(n.name, -1), marks.get(n.name, -1)] for n in nodes],
        # [target, source line, shape and dtype, module path]
        "info": [[written(n.target), str(n.source.line) if n.source else "", _shape(n),
                  module_written(paths[n.name]) if paths.get(n.name) else ""] for n in nodes],
        # [source, target, bends (x, layer, ...), and `base` or `current` if one graph's]
        "edges": [[index[u], index[v], [c for x, layer in pts for c in (x, layer)],
                   *side(u, v)] for u, v, pts in lay.edges if only.get((u, v)) != "layout"],
        "stubs": [[index[u], index[v], *side(u, v)] for u, v in lay.stubs
                  if only.get((u, v)) != "layout"],
        "only": {"base": [index[gh.name] for gh in ghosts],
                 "current": sorted(index[n] for n in current_only)},
        "bands": [{"label": b.label, "start": lay.band_start[i], "depth": lay.band_depth[i],
                   "group": b.group} for i, b in enumerate(bands.bands)],
        "groups": [{"label": gr.label, "bands": list(gr.bands), "n": len(gr.bands),
                    "counterpart": {index[a]: index[b] for a, b in gr.counterpart}}
                   for gr in bands.groups],
    }


def _kernel_source(analysis: Analysis, cluster: Cluster, kernels: KernelSet | None
                   ) -> tuple[str, str]:
    """The cluster's kernel source and why there is none: from the kernels the caller
    generated, else generated here."""
    if kernels is not None and cluster.index in kernels.kernels:
        return kernels.kernels[cluster.index].source, ""
    if kernels is not None and cluster.index in kernels.failed:
        return "", kernels.failed[cluster.index]
    from ...codegen import LoweringError, generate

    try:
        return generate(analysis, cluster).source, ""
    except LoweringError as e:
        return "", str(e).strip().splitlines()[0] if str(e).strip() else "cannot be lowered"


def clusters_view(analysis: Analysis, results: PageResults,
                  mappings: Sequence[SourceMapping]) -> list[dict[str, Any]]:
    """One entry per cluster."""
    from ...sourcemap.diff import diff_lines, header

    sources = _Sources()
    by_index = {m.cluster_index: m for m in mappings}
    report = results.report
    timings = results.timings()
    out = []
    g = analysis.graph
    for c in analysis.clusters:
        m = by_index.get(c.index)
        kernel, kernel_error = _kernel_source(analysis, c, results.kernels)
        timing = timings.get(c.index)
        out.append({
            "index": c.index, "category": c.category, "ops": list(c.ops), "nodes": list(c.nodes),
            "inputs": list(c.inputs), "outputs": list(c.outputs),
            "recomputes": list(c.recomputes), "where": _where(c.lines),
            # What the panel prints: the values as the user wrote them (`add` (line 16)),
            # not their node names (`add_1`), which stay above to identify the nodes.
            "reads": [said(g, n) for n in c.inputs], "writes": [said(g, n) for n in c.outputs],
            "recomputed": [said(g, n) for n in c.recomputes],
            "source": sources.lines(c.lines),
            "map": m.quality.value if m else "", "map_reason": (m.reason or "") if m else "",
            "diff": "\n".join([header(m), *diff_lines(m)]) if m is not None and m.exact
            else "",
            "kernel": kernel, "kernel_error": kernel_error,
            "unfused_bytes": c.traffic.unfused_bytes, "fused_bytes": c.traffic.fused_bytes,
            "numerics": numerics_view(report.result(c.index) if report else None),
            "timing": timing.view() if timing else None,
            **inductor_view(results.agreement, c),
        })
    return out


def page_data(analysis: Analysis, results: PageResults | None = None, *, title: str = "",
              hints: Mapping[str, str] | None = None, ghosts: Sequence[Ghost] = (),
              current_only: Collection[str] = ()) -> dict[str, Any]:
    """Everything one page shows, as plain JSON-able data.

    `results`: what later steps found (``PageResults``: the CLI's run, the plugin's
    measurement); `hints`: why a section is empty, by section (`inductor`, `numerics`,
    `untimed`), in the words of the tool that wrote the page (only the CLI names its own
    flags); `ghosts` and `current_only`: see ``graph_view``.
    """
    from ...sourcemap import map_clusters

    results = results or PageResults()
    mappings = results.mappings if results.mappings is not None else map_clusters(analysis)
    clusters = analysis.clusters
    report, agreement = results.report, results.agreement
    return {
        "title": title or analysis.model_name,
        "model": analysis.model_name, "frontend": analysis.graph.frontend,
        "capture_fallback": analysis.capture_fallback,
        "inputs": [str(s) for s in analysis.inputs], "n_nodes": analysis.n_nodes,
        "unfused_bytes": sum(c.traffic.unfused_bytes for c in clusters),
        "fused_bytes": sum(c.traffic.fused_bytes for c in clusters),
        "mode": report.mode if report else "", "device": report.device if report else "",
        "timed": report.timed if report else None,
        "hints": dict(hints or {}),
        "graph": graph_view(analysis, ghosts, current_only),
        "clusters": clusters_view(analysis, results, mappings),
        "rejections": [{"check": r.check, "ops": list(r.ops), "nodes": list(r.nodes),
                        "culprits": list(r.culprits), "reason": r.reason,
                        "retried": retried(analysis.graph, r, analysis.clusters),
                        "where": _where(r.lines)} for r in analysis.rejections],
        "inductor_ran": agreement is not None,
        "inductor_missed": missed(analysis, agreement) if agreement else [],
    }
