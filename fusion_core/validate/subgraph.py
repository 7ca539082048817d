"""Graph surgery for validation: a cluster's eager subgraph, and a graph with kernels patched in.

Reads the traced ``fx.GraphModule`` and ``Cluster``s; writes new GraphModules (the original is
never modified): ``eager_subgraph`` (the one builder, in ``ir/subgraph.py``, shared with
codegen and the benchmarks) computes only the cluster (same inputs and outputs as the
kernel launcher, so the two can be compared and timed on the same tensors), and ``patch``
replaces each cluster's nodes by one call to its launcher.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx as fx

from ..analysis.types import Cluster, ShapeRead
from ..ir.graph import FusionGraph
from ..ir.spelling import said
from ..ir.split_views import split_name
from ..ir.subgraph import Subgraph, eager_subgraph

__all__ = ["PatchError", "Subgraph", "eager_subgraph", "patch"]


class PatchError(Exception):
    pass


def patch(gm: fx.GraphModule, launchers: Mapping[int, tuple[Cluster, Callable]],
          spelling: FusionGraph | None = None) -> fx.GraphModule:
    """A copy of `gm` where each cluster's nodes are replaced by a call to its launcher.
    `spelling`: the analysed graph of `gm`, so a PatchError names values as the user wrote
    them (`relu` (line 12)) rather than by node (`relu_1`)."""
    graph = copy.deepcopy(gm.graph)
    renamed: dict[str, fx.Node] = {}  # a patched cluster's outputs, read by a later cluster
    for cluster, launcher in launchers.values():
        _replace(graph, cluster, launcher, renamed, spelling)
    graph.lint()
    return fx.GraphModule(gm, graph, f"{type(gm).__name__}_patched")


def launch_args(inputs: Sequence[Any], device: str | torch.device) -> list[Any]:
    """A launcher's arguments: the cluster's input values, or, for a kernel with none
    (every value generated from the index, `arange → add → to`), the device to run on."""
    return list(inputs) if inputs else [torch.device(device)]


def _device_of(members: Sequence[fx.Node]) -> Any:
    """Where an input-less cluster's values were made: its generator's `device` argument
    (an FX node such as `x.device`, or a constant), else torch's default, the CPU."""
    found = (n.kwargs.get("device") for n in members if n.op == "call_function")
    return next((d for d in found if d is not None), torch.device("cpu"))


def _named(launcher: Callable, index: int) -> Callable:
    """FX names call targets after the function: give every launcher a plain, unique one."""
    def call(*args):
        return launcher(*args)
    call.__name__ = call.__qualname__ = f"cluster{index}_launch"
    return call


def _said(g: FusionGraph | None, n: fx.Node) -> str:
    """`n` as the user wrote it where the analysed graph has it; a patched-in kernel call
    (`cluster0_launch`), or one of its results, by its cluster; else by its node name."""
    if g is not None and n.name in g:
        return said(g, n.name)
    if n.target is operator.getitem and isinstance(n.args[0], fx.Node):
        n = n.args[0]  # a result of a multi-output kernel call
    name = getattr(n.target, "__name__", "")
    if n.op == "call_function" and name.startswith("cluster") and name.endswith("_launch"):
        return f"cluster {name.removeprefix('cluster').removesuffix('_launch')}'s kernel call"
    return f"`{n.name}`"


