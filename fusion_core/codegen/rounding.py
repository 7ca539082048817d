"""The rounding divisions' helpers (``ir/rounding.py``) a generated file defines.

Each is torch's own rule written in Triton. Floats: a remainder is fmod (Triton's `%`) moved
to the divisor's sign; a floor division is torch's ``div_floor_floating``
(c10/util/generic_math.h), the quotient of the exact multiple `a - fmod(a, b)` rounded to
the nearest integer (``floor(a / b)`` is one more where `a / b` rounds up to an integer:
1.0 // 0.1 is 9.0); a truncating division is ``trunc(a / b)`` with IEEE division, which
Triton's `/` on float32 is not on the GPU (Inductor divides with ``div_rn`` there too).

Compiled, Triton's float `%` is `a - trunc(a / b) * b` with a rounded quotient: past
|a / b| of 2**24 it leaves [0, b) (`torch.remainder(3e8, 7.0)` is 6, that gives -1). So fmod is
libdevice's, exact, where the kernel is compiled; interpreted, `%` is NumPy's exact fmod and
libdevice does not run (the ``interpreted.FLAG`` switch).

Integers, after Inductor's ``floordiv`` (torch/_inductor/codegen/triton.py): Triton's `//`
and `%` truncate, so a floor division takes one from a truncated quotient whose remainder has
the other sign than the divisor (no negation: `-a` of the lowest integer overflows), and a
remainder moves `%`'s result to the divisor's sign. A zero
divisor, which eager on the CPU refuses, gives 0 (as ``div_floor_integer`` does on CUDA):
it is replaced before dividing, so no kernel divides an integer by zero; nor the lowest
integer by -1, which overflows (the remainder by -1 is 0, the quotient a negation). A
number that is 0 in the dtype never gets here: lowering refuses it as eager does
(``int_scalars.py``).

A file defines the helpers its plan's statements recorded (``Stmt.helpers``), and the fmod
helper where one of them calls it (``_CALL_FMOD``).
"""

from __future__ import annotations

from ..ir.rounding import (
    DIV_RN,
    FLOOR_DIV_FLOAT,
    FLOOR_DIV_INT,
    REMAINDER_FLOAT,
    REMAINDER_INT,
    TRUNC_DIV_FLOAT,
    TRUNC_DIV_INT,
)
from .interpreted import FLAG
from .plan import KernelPlan

FMOD = "_fmod"
# The helpers whose bodies call the fmod helper (below): a file defining one defines it too.
_CALL_FMOD = frozenset({REMAINDER_FLOAT, FLOOR_DIV_FLOAT})

_BODIES: dict[str, list[str]] = {
    DIV_RN: ["return tl.div_rn(tl.cast(a, tl.float32), tl.cast(b, tl.float32))"],
    REMAINDER_FLOAT: [
        f"r = {FMOD}(a, b)",
        "return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)",
    ],
    FLOOR_DIV_FLOAT: [
        f"mod = {FMOD}(a, b)",
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
        "safe = tl.where((b == 0) | (b == -1), 1, b)",
        "q = a // safe",
        "r = a % safe",
        "q = tl.where((r != 0) & ((r < 0) != (safe < 0)), q - 1, q)",
        "# by -1, q is `a` in the operands' dtype (a literal `a` is a Python int interpreted:",
        "# its negation would not wrap)",
        "return tl.where(b == 0, 0, tl.where(b == -1, 0 - q, q))",
    ],
    TRUNC_DIV_INT: [
        "safe = tl.where((b == 0) | (b == -1), 1, b)",
        "q = a // safe",
        "return tl.where(b == 0, 0, tl.where(b == -1, 0 - q, q))",
    ],
}


def used(plan: KernelPlan) -> list[str]:
    """The helpers the plan's statements call (as their lowerings recorded), in a fixed
    order."""
    called = {name for s in plan.stmts for name in s.helpers}
    return [name for name in _BODIES if name in called]


_FMOD_LINES = [
    "@triton.jit",
    f"def {FMOD}(a, b):",
    f"    if {FLAG}:  # NumPy's fmod, exact; libdevice does not run interpreted",
    "        return a % b",
    "    # compiled, `%` rounds its quotient: libdevice's fmod is exact (float32 or float64;",
    "    # either operand may be a literal, so the dtype is their sum's)",
    "    if (a + b).dtype == tl.float64:  # one return: each arm its own dtype",
    "        r = libdevice.fmod(tl.cast(a, tl.float64), tl.cast(b, tl.float64))",
    "    else:",
    "        r = libdevice.fmod(tl.cast(a, tl.float32), tl.cast(b, tl.float32))",
    "    return r",
]


def calls_libdevice(plan: KernelPlan) -> bool:
    """Whether the plan's helpers call libdevice (the fmod helper does)."""
    return bool(_CALL_FMOD.intersection(used(plan)))


def helpers(plan: KernelPlan) -> list[str]:
    """The module-level lines defining the helpers the plan calls (none: no lines); after
    ``interpreted.module_lines``' flag, which the fmod helper reads, and its libdevice import
    (``calls_libdevice``)."""
    names = used(plan)
    lines: list[str] = []
    if _CALL_FMOD.intersection(names):
        lines += _FMOD_LINES
    for name in names:
        if lines:
            lines += ["", ""]
        lines += ["@triton.jit", f"def {name}(a, b):", *(f"    {t}" for t in _BODIES[name])]
    if lines:
        lines = ["# Division and remainder rounded as torch rounds them (Triton's // and % "
                 "truncate).", *lines]
    return lines
