"""The exact GELU of a 16-bit result, as a generated file's helper (``_gelu_half``).

Read by ``kernel.py``, which defines the helper in a file whose statements call it (the
lowering ``ir/lowerings.gelu_half_expr`` records the call). GELU is x·Φ(x), Φ(x) = 1 − q/2
for x ≥ 0 and q/2 below, q = erfc(|x|/√2). Here q = t·P(t)·exp(−z²), t = 1/(1 + p·z),
z = |x|/√2, P of degree 5: one polynomial for every x, where libdevice's erf picks one of two
per element and pays a register move for each picked coefficient.

The coefficients are a least-squares fit, reweighted toward the largest error, of
erfc(z)·exp(z²) for z in [0, 4.6] (``tests/test_codegen_half_gelu.py`` checks the error
bounds): q's relative error is under 1e-6 there as fitted (|x| < 6.5; 4e-6 evaluated in
float32) and under 4e-4 past it up to z = 9.5, where the result is under 2e-9·|x| (past
z ≈ 9.3, exp(−z²) flushes to 0 compiled).
Float16 and bfloat16 keep 11 and 8 bits: the rounding of the result hides both. Below zero
the result is more accurate than eager's float32 `1 + erf(x/√2)`, which cancels (at x = −4 it
keeps one significant bit of Φ).
"""

from __future__ import annotations

from ..ir.lowerings import GELU_HALF
from .interpreted import FLAG
from .plan import KernelPlan

P = 0.418  # t = 1 / (1 + P·z)
# P(t)/2 from the constant term up: the fit's coefficients halved (Φ takes q/2)
HALF_COEFFICIENTS = (0.11906137317419052, 0.10455744713544846, 0.17110535502433777,
                     -0.06895487010478973, 0.2613724172115326, -0.08714212477207184)


def horner(t: str) -> str:
    """t·P(t)/2 as nested products, the constant term outermost."""
    expr = repr(HALF_COEFFICIENTS[-1])
    for c in reversed(HALF_COEFFICIENTS[:-1]):
        expr = f"({c!r} + {t} * {expr})"
    return f"{t} * {expr}"


def called(plan: KernelPlan) -> bool:
    """Whether a statement of the plan recorded a call of the helper."""
    return any(GELU_HALF in s.helpers for s in plan.stmts)


def helpers(plan: KernelPlan) -> list[str]:
    """The helper's lines where the plan calls it (it calls libdevice compiled: ``called``
    asks the file for the import)."""
    if not called(plan):
        return []
    return ["# Exact GELU for a float16 or bfloat16 result: erfc(z) as t·P(t)·exp(-z*z), one",
            "# polynomial for every x (codegen/half_gelu.py: relative error under 4e-6 for",
            "# |x| < 6.5, far under the result's 16-bit rounding).",
            "@triton.jit", f"def {GELU_HALF}(x):",
            "    z = tl.abs(x) * 0.7071067811865476",
            f"    if {FLAG}:  # libdevice does not run interpreted",
            f"        t = 1.0 / (1.0 + {P!r} * z)",
            "        e = tl.exp(-z * z)",
            "    else:  # approximate: the divisor is 1 or more, an exp under 1e-38 flushes to 0",
            f"        t = libdevice.fast_dividef(1.0, 1.0 + {P!r} * z)",
            "        e = libdevice.fast_expf(-z * z)",
            f"    half_q = {horner('t')} * e  # erfc(z) / 2",
            "    return x * tl.where(x >= 0, 1.0 - half_q, half_q)  # NaN: half_q is NaN"]