def _replace(graph: fx.Graph, cluster: Cluster, launcher: Callable,
             renamed: dict[str, fx.Node], spelling: FusionGraph | None = None) -> None:
    nodes = {n.name: n for n in graph.nodes}
    nodes.update(renamed)
    _redirect_shape_reads(graph, cluster, nodes)
    # `x.dtype`, `h.device` of a value not stored: its input's, the same.
    for r in cluster.metadata_reads:
        nodes[r.read].replace_input_with(nodes[r.of], nodes[r.source])
    order = {n: i for i, n in enumerate(graph.nodes)}
    members = [nodes[n] for n in cluster.nodes]
    member_set = set(members)
    inputs = [nodes[n] for n in cluster.inputs]
    first = min(members, key=order.__getitem__)
    # A parameter FX fetched where it was first used (after another cluster result's reader),
    # or a view of it (a norm's weight reshaped to broadcast), reads no activation: computed
    # before the cluster instead, the call can go where the activations allow.
    for node in _weights_after(inputs, order, order[first]):
        first.prepend(node)
    order = {n: i for i, n in enumerate(graph.nodes)}
    last_input = max(inputs, key=order.__getitem__, default=None)
    if last_input is None or order[last_input] < order[first]:
        anchor, where = first, "before"
    else:
        anchor, where = last_input, "after"
    outs = [nodes[o] for o in cluster.outputs]
    users = [u for o in outs for u in o.users if u not in member_set]
    early = min(users, key=order.__getitem__, default=None)
    later = _readers_to_move(outs, member_set, anchor, order) if (
        early is not None and order[early] <= order[anchor]) else []
    if later is None:
        assert early is not None
        result = next(o for o in outs if early in o.users)
        raise PatchError(f"cluster {cluster.index}: its result {_said(spelling, result)} is "
                         f"read by {_said(spelling, early)} before its input "
                         f"{_said(spelling, anchor)} is computed; cannot place one kernel call")
    ctx = graph.inserting_before(anchor) if where == "before" else graph.inserting_after(anchor)
    with ctx:
        args = tuple(inputs) if inputs else (_device_of(members),)
        call = graph.call_function(_named(launcher, cluster.index), args)
    for n in reversed(later):  # after the call, in their order (`position_ids` of a mask)
        call.append(n)
    results = [call] if len(outs) == 1 else []
    prev = call
    for i in range(len(outs) if len(outs) > 1 else 0):
        with graph.inserting_after(prev):
            prev = graph.call_function(operator.getitem, (call, i))
        results.append(prev)
    for o, new in zip(outs, results, strict=True):
        o.replace_all_uses_with(new, delete_user_cb=lambda u: u not in member_set)
        renamed[o.name] = new
    _drop_meta_only_reads(members, member_set)
    # A `chunk` of a value the kernel computes, whose pieces it computes too, goes with them.
    tuples = {u for m in members for u in m.users if u not in member_set
              and split_name(u) is not None and all(x in member_set for x in u.users)}
    # `h.dtype` read only by the cluster's ops (`(h > 0).to(h.dtype)`): the kernel has it.
    baked = {u for m in members for u in m.users if u not in member_set
             and _reads_dtype(u) and u.users and all(x in member_set for x in u.users)}
    for n in sorted([*members, *tuples, *baked], key=order.__getitem__, reverse=True):
        graph.erase_node(n)


def _readers_to_move(outs: Sequence[fx.Node], member_set: set[fx.Node], anchor: fx.Node,
                     order: Mapping[fx.Node, int]) -> list[fx.Node] | None:
    """The nodes up to `anchor` (the call's place) that read the cluster's results, directly
    or through each other, in graph order: moved after the call. None where `anchor` depends
    on one of them (then no place holds one call)."""
    pos = order[anchor]
    moved: set[fx.Node] = set()
    todo = [u for o in outs for u in o.users if u not in member_set and order[u] <= pos]
    while todo:
        n = todo.pop()
        if n not in moved:
            moved.add(n)
            todo += [u for u in n.users if u not in member_set and order[u] <= pos]
    ancestors, stack = {anchor}, [anchor]
    while stack:
        for i in stack.pop().all_input_nodes:
            if i not in ancestors:
                ancestors.add(i)
                stack.append(i)
    return None if moved & ancestors else sorted(moved, key=order.__getitem__)


def _reads_dtype(n: fx.Node) -> bool:
    return n.op == "call_function" and n.target is getattr and n.args[1:] == ("dtype",)


def _weights_after(inputs: Sequence[fx.Node], order: Mapping[fx.Node, int], start: int
                   ) -> list[fx.Node]:
    """The inputs computed from parameters and constants alone, with the nodes they need,
    that come after `start`, in graph order."""
    memo: dict[fx.Node, bool] = {}

    def weight_only(n: fx.Node) -> bool:
        if n not in memo:
            pure = n.op in ("call_function", "call_method") and not n.is_impure()
            memo[n] = n.op == "get_attr" or (pure and bool(n.all_input_nodes) and all(
                weight_only(a) for a in n.all_input_nodes))
        return memo[n]

    found: set[fx.Node] = set()

    def take(n: fx.Node) -> None:
        if order[n] > start and n not in found:
            found.add(n)
            for a in n.all_input_nodes:
                take(a)

    for inp in inputs:
        if order[inp] > start and weight_only(inp):
            take(inp)
    return sorted(found, key=order.__getitem__)


def shape_of(*values: torch.Tensor) -> torch.Tensor:
    """A tensor of the shape `values` broadcast to, holding one element (expanded)."""
    return values[0].new_empty(()).expand(torch.broadcast_shapes(*(v.shape for v in values)))


