"""Which of Inductor's kernels compute each node of a cluster, compared by keys.

Reads an ``Analysis`` (the cluster's nodes, their source lines and module stacks) and the
``InductorKernel``s of a capture; returns each of our nodes' key and the Inductor keys it
stands for, the kernels computing it (by key, then by op for nodes a pattern rewrite left
without a line), each kernel's own keys (the first kernel computing a key owns it: Inductor
recomputes cheap producers) and whether one kernel computes a cluster exactly. ``match.py``
words the verdicts from them.
"""

from __future__ import annotations

from ..analysis.group import moves_data
from ..analysis.types import Cluster
from ..ir.graph import OpKind
from ..pipeline import Analysis
from .capture import InductorKernel, module_path
from .kernel_graph import compatible, norm_path

Key = tuple[str, str, int]


def cluster_keys(analysis: Analysis, cluster: Cluster) -> dict[str, tuple[Key | None, str]]:
    """Per cluster node: its key and op. Ops eager runs as an alias (the registry's
    `moves_data`: dropout in eval, a same-dtype cast) are left out: Inductor has no node
    for them. Views stay (see `folded_views`)."""
    fx_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
    out: dict[str, tuple[Key | None, str]] = {}
    for name, op in zip(cluster.nodes, cluster.ops, strict=True):
        node, fx = analysis.graph[name], fx_nodes.get(name)
        if node.kind is not OpKind.VIEW and not moves_data(analysis.graph, name):
            continue
        mod = module_path(fx.meta.get("nn_module_stack")) if fx is not None else ""
        key = (mod, norm_path(node.source.file), node.source.line) if node.source else None
        out[name] = (key, op)
    return out


def folded_views(analysis: Analysis, ours: dict) -> frozenset[str]:
    """Our nodes no kernel has to compute: views (the registry's `OpKind.VIEW`), which
    become index math in whatever kernel reads them, in Inductor's and in ours."""
    return frozenset(n for n in ours if analysis.graph[n].kind is OpKind.VIEW)


def kernel_keys(k: InductorKernel) -> set[Key]:
    """The kernel's compute nodes' keys, and the concatenations it writes into: a cluster of
    ours holding that `cat` does the same work (each operand's piece of its result)."""
    return {(n.module, norm_path(n.file), n.line) for n in (*k.compute_nodes, *k.cats)
            if n.line is not None}


def resolved_keys(ours: dict[str, tuple[Key | None, str]], universe: set[Key]
                  ) -> dict[str, tuple[frozenset[Key], str]]:
    """Our keys as the Inductor keys they stand for."""
    return {name: (frozenset(u for u in universe if key is not None and compatible(key, u)), op)
            for name, (key, op) in ours.items()}


def keys_of_ours(ours: dict[str, tuple[frozenset[Key], str]]) -> set[Key]:
    return set().union(*(keys for keys, _ in ours.values())) if ours else set()


def _unkeyed_ops(k: InductorKernel) -> set[str]:
    # A `cat` a pattern rewrite made (`relu(cat(a, b))` as a cat of two ReLUs) has no line
    # either: the kernel writing into it still does our `cat`'s work.
    return {n.op for n in (*k.compute_nodes, *k.cats) if n.line is None}


def covering_kernels(ours: dict[str, tuple[frozenset[Key], str]],
                     kernels: list[InductorKernel], kkeys: list[set[Key]]
                     ) -> dict[str, set[int]]:
    """Which kernels compute each of our nodes (by key, then by op for unkeyed nodes)."""
    cover = {name: {i for i, ks in enumerate(kkeys) if keys & ks}
             for name, (keys, _) in ours.items()}
    touching = set().union(*cover.values()) if cover else set()
    for name, (_, op) in ours.items():
        if not cover[name]:
            cover[name] = {i for i in touching if op in _unkeyed_ops(kernels[i])}
    return cover


def owned_keys(kkeys: list[set[Key]]) -> list[set[Key]]:
    """Each kernel's keys minus those an earlier kernel already computed (recompute)."""
    seen: set[Key] = set()
    out = []
    for ks in kkeys:
        out.append(ks - seen or set(ks))  # a pure recompute kernel keeps its keys
        seen |= ks
    return out


def computes_exactly(i: int, ours: dict, cover: dict[str, set[int]], kkeys: list[set[Key]],
                     adds: dict[int, tuple[str, ...]], folded: frozenset[str]) -> bool:
    """Kernel i computes all of the cluster (its views aside: `folded_views`) and nothing else:
    no compute op of another line it owns, no opaque call of ours it does the work of
    (`adds`, see added.py)."""
    if not ours or any(i not in cover[n] for n in ours if n not in folded) or adds.get(i):
        return False
    return kkeys[i] <= keys_of_ours(ours)
