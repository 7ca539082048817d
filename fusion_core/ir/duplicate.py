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
    copies = []
    for value, consumer in pairs:
        v, u = nodes[value], nodes[consumer]
        with gm.graph.inserting_before(u):
            copy = gm.graph.node_copy(v)
        copy.meta.update(v.meta)
        copy.meta["fusion_copy_of"] = v.name
        u.replace_input_with(v, copy)
        copies.append(copy.name)
    if copies:
        gm.recompile()
    return copies


def undo(gm: fx.GraphModule, copies: Iterable[str]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for name in copies:
        copy = nodes[name]
        copy.replace_all_uses_with(nodes[copy.meta["fusion_copy_of"]])
        gm.graph.erase_node(copy)
    gm.recompile()
