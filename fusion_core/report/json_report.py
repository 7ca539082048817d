"""The machine-readable report (`--json`): a versioned document and its JSON Schema."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from ..analysis.types import Cluster, LineSpan, MetadataRead, Rejection, ShapeRead
from ..fileio import write_atomic
from ..ir.graph import FusionGraph
from ..pipeline import Analysis
from .left_unfused import left_unfused, left_unfused_dict
from .units import short_path

SCHEMA_VERSION = 1


def _lines(span: LineSpan | None) -> dict[str, Any] | None:
    return None if span is None else {"file": span.file, "start": span.start, "end": span.end}


def inputs_json(specs) -> list[dict[str, Any]]:
    """Each input's shape and dtype, and its memory order (dims outermost to innermost)
    where that is not the contiguous one: a channels-last input was analysed so."""
    out: list[dict[str, Any]] = []
    for s in specs:
        d: dict[str, Any] = {"shape": list(s.shape), "dtype": str(s.dtype).removeprefix("torch.")}
        if s.memory_order is not None:
            d["memory_order"] = list(s.memory_order)
        out.append(d)
    return out


def shape_read_dict(g: FusionGraph, r: ShapeRead) -> dict[str, Any]:
    """A shape read (`h.shape[-1]`) the cluster's inputs answer, so `of` need not be stored:
    by node (as `nodes` and `inputs` are) and by the line the user wrote it on."""
    src = g[r.read].source
    return {"read": r.read, "of": r.of, "sources": list(r.sources),
            "line": src.line if src else None, "code": src.code if src else None}


def metadata_read_dict(g: FusionGraph, r: MetadataRead) -> dict[str, Any]:
    """A dtype or device read (`input_dtype = x.dtype`, `device=h.device`) the cluster's
    input `source` answers, so `of` need not be stored: by node, by the line the user wrote
    it on, and for a dtype the dtype read."""
    src, meta = g[r.read].source, g[r.of].meta
    out: dict[str, Any] = {"read": r.read, "of": r.of, "source": r.source}
    if r.attribute == "dtype":
        out["dtype"] = str(meta.dtype).removeprefix("torch.") if meta else None
    return out | {"line": src.line if src else None, "code": src.code if src else None}


def cluster_dict(c: Cluster, g: FusionGraph) -> dict[str, Any]:
    return {
        "index": c.index, "category": c.category, "ops": list(c.ops), "nodes": list(c.nodes),
        "inputs": list(c.inputs), "outputs": list(c.outputs),
        "traffic": {"unfused_bytes": c.traffic.unfused_bytes,
                    "fused_bytes": c.traffic.fused_bytes,
                    "saved_bytes": c.traffic.saved_bytes},
        "lines": _lines(c.lines), "recomputes": list(c.recomputes),
        "shape_reads": [shape_read_dict(g, r) for r in c.shape_reads],
        "dtype_reads": [metadata_read_dict(g, r) for r in c.dtype_reads],
        "device_reads": [metadata_read_dict(g, r) for r in c.device_reads],
    }


def rejection_dict(r: Rejection) -> dict[str, Any]:
    return {"check": r.check, "ops": list(r.ops), "nodes": list(r.nodes),
            "culprits": list(r.culprits), "reason": r.reason, "lines": _lines(r.lines)}


def to_document(analysis: Analysis, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON document; later passes add their sections through `extra`."""
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "model": analysis.model_name,
        "frontend": analysis.graph.frontend,
        "capture_fallback": analysis.capture_fallback or None,
        "capture_choice": analysis.capture_choice or None,
        "inputs": inputs_json(analysis.inputs),
        "n_nodes": analysis.n_nodes,
        "clusters": [cluster_dict(c, analysis.graph) for c in analysis.clusters],
        "rejections": [rejection_dict(r) for r in analysis.rejections],
        # The console header's "Left unfused" notes: ops no cluster or rejection names.
        "left_unfused": [left_unfused_dict(i) for i in left_unfused(analysis.graph, short_path)],
        "totals": {
            "unfused_bytes": sum(c.traffic.unfused_bytes for c in analysis.clusters),
            "fused_bytes": sum(c.traffic.fused_bytes for c in analysis.clusters),
        },
    }
    doc.update(extra or {})
    return doc


def schema() -> dict[str, Any]:
    text = resources.files("fusion_core.report").joinpath("analysis.schema.json").read_text()
    return json.loads(text)


def write_json(path: str | Path, doc: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(doc, indent=2) + "\n")
