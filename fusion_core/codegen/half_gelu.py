"""The exact GELU of a 16-bit result, as a generated file's helper (``_gelu_half``).

Read by ``kernel.py``, which defines the helper in a file whose statements call it (the
lowering ``ir/lowerings.gelu_half_expr`` records the call). GELU is x·Φ(x), Φ(x) = 1 − q/2
for x ≥ 0 and q/2 below, q = erfc(z), z = |x|/√2. Here q/2 = exp(L(z) − z²), L of degree 9
with L(0) = −log 2 fitted to log(erfc(z)/2) + z²: one polynomial for every x (libdevice's erf
picks one of two per element and pays a register move for each picked coefficient) and one
special-function instruction (the exp), where t·P(t)·exp(−z²), t = 1/(1 + p·z), took two (a
reciprocal too). An SM issues those at an eighth of its arithmetic rate: the bfloat16
LayerNorm→GELU over 1024 x 16384, 1.3 of them an element, went from 39.7 to 35.6 µs at 16
warps a program on an H100 (``benchmarks/gelu_probe.py``, RESULTS.md).

The kernel evaluates the same function in the form that costs fewest instructions:
log2(q/2) = log2(e)·(L(a/√2) − a²/2) is a polynomial in a = |x| of degree 9
(``LOG2_COEFFICIENTS``, derived from the fit, not fitted again), so that a = min(|x|, A_FIT)
is one instruction (the absolute value is an operand of the min), the −z² term, the 1/√2
and the log2(e) of the exp are folded into the coefficients, and q/2 is one exp2. Per
element: 13 arithmetic instructions and the exp2 where the form above took 16 (compiled for
sm_90 on the CPU; RESULTS.md, 2026-12-07).

The coefficients are a least-squares fit, reweighted toward the largest error, of
log(erfc(z)) + z² for z in [0, 9.5] (``tests/test_codegen_half_gelu.py`` checks the error
bounds): q's relative error, evaluated in float32 as the kernel does (one rounding a
multiply-add), is under 3e-5 for z ≤ 4.6 (|x| < 6.5) and under 1e-4 up to z = 9.5
(|x| < 13.4); past it a is clamped and log2(q/2) is below −133, which the compiled exp2
flushes to 0 (its result is under 2^−126), as the exact q/2 < 1e-40 nearly is.
Float16 and bfloat16 keep 11 and 8 bits: every result is within a rounding step of the exact
one, and rounds to it but where the exact value lies within that error of a step: 1.0% of
fp16 values drawn from N(0, 3²) (the reciprocal form, 0.02%; eager, 7.8%). Below zero the
result is more accurate than eager's float32 `1 + erf(x/√2)`, which cancels (at x = −4 it
keeps one significant bit of Φ).
"""

from __future__ import annotations

import math

from ..ir.lowerings import GELU_HALF
from .interpreted import FLAG
from .plan import KernelPlan

Z_FIT = 9.5  # L's domain: z clamped to it
LOG_HALF = -0.6931471805599453  # L(0) = log(erfc(0) / 2)
# L(z) = LOG_HALF + z·(c1 + c2·z + ... + c9·z⁸), c1 first
COEFFICIENTS = (-1.128319501876831, 0.3640023171901703, -0.10573824495077133,
                0.023983262479305267, -0.0039840033277869225, 0.0004597144725266844,
                -3.451734664849937e-05, 1.5064307490320061e-06, -2.8876149471557255e-08)


def log_half_erfc(z: str) -> str:
    """L(z), log(erfc(z)/2) + z², as nested products (z at most Z_FIT)."""
    return _horner(z, (LOG_HALF, *COEFFICIENTS))


def _log2_coefficients() -> tuple[float, ...]:
    """log2(erfc(a/√2)/2) = log2(e)·(L(a/√2) − a²/2) as a polynomial in a, constant first:
    L's coefficient of z^k scaled by log2(e)·2^(−k/2), and −log2(e)/2 added to a²'s."""
    log2e = 1 / math.log(2)
    coefficients = [c * log2e * 2 ** (-k / 2) for k, c in enumerate((LOG_HALF, *COEFFICIENTS))]
    coefficients[2] -= log2e / 2
    return tuple(coefficients)


LOG2_COEFFICIENTS = _log2_coefficients()  # the constant is log2(1/2) = -1
A_FIT = Z_FIT * math.sqrt(2)  # a = |x| clamped to it


def log2_half_erfc(a: str) -> str:
    """log2(erfc(a/√2)/2), the kernel's polynomial in a = |x| (a at most A_FIT)."""
    return _horner(a, LOG2_COEFFICIENTS)


def _horner(var: str, coefficients: tuple[float, ...]) -> str:
    """The polynomial with these coefficients (constant first) as nested products."""
    expr = repr(coefficients[-1])
    for c in reversed(coefficients[:-1]):
        expr = f"({c!r} + {var} * {expr})"
    return expr


def called(plan: KernelPlan) -> bool:
    """Whether a statement of the plan recorded a call of the helper."""
    return any(GELU_HALF in s.helpers for s in plan.stmts)


def helpers(plan: KernelPlan) -> list[str]:
    """The helper's lines where the plan calls it (it calls libdevice compiled: ``called``
    asks the file for the import)."""
    if not called(plan):
        return []
    return ["# Exact GELU for a float16 or bfloat16 result: erfc(|x|/sqrt(2))/2 as 2**P(|x|),",
            "# one polynomial for every x (codegen/half_gelu.py: relative error under 3e-5 for",
            "# |x| < 6.5, 1e-4 up to 13.4, far under the result's 16-bit rounding).",
            "@triton.jit", f"def {GELU_HALF}(x):",
            f"    a = tl.minimum(tl.abs(x), {A_FIT!r})  # past it 2**P(a) is 0",
            f"    g = {log2_half_erfc('a')}",
            f"    if {FLAG}:  # libdevice does not run interpreted; flushed as compiled",
            "        half_q = tl.where(g < -126.0, 0.0, tl.exp2(g))",
            "    else:  # approximate: a result under 2**-126 flushes to 0",
            "        half_q = libdevice.exp2(g)",
            "    return x * tl.where(x >= 0, 1.0 - half_q, half_q)  # NaN and -inf: NaN, as eager"]
