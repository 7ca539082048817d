"""Whether a matched expression's surroundings agree with the graph one level further out.

``unify.py`` checks an expression against a graph value by its outermost operation alone,
and a plain name against nothing. On a line that applies the same layer twice
(`F.relu(self.conv1(F.relu(self.conv1(x))))`) that lets the outer pass's cluster match the
inner call (`x` read as the inner pass's result) or the inner pass's cluster match the whole
line (`self.conv1(<inner call>)` read as the inner layer's result): the edit then writes
one call and claims both clusters. Two checks one level out catch both:
``args_computed``: an inlined input's tensor arguments compute what the graph passes it;
``taken_by_enclosing``: the code a part is an argument of takes the part's value.
Reads AST nodes and FX nodes; writes nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

import torch.fx as fx

from .pyexpr import module_chain, module_path, operands_in_graph_order
from .pysource import is_plain_access

Computes = Callable[[ast.expr, fx.Node], bool]


def _pairs(expr: ast.expr, node: fx.Node, layer: str | None
           ) -> list[tuple[ast.expr, object]] | None:
    """(argument expression, graph operand) in order, or None when they need not line up:
    a function or method (a method's receiver is no argument), or a layer's op that reads
    values the layer computed (a module traced through)."""
    if isinstance(expr, ast.BinOp):
        return list(zip(operands_in_graph_order(expr, node), node.args, strict=False))
    if not isinstance(expr, ast.Call):
        return None
    if node.op == "call_module":  # a leaf module reads the call's arguments as they are
        return list(zip(expr.args, node.args, strict=False))
    if node.op != "call_function" or layer is None or module_path(node) != layer or any(
            isinstance(a, fx.Node) and (p := module_path(a)) is not None
            and (p == layer or p.startswith(layer + ".")) for a in node.args):
        return None
    return list(zip(expr.args, node.args, strict=False))


def called_layer(expr: ast.expr, self_name: str, child_path: Callable[[list[str]], str | None]
                 ) -> str | None:
    """The module path of the layer `expr` calls (`self.fc(...)`, `self.stem[0](...)`)."""
    chain = module_chain(expr.func) if isinstance(expr, ast.Call) else []
    return child_path(chain[1:]) if len(chain) > 1 and chain[0] == self_name else None


def args_computed(expr: ast.expr, node: fx.Node, layer: str | None,
                  computes: Computes) -> bool:
    """Each tensor argument `expr` spells with code (not a plain name) computes the operand
    the graph's `node` reads in its place. `layer`: the module path `expr` calls, if any
    (`self.fc(...)`)."""
    pairs = _pairs(expr, node, layer)
    return pairs is None or all(
        computes(e, a) for e, a in pairs
        if isinstance(a, fx.Node) and not isinstance(e, ast.Starred) and not is_plain_access(e))


def enclosing(stmt: ast.stmt, part: ast.expr) -> ast.expr | None:
    """The call or operator of `stmt` that takes `part` as an argument or operand; None when
    `part` is the statement's value or sits in anything else (a tuple, a list)."""
    for n in ast.walk(stmt):
        if isinstance(n, ast.Call) and (any(a is part for a in n.args)
                                        or any(k.value is part for k in n.keywords)):
            return n
        if isinstance(n, ast.BinOp) and part in (n.left, n.right):
            return n
        if isinstance(n, ast.UnaryOp) and n.operand is part:
            return n
    return None


def taken_by_enclosing(stmt: ast.stmt, part: ast.expr, result: fx.Node,
                       computes: Computes) -> bool:
    """The code around `part` that takes its value (`self.conv1(<part>)`) is what reads the
    cluster's `result` in the graph: some user of `result` is computed by it."""
    outer = enclosing(stmt, part)
    return outer is None or any(computes(outer, u) for u in result.users if u.op != "output")
