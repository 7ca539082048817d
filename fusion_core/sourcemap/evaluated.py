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
from collections.abc import Callable, Iterable

import torch.fx as fx

from .pyexpr import layer_range, module_chain, module_path, operands_in_graph_order

Computes = Callable[[ast.expr, fx.Node], bool]


def called_layer(expr: ast.expr, self_name: str, child_path: Callable[[list[str]], str | None]
                 ) -> str | None:
    """The module path of the layer `expr` calls (`self.fc(...)`, `self.stem[0](...)`)."""
    chain = module_chain(expr.func) if isinstance(expr, ast.Call) else []
    return child_path(chain[1:]) if len(chain) > 1 and chain[0] == self_name else None


def _inside(node: fx.Node, layer: str) -> bool:
    where = module_path(node)
    return where is not None and (where == layer or where.startswith(layer + "."))


def _pairs(expr: ast.expr, node: fx.Node, layer: str | None
           ) -> list[tuple[ast.expr, object]] | None:
    """(argument expression, graph operand) in order, or None when they need not line up:
    a function or method (a method's receiver is no argument), a layer inside the one
    called (a container traced through), or a layer's op reading what the layer computed."""
    if isinstance(expr, ast.BinOp):
        return list(zip(operands_in_graph_order(expr, node), node.args, strict=False))
    if not isinstance(expr, ast.Call) or layer is None:
        return None
    if node.op == "call_module":  # the very layer called reads the call's arguments
        return list(zip(expr.args, node.args, strict=False)) if node.target == layer else None
    if node.op != "call_function" or module_path(node) != layer or any(
            isinstance(a, fx.Node) and _inside(a, layer) for a in node.args):
        return None
    return list(zip(expr.args, node.args, strict=False))


def _checkable(e: ast.expr, self_name: str, child_path: Callable[[list[str]], str | None]
               ) -> bool:
    """An argument whose outermost operation ``computes`` can judge: an operator, a call of
    a layer, a library function or a method; not a helper of the user's (`act(h)`), whose
    ops the graph holds inlined, nor a plain name."""
    if isinstance(e, (ast.BinOp, ast.UnaryOp)):
        return True
    if not isinstance(e, ast.Call) or not isinstance(e.func, ast.Attribute):
        return False
    chain = module_chain(e.func)
    return not (chain[:1] == [self_name] and child_path(chain[1:]) is None)


def args_computed(expr: ast.expr, node: fx.Node, self_name: str,
                  child_path: Callable[[list[str]], str | None], computes: Computes) -> bool:
    """Each tensor argument of `expr` that is code ``computes`` can judge computes the operand
    the graph's `node` reads in its place (checked where `expr` calls a layer, `self.fc(...)`,
    or is an operator)."""
    pairs = _pairs(expr, node, called_layer(expr, self_name, child_path))
    return pairs is None or all(
        computes(e, a) for e, a in pairs
        if isinstance(a, fx.Node) and _checkable(e, self_name, child_path))


def runs_no_op(outer: ast.expr, self_name: str, child_path: Callable[[list[str]], str | None],
               nodes: Iterable[fx.Node]) -> bool:
    """`self.block[3:](h)`, `self.drop(h)`: a slice of layers, or a layer the graph holds no
    op of (an empty slice, nn.Identity), may hand the value on unchanged."""
    if not isinstance(outer, ast.Call):
        return False
    if layer_range(outer.func) is not None:
        return True
    layer = called_layer(outer, self_name, child_path)
    return layer is not None and not any(_inside(n, layer) for n in nodes)


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


def taken_by_enclosing(stmt: ast.stmt, part: ast.expr, result: fx.Node, computes: Computes,
                       no_op: Callable[[ast.expr], bool]) -> bool:
    """The code around `part` that takes its value (`self.conv1(<part>)`) is what reads the
    cluster's `result` in the graph: some user of `result` is computed by it (`no_op`: code
    that may hand the value on unchanged, not judged)."""
    outer = enclosing(stmt, part)
    return outer is None or no_op(outer) or any(
        computes(outer, u) for u in result.users if u.op != "output")
