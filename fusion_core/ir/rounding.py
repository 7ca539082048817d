"""Rounding divisions: remainder, floor_divide and div with a rounding mode, as torch rounds.

torch follows Python's signs (a remainder takes the divisor's sign, a floor division rounds
toward -inf) where Triton's `//` and `%` truncate as C does (on floats `%` is fmod), so each
of these ops lowers to a call of a helper the generated file defines
(``codegen/rounding.py``), one per op and dtype family: the result's dtype picks the
integer or the float form (``codegen/node_lowering.pointwise_rule``), as torch's own
kernels do. The registry's rows name the lowerings below; ``INT_ROUNDING`` holds the
integer forms. A lowering that calls helpers returns them with its expression (``Calls``):
the statement records them, and the generated file defines what its statements record.

A Python integer beside an integer tensor is converted to the tensor's dtype, wrapping
(``wrapped``): eager's `int8 // 259` divides by 3.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

# Helper names, each defined by ``codegen/rounding.py`` where a kernel calls it.
FLOOR_DIV_FLOAT, FLOOR_DIV_INT = "_floor_div_float", "_floor_div_int"
TRUNC_DIV_FLOAT, TRUNC_DIV_INT = "_trunc_div_float", "_trunc_div_int"
REMAINDER_FLOAT, REMAINDER_INT = "_remainder_float", "_remainder_int"
DIV_RN = "_div_rn"  # IEEE float32 division (Triton's `/` is approximate compiled)
HELPERS = (FLOOR_DIV_FLOAT, FLOOR_DIV_INT, TRUNC_DIV_FLOAT, TRUNC_DIV_INT, REMAINDER_FLOAT,
           REMAINDER_INT, DIV_RN)


@dataclass(frozen=True)
class Calls:
    """An expression and the generated file's helpers it calls (names of ``HELPERS``, and
    ``lowerings.ROUND_BF16``)."""

    expr: str
    helpers: tuple[str, ...]


_Lowering = Callable[[tuple[str, ...], Mapping[str, Any]], "str | Calls | None"]


def _call(name: str, a: tuple[str, ...]) -> Calls:
    return Calls(f"{name}({a[0]}, {a[1]})", (name,))


def _helper(name: str) -> _Lowering:
    return lambda a, p: _call(name, a)


def _div(floor: str, trunc: str) -> _Lowering:
    """`torch.div`: true division without a rounding mode, else the mode's helper."""
    modes = {"floor": floor, "trunc": trunc}

    def lower(a: tuple[str, ...], p: Mapping[str, Any]) -> str | Calls | None:
        mode = p.get("rounding_mode")
        if mode is None:
            return f"({a[0]} / {a[1]})"
        return _call(modes[mode], a) if mode in modes else None

    return lower


# Float (and float16/bfloat16, computed in float32) results.
remainder_expr = _helper(REMAINDER_FLOAT)
floor_divide_expr = _helper(FLOOR_DIV_FLOAT)
div_expr = _div(FLOOR_DIV_FLOAT, TRUNC_DIV_FLOAT)


def half_div(round_to: Callable[[str], Calls]) -> _Lowering:
    """`torch.div` of a float16/bfloat16 result: a truncating division truncates the quotient
    rounded to the dtype, as eager's does (c10::Half's `/` rounds: fp16 7.0 / 0.7002 is 10,
    the float32 quotient 9.997 truncates to 9); `round_to` writes that rounding."""
    def lower(a: tuple[str, ...], p: Mapping[str, Any]) -> str | Calls | None:
        if p.get("rounding_mode") != "trunc":
            return div_expr(a, p)
        rounded = round_to(f"{DIV_RN}({a[0]}, {a[1]})")
        return Calls(f"{TRUNC_DIV_FLOAT}({rounded.expr}, 1.0)",
                     (TRUNC_DIV_FLOAT, DIV_RN, *rounded.helpers))

    return lower


def _int_div(a: tuple[str, ...], p: Mapping[str, Any]) -> str | Calls | None:
    # An integer result of `div` has a rounding mode: true division makes floats.
    return None if p.get("rounding_mode") is None else _div(FLOOR_DIV_INT, TRUNC_DIV_INT)(a, p)


# Integer results: Triton's truncating `//` and `%`, their signs fixed.
INT_ROUNDING: dict[str, _Lowering] = {
    "remainder": _helper(REMAINDER_INT), "floor_divide": _helper(FLOOR_DIV_INT), "div": _int_div,
}


def wrapped(value: int, dtype: torch.dtype) -> int:
    """Python integer `value` as eager converts it to integer `dtype`: two's complement to the
    dtype's width (int8's 259 is 3, -129 is 127; int32's 2**31 + 5 is -2**31 + 5). Eager
    refuses a number outside [-2**63, 2**64) before (an OverflowError at capture)."""
    info = torch.iinfo(dtype)
    low = value & ((1 << info.bits) - 1)
    return low - (1 << info.bits) if info.min < 0 and low >> (info.bits - 1) else low


def converts(value: int | float, dtype: torch.dtype) -> bool:
    """Whether eager's checked conversion (of `torch.where`'s, `masked_fill`'s, `clamp`'s
    number) takes Python number `value` to integer or bool `dtype` rather than raising: an
    integer within its range, or down to -max for an unsigned one, wrapped (c10's
    `overflows`: uint8's -1 is 255, -256 raises); a float finite and within the range's ends
    as doubles (int8's 127.5 and uint8's -0.5 raise); any number to bool."""
    if dtype is torch.bool:
        return True
    info = torch.iinfo(dtype)
    if isinstance(value, float):
        return math.isfinite(value) and float(info.min) <= value <= float(info.max)
    return info.min <= value <= info.max or (info.min == 0 and -info.max <= value < 0)


def converted(value: int | float, dtype: torch.dtype) -> int | bool:
    """Python number `value` as eager's conversion makes it integer or bool `dtype`: to bool
    nonzero as True (NaN too), a float truncated toward 0 (C++'s cast), then wrapped."""
    if dtype is torch.bool:
        return bool(value)
    return wrapped(int(value), dtype)