def _redirect_shape_reads(graph: fx.Graph, cluster: Cluster, nodes: dict[str, fx.Node]
                          ) -> None:
    """`h.shape` of a value the cluster no longer stores reads the shape of the values it
    was broadcast from instead (``Cluster.shape_reads``): computed when the model runs, so
    it follows the input size, never the analysed one."""
    for r in cluster.shape_reads:
        read = nodes[r.read]
        with graph.inserting_before(read):
            if r.via:
                proxy = _replayed(graph, r, nodes)
            else:
                proxy = graph.call_function(shape_of, tuple(nodes[s] for s in r.sources))
        read.replace_input_with(nodes[r.of], proxy)


def on_meta(value: Any) -> Any:
    """An empty tensor of `value`'s shape, strides and dtype that holds no data (the strides:
    a replayed `.view` of a channels-last value works only where the real one did); other
    values (a size) as they are."""
    if not isinstance(value, torch.Tensor):
        return value
    return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")


def _replayed(graph: fx.Graph, r: ShapeRead, nodes: dict[str, fx.Node]) -> fx.Node:
    """`r.of` recomputed on meta tensors of its operands' shapes: a view's result shape
    follows its input's and its own size arguments at any input size, and costs no data."""
    return _on_meta(graph, [nodes[name] for name in r.via])[nodes[r.of]]


def _on_meta(graph: fx.Graph, chain: Sequence[fx.Node]) -> dict[fx.Node, fx.Node]:
    """Copies of `chain` (in graph order) computed on meta tensors of their operands, inserted
    where `graph` is being inserted into; by original node."""
    env: dict[fx.Node, fx.Node] = {}

    def arg(a: fx.Node) -> fx.Node:
        # Every operand, not only those recorded as tensors: another cluster's patched call
        # has no recorded value, and a real tensor beside meta ones fails the replayed op.
        if a not in env:
            env[a] = graph.call_function(on_meta, (a,))
        return env[a]

    for m in chain:
        env[m] = graph.node_copy(m, arg)
    return env


# `y.type_as(x)` reads `x` for its dtype alone, `y.reshape_as(x)` (view_as, expand_as) for
# its shape, so analysis does not make `x` a cluster result; once the cluster is patched out,
# such a read becomes a cast to the dtype `x` had, or a reshape to the shape `x` has at this
# call (replayed on meta tensors, not the analysed one).
# (op, target) -> (replacement target, what of `x` it takes; None: its shape at this call)
_META_READS: dict[tuple[str, Any], tuple[Any, Callable[[torch.Tensor], Any] | None]] = {
    ("call_function", torch.ops.aten.type_as.default): (torch.ops.aten.to.dtype,
                                                        lambda v: v.dtype),
    ("call_method", "type_as"): ("to", lambda v: v.dtype),
    ("call_method", "reshape_as"): ("reshape", None),
    ("call_method", "view_as"): ("view", None),
    ("call_method", "expand_as"): ("expand", None),
}


def _drop_meta_only_reads(members: list[fx.Node], member_set: set[fx.Node]) -> None:
    for n in members:
        val = n.meta.get("val")
        for user in list(n.users):
            if user in member_set or len(user.args) != 2 or user.args[1] is not n:
                continue
            rewrite = _META_READS.get((user.op, user.target))
            if rewrite is not None and isinstance(val, torch.Tensor):
                target, take = rewrite
                if take is None:
                    with n.graph.inserting_before(user):
                        sizes = n.graph.call_function(sizes_of, (_on_shapes(n, member_set),))
                    user.target, user.args = target, (user.args[0], sizes)
                else:
                    user.target, user.args = target, (user.args[0], take(val))


def sizes_of(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def _on_shapes(n: fx.Node, member_set: set[fx.Node]) -> fx.Node:
    """Cluster member `n` recomputed on meta tensors of the values it is computed from
    (`h.expand_as(gelu)` where the kernel computes `gelu`): its shape at any input size,
    for no data; inserted where the graph is being inserted into."""
    order = {m: i for i, m in enumerate(n.graph.nodes)}
    todo, needed = [n], set()
    while todo:
        m = todo.pop()
        if m in member_set and m not in needed:
            needed.add(m)
            todo.extend(m.all_input_nodes)
    return _on_meta(n.graph, sorted(needed, key=order.__getitem__))[n]
