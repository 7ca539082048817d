"""Give every reader of an index-only value its own copy of the ops that make it.

Reads a shape-propagated ``fx.GraphModule``; rewrites it in place and returns the copies'
names. A value is *index-only* when a generator (``arange``) makes it from nothing, or a
pointwise op or a view makes it from index-only values and scalars alone. Such a value
costs no loads to recompute, so one kernel storing it for several readers is the wrong
trade: each reader that computes (a pointwise op, a reduction, a view on the way to one)
gets its own copy of the chain, inserted just before it, and detection may fuse that copy
into the reader's kernel; readers that cannot fuse (an opaque op, the graph's output)
share the original. Inductor does the same with the positions a decoder makes once
(``arange(n) + past_length``) and reads in several places.

Copies are made by ``ir/duplicate.py``'s ``copy_for``, marked like its recompute copies: the
model computes the value once, at the original, and a source edit cannot rewrite a value two
kernels compute. A copy that joined no reader's kernel
(``stray_copies``: it is in no kernel, or in one of copies alone) is taken back with
``duplicate.undo``: its reader reads the original again rather than a second small kernel.
So is a copy in the kernel that computes its original (two readers fused into one kernel):
there the reader reads the original's value in registers instead of computing it twice,
unless it reads it through other views (``_read_otherwise``: a mask comparing positions by
query with positions by key needs them along two dims, which one value cannot give).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import torch.fx as fx

from .duplicate import copy_for
from .graph import FusionGraph, OpKind
from .normalize import to_fusion_graph


def index_only(graph: FusionGraph) -> set[str]:
    """Names of the index-only values (see the module docstring), in one forward sweep."""
    out: set[str] = set()
    for node in graph.nodes:
        if node.kind is OpKind.GENERATOR:
            out.add(node.name)
        elif (node.kind.is_pointwise or node.kind is OpKind.VIEW) and node.refs and all(
                r in out for r in node.refs):
            out.add(node.name)
    return out


def copy_index_values(gm: fx.GraphModule) -> list[str]:
    """One copy of each index-only chain per reader; returns the copies' names."""
    graph = to_fusion_graph(gm, type(gm).__name__)
    values = index_only(graph)
    if not values:
        return []
    fusable = _fusable_readers(graph)
    copies = []
    # Last node first: copying a value gives its operands more readers, and those come
    # earlier in the graph, so they are reached after it and copied in turn.
    for node in reversed(list(gm.graph.nodes)):
        if node.name not in values:
            continue
        readers = [u for u in node.users
                   if u.name in fusable or u.meta.get("fusion_copy_of") in fusable]
        shared = len(node.users) > len(readers)  # the original stays for the others
        copies += [copy_for(gm, node, user).name for user in readers[0 if shared else 1:]]
    if copies:
        gm.recompile()
    return copies


def _fusable_readers(graph: FusionGraph) -> set[str]:
    """Nodes a copy may join in one kernel: compute ops, and views on the way to one."""
    out: set[str] = set()
    for node in reversed(graph.nodes):
        if node.kind.is_compute or (node.kind is OpKind.VIEW and any(
                u in out for u in graph.users[node.name])):
            out.add(node.name)
    return out


def stray_copies(graph: FusionGraph, clusters: Sequence[Collection[str]],
                 copies: Collection[str]) -> list[str]:
    """The copies that joined no reader's kernel (in none, or in one of copies alone) or
    joined the kernel that computes their original and read it through the same views (two
    readers in one kernel: it would compute the value twice), last first: the order
    ``duplicate.undo`` takes them back in, a chain's tail before its head."""
    made = set(copies)
    joined = {n for c in clusters if not set(c) <= made for n in c
              if graph[n].copy_of not in c or _read_otherwise(graph, set(c), n)}
    return sorted((c for c in copies if c not in joined), key=graph.position, reverse=True)


def _view_paths(graph: FusionGraph, cluster: set[str], name: str) -> list[tuple]:
    """How the kernel's ops read `name`: per reader in `cluster` that is not a copy, the
    views (op and params) from it to the first op that computes."""
    paths = []
    for reader in graph.users[name]:
        if reader not in cluster or graph[reader].copy_of:
            continue
        path, at = [], reader
        while graph[at].kind is OpKind.VIEW:
            path.append((graph[at].op, graph[at].params))
            nxt = [u for u in graph.users[at] if u in cluster]
            if len(nxt) != 1:
                break
            at = nxt[0]
        paths.append(tuple(path))
    return paths


def _read_otherwise(graph: FusionGraph, cluster: set[str], copy: str) -> bool:
    """Whether copy `copy`, in the kernel of its original, is read there through other views
    than the original (the positions a mask reads by query and by key): one value cannot
    stand for both, so the kernel computes it twice. A copy inside a copied chain follows
    the chain's copies it feeds."""
    original = graph[copy].copy_of
    mine, theirs = _view_paths(graph, cluster, copy), _view_paths(graph, cluster, original)
    theirs.append(())  # read as the original is stored: the same map
    if mine and not any(p in theirs for p in mine):
        return True
    return any(_read_otherwise(graph, cluster, u) for u in graph.users[copy]
               if u in cluster and graph[u].copy_of)
