"""What the reason for a call only partly fused names: the layer the cluster ran in, and the fix
when the callee's part is one call on its parameters.

A layer's first norm (`x = x + self.attn(self.norm1(x))`) fused with the caller's sum before
the call (`x = self.tokens(ids) + self.positions(pos)`), or squeeze-excitation's
`F.adaptive_avg_pool2d(x, 1)` fused with the activation its caller computes: the call's
line cannot be replaced (the callee runs other ops) and the callee's line runs in every
call. Computed at the caller's line and passed in, that one call joins the caller's ops in
one function, where an edit can write them.

Reads an ``Analysis`` (the cluster's nodes inside the call, their source lines) and the
callee's file; writes nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Collection

import torch.fx as fx

from ..pipeline import Analysis
from .callkeys import instance_path
from .pyexpr import attr_chain, module_path
from .pysource import SourceFile


def argument_hint(analysis: Analysis, site: tuple[str, int],
                  callee: tuple[str, str] | None, fused: Collection[str]) -> str:
    """`; the cluster's part of it is only `self.norm1(x)` (line 47): to apply, ...`, or ""
    when the callee's part of the cluster is not one call on its parameters."""
    locs = {(s.file, s.line) for m in fused if (s := analysis.graph[m].source)}
    if callee is None or len(locs) != 1 or not fused:
        return ""
    ((file, line),) = locs
    try:
        src = SourceFile.read(file)
    except (OSError, SyntaxError, UnicodeDecodeError):
        return ""
    scope = src.scope_at(line)
    if scope is None or (file, scope.qualname) != callee:
        return ""  # the part lies deeper, in a call the callee makes
    args = scope.node.args
    params = {p.arg for p in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    # A parameter reassigned above the line no longer holds what the caller passed.
    rebound = {n.id for st in scope.node.body if st.lineno < line for n in ast.walk(st)
               if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    fx_nodes = {n.name: n for n in analysis.graph_module.graph.nodes}
    calls = [n for n in ast.walk(scope.node) if isinstance(n, ast.Call)
             and n.lineno <= line <= (n.end_lineno or n.lineno)
             and _on_parameters(n, params - rebound)
             and _makes(n, [fx_nodes.get(m) for m in fused], scope.receiver or "self")]
    if len(calls) != 1:
        return ""
    text = src.segment(calls[0])
    return (f"; the cluster's part of it is only `{text}` (line {line}): to apply, compute it "
            f"in a statement of its own above line {site[1]} and pass the result to the call "
            "as an argument of its own, so one function holds the whole cluster")


def _on_parameters(call: ast.Call, params: set[str]) -> bool:
    """Every argument a constant or one of `params`, at least one of them a parameter."""
    values = [*call.args, *(k.value for k in call.keywords)]
    names = [v for v in values if isinstance(v, ast.Name)]
    return bool(names) and all(isinstance(v, ast.Constant) or (
        isinstance(v, ast.Name) and v.id in params) for v in values)


def _makes(call: ast.Call, nodes: list[fx.Node | None], receiver: str) -> bool:
    """The nodes are what `call` computes: each ran in the submodule `self.<child>` names, or
    the one node is the function it names (`F.adaptive_avg_pool2d`)."""
    chain = attr_chain(call.func)
    if not chain or None in nodes:
        return False
    if chain[0] == receiver and len(chain) > 1:
        child = ".".join(chain[1:])
        paths = [module_path(n) or "" for n in nodes]
        return all(p == child or p.endswith("." + child) for p in paths)
    (node,) = nodes if len(nodes) == 1 else (None,)
    target = getattr(node.target, "__name__", str(node.target)) if node is not None else ""
    return node is not None and target == chain[-1]


def own_call_first(analysis: Analysis, left: list[str], fused: Collection[str],
                   owner: str | None) -> list[str]:
    """`left` (the call's ops outside the cluster), those of the module instance the cluster's
    own ops ran on first: calls in a loop (`x = layer(x)`) share the call's line, and the
    reason names the layer the cluster is in (`self.layers[11]`), not the loop's first."""
    gm = {n.name: n for n in analysis.graph_module.graph.nodes}

    def path(name: str) -> str | None:  # a copy ran where its original did
        return instance_path(gm.get(name) or gm.get(analysis.graph[name].copy_of or ""), owner)

    mine = {path(m) for m in fused} - {None}
    return sorted(left, key=lambda m: path(m) not in mine) if mine else left
