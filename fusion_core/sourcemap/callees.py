"""Which call in the source made an FX node: a Tensor method, a function, or a layer.

The matcher (``unify.py``) walks a statement's expression against the FX node it must
evaluate to; here it asks whether the expression's callee is the one that made the node:
`scores.masked_fill(...)` a method of a local value, `F.relu(x)` a function, `self.conv(x)`
or `self.stem[:2](x)` a child layer the node ran in.

Reads AST nodes, FX nodes (their target, module path) and the user's module tree; writes
nothing.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable

import torch
import torch.fx as fx

from .from_end import layer_positions, within
from .pyexpr import BINOPS, attr_chain, layer_range, module_chain, module_path
from .spelled_ops import op_names, same_operator

ChildPath = Callable[[list[str]], str | None]  # `self.<parts>`'s module path (Unifier's)


def _of_attribute(node: fx.Node, name: str) -> bool:
    """An op that `name` spells, of a parameter or buffer (export's `self.w_q.float()`)."""
    first = node.args[0] if node.args else None
    return (node.op == "call_function" and name in op_names(node)
            and isinstance(first, fx.Node) and first.op == "get_attr")


def calls_method(func: ast.expr, node: fx.Node, self_name: str,
                 local_names: frozenset[str]) -> bool:
    """`func` is a Tensor method, not a function: `scores.masked_fill(...)` calls a method of
    a local value (FX: call_method; export: an aten op whose first operand is the receiver);
    `F.relu(x)` a function. A Tensor method of an attribute of self: `self.w_q.float()` (FX's
    call_method; export's aten op of the attribute, named as the method is)."""
    chain = attr_chain(func)
    return isinstance(func, ast.Attribute) and (
        not chain or (chain[0] in local_names and chain[0] != self_name)
        or (chain[0] == self_name and len(chain) > 2 and (
            node.op == "call_method" or _of_attribute(node, func.attr))))


def same_callee(func: ast.expr, node: fx.Node, self_name: str, child_path: ChildPath) -> bool:
    """`func` names the child layer `node` ran in, or the function that made it."""
    chain = module_chain(func)
    if chain and chain[0] == self_name and len(chain) > 1:
        return module_path(node) == child_path(chain[1:])
    return bool(chain) and chain[-1] in op_names(node)


def computes_node(expr: ast.expr, node: fx.Node, self_name: str,
                  model: torch.nn.Module | None, child_path: ChildPath) -> bool:
    """`expr`'s outermost operation is the one that made `node` (a call of the same
    function or of a child module whose graph `node` ends, or the same operator)."""
    if isinstance(expr, ast.BinOp):
        return same_operator(node, BINOPS.get(type(expr.op)))
    if isinstance(expr, ast.Subscript):  # `self.t(emb)[:, :, None, None]`
        return same_operator(node, operator.getitem)
    if not isinstance(expr, ast.Call) or node.op not in (
            "call_function", "call_method", "call_module"):
        return False
    if isinstance(expr.func, ast.Attribute) and node.op == "call_method":
        return expr.func.attr in op_names(node)  # `self.conv.bias.reshape(-1, 1, 1)` too
    chain = module_chain(expr.func)  # `self.conv(x)`, a Sequential's `self.stem[0](x)`
    where = str(node.target) if node.op == "call_module" else module_path(node)
    if chain and chain[0] == self_name and len(chain) > 1:
        child = child_path(chain[1:])
        return where is not None and child is not None and within(model, child, where)
    layers = layer_range(expr.func)  # `self.stem[:2](x)`: made by one of those layers
    if layers is not None and layers[0][0] == self_name and where is not None:
        path = child_path(layers[0][1:])
        held = layer_positions(model, path, layers[1]) if path is not None else None
        head = where.removeprefix(f"{path}.").split(".")[0]
        return (held is not None and where.startswith(f"{path}.") and head.isdigit()
                and int(head) in held)
    chain = attr_chain(expr.func)
    return bool(chain) and node.op != "call_module" and chain[-1] in op_names(node)
