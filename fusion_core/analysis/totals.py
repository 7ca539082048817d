"""Model totals: what the whole model launches and moves once its clusters are fused.

Reads a ``FusionGraph`` and its clusters; returns ``ModelTotals``: the kernels the model
runs (each cluster one, each compute op outside every cluster one, each opaque or
in-place op one; views none) and the DRAM bytes of its pointwise and reduction work
(clusters at their fused bytes, the other compute ops at their eager bytes). The pytest
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
    return ModelTotals(kernels, traffic)
