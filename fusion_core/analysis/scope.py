"""Where a group of nodes lives in the model: its module path and its function.

Reads a ``FusionGraph`` and the node names of a group (a cluster or a rejected
candidate); returns a ``Scope``: the deepest module path all of them ran in
(``blocks.3.mlp``; "" for the model itself; a group that straddles two items of a
container takes the item it starts in) and the function of the group's last node
that has a source. Neither depends on line numbers, so the pytest plugin
identifies a cluster by its ops and scope and an edit elsewhere in the file
leaves the identity alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..ir.graph import FusionGraph, OpKind


@dataclass(frozen=True)
class Scope:
    module: str  # "blocks.3.mlp"; "" for the model's own forward
    function: str  # "forward", "_attn"; "" when no node of the group has a source

    def __str__(self) -> str:
        return ".".join(p for p in (self.module, self.function) if p)


def common_module(paths: Iterable[str]) -> str:
    """The longest dotted prefix shared by every path (`h.0` for `h.0` and `h.0.ln`)."""
    split = [p.split(".") if p else [] for p in paths]
    if not split:
        return ""
    common = split[0]
    for parts in split[1:]:
        n = 0
        while n < min(len(common), len(parts)) and common[n] == parts[n]:
            n += 1
        common = common[:n]
    return ".".join(common)


def scope_of(graph: FusionGraph, names: Iterable[str]) -> Scope:
    nodes = [graph[n] for n in names]
    located = [n for n in nodes if n.source is not None]
    function = located[-1].source.function if located else ""
    module = common_module(n.module for n in nodes)
    # A group straddling two items of a container (the end of `blocks.0` and the first
    # norm of `blocks.1`) belongs to the item it starts in, so repeated ones tell apart.
    depth = len(module.split(".")) if module else 0
    first = nodes[0].module.split(".") if nodes and nodes[0].module else []
    if len(first) > depth and first[depth].isdigit():
        module = ".".join(first[:depth + 1])
    return Scope(module, function)


def op_sites(graph: FusionGraph) -> dict[str, str]:
    """Node name -> its site: `blocks.0.attn:softmax#0`, the k-th `softmax` run in that module.

    Sites name compute and opaque ops by where they run and their order there, not by the
    node names capture generated (`softmax_1` shifts when an op is added anywhere before
    it), so an op keeps its site through edits elsewhere in the model. A recomputed copy
    takes its original's site with a `'`.
    """
    seen: dict[tuple[str, str], int] = {}
    sites: dict[str, str] = {}
    for n in graph.nodes:
        if n.copy_of or not (n.kind.is_compute or n.kind in (OpKind.OPAQUE, OpKind.INPLACE)):
            continue
        k = seen.get((n.module, n.op), 0)
        seen[(n.module, n.op)] = k + 1
        sites[n.name] = f"{n.module}:{n.op}#{k}"
    for n in graph.nodes:
        if n.copy_of and n.copy_of in sites:
            sites[n.name] = sites[n.copy_of] + "'"
    return sites
