"""Whether a source operand holds a Python number rather than a tensor.

torch.export records `s * h` as `aten.mul.Tensor(h, s)`, the tensor first, so the matcher
must know which of the two source operands is the number to pair them with the graph's
(``pyexpr.operands_in_graph_order``). Reads the expression, the enclosing function's and
the file's AST and the module instance `self` names; writes nothing. A name the function or
the file may bind to anything but a constant, or a parameter, is not known to be a number.
"""

from __future__ import annotations

import ast

from torch import nn

from .pyexpr import attr_chain, is_constant
from .pysource import Scope


def _bound_only_to_constants(part: ast.AST, name: str) -> bool:
    """`part` binds `name` somewhere, and only ever by a plain `name = <constant>`: no other
    assignment, loop or `with` target, parameter, import or definition of that name."""
    stores = [n for n in ast.walk(part)
              if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)]
    constant = {id(st.targets[0]) for st in ast.walk(part)
                if isinstance(st, ast.Assign) and len(st.targets) == 1
                and isinstance(st.targets[0], ast.Name) and is_constant(st.value)}
    other = any(
        isinstance(n, ast.arg) and n.arg == name
        or isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
        or isinstance(n, (ast.Import, ast.ImportFrom))
        and any((a.asname or a.name).split(".")[0] == name for a in n.names)
        for n in ast.walk(part))
    return bool(stores) and not other and all(id(n) in constant for n in stores)


def _binds(part: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
               or isinstance(n, ast.arg) and n.arg == name for n in ast.walk(part))


def constant_name(scope: Scope, tree: ast.Module, name: str) -> bool:
    """Every binding of `name` in the function is a plain `name = <constant>` (`s = 0.25`);
    where the function binds none, every one in the file is (a module constant:
    `SQRT_2_OVER_PI = math.sqrt(2 / math.pi)`)."""
    if _binds(scope.node, name):
        return _bound_only_to_constants(scope.node, name)
    return _bound_only_to_constants(tree, name)


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
    if isinstance(expr, ast.Name):
        return scope is not None and constant_name(scope, tree, expr.id)
    return module is not None and number_attribute(expr, self_name, module)
