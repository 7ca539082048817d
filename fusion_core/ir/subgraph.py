"""A cluster's eager subgraph: the one builder codegen, validation and the benchmarks use.

Reads the captured ``fx.GraphModule`` and a cluster (its node names, inputs and
outputs); writes a new ``GraphModule`` ``(*cluster.inputs, *extras) -> output`` (one
value, or a tuple for several) that runs only the cluster's ops, so a generated kernel
can be compared and timed against it on the same tensors. The original graph is never
modified.

A cluster's ops may read outside values that are not tensors the kernel takes: a
parameter (``get_attr``), or a Python value such as ``x.dtype`` or ``x.shape[-1]``. Such
a value is *recomputed* inside the subgraph when it is a non-tensor result of ops whose
own inputs the subgraph has (Hugging Face's LlamaRMSNorm reads ``dtype = x.dtype`` of a
value inside the cluster, then casts back with ``.to(dtype)``; a size read from an input's
shape then follows the input at any size, as the kernel's view does); else it is inlined as its
trace-time constant when shape propagation recorded one; else it becomes an extra
placeholder, which only a caller holding a recording of the whole model can feed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.fx as fx


class ClusterLike(Protocol):
    index: int
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class Subgraph:
    module: fx.GraphModule
    inputs: tuple[str, ...]  # cluster.inputs: what the launcher takes
    extras: tuple[str, ...]  # other outside values the ops read (fed from a recording)


_NO_VALUE = object()


def _constant(n: fx.Node) -> Any:
    """The trace-time Python value of `n`, or _NO_VALUE (tensors and unknowns have none)."""
    val = n.meta.get("val", _NO_VALUE)
    return _NO_VALUE if val is None or isinstance(val, torch.Tensor) else val


class _Sources:
    """How each outside value a cluster reads gets into the subgraph (module docstring)."""

    def __init__(self, cluster: ClusterLike) -> None:
        self.members = set(cluster.nodes)
        self.inputs = set(cluster.inputs)
        self.kind: dict[str, str] = {}
        self.extras: list[str] = []

    def visit(self, n: fx.Node) -> str:
        if n.name in self.kind:
            return self.kind[n.name]
        if n.name in self.members:
            kind = "member"
        elif n.name in self.inputs:
            kind = "input"
        elif n.op == "get_attr":
            kind = "attr"
        elif (n.op in ("call_function", "call_method")
              and not isinstance(n.meta.get("val"), torch.Tensor) and n.all_input_nodes
              and all(self.visit(d) != "extra" for d in n.all_input_nodes)):
            kind = "derived"  # a Python value of values the subgraph has: recompute it
        elif _constant(n) is not _NO_VALUE:
            kind = "constant"
        else:
            kind = "extra"
            self.extras.append(n.name)
        self.kind[n.name] = kind
        return kind


def eager_subgraph(gm: fx.GraphModule, cluster: ClusterLike) -> Subgraph:
    """A GraphModule `(*cluster.inputs, *extras) -> output or tuple of outputs`."""
    nodes = {n.name: n for n in gm.graph.nodes}
    sources = _Sources(cluster)
    for name in cluster.nodes:  # classify first: placeholders must lead the graph
        for dep in nodes[name].all_input_nodes:
            sources.visit(dep)
    graph = fx.Graph()
    env: dict[str, fx.Node] = {}
    for name in (*cluster.inputs, *sources.extras):
        env[name] = graph.placeholder(name)

    def arg(n: fx.Node) -> Any:
        if n.name in env:
            return env[n.name]
        kind = sources.kind.get(n.name) or sources.visit(n)
        if kind == "attr":
            env[n.name] = graph.get_attr(n.target)
        elif kind == "derived":
            env[n.name] = graph.node_copy(n, arg)
        elif kind == "constant":
            return _constant(n)
        else:  # a member not yet copied: cluster.nodes is not topological
            raise ValueError(f"cluster {cluster.index}: `{n.name}` is read before it is "
                             "computed")
        return env[n.name]

    for name in cluster.nodes:
        env[name] = graph.node_copy(nodes[name], arg)
    outs = [env[o] for o in cluster.outputs]
    graph.output(outs[0] if len(outs) == 1 else tuple(outs))
    graph.lint()
    return Subgraph(fx.GraphModule(gm, graph, f"cluster{cluster.index}_eager"),
                    tuple(cluster.inputs), tuple(sources.extras))
