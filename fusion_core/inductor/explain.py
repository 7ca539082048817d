"""Why we do not propose a kernel Inductor generated, and short names for printing it.

Reads an ``Analysis`` (our graph, clusters, rejections, the captured FX graph) and one
``InductorKernel``; returns one line naming the cause, first match wins:

1. Inductor fused a GEMM or convolution's epilogue (the bias add, an activation after
   ``addmm``/``convolution``) that we keep inside one opaque call: our ops on the kernel's
   lines read the call's result and the kernel computes on its behalf (``kernel_graph.py``).
   When our graph cannot tell (no op of ours on the kernel's lines, or a GEMM among Inductor's
   origins with no call of ours on its line) a GEMM among the origins still means this. A
   GEMM or convolution whose bias our capture split off into an ``add`` of its own
   (``ir/conv_bias.py``, ``ir/linear_bias.py``) is not such a case: its epilogue is in our
   graph, so the kernel goes on to the checks below.
2. None of our compute ops sit on the kernel's lines: the capture hid them (an opaque
   op or a module we do not trace through, named when there is one).
3. A legality check of ours rejected a group holding those ops: the check and reason.
4. An opaque op or a view of ours lies between two of them.
5. Inductor wrote the kernel's results into a concatenation's output (its ``cat`` lends
   each input a slice of its buffer, or reads the inputs inline), where our ``cat`` is an
   opaque call the kernel's ops feed: ``INTO_CAT``, with what our side lacks.
6. Inductor fused ops that share a loop but do not feed each other (horizontal fusion).
7. Otherwise, the ops are split over groups of ours too small to fuse.

A kernel whose ops produce the operands of a GEMM or attention call and do not read its
result (Inductor lists the consumer among the origins of the kernel preparing its inputs)
is that call's prologue, not its epilogue: its reason from 2-6 says so first.

``collapse`` folds kernels with the same ops and reason into one line (a model of N
identical blocks otherwise prints N copies).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..ir.bias_split import SPLIT_BIAS
from ..ir.graph import FusionGraph, Node, OpKind
from ..ir.normalize import parse_stack_trace
from ..ir.spelling import place
from ..pipeline import Analysis
from .capture import InductorKernel, module_path
from .kernel_graph import GEMM_OPS, KernelGraph, Role, callee, compatible, norm_path

EPILOGUE = "Inductor fuses across a GEMM/conv epilogue"
INTO_CAT = "written into `cat`'s output: Inductor fuses a producer into a concatenation"


def into_cat(where: str) -> str:
    """INTO_CAT with where the concatenation is (" (line 17)") after its name."""
    return INTO_CAT.replace("output:", f"output{where}:", 1)

# What our side lacks, said beside INTO_CAT (see the module docstring).
NO_CAT_FUSION = ("our `cat` stays a call of its own: we do not yet fuse a producer into a "
                 "concatenation (each input's kernel writing its slice of the output)")
NAME_LIMIT = 48


def short_name(name: str, limit: int = NAME_LIMIT) -> str:
    """`cpp_fused__native_batch_norm_legit_no_training_add_…_17`: the head and the number."""
    if len(name) <= limit:
        return name
    m = re.search(r"_\d+$", name)
    tail = m.group(0) if m else ""
    return name[:limit - len(tail) - 1] + "…" + tail


def _our_nodes(analysis: Analysis, k: InductorKernel) -> list[Node]:
    """Our nodes on the kernel's (module, file, line) keys."""
    keys = {(n.module, norm_path(n.file), n.line) for n in k.nodes if n.line is not None}
    lines = {key[1:] for key in keys}
    fx_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
    out = []
    for node in analysis.graph.nodes:
        s = node.source
        if s is None or (norm_path(s.file), s.line) not in lines:
            continue
        fx = fx_nodes.get(node.name)
        mod = module_path(fx.meta.get("nn_module_stack")) if fx is not None else ""
        if not mod or any((mod, norm_path(s.file), s.line) == key for key in keys):
            out.append(node)
    return out


