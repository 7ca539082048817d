"""Why two of Inductor's kernels are separate, in the analyzer's words.

Reads an ``Analysis`` (our graph, clusters, rejections) and the kernels of one compiled
record (``compiled.CompiledKernel``: ops with their module and line); returns one
``Separation`` per pair of generated kernels where the first feeds the second in our graph,
with what lies between them. The compiled gate reads these when a kernel of the baseline
now splits: the reason that pair is apart is the reason it split.

Our nodes are placed in a kernel by (module, file, line) and op, as ``match.py`` does; a
matrix product or convolution of ours goes with a library call on its line. Paths run
from one kernel's nodes through nodes no generated kernel computes (views, library calls,
opaque ops) to another kernel's nodes. First match wins:

1. A library call of ours (matrix product, convolution, attention) lies between them.
2. Another opaque op of ours lies between them (Inductor cannot see into it either).
3. A legality check of ours rejected a group holding ops of both: its check and reason.
4. A view of ours lies between them.
5. One cluster of ours holds ops of both (we would fuse them: Inductor's scheduler did not),
   or they fall into different clusters of ours.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..ir.graph import FusionGraph, Node, OpKind
from ..ir.spelling import place
from .kernel_graph import GEMM_OPS, callee, compatible, norm_path

if TYPE_CHECKING:
    from ..pipeline import Analysis
    from .compiled import CompiledKernel

Key = tuple[str, str, int]


@dataclass(frozen=True)
class Separation:
    before: str  # the kernel whose results the other reads (a name in the record)
    after: str
    reason: str  # what keeps them apart, one line


def _where(g: FusionGraph, node: Node) -> str:
    return f"`{node.target or node.op}`" + (f" ({place(g, node.source)})" if node.source else "")


def _key(node: Node) -> Key | None:
    s = node.source
    return (node.module, norm_path(s.file), s.line) if s is not None else None


def _owners(analysis: Analysis, kernels: Sequence[CompiledKernel]) -> dict[str, int]:
    """Our compute node -> the first generated kernel computing it (by key and op)."""
    sites = [[((s.module, norm_path(s.file), s.line), s.op) for s in k.sites
              if s.line is not None] for k in kernels]
    owner: dict[str, int] = {}
    for node in analysis.graph.nodes:
        key = _key(node)
        if key is None or not (node.kind.is_compute or node.kind is OpKind.INPLACE):
            continue
        for i, k in enumerate(kernels):
            if k.kind == "generated" and any(op == node.op and compatible(key, at)
                                             for at, op in sites[i]):
                owner[node.name] = i
                break
    return owner


def _reach(analysis: Analysis, starts: Iterable[str], owner: dict[str, int], forward: bool,
           stop_at: int) -> tuple[set[str], set[int]]:
    """Unowned nodes reached from `starts`, and the kernels (other than `stop_at`) whose
    nodes end the paths: a path stops at the first node another kernel computes."""
    g = analysis.graph
    users = g.users  # a cached mapping
    seen: set[str] = set()
    kernels: set[int] = set()
    todo = list(starts)
    while todo:
        name = todo.pop()
        for nxt in (users[name] if forward else g[name].refs):
            k = owner.get(nxt)
            if k is not None:
                if k != stop_at:
                    kernels.add(k)
                continue
            if nxt not in seen and g[nxt].kind not in (OpKind.INPUT, OpKind.CONSTANT,
                                                       OpKind.OUTPUT):
                seen.add(nxt)
                todo.append(nxt)
    return seen, kernels


def _reason(analysis: Analysis, between: list[Node], ours: set[str]) -> str:
    calls = [n for n in between if callee(n)]
    if calls:
        op = callee(calls[0])
        what = ("convolution" if "conv" in op.lower() else "matrix product" if op in GEMM_OPS
                else "attention call")
        return (f"the {what} {_where(analysis.graph, calls[0])} sits between them (a library "
                "call: Inductor fuses nothing across it)")
    opaque = [n for n in between if n.kind is OpKind.OPAQUE]
    if opaque:
        return f"an opaque op {_where(analysis.graph, opaque[0])} separates the ops in our graph"
    rejection = next((r for r in analysis.rejections
                      if len(ours & {*r.nodes, *r.culprits}) >= 2), None)
    if rejection is not None:
        return f"split by our {rejection.check} check: {rejection.reason}"
    views = [n for n in between if n.kind is OpKind.VIEW]
    if views:
        return f"a view {_where(analysis.graph, views[0])} separates the ops in our graph"
    holding = [c.index for c in analysis.clusters if len(ours & set(c.nodes)) >= 2]
    if holding:
        return (f"our cluster {holding[0]} fuses them: nothing between them in our graph "
                "keeps them apart (Inductor's scheduler chose to)")
    return "the ops fall into different clusters of ours"


def separations(analysis: Analysis, kernels: Sequence[CompiledKernel]
                ) -> tuple[Separation, ...]:
    """For each generated kernel feeding another one, what lies between them."""
    owner = _owners(analysis, kernels)
    by_kernel: dict[int, set[str]] = {}
    for name, i in owner.items():
        by_kernel.setdefault(i, set()).add(name)
    out = []
    for i in sorted(by_kernel):
        down, fed = _reach(analysis, by_kernel[i], owner, True, i)
        for j in sorted(fed):
            up, _ = _reach(analysis, by_kernel[j], owner, False, j)
            between = [n for n in analysis.graph.nodes if n.name in down & up]
            # Only the two kernels' own ops count for the legality and cluster rules.
            reason = _reason(analysis, between, {*by_kernel[i], *by_kernel[j]})
            out.append(Separation(kernels[i].name, kernels[j].name, reason))
    return tuple(out)
