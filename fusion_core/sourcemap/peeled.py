"""A cluster read without its leading aliases: ops eager runs as the identity (a dropout in
eval mode, a cast to the dtype a value already has) that read one of its inputs.

`return self.drop(self.fc2(h))` ends an MLP (timm's Mlp, GPT-2's MLP, nanoGPT) and the
caller's `x + self.mlp(...)` fuses with that dropout: the kernel's dropout is the identity,
so the call's result holds the value the kernel reads, and the edit of the caller's line can
pass `self.mlp(...)` where the kernel takes the dropout's input. The peeled cluster has the
same inputs in the same order (the kernel's launcher is unchanged), each peeled op's input
standing for the op itself. In training the callee still runs its own dropout: the same model.

Reads an ``Analysis``; writes nothing. ``mapping.py`` maps a cluster peeled when it does not
map as it is.
"""

from __future__ import annotations

from dataclasses import replace

from ..analysis.group import moves_data
from ..analysis.types import Cluster
from ..ir.graph import OpKind
from ..pipeline import Analysis


def _alias(analysis: Analysis, name: str) -> bool:
    """An op eager runs as the identity, of the shape and dtype it reads (no view)."""
    node = analysis.graph[name]
    if node.kind is OpKind.VIEW or moves_data(analysis.graph, name) or len(node.refs) != 1:
        return False
    return dict(node.params).get("training") in (None, False)


def peeled(analysis: Analysis, c: Cluster) -> Cluster | None:
    """`c` without the identity ops that read one of its inputs and nothing else of it (the
    input then stands for the op), or None when there is none to peel."""
    g = analysis.graph
    nodes, inputs = list(c.nodes), list(c.inputs)
    for name in c.nodes:
        if name in c.outputs or not _alias(analysis, name):
            continue
        (ref,) = g[name].refs
        readers = [u for u in g.users[ref] if u in nodes]
        if ref not in inputs or readers != [name]:
            continue  # computed inside, or read raw by another of the cluster's ops too
        inputs[inputs.index(ref)] = name
        nodes.remove(name)
    if len(nodes) == len(c.nodes) or not nodes:
        return None
    keep = set(nodes)
    ops = tuple(op for n, op in zip(c.nodes, c.ops, strict=True) if n in keep)
    return replace(c, nodes=tuple(nodes), ops=ops, inputs=tuple(inputs))
