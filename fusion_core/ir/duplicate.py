"""Give a consumer its own copy of a pointwise value (recompute instead of store).

Reads a shape-propagated ``fx.GraphModule`` and (value, consumer) node-name pairs;
rewrites the graph in place. Each consumer reads a fresh copy of the value's node,
inserted just before it and marked ``meta["fusion_copy_of"]``, so detection may fuse
the copy into the consumer's kernel while the original stays with its own cluster.
``undo`` puts back the original value where a copy found no kernel to join.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch.fx as fx


def duplicate_values(gm: fx.GraphModule, pairs: Iterable[tuple[str, str]]) -> list[str]:
    """Copy each value for its consumer; returns the copies' names."""
    nodes = {n.name: n for n in gm.graph.nodes}
    copies = [copy_for(gm, nodes[value], nodes[consumer]).name for value, consumer in pairs]
    if copies:
        gm.recompile()
    return copies


def copy_for(gm: fx.GraphModule, value: fx.Node, consumer: fx.Node) -> fx.Node:
    """A copy of `value` just before `consumer`, which reads it instead; marked with the
    original's name (a copy of a copy with the first original's). The caller recompiles."""
    with gm.graph.inserting_before(consumer):
        copy = gm.graph.node_copy(value)
    copy.meta.update(value.meta)
    copy.meta["fusion_copy_of"] = value.meta.get("fusion_copy_of", value.name)
    consumer.replace_input_with(value, copy)
    return copy


def undo(gm: fx.GraphModule, copies: Iterable[str]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for name in copies:
        copy = nodes[name]
        copy.replace_all_uses_with(nodes[copy.meta["fusion_copy_of"]])
        gm.graph.erase_node(copy)
    gm.recompile()
