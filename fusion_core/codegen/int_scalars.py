"""Python numbers beside integer or bool tensors, as eager converts them to the tensors' dtype.

Eager converts a Python integer operand to the integer dtype the op computes in. Most ops
wrap it to the dtype's width, two's complement (``ir/rounding.wrapped``): int8's `x + 259`
adds 3, `x < 259` compares with 3, `x & -300` masks with -44, `x // 259` divides by 3.
Triton instead refuses a literal its tensor's dtype cannot hold ("Scalar 259 is out of
range for type int8"), or computes with the number itself: each such number is written
wrapped. Ops that fill or bound with the number (`torch.where(c, x, 259)`, `masked_fill`,
`clamp`) convert it to their result's dtype, checking that it fits (``ir/rounding.converts``:
an unsigned dtype takes negatives down to -max, wrapped), and eager raises where it does
not: lowering refuses them by name. A float that such a fill takes into integers is
truncated (int8's `masked_fill(m, 2.7)` fills 2), and a bool tensor is filled with bools
(`masked_fill(m, 259)` fills True): the kernel held 2.7 or 259 where eager held 2 or True,
and what read it (`.int()`, `~`, `+ 1`) differed where the store alone had converted it.
The registry says which an op does (``OpSpec.int_scalar``), and which param multiplies
a number first (``OpSpec.scaled``: add's alpha, checked so too). A divisor that is 0 in the
dtype is refused too, as eager refuses it (a tensor divisor's 0 gives 0, as CUDA's floor
division: ``codegen/rounding.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Any

import torch

from ..ir.graph import FusionGraph, Node, Ref
from ..ir.registry import CHECKS, SPECS, WRAPS
from ..ir.rounding import converted, converts, wrapped
from ..ir.spelling import said
from .layout import LoweringError


@dataclass(frozen=True)
class Typed:
    """A number written as a constant of `dtype` (``node_lowering.literal``), not as a
    literal Triton types by its value."""

    value: int
    dtype: torch.dtype


def _dtype(graph: FusionGraph, node: Node, how: str) -> torch.dtype | None:
    """The integer or bool dtype eager converts `node`'s Python numbers to, or None where it
    computes in floats: a fill's or bound's (CHECKS) its result's (`masked_fill` of a bool
    tensor fills with bools); a wrapping op's its operands' (a comparison's result is bool)."""
    if node.meta is None:
        return None
    dtype = node.meta.dtype
    if dtype is torch.bool and how == WRAPS:  # a comparison's result: the operands' dtype
        metas = [m for r in node.refs if (m := graph[r].meta) is not None]
        # as eager types them: a 0-dim tensor beside more dims like a number
        dtype = torch.result_type(*(torch.empty(m.shape, dtype=m.dtype, device="meta")
                                    for m in metas)) if len(metas) == 2 else reduce(
            torch.promote_types, [m.dtype for m in metas], torch.bool)
        dtype = torch.int64 if dtype is torch.bool else dtype  # a Python integer beside bools
    return None if dtype.is_floating_point or dtype.is_complex else dtype


def _refused(graph: FusionGraph, node: Node, what: str, dtype: torch.dtype) -> LoweringError:
    info = torch.iinfo(dtype)
    return LoweringError(f"{said(graph, node.name)} takes {what}, which {_name(dtype)} cannot "
                         "hold: eager raises (\"value cannot be converted ... without "
                         f"overflow\"); use a number in [{info.min}, {info.max}]", (node.name,))


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def integer_scalars(graph: FusionGraph, node: Node, inputs: tuple,
                    params: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """`inputs` and `params` (`node`'s) with their Python integers as eager converts them to
    the op's integer dtype; `LoweringError` where eager raises instead. A number that eager
    multiplies by a param (`torch.add(x, 100, alpha=2)`) is written as the product, wrapped
    (Python multiplied the two literals: 200, past int8), and the param itself wrapped
    (`torch.sub(x, y, alpha=128)` in int8 subtracts -128 times y, the same modulo 256)."""
    spec = SPECS.get(node.op)
    how = None if spec is None else spec.int_scalar
    dtype = None if how is None else _dtype(graph, node, how)
    if dtype is None:
        return inputs, params
    out = list(inputs)
    for i, a in enumerate(inputs):
        # a float beside integers makes a wrapping op's result float (a comparison compares
        # in floats); a fill converts it to its integer or bool dtype
        if isinstance(a, bool) or not isinstance(a, int | float) or (
                isinstance(a, float) and how != CHECKS):
            continue
        if how == CHECKS and not converts(a, dtype):
            raise _refused(graph, node, str(a), dtype)
        out[i] = converted(a, dtype)
        if spec.divisor is not None and i == spec.operands.index(spec.divisor) and not out[i]:
            held = "" if a == 0 else f", which is 0 in {_name(dtype)} (eager wraps it)"
            raise LoweringError(f"{said(graph, node.name)} divides by {a}{held}: eager raises "
                                "ZeroDivisionError there; divide by a number that is not 0 "
                                f"in {_name(dtype)}", (node.name,))
    by = params.get(spec.scaled[1]) if spec.scaled is not None else None
    if spec.scaled is not None and isinstance(by, int) and not isinstance(by, bool):
        operand, param, sign = spec.scaled
        if not converts(sign * by, dtype):  # sub adds `other` times -alpha
            raise _refused(graph, node, f"{param}={by}" + (f" (as {-by})" if sign < 0 else ""),
                           dtype)
        at = spec.operands.index(operand)
        if isinstance(out[at], int) and not isinstance(out[at], bool):
            out[at], by = wrapped(out[at] * by, dtype), 1
        params = {**params, param: wrapped(by, dtype)}  # a literal the dtype holds
    if dtype is not torch.bool and all(graph[r].meta is not None
                                       and graph[r].meta.dtype is torch.bool for r in node.refs):
        # beside bool tensors only, eager computes in int64 where Triton made an int32 of
        # the literal: `(m + 259) * 2**40` overflowed
        out = [Typed(a, dtype) if isinstance(a, int) and not isinstance(a, bool) else a
               for a in out]
    return tuple(out), params


def zero_dim_dtypes(graph: FusionGraph, node: Node) -> dict[str, torch.dtype]:
    """`node`'s 0-dim tensor operands beside an operand of more dims, by name, with the integer
    or bool dtype eager converts them to where Triton would compute with another (an int64
    `torch.tensor(259)` beside int8). Bool ones are left: Triton widens them losslessly (and
    `where`'s condition, `masked_fill`'s mask, are read as bools)."""
    spec = SPECS.get(node.op)
    how = WRAPS if spec is None or spec.int_scalar is None else spec.int_scalar
    refs = [a.name for a in node.inputs if isinstance(a, Ref)]
    metas = {r: graph[r].meta for r in refs}
    if any(m is None for m in metas.values()) or all(not m.shape for m in metas.values()):
        return {}
    dtype = _dtype(graph, node, how)  # maximum, logical_and: the result's, the operands'
    return {} if dtype is None else {
        r: dtype for r, m in metas.items()
        if not m.shape and m.dtype not in (dtype, torch.bool)}
