"""Where the numerics run: the model re-analysed at a smaller input shape, and its activations.

Reads an ``Analysis`` and candidate input specs; writes a ``Recording``: the analysis at
the first candidate whose graph is the analysed one (``graph_difference``) and whose clusters are
the real ones (same nodes, inputs and outputs, matched by node names), the traced graph,
random inputs, the model output and the values of the nodes asked for. A candidate the
model rejects, or where the graph or the clusters come out different, is skipped; the
analysed shape itself is the last resort.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..analysis.types import Cluster
from ..codegen.reference import graph_on
from ..ir.shapes import InputSpec
from ..ir.spelling import said
from ..pipeline import Analysis, analyze
from .inputs import graph_inputs, record, result_shape
from .subgraph import eager_subgraph


@dataclass
class Recording:
    analysis: Analysis  # the analysis at the shape the numerics run at
    clusters: dict[int, Cluster]  # index in the real analysis -> cluster in `analysis`
    gm: torch.fx.GraphModule
    inputs: list[torch.Tensor]
    model_out: Any
    values: dict[str, Any]

    @property
    def specs(self) -> tuple[InputSpec, ...]:
        return self.analysis.inputs

    @property
    def device(self) -> torch.device:
        """Where the recorded values live: the inputs' device (the CPU for a model without)."""
        return self.inputs[0].device if self.inputs else torch.device("cpu")


def graph_difference(analysis: Analysis, other: Analysis) -> str:
    """Why `other` (the model captured at another input shape) is not the analysed graph,
    or "" when it is: the same nodes with the same ops in the same order, each of the same
    rank, and no dim that was larger than 1 down to 1 unless it had the batch's size and
    the batch went to 1. The kernels are the ones generated for the analysed graph: checked
    in another graph they would be checked in a context the analysis never saw, and a dim
    collapsed to 1 hides any indexing mistake along it."""
    ours, theirs = analysis.graph.nodes, other.graph.nodes
    for a, b in zip(ours, theirs, strict=False):  # lengths compared below
        if (a.name, a.op) != (b.name, b.op):
            return f"its ops differ from {said(analysis.graph, a.name)} on"
    if len(ours) != len(theirs):
        return f"it has {len(theirs)} nodes, not {len(ours)}"
    batch_cut = {s.shape[0] for s in analysis.inputs if s.shape} if all(
        s.shape[:1] == (1,) for s in other.inputs if s.shape) else set()
    for a, b in zip(ours, theirs, strict=True):
        if (a.meta is None) != (b.meta is None):
            return f"{said(analysis.graph, a.name)} differs"
        if a.meta is None or b.meta is None:
            continue
        if len(a.meta.shape) != len(b.meta.shape):
            return (f"{said(analysis.graph, a.name)} has rank {len(b.meta.shape)}, not "
                    f"{len(a.meta.shape)}")
        for was, now in zip(a.meta.shape, b.meta.shape, strict=True):
            if was > 1 and now == 1 and was not in batch_cut:
                return f"{said(analysis.graph, a.name)} has a dim of {was} down to 1"
    return ""


Matched = tuple[Analysis, dict[int, Cluster]]


def matched(analysis: Analysis, specs: tuple[InputSpec, ...], keep_rows: bool
            ) -> Matched | None:
    """The analysis at `specs` with its clusters keyed by the real ones, or None when the
    model rejects the shape, its graph is not the same (``graph_difference``) or its clusters
    differ (nodes, inputs, outputs). `keep_rows`: each cluster's result must keep its last
    dim (the row a reduction walks)."""
    if specs == analysis.inputs:
        return analysis, {c.index: c for c in analysis.clusters}
    try:
        other = analyze(analysis.module, *specs, capture=analysis.graph.frontend)
    except Exception:  # noqa: BLE001 - the model does not take this shape
        return None
    if graph_difference(analysis, other):
        return None
    by_nodes = {c.nodes: c for c in other.clusters}
    pairs = {}
    for c in analysis.clusters:
        oc = by_nodes.get(c.nodes)
        if oc is None or (oc.inputs, oc.outputs) != (c.inputs, c.outputs):
            return None
        if keep_rows and result_shape(other, oc.index)[-1:] != result_shape(analysis, c.index)[-1:]:
            return None
        pairs[c.index] = oc
    return other, pairs


def recording(analysis: Analysis, candidates: Sequence[tuple[InputSpec, ...]], *,
              keep_rows: bool, device: str, seed: int, clusters: Iterable[int] = ()
              ) -> Recording:
    """Run the model at the first usable candidate shape (else the analysed one) and record
    the inputs (and other outside values) of `clusters`."""
    found = None
    for specs in (*candidates, analysis.inputs):
        found = matched(analysis, tuple(specs), keep_rows)
        if found is not None:
            break
    assert found is not None  # the analysed shape always matches itself
    return record_at(found, device=device, seed=seed, clusters=clusters)


def record_at(found: Matched, *, device: str, seed: int, clusters: Iterable[int] = ()
              ) -> Recording:
    """Run `found`'s graph on random inputs of its shape; record what `clusters` read."""
    num, pairs = found
    gm = graph_on(num.graph_module, device) if device != "cpu" else num.graph_module
    inputs = graph_inputs(num.graph, num.inputs, num.module, device, seed)
    needed: set[str] = set()
    for i in clusters:
        c = pairs[i]
        needed.update(c.inputs)
        needed.update(eager_subgraph(gm, c).extras)  # outside values beyond cluster.inputs
    # On copies: a graph that writes into its inputs (`x.mul_(2.0)`) must leave `inputs` as
    # drawn for the model and the patched graph that run on them next.
    model_out, values = record(gm, [t.clone() for t in inputs], needed)
    return Recording(num, pairs, gm, inputs, model_out, values)
