"""Whether a source operand holds a Python number rather than a tensor.

torch.export records `s * h` as `aten.mul.Tensor(h, s)`, the tensor first, so the matcher
must know which of the two source operands is the number to pair them with the graph's
(``pyexpr.operands_in_graph_order``). Reads the expression, the enclosing function's AST and
the module instance `self` names; writes nothing. A name the function may set to anything
but a constant, or a parameter, is not known to be a number.
"""

from __future__ import annotations

import ast

from torch import nn

from .pyexpr import attr_chain, is_constant
from .pysource import Scope, stored_names


def constant_local(scope: Scope, name: str) -> bool:
    """`name` is no parameter of the function, and every line of it that assigns `name` is a
    plain `name = <constant>` (`s = 0.25`)."""
    a = scope.node.args
    params = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
              if p is not None}
    stores = [st for st in ast.walk(scope.node)
              if isinstance(st, ast.stmt) and name in stored_names(st)]
    return name not in params and bool(stores) and all(
        isinstance(st, ast.Assign) and len(st.targets) == 1
        and isinstance(st.targets[0], ast.Name) and is_constant(st.value) for st in stores)


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


def is_number(expr: ast.expr, scope: Scope | None, self_name: str,
              module: nn.Module | None) -> bool:
    """A constant expression (`math.sqrt(2.0 / math.pi)`), a local the function only sets to
    constants, or a number attribute of the module."""
    if is_constant(expr):
        return True
    if isinstance(expr, ast.Name):
        return scope is not None and constant_local(scope, expr.id)
    return module is not None and number_attribute(expr, self_name, module)
