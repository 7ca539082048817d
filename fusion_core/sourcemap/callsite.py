"""Clusters that run partly inside a call of the user's own module or helper function.

Reads a cluster's nodes with their chains of user frames (``SourceLoc.caller``) and the
files those frames lie in; returns, for a cluster whose nodes lie in several functions,
the line each node stands at in the outermost one (``Lifted``): an op inside `self.norm(h)`
(a user RMSNorm's forward) stands at that call's line, as a library module's ops already
do. A call is lifted only when the cluster holds every op it runs, so the edit that replaces
its line computes all of it; otherwise ``Unliftable`` names the call left half fused
(``unliftable.py``). Calls are told apart by their frames (``callkeys.py``) and, on one
line spelling several, by their ops (``stated_calls.py``). Frames of wrappers that only
hand the call on (``wrappers.py``: a ``functools.wraps`` decorator, a forwarding
``__call__``) are looked through, unless the graph shows the wrapper computing ops of its
own: the caller's line then calls the function the wrapper reaches.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass

from ..analysis.types import Cluster
from ..ir.graph import OpKind, SourceLoc
from ..pipeline import Analysis
from .callkeys import calls_at, common_depth
from .frames import Frames
from .pysource import Scope, SourceFile
from .stated_calls import NestedCalls, each_call, nested_calls
from .unliftable import Unliftable, is_feeder, partly_fused, unread_tuple


@dataclass(frozen=True)
class LiftedCall:
    """One call, on a line of the span's function, whose every op the cluster computes."""

    line: int  # the call's line in the caller
    function: str  # the callee, `RMSNorm.forward`
    name: str  # the callee's own name (`forward`, `rms_norm`)
    result: str  # the node the call returns
    nodes: frozenset[str]  # the cluster's nodes the call computes
    # (node, value from outside): a same-dtype `.to` that torch.export made the name of its
    # operand from then on (the tensor object is the argument itself), so later code
    # outside the call reads the node while the source reads the argument.
    passes: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Lifted:
    locs: Mapping[str, SourceLoc]  # node name -> where it stands in the outermost function
    calls: tuple[LiftedCall, ...] = ()
    nested: NestedCalls | None = None


def site_line(loc: SourceLoc | None, src: SourceFile, scope: Scope) -> int | None:
    """The line of `scope` (in `src`) a node stands at: its own, or that of the call in
    `scope` it ran inside (innermost such frame); None when no frame lies there."""
    end = scope.node.end_lineno or 0
    for frame in reversed(loc.chain if loc is not None else ()):
        if (frame.file == src.path and scope.start <= frame.line <= end
                and src.scope_at(frame.line) is scope):
            return frame.line
    return None


def _returns_one_value(scope: Scope | None) -> bool:
    """Whether every `return` of the callee's own body returns one expression that is not a
    tuple, and it does not yield (nested functions and lambdas aside)."""
    if scope is None:
        return False
    todo: list[ast.AST] = list(scope.node.body)
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(n, (ast.Yield, ast.YieldFrom)):
            return False
        if isinstance(n, ast.Return) and (n.value is None or isinstance(n.value, ast.Tuple)):
            return False
        todo.extend(ast.iter_child_nodes(n))
    return True


def lift(analysis: Analysis, c: Cluster, frames: Frames) -> Lifted:
    """Where each of `c`'s nodes stands once the calls it fuses whole are lifted to their
    call sites (`frames`: the analysis' frames, shared by every cluster it maps). Raises
    ``Unliftable`` when no one function holds all the calls' lines, with the call's `site`
    when a call's ops are only partly in `c`."""
    nodes = [analysis.graph[n] for n in c.nodes]
    try:
        chains = {n.name: frames.chain(n.source) for n in nodes}
        if len({frames.function(ch[-1]) for ch in chains.values()}) <= 1:
            return Lifted({n.name: n.source for n in nodes},
                          nested=nested_calls(analysis, c, chains, frames))
        depth = common_depth(list(chains.values()), frames)
        if depth is None:
            raise Unliftable("no common caller")
        gm_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
        keys, members = calls_at(analysis, depth, list(chains), frames, gm_nodes)
    except (OSError, SyntaxError, UnicodeDecodeError) as e:  # a frame's file cannot be read
        raise Unliftable(str(e)) from e
    callee_names = {k: chains[name][depth + 1].function for name, k in keys.items()}
    callee_scopes = {k: frames.scope(chains[name][depth + 1]) for name, k in keys.items()}
    inside = set(c.nodes)
    calls = []
    for key in dict.fromkeys(keys.values()):
        site, callee = key[0][-1], key[1]
        if not _returns_one_value(callee_scopes[key]):
            # `a, b = f(h)`: an edit binding the kernel's one result to those names is wrong.
            raise Unliftable(f"the call at line {site[1]} (`{callee[1] if callee else '?'}`) "
                             "returns several values (a tuple) or yields; an edit of its "
                             "line binds one", site)
        for each in each_call(analysis, members[key], site, callee_scopes[key], key[2],
                             frames):
            if inside.isdisjoint(each):  # another call on that line, of another kernel
                continue
            calls.append(_lifted(analysis, c, site, callee, callee_names[key], each))
    locs = {}
    for n in nodes:
        ch = chains[n.name]
        locs[n.name] = ch[depth] if len(ch) > depth + 1 else n.source
    return Lifted(locs, tuple(calls))


def _lifted(analysis: Analysis, c: Cluster, site: tuple[str, int],
            callee: tuple[str, str] | None, name: str, members: list[str]) -> LiftedCall:
    """One call whose every op `c` must compute, and the one value it hands `c`."""
    inside = set(c.nodes)
    left = [m for m in members if m not in inside and not is_feeder(analysis.graph[m])
            and not unread_tuple(analysis, m)]
    # the tuple counts as the call's own: its pieces' source is what the call reads
    ran = frozenset(m for m in members if m in inside or unread_tuple(analysis, m))
    if left:
        raise partly_fused(analysis, site, callee, left, ran)
    read = [m for m in c.nodes if m in ran and any(
        u not in ran for u in analysis.graph.users[m])]
    # A reader without a source line could be the call's own last op, unseen above.
    if any(analysis.graph[u].source is None and analysis.graph[u].kind is not OpKind.OUTPUT
           for m in read for u in analysis.graph.users[m] if u not in ran):
        raise Unliftable("a value of the call is read by a node without a source line")
    passes = tuple((m, v) for m in read if (v := _same_as_operand(analysis, m, ran)))
    returned = [m for m in read if m not in dict(passes)]
    if len(returned) != 1:
        raise Unliftable(f"the call at line {site[1]} (`{callee[1] if callee else '?'}`) "
                         f"hands the cluster {len(returned)} of its values; an "
                         "edit of its line can bind only the one it returns", site)
    return LiftedCall(site[1], callee[1], name, returned[0], ran, passes)


def _same_as_operand(analysis: Analysis, name: str, ran: frozenset[str]) -> str | None:
    """The value from outside the call that `name` is, when it is a conversion to the
    dtype, shape and strides its operand already has (a no-op torch returns the operand
    for)."""
    node = analysis.graph[name]
    if node.op != "to" or len(node.refs) != 1 or node.refs[0] in ran:
        return None
    operand = analysis.graph[node.refs[0]]
    return operand.name if node.meta is not None and node.meta == operand.meta else None
