"""What Python expressions in a model's source mean to the matcher (``unify.py``): the
operators the AST spells and their aten names, literals, side-effect free calls, attribute
chains, and the FX nodes inside an argument structure. Pure functions of AST and FX values.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.fx as fx

from ..ir.view_params import flatten

BINOPS: dict[type[ast.AST], Any] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.MatMult: operator.matmul, ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}
UNARYOPS: dict[type[ast.AST], Any] = {
    ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert,
    ast.Not: operator.not_,
}
COMPAREOPS: dict[type[ast.AST], Any] = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
}


# The same operators as aten ops (the torch.export frontend records these).
ATEN_NAMES: dict[Any, str] = {
    operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div",
    operator.floordiv: "floor_divide", operator.mod: "remainder", operator.pow: "pow",
    operator.matmul: "matmul", operator.and_: "bitwise_and", operator.or_: "bitwise_or",
    operator.xor: "bitwise_xor", operator.lshift: "bitwise_left_shift",
    operator.rshift: "bitwise_right_shift", operator.neg: "neg", operator.pos: "positive",
    operator.invert: "bitwise_not", operator.not_: "logical_not", operator.lt: "lt",
    operator.le: "le", operator.gt: "gt", operator.ge: "ge", operator.eq: "eq",
    operator.ne: "ne",
}


_LITERAL_NODES = (ast.Constant, ast.UnaryOp, ast.BinOp, ast.Tuple, ast.List, ast.Load,
                  ast.unaryop, ast.operator)
_LITERAL_CALLS = {"float", "int", "bool"}  # float("-inf")


def is_literal(expr: ast.expr) -> bool:
    """A value written out in the source (`2.0`, `-1`, `float("-inf")`), not read from a name."""
    for n in ast.walk(expr):
        if isinstance(n, ast.Call):
            if not (isinstance(n.func, ast.Name) and n.func.id in _LITERAL_CALLS):
                return False
        elif isinstance(n, ast.Name):
            if n.id not in _LITERAL_CALLS:
                return False
        elif not isinstance(n, _LITERAL_NODES):
            return False
    return True


_PURE_CALLS = {"math", "float", "int", "bool", "abs", "min", "max", "round", "len", "pow"}


def calls_only_pure(expr: ast.expr) -> bool:
    """Calls in a constant argument are side-effect free (`math.sqrt(d)`, `float("-inf")`)."""
    return all(attr_chain(n.func)[:1] and attr_chain(n.func)[0] in _PURE_CALLS
               for n in ast.walk(expr) if isinstance(n, ast.Call))


def module_path(node: fx.Node) -> str | None:
    """The innermost module `node` was traced in (`blocks.0.attn.attn_drop`)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return None
    value = list(stack.values())[-1]
    return value[0] if isinstance(value, tuple) else str(value)


def attr_chain(expr: ast.expr) -> list[str]:
    """`self.ln.weight` as ["self", "ln", "weight"]; [] for anything but names and attributes."""
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        return [expr.id, *reversed(parts)]
    return []


