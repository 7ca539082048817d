"""Values one kernel leaves unstored and another recomputes, as the source map reads them.

Reads an ``Analysis`` (the clusters' recomputed values, the copies standing for them, the FX
graph's readers); returns why a cluster whose value another kernel recomputes is not edited,
with the rewrite that makes both edits possible (``unstored_reason``), and the cluster
written as storing every value the graph reads from it (``as_stored``), which lets it map
beside a cluster of the same lines.
"""

from __future__ import annotations

import ast
from dataclasses import replace

from ..analysis.types import Cluster
from ..ir.graph import Node
from ..ir.spelling import said
from ..pipeline import Analysis
from .pysource import is_plain_access


def unstored_reason(analysis: Analysis, node: Node) -> str:
    """Why a cluster whose value another kernel recomputes is not edited, and the rewrite
    of the source that makes both edits possible."""
    graph = analysis.graph
    copies = {n.name for n in graph.nodes if n.copy_of == node.name}
    other = next(o for o in analysis.clusters if copies & set(o.nodes) or node.name in o.recomputes)
    fx_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
    # A read of its dtype or device (`h.dtype`) needs no spelling: not a use of its data.
    readers = {u.name for n in (node.name, *copies) if n in fx_nodes
               for u in fx_nodes[n].users
               if not (u.name in graph and graph[u.name].metadata_of)} - copies
    lines = sorted({graph[n].source.line for n in readers
                    if n in graph and graph[n].source is not None})
    at = ", ".join(str(line) for line in lines)
    there = sorted({graph[n].source.line for n in readers & set(other.nodes)
                    if graph[n].source is not None})
    where = f" at line {there[0]}" if there else ""
    code = node.source.code if node.source is not None else ""
    try:
        stmt = ast.parse(code).body[0] if code else None
    except SyntaxError:
        stmt = None
    value = stmt.value if isinstance(stmt, ast.Assign | ast.AnnAssign) else None
    reason = (f"{said(graph, node.name)} is computed by two kernels (recomputed instead of "
              f"stored): cluster {other.index} recomputes it{where}, where the source reads "
              "the variable these lines assign, so an edit of them alone would drop it")
    if value is None or not is_plain_access(value):  # spelled twice, it would run twice
        return reason + "; a source edit would have to rewrite both together"
    return (f"{reason}. To apply both, spell `{ast.unparse(value)}` inside each expression "
            f"that reads it (line{'s' if len(lines) > 1 else ''} {at}) instead of assigning "
            "it once")


def as_stored(analysis: Analysis, c: Cluster) -> Cluster | None:
    """`c` writing every value the graph reads from it, when another cluster recomputes one
    of them (so `c` does not store it). That cluster is never edited (`locate` refuses
    its copies), so its
    value must come from these lines: `c` maps only beside a cluster of the same lines
    (other calls) whose kernel writes them all; None when `c` itself recomputes."""
    if c.recomputes or any(analysis.graph[n].copy_of for n in c.nodes):
        return None
    fx_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
    inside = set(c.nodes)
    # The recomputing cluster reads its own copy (`copy_of`); the source reads the variable.
    copied = {n.copy_of for n in analysis.graph.nodes if n.copy_of}
    outputs = tuple(n for n in c.nodes if n in copied or any(
        u.name not in inside for u in fx_nodes[n].users))
    if outputs == c.outputs or not set(c.outputs) <= set(outputs):
        return None
    return replace(c, outputs=outputs)
