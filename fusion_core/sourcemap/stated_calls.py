"""Calls of one function that one line spells several times (`act(h) + act(h)`, `act(act(h))`).

Reads the statement at a call's line (``Frames``: the files read once) and the graph; returns
the nodes of each call, told apart by their connected ops when the line spells as many calls
as the graph shows, or the reason an edit of the line cannot bind each call's result
(``Unliftable``; ``NestedCalls`` for a cluster whose ops all lie in the callee).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass

from ..analysis.group import components
from ..analysis.types import Cluster
from ..ir.graph import SourceLoc
from ..pipeline import Analysis
from .callkeys import call_key
from .frames import Frames, pos
from .pyexpr import attr_chain
from .pysource import Scope
from .unliftable import Unliftable, is_feeder


@dataclass(frozen=True)
class NestedCalls:
    """The one line that calls the function all of a cluster's ops lie in, spelling that
    call several times one inside the other (`act(act(x))`): why no edit of the function's
    lines computes a cluster of ops from more than one of those calls."""

    reason: str
    file: str
    line: int


def each_call(analysis: Analysis, members: list[str], site: tuple[str, int],
              callee: Scope | None, module: str, frames: Frames) -> list[list[str]]:
    """The nodes of each call one key stands for. Two calls on one line of one module share
    a key (`act(h) + act(h)`); each is told by its own connected ops when the line spells
    that many calls of the callee. Calls one inside the other (`act(act(h))`) share ops
    the graph cannot tell apart: refused in those words."""
    stated = _stated_calls(analysis, site, callee, module, frames)
    if len(stated) < 2:
        return [members]
    each = _connected(analysis, members)
    if len(each) == len(stated):
        return each
    raise Unliftable(_calls_reason(site, callee, stated, frames), site)


def _outermost(stated: list[ast.Call]) -> list[ast.Call]:
    return [s for s in stated if not any(o is not s and _holds(o, s) for o in stated)]


def _calls_reason(site: tuple[str, int], callee: Scope | None, stated: list[ast.Call],
                  frames: Frames) -> str:
    outer = _outermost(stated)
    src = frames.files[site[0]]
    spelled = ", ".join(f"`{src.segment(s)}`" for s in outer)
    nested = ", one inside the other" if len(outer) < len(stated) else ""
    return (f"line {site[1]} calls `{callee.node.name if callee else '?'}` "
            f"{_times(len(stated))} ({spelled}{nested}), and the graph does not say "
            "which of its ops ran in which call; an edit of the line cannot bind "
            "each call's result")


def nested_calls(analysis: Analysis, c: Cluster, chains: Mapping[str, tuple[SourceLoc, ...]],
                 frames: Frames) -> NestedCalls | None:
    """For a cluster whose ops all lie in one function: the line of its caller that calls it
    nested (`act(act(x))`), when every op ran under that one line; else None."""
    if not chains or any(len(ch) < 2 for ch in chains.values()):
        return None
    if len({tuple(pos(f) for f in ch[:-1]) for ch in chains.values()}) != 1:
        return None
    name, chain = next(iter(chains.items()))
    depth = len(chain) - 2
    site, callee = pos(chain[depth]), frames.scope(chain[-1])
    gm_node = next((n for n in analysis.graph_module.graph.nodes if n.name == name), None)
    module = call_key(chain, depth, frames, gm_node)[2]
    stated = _stated_calls(analysis, site, callee, module, frames)
    if len(_outermost(stated)) == len(stated):
        return None
    return NestedCalls(_calls_reason(site, callee, stated, frames), *site)


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _holds(outer: ast.Call, inner: ast.Call) -> bool:
    return any(n is inner for n in ast.walk(outer))


def _stated_calls(analysis: Analysis, site: tuple[str, int], callee: Scope | None,
                  module: str, frames: Frames) -> list[ast.Call]:
    """The calls of `callee` the statement at the site line spells: `act(...)` by the
    function's name, `self.norm(...)` by the submodule it names; empty when unknown."""
    src = frames.files.get(site[0])
    caller = frames.scopes.get(site)
    if src is None or caller is None or callee is None:
        return []
    st = src.statement_at(caller, site[1])
    if st is None:
        return []
    found = []
    for n in ast.walk(st.node):
        if not isinstance(n, ast.Call):
            continue
        chain = attr_chain(n.func)
        if callee.node.name != "forward":
            if chain and chain[-1] == callee.node.name:
                found.append(n)
        elif len(chain) > 1 and caller.class_name and _names_class(
                analysis, module, chain[1:], callee.class_name):
            found.append(n)
    return found


def _names_class(analysis: Analysis, module: str, attrs: list[str], cls: str | None) -> bool:
    try:
        sub = analysis.module.get_submodule(".".join(p for p in (module, *attrs) if p))
    except AttributeError:
        return False
    return type(sub).__name__ == cls


def _connected(analysis: Analysis, members: list[str]) -> list[list[str]]:
    """`members` split by the ops that read one another (parameters and Python values go
    with the ops that read them)."""
    ops = [m for m in members if not is_feeder(analysis.graph[m])]
    each = [list(c) for c in components(analysis.graph, ops)]
    for m in members:
        if is_feeder(analysis.graph[m]):  # with the first call that reads it
            at = next((g for g in each if any(m in analysis.graph[o].refs for o in g)),
                      each[0] if each else None)
            if at is not None:
                at.append(m)
    return each
