"""The rounding divisions' helpers (``ir/rounding.py``) a generated file defines.

Each is torch's own rule written in Triton. Floats: a remainder is fmod (Triton's `%`) moved
to the divisor's sign; a floor division is torch's ``div_floor_floating``
(c10/util/generic_math.h), the quotient of the exact multiple `a - fmod(a, b)` rounded to
the nearest integer (``floor(a / b)`` is one more where `a / b` rounds up to an integer:
1.0 // 0.1 is 9.0); a truncating division is ``trunc(a / b)`` with IEEE division, which
Triton's `/` on float32 is not on the GPU (Inductor divides with ``div_rn`` there too).

Integers, after Inductor's ``floordiv`` (torch/_inductor/codegen/triton.py): Triton's `//`
and `%` truncate, so a floor division divides non-negative values (`~` maps a negative
dividend to one, and back) and a remainder moves `%`'s result to the divisor's sign. A zero
divisor, which eager on the CPU refuses, gives 0 (as ``div_floor_integer`` does on CUDA):
it is replaced before dividing, so no kernel divides an integer by zero; nor the lowest
integer by -1, which overflows (the remainder by -1 is 0, the quotient a negation).
"""

from __future__ import annotations

from ..ir.rounding import (
    FLOOR_DIV_FLOAT,
    FLOOR_DIV_INT,
    REMAINDER_FLOAT,
    REMAINDER_INT,
    TRUNC_DIV_FLOAT,
    TRUNC_DIV_INT,
)
from .plan import KernelPlan

_BODIES: dict[str, list[str]] = {
    REMAINDER_FLOAT: [
        "r = a % b",
        "return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)",
    ],
    FLOOR_DIV_FLOAT: [
        "mod = a % b",
        "div = (a - mod) / b",
        "div = tl.where((mod != 0) & ((mod < 0) != (b < 0)), div - 1.0, div)",
        "down = tl.floor(div)",
        "down = tl.where(div - down > 0.5, down + 1.0, down)",
        "q = a / b",
        "# a zero quotient takes the sign of a / b; a zero divisor gives a / b (inf, NaN)",
        "return tl.where(b == 0, q, tl.where(div != 0, down, q * 0.0))",
    ],
    TRUNC_DIV_FLOAT: [
        "q = a / b",
        "if q.dtype == tl.float32:  # Triton's `/` is approximate there: IEEE division",
        "    q = tl.div_rn(tl.cast(a, tl.float32), tl.cast(b, tl.float32))",
        "return tl.where(q < 0, tl.ceil(q), tl.floor(q))",
    ],
    REMAINDER_INT: [
        "safe = tl.where((b == 0) | (b == -1), 1, b)  # both leave 0",
        "r = a % safe",
        "return tl.where((r != 0) & ((r < 0) != (safe < 0)), r + safe, r)",
    ],
    FLOOR_DIV_INT: [
        "zero = b == 0",
        "b = tl.where(zero, 1, b)",
        "flip = b < 0  # a // b == -a // -b",
        "a = tl.where(flip, 0 - a, a)",
        "b = tl.where(flip, 0 - b, b)",
        "below = a < 0  # floor(a / b) == ~(~a // b) for a < 0 <= ~a",
        "q = tl.where(below, ~a, a) // b",
        "return tl.where(zero, 0, tl.where(below, ~q, q))",
    ],
    TRUNC_DIV_INT: [
        "safe = tl.where((b == 0) | (b == -1), 1, b)",
        "return tl.where(b == 0, 0, tl.where(b == -1, 0 - a, a // safe))",
    ],
}


def used(plan: KernelPlan) -> list[str]:
    """The helpers the plan's statements call, in a fixed order."""
    return [name for name in _BODIES if any(f"{name}(" in s.expr for s in plan.stmts)]


def helpers(plan: KernelPlan) -> list[str]:
    """The module-level lines defining the helpers the plan calls (none: no lines)."""
    lines: list[str] = []
    for name in used(plan):
        if lines:
            lines += ["", ""]
        lines += ["@triton.jit", f"def {name}(a, b):", *(f"    {t}" for t in _BODIES[name])]
    if lines:
        lines = ["# Division and remainder rounded as torch rounds them (Triton's // and % "
                 "truncate).", *lines]
    return lines
