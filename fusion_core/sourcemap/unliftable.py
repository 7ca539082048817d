"""Why a call of the user's own code cannot be lifted to its caller's line.

Reads a call's nodes and the cluster (an ``Analysis``); ``is_feeder`` and ``unread_tuple``
tell the nodes a call may run that no kernel computes, and ``partly_fused`` words the
refusal of a call only part of whose ops the cluster holds: the op left out, the layer
the call ran on and, where one exists, the rewrite that puts the cluster in one function
(``hints.py``, or moving the outer call of the callee's `return` to the caller).
"""

from __future__ import annotations

import ast

from ..ir.graph import Node, OpKind
from ..ir.spelling import called_as, layer_said, said
from ..pipeline import Analysis
from .callkeys import instance_path
from .frames import pos
from .hints import argument_hint, own_call_first


class Unliftable(Exception):
    """The cluster's calls cannot be lifted to one function: with `site` (file, line), a
    call there is only partly fused and `reason` says so; without, the plain refusal stands."""

    def __init__(self, reason: str, site: tuple[str, int] | None = None) -> None:
        super().__init__(reason)
        self.reason, self.site = reason, site


def is_feeder(node: Node) -> bool:
    """Nodes a call may run that no kernel computes: its parameters and Python values."""
    return node.kind in (OpKind.CONSTANT, OpKind.INPUT) or node.op == "meta"


def unread_tuple(analysis: Analysis, name: str) -> bool:
    """A chunk or split whose pieces each read its source directly (``ir/split_views.py``):
    the tuple itself is no value a kernel computes or the call's line must keep."""
    node = analysis.graph[name]
    return node.kind is OpKind.VIEW and node.meta is None and not analysis.graph.users[name]


def partly_fused(analysis: Analysis, site: tuple[str, int], callee: tuple[str, str] | None,
                 left: list[str], fused: frozenset[str] = frozenset()) -> Unliftable:
    """The refusal of a call the cluster holds only part of: `left`, the ops it runs
    outside the cluster, `fused` those inside."""
    name = f"`{callee[1]}`" if callee else "the call"
    # a call through a variable (`x = blk(x)` in a loop) says the module it ran on
    owner = callee[1].split(".")[-2] if callee and "." in callee[1] else None
    own = {m for m in fused if not unread_tuple(analysis, m)}  # a split's tuple: every call's
    left = own_call_first(analysis, left, own, owner)
    fx_node = next((n for n in analysis.graph_module.graph.nodes if n.name == left[0]), None)
    src = analysis.graph[left[0]].source
    loc = next((f for f in src.chain if pos(f) == site), None) if src else None
    if (path := instance_path(fx_node, owner)) and loc and called_as(path, loc):
        name += f" on {layer_said(path, loc)}"
    out = said(analysis.graph, left[0])
    # A view the kernel reads (a cat's operand sliced inside `rotate_half`) is made there.
    out += (" is a view made inside the call, which the kernel reads as an input,"
            if analysis.graph[left[0]].kind is OpKind.VIEW else
            " runs in another kernel or unfused,")
    return Unliftable(f"only part of the call at line {site[1]} ({name}) is in the cluster: "
                      f"{out} and an edit of the call's line would drop it"
                      + (_return_hint(analysis, site, fused)
                         or argument_hint(analysis, site, callee, own)), site)


def _return_hint(analysis: Analysis, site: tuple[str, int], fused: frozenset[str]) -> str:
    """The fix when the callee's part of the cluster is the outer call of its `return`
    (squeeze-excitation's `return self.scale_activation(scale)` under `scale * input`):
    that call, made at the caller's line instead, puts the cluster in one function."""
    locs = {(s.file, s.line, s.code) for m in fused if (s := analysis.graph[m].source)}
    if len(locs) != 1 or len(fused) != sum(analysis.graph[m].source is not None for m in fused):
        return ""
    (_, line, code), = locs
    try:
        st = ast.parse(code).body[0]
    except (SyntaxError, IndexError):
        return ""
    if not (isinstance(st, ast.Return) and isinstance(st.value, ast.Call)
            and len(st.value.args) == 1 and not st.value.keywords):
        return ""
    func, arg = ast.unparse(st.value.func), ast.unparse(st.value.args[0])
    return (f"; the cluster's part of it is only `{ast.unparse(st.value)}` (line {line}): to "
            f"apply, `return {arg}` there and call `{func}` on the result of line {site[1]} "
            "in a statement of its own below it, so one function holds the whole cluster")