def _key(fx_nodes: dict, node: Node) -> tuple[str, str, int]:
    fx_node = fx_nodes.get(node.name)
    module = module_path(fx_node.meta.get("nn_module_stack")) if fx_node is not None else ""
    source = node.source
    return (module, norm_path(source.file), source.line) if source else (module, "", 0)


def _where(g: FusionGraph, node: Node) -> str:
    return f"`{node.target or node.op}`" + (f" ({place(g, node.source)})" if node.source else "")


def _split_bias_keys(analysis: Analysis) -> set[tuple[str, str, int]]:
    """(module, file, line) of every bias add our capture split off a GEMM or convolution:
    the add keeps its layer's module and line."""
    keys = set()
    for fx_node in analysis.graph_module.graph.nodes:
        loc = parse_stack_trace(fx_node.meta.get("stack_trace"))
        if fx_node.meta.get(SPLIT_BIAS) and loc is not None:
            keys.add((module_path(fx_node.meta.get("nn_module_stack")), norm_path(loc.file),
                      loc.line))
    return keys


def _kept_whole(key: tuple[str, str, int], split: set[tuple[str, str, int]]) -> bool:
    """A GEMM/conv at `key` whose bias we did not split off (module "" matches any)."""
    return not any(key[1:] == s[1:] and (key[0] == s[0] or not key[0] or not s[0])
                   for s in split)


def miss_reason(analysis: Analysis, k: InductorKernel) -> str:
    """One line: why no cluster of ours computes what kernel `k` computes."""
    split = _split_bias_keys(analysis)
    ours = _our_nodes(analysis, k)
    fx_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
    kg = KernelGraph(analysis.graph, k, frozenset(n.name for n in ours))
    calls = {n.name: _key(fx_nodes, n) for n in ours
             if callee(n) and _kept_whole(_key(fx_nodes, n), split)}
    theirs = [key for n in k.nodes if n.op in GEMM_OPS
              and _kept_whole(key := (n.module, norm_path(n.file), n.line or 0), split)]
    if (theirs or any(analysis.graph[c].op in GEMM_OPS for c in calls)) and (
            not kg.compute
            or not all(any(compatible(c, t) for c in calls.values()) for t in theirs)):
        return EPILOGUE  # our graph cannot tell which side of the GEMM the ops are on
    roles = {c: kg.role(analysis.graph[c], key) for c, key in calls.items()}
    if Role.EPILOGUE in roles.values():
        return EPILOGUE
    # Beside ops of ours, a call has a role and hides nothing; with none, it is all there is
    # to name.
    reason = _own_reason(analysis, kg, ours, set(calls) if kg.compute else set(), split,
                         fx_nodes)
    fed = [analysis.graph[c] for c, role in roles.items() if role is Role.PROLOGUE]
    if fed:
        return (f"Inductor fuses the ops that feed {_where(analysis.graph, fed[0])} into one "
                f"kernel; {reason}")
    return reason


def _own_reason(analysis: Analysis, kg: KernelGraph, ours: list[Node], calls: set[str],
                split: set[tuple[str, str, int]], fx_nodes: dict) -> str:
    """Rules 2-6: what in our graph keeps the kernel's ops apart; `calls` are the GEMM and
    attention calls already placed beside the kernel (they hide nothing)."""
    compute = [n for n in ours if n.name in kg.compute]
    # A convolution whose bias we split off sits on its add's line, not between our ops.
    hidden = [n for n in ours if n.kind is OpKind.OPAQUE and n.op != "meta"
              and n.name not in calls
              and not (n.op in GEMM_OPS and not _kept_whole(_key(fx_nodes, n), split))]
    if len(compute) < 2:
        if hidden:
            return (f"capture: opaque {_where(analysis.graph, hidden[0])} hides the ops "
                    "Inductor fused")
        return ("capture: our graph has no pointwise/reduction ops on these lines (a module or "
                "function we keep as one call)")
    names = {n.name for n in compute}
    rejection = next((r for r in analysis.rejections if names & set(r.culprits)), None) or next(
        (r for r in analysis.rejections if names & set(r.nodes)), None)
    if rejection is not None:
        return f"split by our {rejection.check} check: {rejection.reason}"
    cat = _our_cat(analysis, kg, ours)
    if cat is not None:
        line = f" ({place(analysis.graph, cat.source)})" if cat.source else ""
        return f"{into_cat(line)}; {NO_CAT_FUSION}"
    # Only what lies on a path from one of the kernel's ops to another keeps them apart (not
    # a call they feed, nor a view of a parameter).
    views = [n for n in ours if n.kind is OpKind.VIEW]
    barrier = next((n for n in hidden + views if kg.between(n.name)), None)
    if barrier is not None:
        what = "an opaque op" if barrier.kind is OpKind.OPAQUE else "a view"
        return f"{what} {_where(analysis.graph, barrier)} separates the ops in our graph"
    if not any(r in names for n in compute for r in n.refs):
        return "Inductor fuses ops that share a loop but do not feed each other (horizontal)"
    clustered = {n for c in analysis.clusters for n in c.nodes}
    return ("our groups on these lines are too small to fuse (fewer than two ops that move data)"
            if not names & clustered else "the ops fall into different clusters of ours")


