"""Model totals: what the whole model launches and moves once its clusters are fused.

Reads a ``FusionGraph`` and its clusters; returns ``ModelTotals``: the kernels the model
runs (each cluster one, each compute op outside every cluster one, each opaque or
in-place op one; a view none, unless eager copies a strided input for it, as
`.contiguous()` after a permute) and the DRAM bytes of its pointwise and reduction work
and such copies (clusters at their fused bytes, the rest at their eager bytes). The pytest
plugin compares two runs' totals to tell an edit that removed work from the model (fewer
kernels, less traffic) from one that lost a fusion.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..ir.graph import FusionGraph, OpKind
from .traffic import estimate_traffic
from .types import Cluster


@dataclass(frozen=True)
class ModelTotals:
    kernels: int
    traffic_bytes: int


def model_totals(graph: FusionGraph, clusters: Iterable[Cluster]) -> ModelTotals:
    clusters = tuple(clusters)
    fused = {n for c in clusters for n in c.nodes}
    kernels, traffic = len(clusters), sum(c.traffic.fused_bytes for c in clusters)
    for n in graph.nodes:
        if n.name in fused or n.copy_of:  # a copy outside every cluster never runs
            continue
        if n.kind.is_compute:
            kernels += 1
            traffic += estimate_traffic(graph, [n.name]).unfused_bytes
        elif n.kind is OpKind.INPLACE or (n.kind is OpKind.OPAQUE and n.op != "meta"):
            kernels += 1
        elif _copies(graph, n.name):
            kernels += 1
            traffic += 2 * graph[n.name].meta.nbytes
    return ModelTotals(kernels, traffic)


# Views eager runs as a copy when their input is strided: `.contiguous()` after a permute.
_COPYING_VIEWS = ("contiguous", "reshape", "flatten")


def _copies(graph: FusionGraph, name: str) -> bool:
    n = graph[name]
    src = graph[n.refs[0]].meta if n.refs else None
    return (n.kind is OpKind.VIEW and n.op in _COPYING_VIEWS and n.meta is not None
            and src is not None and not src.is_contiguous and n.meta.is_contiguous)
