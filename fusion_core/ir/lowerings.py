"""Pointwise lowerings: each turns operand expressions into one Triton expression.

Read by the op registry (``registry.py``), whose ``OpSpec`` rows name these functions;
``TL_TYPES`` (Triton names of torch dtypes) is also read by codegen's emitters. Operands are
Triton SSA names or literals; a lowering returns None where it has no rule for the call's
params, which the lowering check reports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from .rounding import INT_ROUNDING, Calls, half_div

# A lowering's expression, with the generated file's helpers it calls where it calls some.
Lowering = Callable[[tuple[str, ...], Mapping[str, Any]], "str | Calls | None"]


def tanh_expr(x: str) -> str:
    # Triton has no tl.tanh and libdevice does not run in the interpreter.
    return f"(2.0 * tl.sigmoid(2.0 * {x}) - 1.0)"


def pow_expr(a: tuple[str, ...], p: Mapping[str, Any]) -> str | None:
    e = p["exponent"]
    if not isinstance(e, (int, float)) or isinstance(e, bool):
        return None  # tensor exponent (or scalar base): no rule
    x = a[0]
    if e == int(e) and 0 <= e <= 4:
        return "(" + " * ".join([x] * int(e)) + ")" if e else "1.0"
    if e == -1:
        return f"(1.0 / {x})"
    if e == 0.5:
        return f"tl.sqrt({x})"
    if e == -0.5:
        return f"tl.math.rsqrt({x})"
    return f"tl.exp({float(e)!r} * tl.log({x}))"


# Triton names of torch dtypes. Kernels compute half precision in float32, so a cast
# to a half type rounds through it and comes back.
TL_TYPES: dict[torch.dtype, str] = {
    torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64", torch.int64: "tl.int64", torch.int32: "tl.int32",
    torch.int16: "tl.int16", torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}


# A generated file's helper rounding a float32 value to bfloat16 (``codegen/half_reads.py``):
# Triton's interpreter truncates float32 to bfloat16 where the GPU rounds to nearest even.
ROUND_BF16 = "_round_bf16"


def half_round(x: str, dtype: Any) -> Calls:
    """Float32 `x` rounded to 16-bit `dtype`, kept in float32 (bfloat16's through the helper,
    which the expression records)."""
    if dtype is torch.bfloat16:
        return Calls(f"{ROUND_BF16}({x})", (ROUND_BF16,))
    return Calls(f"{x}.to({TL_TYPES[dtype]}).to(tl.float32)", ())


def cast(x: str, dtype: Any) -> str | Calls | None:
    if dtype is torch.bool:
        return f"({x} != 0)"
    if dtype in (torch.float16, torch.bfloat16):
        # through float32 first: Triton's interpreter fails casting a comparison's int1
        # to bfloat16 ("cannot reshape array of size 32 into shape (128,)"); a no-op else
        return half_round(f"{x}.to(tl.float32)", dtype)
    return f"{x}.to({TL_TYPES[dtype]})" if dtype in TL_TYPES else None


def gelu_expr(a: tuple[str, ...], p: Mapping[str, Any]) -> str | None:
    x = a[0]
    if p["approximate"] == "tanh":
        inner = f"0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x})"
        return f"(0.5 * {x} * (1.0 + {tanh_expr(inner)}))"
    if p["approximate"] == "none":
        return f"(0.5 * {x} * (1.0 + tl.erf({x} * 0.7071067811865476)))"
    return None


# A generated file's helper computing exact GELU (x·Φ(x)) for a 16-bit result
# (``codegen/half_gelu.py``).
GELU_HALF = "_gelu_half"


def gelu_half_expr(a: tuple[str, ...], p: Mapping[str, Any]) -> str | Calls | None:
    """GELU whose result eager rounds to float16 or bfloat16: the exact form through the
    helper (relative error under 3e-5 in float32 where |x| < 6.5, 1e-4 past it: far
    under the result's rounding), the tanh form as in float32."""
    if p["approximate"] == "none":
        return Calls(f"{GELU_HALF}({a[0]})", (GELU_HALF,))
    return gelu_expr(a, p)


def nan_max(a: str, b: str) -> str:
    """`max(a, b)` that gives NaN where either is NaN, as torch's relu, clamp and maximum do
    (`tl.maximum` alone returns the other operand: a NaN fed to relu came out 0)."""
    return f"tl.maximum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)"


def nan_min(a: str, b: str) -> str:
    """`min(a, b)` that gives NaN where either is NaN (see ``nan_max``)."""
    return f"tl.minimum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)"


def clamp_expr(a: tuple[str, ...], p: Mapping[str, Any]) -> str:
    x, lo, hi = a
    if lo != "None":
        x = nan_max(x, lo)
    if hi != "None":
        x = nan_min(x, hi)
    return x


def batch_norm_expr(a: tuple[str, ...], p: Mapping[str, Any]) -> str | None:
    if p["training"]:
        return None  # batch statistics: a reduction, not a pointwise op
    x, mean, var, weight, bias = a
    y = f"(({x} - {mean}) * tl.math.rsqrt({var} + {p['eps']!r}))"
    y = y if weight == "None" else f"({y} * {weight})"
    return y if bias == "None" else f"({y} + {bias})"


def arange_bounds(p: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """(start, end, step) of an `arange` call: `torch.arange(n)` binds n to `start`, aten's
    `arange.default` to `end`."""
    if p.get("end") is None:
        return 0, p.get("start"), p.get("step", 1)
    return p.get("start", 0), p["end"], p.get("step", 1)


def arange_expr(a: tuple[str, ...], p: Mapping[str, Any]) -> str | None:
    """A generator's value from its operand, the element's own index (already in the
    value's compute dtype): `start + step * i`. Only constant bounds are generated."""
    start, _, step = arange_bounds(p)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (start, step)):
        return None
    dtype = p.get("dtype")
    if isinstance(dtype, torch.dtype) and not dtype.is_floating_point:
        # torch makes an integer range in its own type: a float start or step is
        # truncated first (`arange(0.5, 5, 1.5, dtype=torch.int64)` is 0, 1, 2, 3, 4)
        start, step = int(start), int(step)
    scaled = a[0] if step == 1 else f"({a[0]} * {step!r})"
    return f"({scaled} + {start!r})" if start else scaled


CAT_ENDS = "cat_ends"  # the params key lowering adds: where each cat operand's piece ends


def cat_expr(a: tuple[str, ...], p: Mapping[str, Any]) -> str | None:
    """A concatenation from its operands' values over their pieces: `a[0]` is the element's
    coordinate along the cat dim, `a[1:]` the operands, `p[CAT_ENDS]` where each operand's
    piece ends (the last is the result's size). Codegen adds the ends from the shapes; the
    legality check's call, without them, names them."""
    if not isinstance(p.get("dim"), int) or len(a) < 2:
        return None
    ends = p.get(CAT_ENDS) or tuple(f"end{i}" for i in range(len(a) - 1))
    expr = a[-1]
    for value, end in zip(reversed(a[1:-1]), reversed(ends[:-1]), strict=True):
        expr = f"tl.where({a[0]} < {end}, {value}, {expr})"
    return expr


def with_alpha(sym: str) -> Lowering:
    def lower(a: tuple[str, ...], p: Mapping[str, Any]) -> str:
        other = a[1] if p.get("alpha", 1) == 1 else f"({p['alpha']!r} * {a[1]})"
        return f"({a[0]} {sym} {other})"

    return lower


def infix(sym: str) -> Lowering:
    return lambda a, p: f"({a[0]} {sym} {a[1]})"


# Ops whose bool result torch computes otherwise than the same op on Triton's 1-bit
# integers: `True + True` is True in torch (a logical or) and wraps to False in int1.
BOOL_LOWERINGS: dict[str, Lowering] = {"add": lambda a, p: f"({a[0]} | {a[1]})"}
# Integer forms: torch.round keeps an integer tensor as it is (Triton's floor takes floats
# only); rounding divisions correct Triton's truncating `//` and `%` (ir/rounding.py).
INT_LOWERINGS: dict[str, Lowering] = {"round": lambda a, p: None if p["decimals"] else a[0],
                                      **INT_ROUNDING}


# 16-bit forms, by the result's dtype: a truncating division of the rounded quotient.
HALF_LOWERINGS: dict[str, Callable[[Any], Lowering]] = {
    "div": lambda dtype: half_div(lambda x: half_round(x, dtype))}
# 16-bit results computed in float32 with fewer instructions: libdevice's erf picks one of two
# polynomials per element, and the picked coefficients cost a register move each (SASS of
# LayerNorm→GELU at 4096 fp16: 14 of 47 instructions an element), which a result rounded to
# 16 bits does not need.
HALF_RESULT_LOWERINGS: dict[str, Lowering] = {"gelu": gelu_half_expr}


def call(fn: str) -> Lowering:
    return lambda a, p: f"{fn}({', '.join(a)})"


def softplus_expr(a: tuple[str, ...], p: Mapping[str, Any]) -> str:
    """log(1 + exp(βx)) / β, and x itself past the threshold, as torch computes it. There is
    no log1p under Triton's interpreter: log(u)·y/(u − 1), u = 1 + y, keeps log1p's accuracy
    where y = exp(βx) is tiny (u rounds to 1, the quotient to y)."""
    x, beta = a[0], float(p["beta"])
    bx = f"({x} * {beta!r})"
    y = f"tl.exp({bx})"
    u = f"(1.0 + {y})"
    safe = f"tl.where({u} == 1.0, 1.0, {u} - 1.0)"  # no 0/0 in the branch not taken
    log1p = f"tl.where({u} == 1.0, {y}, tl.log({u}) * ({y} / {safe}))"
    return f"tl.where({bx} > {float(p['threshold'])!r}, {x}, {log1p} / {beta!r})"


def round_expr(a: tuple[str, ...], p: Mapping[str, Any]) -> str | None:
    """Round half to even, as torch.round: from floor(x) and the exact remainder x − floor(x)
    (x + 0.5 would round up 0.49999997); integers, infinities and NaN are x itself."""
    if p["decimals"]:
        return None  # a scale by 10**decimals first: left to eager
    x = a[0]
    r = f"tl.floor({x})"
    d = f"({x} - {r})"
    odd = f"({r} - 2.0 * tl.floor({r} * 0.5))"
    return (f"tl.where({r} == {x}, {x}, {r} + tl.where({d} > 0.5, 1.0, "
            f"tl.where({d} < 0.5, 0.0, {odd})))")