def is_cat(node: Node) -> bool:
    """Our `torch.cat`: one we fuse (``OpKind.CONCAT``), or a call of it we keep opaque."""
    return node.kind is OpKind.CONCAT or (node.kind is OpKind.OPAQUE and node.target.rsplit(
        ".", 1)[-1] in ("cat", "concat", "concatenate"))


def _our_cat(analysis: Analysis, kg: KernelGraph, ours: list[Node]) -> Node | None:
    """Our opaque `cat` on the line of a concatenation the kernel writes into, when one of
    the kernel's ops of ours feeds it (directly or through views)."""
    names = {n.name for n in ours if n.name in kg.compute}
    found = _cats_fed(analysis, kg.kernel, names)
    return next(iter(found.values()), None)


def cat_feeders(analysis: Analysis, kernel: InductorKernel, names: Iterable[str]) -> list[str]:
    """Those of `names` that feed (directly or through views) our `cat` on the line of a
    concatenation the kernel fuses; the others read its output or lie elsewhere."""
    return [n for n in names if n in _cats_fed(analysis, kernel, {n})]


def _cats_fed(analysis: Analysis, kernel: InductorKernel, names: set[str]
              ) -> dict[str, Node]:
    """Each of `names` feeding one of our cats on the kernel's concatenation lines -> it."""
    lines = {(norm_path(c.file), c.line) for c in kernel.cats if c.line is not None}
    out: dict[str, Node] = {}
    for node in analysis.graph.nodes if lines else ():
        if not (is_cat(node) and node.source is not None
                and (norm_path(node.source.file), node.source.line) in lines):
            continue
        todo = list(node.refs)
        while todo:
            ref = analysis.graph[todo.pop()]
            if ref.name in names:
                out.setdefault(ref.name, node)
            elif ref.kind is OpKind.VIEW:
                todo.extend(ref.refs)
    return out


@dataclass(frozen=True)
class MissLine:
    ops: tuple[str, ...]
    reason: str
    kernels: tuple[str, ...]
    lines: tuple[int, ...]

    def __str__(self) -> str:
        first = short_name(self.kernels[0])
        more = f" and {len(self.kernels) - 1} more like it" if len(self.kernels) > 1 else ""
        lines = ",".join(f"L{x}" for x in self.lines) or "no source line"
        return f"{first}{more} ({' → '.join(self.ops)}; {lines}): {self.reason}"


def collapse(missed: Iterable[tuple[str, tuple[str, ...], tuple[int, ...], str]]
             ) -> list[MissLine]:
    """(kernel, ops, lines, reason) rows folded by (ops, reason), first seen first."""
    groups: dict[tuple[tuple[str, ...], str], tuple[list[str], set[int]]] = {}
    for name, ops, lines, reason in missed:
        names, all_lines = groups.setdefault((ops, reason), ([], set()))
        names.append(name)
        all_lines.update(lines)
    return [MissLine(ops, reason, tuple(names), tuple(sorted(lines)))
            for (ops, reason), (names, lines) in groups.items()]