def int_index(expr: ast.expr) -> int | None:
    """A constant integer index, negative ones (`-1`, a unary minus in the AST) included."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        inner = int_index(expr.operand)
        return -inner if inner is not None and inner > 0 else None
    return expr.value if isinstance(expr, ast.Constant) and type(expr.value) is int else None


def module_chain(expr: ast.expr) -> list[str]:
    """`attr_chain` that also reads a constant index, as a Sequential's layer is named:
    `self.stem[1].weight` as ["self", "stem", "1", "weight"], `self.block[-1]` (its last
    layer, ``from_end.py`` resolves it per module) as ["self", "block", "-1"]; [] for
    anything else."""
    parts: list[str] = []
    while True:
        if isinstance(expr, ast.Attribute):
            parts.append(expr.attr)
        elif isinstance(expr, ast.Subscript) and (k := int_index(expr.slice)) is not None:
            parts.append(str(k))
        else:
            break
        expr = expr.value
    return [expr.id, *reversed(parts)] if isinstance(expr, ast.Name) else []


def layer_range(func: ast.expr) -> tuple[list[str], slice] | None:
    """`self.stem[:2]` as (["self", "stem"], slice(0, 2)): a slice of a Sequential's layers
    with constant bounds (negative ones count from its end); else None."""
    if not (isinstance(func, ast.Subscript) and isinstance(func.slice, ast.Slice)
            and func.slice.step is None):
        return None
    bounds = []
    for bound in (func.slice.lower, func.slice.upper):
        k = int_index(bound) if bound is not None else None
        if bound is not None and k is None:
            return None
        bounds.append(k)
    chain = module_chain(func.value)
    return (chain, slice(*bounds)) if chain else None


def fx_nodes(obj: Any) -> Iterator[fx.Node]:
    """Every FX node in an argument structure (tuples, lists, dicts, slices)."""
    return (x for x in flatten(obj) if isinstance(x, fx.Node))


def values_call(expr: ast.expr) -> ast.Call | None:
    """The call in `x.max(1).values` or `torch.max(x, 1)[0]`, else None."""
    if isinstance(expr, ast.Attribute) and expr.attr == "values":
        inner = expr.value
    elif isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant) \
            and expr.slice.value == 0:
        inner = expr.value
    else:
        return None
    return inner if isinstance(inner, ast.Call) else None


def is_constant(expr: ast.expr) -> bool:
    """A number computed from literals by pure functions alone (`2.0`, `1 / 8`,
    `math.sqrt(2.0 / math.pi)`): every name in it is a pure module's or function's."""
    return calls_only_pure(expr) and all(
        isinstance(n, (*_LITERAL_NODES, ast.Call, ast.Attribute, ast.keyword))
        or isinstance(n, ast.Name) and n.id in _PURE_CALLS for n in ast.walk(expr))


def operands_in_graph_order(expr: ast.BinOp, node: fx.Node,
                            is_number: Callable[[ast.expr], bool] = is_constant
                            ) -> list[ast.expr]:
    """`1 + s` and `math.sqrt(2.0 / math.pi) * s` as the graph holds them: torch.export
    records the tensor first (`aten.add.Tensor(s, 1)`), so in source order `s` would be
    taken for the constant and the kernel called with `1` in its place. `is_number` says
    which source operand holds a number (by default: a constant expression)."""
    left, right = expr.left, expr.right
    swapped = (isinstance(expr.op, (ast.Add, ast.Mult)) and len(node.args) == 2
               and isinstance(node.args[0], fx.Node) and not isinstance(node.args[1], fx.Node)
               and is_number(left) and not is_number(right))
    return [right, left] if swapped else [left, right]


RUNTIME_INDEX = object()  # an index that names a value


class _Indexer:
    def __getitem__(self, key: Any) -> Any:
        return key


def constant_index(expr: ast.expr) -> Any:
    """The index a subscript spells with literals only (`:, None` is (slice(None), None)),
    or RUNTIME_INDEX where it reads a name or calls anything."""
    if any(isinstance(n, (ast.Name, ast.Call, ast.Attribute)) for n in ast.walk(expr)):
        return RUNTIME_INDEX
    tree = ast.Expression(ast.Subscript(ast.Name("_i", ast.Load()), expr, ast.Load()))
    code = compile(ast.fix_missing_locations(tree), "<index>", "eval")
    return eval(code, {"__builtins__": {}, "_i": _Indexer()})  # noqa: S307 - literals only


def dtype_read(value: Any) -> torch.dtype | None:
    """The dtype a `x.dtype` node of the graph (FX's `getattr`) read at analysis, else None."""
    if not (isinstance(value, fx.Node) and value.op == "call_function"
            and value.target is getattr and value.args[1:] == ("dtype",)
            and isinstance(value.args[0], fx.Node)):
        return None
    meta = value.args[0].meta
    dtype = getattr(meta.get("val", meta.get("tensor_meta")), "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) else None


def module_attr_text(self_name: str, self_path: str, target: str) -> str | None:
    """`blocks.0.ln1.weight` seen from module `blocks.0` → `self.ln1.weight`."""
    if self_path:
        if not target.startswith(self_path + "."):
            return None
        target = target[len(self_path) + 1:]
    out = self_name
    for part in target.split("."):
        out += f"[{part}]" if part.removeprefix("-").isdigit() else f".{part}"
    return out
