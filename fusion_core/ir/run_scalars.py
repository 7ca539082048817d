"""Python numbers computed at run time from tensor sizes alone, as expressions of those sizes.

Under FX capture `b, t, c = x.shape; att = s / math.sqrt(c)` reaches the division as graph
nodes (`getattr(x, "shape")`, `getitem`, `sqrt`) that compute a Python float, where export
records a constant. Reads the FX node of such a value (``ir/normalize.py`` calls
``scalar_of`` for each Python-valued node) and writes a ``Scalar`` expression of tensors'
dims (``ir/sizes.py``'s ``Dim``), numeric constants and the arithmetic Python does on them
(`+ - * / // **`, unary `-`, `math.sqrt`), stored in the node's params under ``RUN_SCALAR``.
A value with any other origin (`.item()`, a tensor's value, a call not listed) gets none and
stays a value the kernel cannot take (``analysis/legality.py`` names its line).

``symbolic`` evaluates an expression on one sympy symbol per dim: the proof that the value
is a function of sizes only (no other free symbol can appear). ``codegen/lower.py`` passes
such a value to the kernel as a scalar argument; the launcher takes it from its caller and
keys its launch plans on it (few values: one per input size).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sympy
import torch.fx as fx

from .graph import FusionGraph
from .sizes import Dim, size_of

RUN_SCALAR = "run_scalar"  # the params key of a Python value's size expression


@dataclass(frozen=True)
class Num:
    """A numeric constant of the user's code (`-0.5` in `c ** -0.5`)."""

    value: int | float


@dataclass(frozen=True)
class Apply:
    """`op` applied to `args`: a Python operator or `math.sqrt`."""

    op: str  # a key of _OPS
    args: tuple[Scalar, ...]


Scalar = Dim | Num | Apply

# name -> (Python function, sympy function, spelling with {0}, {1} for the operands)
_OPS: dict[str, tuple[Callable[..., Any], Callable[..., Any], str]] = {
    "add": (operator.add, operator.add, "{0} + {1}"),
    "sub": (operator.sub, operator.sub, "{0} - {1}"),
    "mul": (operator.mul, operator.mul, "{0} * {1}"),
    "truediv": (operator.truediv, operator.truediv, "{0} / {1}"),
    "floordiv": (operator.floordiv, lambda a, b: sympy.floor(a / b), "{0} // {1}"),
    "pow": (operator.pow, operator.pow, "{0} ** {1}"),
    "neg": (operator.neg, operator.neg, "-{0}"),
    "sqrt": (math.sqrt, sympy.sqrt, "math.sqrt({0})"),
}
_TARGETS: dict[Any, str] = {operator.add: "add", operator.sub: "sub", operator.mul: "mul",
                            operator.truediv: "truediv", operator.floordiv: "floordiv",
                            operator.pow: "pow", operator.neg: "neg", math.sqrt: "sqrt"}


def scalar_of(a: Any) -> Scalar | None:
    """`a` (an FX argument) as a ``Scalar``; None where it is not a Python number computed
    from sizes and constants alone."""
    if isinstance(a, bool):
        return None
    if isinstance(a, (int, float)):
        return Num(a)
    if not isinstance(a, fx.Node) or a.kwargs or not isinstance(a.meta.get("val"), (int, float)):
        return None
    if isinstance(dim := size_of(a), Dim):
        return dim
    op = _TARGETS.get(a.target) if a.op == "call_function" else None
    if op is None:
        return None
    args = tuple(scalar_of(x) for x in a.args)
    if any(x is None for x in args) or not any(_reads_sizes(x) for x in args):
        return None
    return Apply(op, args)  # type: ignore[arg-type]


def _reads_sizes(s: Scalar) -> bool:
    return isinstance(s, Dim) or (isinstance(s, Apply) and any(map(_reads_sizes, s.args)))


def evaluate(s: Scalar, dim: Callable[[str, int], Any], symbolic: bool = False) -> Any:
    """`s` with each ``Dim`` given by `dim`: a Python number, or a sympy expression."""
    if isinstance(s, Num):
        return sympy.nsimplify(s.value) if symbolic else s.value
    if isinstance(s, Dim):
        return dim(s.value, s.dim)
    fn, sym, _ = _OPS[s.op]
    return (sym if symbolic else fn)(*(evaluate(x, dim, symbolic) for x in s.args))


def symbolic(s: Scalar) -> Any:
    """`s` over one positive integer symbol per dim (`q.shape[2]`); its free symbols are
    dims only, by construction: what makes it a function of the inputs' sizes."""
    return evaluate(s, lambda v, k: sympy.Symbol(f"{v}.shape[{k}]", integer=True,
                                                 positive=True), symbolic=True)


def analysed(g: FusionGraph, s: Scalar) -> int | float:
    """The value at the analysed shapes (what the captured graph computed)."""
    return evaluate(s, lambda v, k: g[v].meta.shape[k])


def spelled(s: Scalar) -> str:
    """`s` as Python text (`math.sqrt(q.shape[2])`), graph names for values."""
    if isinstance(s, Num):
        return repr(s.value)
    if isinstance(s, Dim):
        return f"{s.value}.shape[{s.dim}]"
    parts = [spelled(x) if not isinstance(x, Apply) or s.op == "sqrt" else f"({spelled(x)})"
             for x in s.args]
    return _OPS[s.op][2].format(*parts)


def run_scalar(g: FusionGraph, name: str) -> Scalar | None:
    """The size expression of Python value `name`, or None (a tensor, or not sizes alone)."""
    node = g[name]
    return node.param(RUN_SCALAR) if node.op == "meta" else None
