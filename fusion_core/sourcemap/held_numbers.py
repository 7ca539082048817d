"""Whether a source operand holds a Python number rather than a tensor.

torch.export records `s * h` as `aten.mul.Tensor(h, s)`, the tensor first, so the matcher
must know which of the two source operands is the number to pair them with the graph's
(``pyexpr.operands_in_graph_order``). Reads the expression, the enclosing function's and
the file's AST and the module instance `self` names; writes nothing. A name the function or
the file may bind to anything but a constant, or a parameter, is not known to be a number.
"""

from __future__ import annotations

import ast

import torch.fx as fx
from torch import nn

from .bindings import bindings, declared_global, plain_assignment
from .pyexpr import attr_chain, is_constant
from .pysource import Scope


def _only_constants(root: ast.AST, name: str) -> bool:
    """`root` binds `name`, only ever by a plain `name = <constant>` in its own scope."""
    found = bindings(root, name)
    return bool(found) and all(
        isinstance(b, ast.Name) and (st := plain_assignment(root, b)) is not None
        and is_constant(st.value) for b in found)


def constant_name(scope: Scope, tree: ast.Module, name: str) -> bool:
    """Every binding of `name` in the function is a plain `name = <constant>` (`s = 0.25`);
    where the function binds none, every one at the file's top level is (a module constant:
    `SQRT_2_OVER_PI = math.sqrt(2 / math.pi)`) and no function declares it `global`."""
    if bindings(scope.node, name):
        return _only_constants(scope.node, name)
    return not declared_global(tree, name) and _only_constants(tree, name)


def number_attribute(expr: ast.expr, self_name: str, module: nn.Module) -> bool:
    """`expr` is `self.<attributes>` (`self.scale`) and holds an int or a float on `module`,
    the instance `self_name` names."""
    chain = attr_chain(expr)
    if len(chain) < 2 or chain[0] != self_name:
        return False
    value: object = module
    try:
        for part in chain[1:]:
            value = getattr(value, part)
    except AttributeError:
        return False
    return isinstance(value, (int, float))


def module_at(model: nn.Module | None, path: str) -> nn.Module | None:
    """The module at `path` in `model` (`self` of the span's function), None if unknown."""
    try:
        return model.get_submodule(path) if model is not None else None
    except AttributeError:
        return None


def is_number(expr: ast.expr, scope: Scope | None, tree: ast.Module, self_name: str,
              module: nn.Module | None) -> bool:
    """A constant expression (`math.sqrt(2.0 / math.pi)`), a name only ever set to constants
    (`constant_name`), or a number attribute of the module."""
    if is_constant(expr):
        return True
    if isinstance(expr, ast.UnaryOp):  # `-s * h`
        return is_number(expr.operand, scope, tree, self_name, module)
    if isinstance(expr, ast.BinOp):  # `(1 - s) * h`
        return all(is_number(e, scope, tree, self_name, module) for e in (expr.left, expr.right))
    if isinstance(expr, ast.Name):
        return scope is not None and constant_name(scope, tree, expr.id)
    return module is not None and number_attribute(expr, self_name, module)


def root_forward(scope: Scope | None, self_path: str
                 ) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The model's own `forward` (`self` the root module), whose parameters are the graph's
    inputs, when `scope` is it."""
    if scope is None or self_path != "" or scope.node.name != "forward":
        return None
    return scope.node


def other_is_the_input(binop: ast.BinOp, operand: ast.expr, node: fx.Node,
                       root_forward: ast.FunctionDef | ast.AsyncFunctionDef | None) -> bool:
    """`operand` is the number by elimination: the other one is a parameter of the model's
    own forward (`root_forward`), never rebound there, whose placeholder the graph
    multiplies (`s * h`, `h` the input `h`: its placeholder keeps the name), and `operand`
    is not."""
    tensor = node.args[0] if node.args else None

    def names_input(e: ast.expr) -> bool:
        return (root_forward is not None and isinstance(e, ast.Name)
                and isinstance(tensor, fx.Node) and tensor.op == "placeholder"
                and tensor.name == e.id and bool(found := bindings(root_forward, e.id))
                and all(isinstance(b, ast.arg) for b in found))

    other = binop.right if operand is binop.left else binop.left
    return names_input(other) and not names_input(operand)
