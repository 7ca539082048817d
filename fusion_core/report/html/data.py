"""The data one HTML page shows: the laid-out graph and everything known per cluster.

Reads an ``Analysis``, its ``SourceMapping``s and the JSON extras the CLI's later steps
returned (``validation``, ``inductor``) or the pytest plugin's measurement; writes one
JSON-able dict: drawn nodes with their positions, edges with their bends, bands and
collapsible groups, and per cluster its ops, source lines, diff, generated Triton source,
traffic, numerics and timings; the rejections; Inductor's kernels we did not propose.
Parameters and shape queries are not drawn (they would triple the node count); a cluster's
detail lists its inputs instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...analysis.types import LineSpan
from ...ir.graph import FusionGraph, Node, OpKind
from ...pipeline import Analysis
from ..units import short_path
from .blocks import block_key, find_bands
from .layout import LayoutNode, layout

KIND_CODE = {OpKind.POINTWISE_UNARY: "p", OpKind.POINTWISE_BINARY: "p", OpKind.GENERATOR: "p",
             OpKind.REDUCTION: "r",
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
    if target.startswith(("torch.", "F.", "operator.", ".")):
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


def graph_view(analysis: Analysis) -> dict[str, Any]:
    """Nodes, edges, bands and groups, laid out (see layout.py and blocks.py)."""
    g: FusionGraph = analysis.graph
    nodes = [n for n in g.nodes if drawn(n)]
    names = {n.name for n in nodes}
    cluster_of = {m: c.index for c in analysis.clusters for m in c.nodes}
    paths = module_paths(analysis)
    bands = find_bands([n.name for n in nodes], paths, {n.name: n.op for n in nodes})
    band_of = bands.band_of()
    edges = [(r, n.name) for n in nodes for r in dict.fromkeys(n.refs) if r in names]
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
    return {
        "width": lay.width,
        # [name, label, kind, x, layer, width, cluster or -1, rejection or -1]
        "nodes": [[n.name, label(n), KIND_CODE.get(n.kind, "o"), lay.x[n.name],
                   lay.layer[n.name], round(len(label(n)) * CHAR_WIDTH + PAD, 1),
                   cluster_of.get(n.name, -1), marks.get(n.name, -1)] for n in nodes],
        # [target, source line, shape and dtype, module path]
        "info": [[n.target, str(n.source.line) if n.source else "", _shape(n),
                  paths.get(n.name, "")] for n in nodes],
        "edges": [[index[u], index[v], [c for x, layer in pts for c in (x, layer)]]
                  for u, v, pts in lay.edges],
        "stubs": [[index[u], index[v]] for u, v in lay.stubs],
        "bands": [{"label": b.label, "start": lay.band_start[i], "depth": lay.band_depth[i],
                   "group": b.group} for i, b in enumerate(bands.bands)],
        "groups": [{"label": gr.label, "bands": list(gr.bands), "n": len(gr.bands),
                    "counterpart": {index[a]: index[b] for a, b in gr.counterpart}}
                   for gr in bands.groups],
    }


def _kernel_source(analysis: Analysis, cluster) -> tuple[str, str]:
    from ...codegen import LoweringError, generate

    try:
        return generate(analysis, cluster).source, ""
    except LoweringError as e:
        return "", str(e).strip().splitlines()[0] if str(e).strip() else "cannot be lowered"


def _timings(extra: dict[str, Any], measured: dict | None) -> dict[int, dict[str, Any]]:
    """Per cluster: samples in µs, GB/s and the ceilings, from the CLI or the plugin."""
    out: dict[int, dict[str, Any]] = {}
    validation = extra.get("validation") or {}
    for r in validation.get("clusters", []):
        t = r.get("timing_us") or {}
        if t.get("kernel"):
            out[r["cluster"]] = {"kernel_us": t["kernel"], "eager_us": t.get("eager", []),
                                 "inductor_us": t.get("inductor", []), "gbps": r.get("gbps"),
                                 "peak_gbps": r.get("peak_gbps"),
                                 "copy_gbps": r.get("copy_gbps"), "regime": r.get("regime")}
    for r in (measured or {}).get("clusters", []):
        out.setdefault(r["index"], {"kernel_us": r.get("kernel_us", []),
                                    "eager_us": r.get("eager_us", []), "inductor_us": [],
                                    "gbps": r.get("gbps"), "peak_gbps": None,
                                    "copy_gbps": r.get("copy_gbps"), "regime": r.get("regime")})
    return out


def clusters_view(analysis: Analysis, mappings: Sequence[Any], extra: dict[str, Any],
                  measured: dict | None, kernels: Mapping[int, tuple[str, str]] | None = None
                  ) -> list[dict[str, Any]]:
    """One entry per cluster; `kernels` (cluster -> source, why none) are the kernels the
    caller already generated, else each is generated here."""
    from ...sourcemap.diff import diff_lines, header

    sources = _Sources()
    by_index = {m.cluster_index: m for m in mappings}
    numerics = {r["cluster"]: r for r in (extra.get("validation") or {}).get("clusters", [])}
    timings = _timings(extra, measured)
    inductor = extra.get("inductor") or {}
    verdicts = {v["cluster"]: v for v in inductor.get("cluster_verdicts", [])}
    out = []
    for c in analysis.clusters:
        m = by_index.get(c.index)
        known = kernels.get(c.index) if kernels is not None else None
        kernel, kernel_error = known if known is not None else _kernel_source(analysis, c)
        check = numerics.get(c.index)
        out.append({
            "index": c.index, "category": c.category, "ops": list(c.ops), "nodes": list(c.nodes),
            "inputs": list(c.inputs), "outputs": list(c.outputs),
            "recomputes": list(c.recomputes), "where": _where(c.lines),
            "source": sources.lines(c.lines),
            "map": m.quality if m else "", "map_reason": (m.reason or "") if m else "",
            "diff": "\n".join([header(m), *diff_lines(m)]) if m is not None and m.exact
            else "",
            "kernel": kernel, "kernel_error": kernel_error,
            "unfused_bytes": c.traffic.unfused_bytes, "fused_bytes": c.traffic.fused_bytes,
            "numerics": None if check is None else {
                "status": check["status"], "max_abs_err": check["max_abs_err"],
                "gates": check["gates"]},
            "timing": timings.get(c.index),
            "inductor": verdicts.get(c.index),
            "inductor_kernels": [k for k in inductor.get("kernels", [])
                                 if c.index in k.get("clusters", [])],
        })
    return out


def _missed(analysis: Analysis, inductor: dict[str, Any]) -> list[dict[str, Any]]:
    """Inductor kernels we did not propose, each with the rejection on its lines if any."""
    out = []
    for k in inductor.get("kernels", []):
        if k.get("status") != "missed":
            continue
        lines = set(k.get("lines", []))
        hit = next((r for r in analysis.rejections if r.lines and lines & set(
            range(r.lines.start, r.lines.end + 1))), None)
        why = (f"we rejected a candidate on these lines: {hit.check}, {hit.reason}" if hit
               else "no candidate of ours covers these ops (no rejection names these lines)")
        out.append({**k, "reason": why})
    return out


def page_data(analysis: Analysis, extra: dict[str, Any] | None = None,
              mappings: Sequence[Any] | None = None, measured: dict | None = None,
              title: str = "", kernels: Mapping[int, tuple[str, str]] | None = None,
              hints: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Everything one page shows, as plain JSON-able data.

    `hints`: why a section is empty, by section (`inductor`, `numerics`, `untimed`), in the
    words of the tool that wrote the page (only the CLI names its own flags).
    """
    from ...sourcemap import map_clusters

    extra = extra or {}
    if mappings is None:
        mappings = map_clusters(analysis)
    clusters = analysis.clusters
    validation = extra.get("validation") or {}
    inductor = extra.get("inductor")
    return {
        "title": title or analysis.model_name,
        "model": analysis.model_name, "frontend": analysis.graph.frontend,
        "capture_fallback": analysis.capture_fallback,
        "inputs": [str(s) for s in analysis.inputs], "n_nodes": analysis.n_nodes,
        "unfused_bytes": sum(c.traffic.unfused_bytes for c in clusters),
        "fused_bytes": sum(c.traffic.fused_bytes for c in clusters),
        "mode": validation.get("mode", ""), "device": validation.get("device", ""),
        "timed": validation.get("timed"),
        "model_check": validation.get("model"),
        "hints": dict(hints or {}),
        "graph": graph_view(analysis),
        "clusters": clusters_view(analysis, mappings, extra, measured, kernels),
        "rejections": [{"check": r.check, "ops": list(r.ops), "nodes": list(r.nodes),
                        "culprits": list(r.culprits), "reason": r.reason,
                        "where": _where(r.lines)} for r in analysis.rejections],
        "inductor_ran": inductor is not None,
        "inductor_missed": _missed(analysis, inductor) if inductor else [],
    }
