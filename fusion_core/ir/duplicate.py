"""Give a consumer its own copy of a pointwise value (recompute instead of store).

Reads a shape-propagated ``fx.GraphModule`` and (value, consumer) node-name pairs;
rewrites the graph in place. Each consumer reads a fresh copy of the value's node,
inserted just before it and marked ``meta["fusion_copy_of"]``, so detection may fuse
the copy into the consumer's kernel while the original stays with its own cluster.
``copy_cone`` does the same for a slice (``analysis/slice_recompute.py``): the slice reads
a copy of the value's whole pointwise cone, through a copy of the `chunk`/`split` call
when it is a piece of one. ``undo`` puts back the original value where a copy found no
kernel to join, and drops the copies that then feed nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch.fx as fx

_SPLIT_COPY = "fusion_split_copy"  # a split call copied for one piece (``copy_cone``)


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


def copy_cone(gm: fx.GraphModule, cone: Sequence[str], reader: str) -> list[str]:
    """Copies of `cone`'s nodes (graph order, the value last) that the view `reader` reads
    instead; a piece of a split reads a copy of the split call, which reads the value's
    copy. Returns the cone's copies' names; the caller recompiles."""
    nodes = {n.name: n for n in gm.graph.nodes}
    view = nodes[reader]
    value = nodes[cone[-1]]
    consumer = view
    split = view.args[0] if view.args else None
    if isinstance(split, fx.Node) and split is not value and value in split.all_input_nodes:
        consumer = split
        if len(split.users) > 1:  # the last piece takes the call itself: none is left dead
            consumer = copy_for(gm, split, view)  # `h.chunk(2, -1)` again, on the copy
            consumer.meta[_SPLIT_COPY] = True
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    readers = _own_shape_reads(value, consumer, order)
    first = min([consumer, *readers], key=order.__getitem__)
    copies: dict[fx.Node, fx.Node] = {}
    with gm.graph.inserting_before(first):  # in graph order: each after its operands
        for name in cone:
            node = nodes[name]
            copy = gm.graph.node_copy(node, lambda a: copies.get(a, a))
            copy.meta.update(node.meta)
            copy.meta["fusion_copy_of"] = node.meta.get("fusion_copy_of", node.name)
            copies[node] = copy
    for reader in (consumer, *readers):
        reader.replace_input_with(value, copies[value])
    return [copies[nodes[name]].name for name in cone]


def _own_shape_reads(value: fx.Node, consumer: fx.Node, order: dict[fx.Node, int]
                     ) -> list[fx.Node]:
    """Readers of `value` that serve `consumer` alone (`h.shape[-1] // 2` for the bound of
    `h[..., : h.shape[-1] // 2]`): they read the copy too, the same shape, so a slice whose
    bounds come from its own source's size keeps its steps (``ir/view_params.py``)."""
    above: set[fx.Node] = set()
    todo = list(consumer.all_input_nodes)
    while todo:  # what `consumer` reads that `value` may feed: nodes after it
        n = todo.pop()
        if n not in above and order[n] > order[value]:
            above.add(n)
            todo.extend(n.all_input_nodes)
    memo: dict[fx.Node, bool] = {}

    def serves_consumer(n: fx.Node) -> bool:
        if n not in memo:
            memo[n] = all(u is consumer or (u in above and serves_consumer(u)) for u in n.users)
        return memo[n]

    return [u for u in value.users if u in above and serves_consumer(u)]


def undo(gm: fx.GraphModule, copies: Iterable[str]) -> None:
    nodes = {n.name: n for n in gm.graph.nodes}
    for name in copies:
        copy = nodes[name]
        copy.replace_all_uses_with(nodes[copy.meta["fusion_copy_of"]])
        gm.graph.erase_node(copy)
    # A cone's inner copies fed the copies just undone; a split's copy now reads the
    # original again: neither does anything.
    for node in reversed(list(gm.graph.nodes)):
        if "fusion_copy_of" not in node.meta:
            continue
        if node.meta.get(_SPLIT_COPY) and not any(
                "fusion_copy_of" in a.meta for a in node.all_input_nodes):
            node.replace_all_uses_with(nodes[node.meta["fusion_copy_of"]])
        if not node.users:
            gm.graph.erase_node(node)
    gm.recompile()
