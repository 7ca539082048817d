"""16-bit float values read at another dtype: rounded first, as eager holds them.

Kernels compute float16/bfloat16 values in float32 and round once, at the store: within one
16-bit dtype that is eager's result to its tolerance. Where such a value feeds an op of
another dtype (`h_bf16 * 0.1 + x_fp32`, `h.sum(-1, dtype=torch.float32)`, `h.long()`,
`h > 0`), eager read it rounded, and the wider result shows the difference (every element
of an fp32 residual add off by a bf16 ulp, a `long()` one apart): the reader gets the value
rounded to its dtype, one statement per value. A reduction reads its operand rounded too:
`s * 0.3 + ext` in float16 with `ext` at finfo.min lands on a handful of float16 numbers,
and a softmax over a masked row of them is another distribution than over the exact sums.

An op that rounds (`x // 0.7`, `torch.round`, ``OpSpec.steps``) reads its 16-bit operands
rounded too, though of their dtype: a float32 value a rounding away from a step (2.0999 where
eager holds 2.1) lands on its other side, a whole unit off.

A Python number compared with a 16-bit tensor is rounded to its dtype first: torch compares
in the tensor's dtype (`h > 0.1` of a bfloat16 `h` is `h > 0.10009765625`, so `h` equal to
that is not greater), where the kernel compared float32 registers with 0.1. Eager's remainder
rounds its number so too (`h % 0.7` is by 0.7002 in float16; `h // 0.7` is by 0.7).

Rounding to bfloat16 goes through a helper of the generated file (``helpers``): Triton's
interpreter truncates float32 to bfloat16 (the GPU rounds to nearest even), so there the
helper rounds on the bits; compiled, it is the plain cast.
"""

from __future__ import annotations

from typing import Any

import torch

from ..ir.graph import FusionGraph, Node
from ..ir.lowerings import ROUND_BF16, half_round
from ..ir.registry import SPECS
from .interpreted import FLAG
from .plan import KernelPlan, Stmt

HALF = frozenset({torch.float16, torch.bfloat16})


def computed_unrounded(dtype: torch.dtype | None, op: str) -> bool:
    """A kernel value of `dtype` computed by `op` holds float32 bits, not `dtype`'s: every
    16-bit op but a cast (whose lowering rounds, `ir/lowerings.cast`)."""
    return dtype in HALF and op != "to"


def rounds_operands(node: Node) -> bool:
    """Whether `node` rounds (its value jumps): it reads 16-bit operands as eager holds them."""
    spec = SPECS.get(node.op)
    return spec is not None and spec.steps is not None and spec.steps(dict(node.params))


def rounding(temp: str, new_temp: str, dtype: torch.dtype, node: str, per_row: bool,
             phase: str) -> Stmt:
    """`new_temp`: `temp` rounded to `dtype` (kept in float32 registers)."""
    rounded = half_round(temp, dtype)
    return Stmt(new_temp, rounded.expr, node, "round", (temp,), per_row, phase, rounded.helpers)


def helpers(plan: KernelPlan) -> list[str]:
    """The bfloat16 rounding helper's lines, where a statement of the plan recorded it (its
    lowering called ``half_round``)."""
    if not any(ROUND_BF16 in s.helpers for s in plan.stmts):
        return []
    return ["# A float32 value rounded to the nearest bfloat16 (ties to even), kept in float32.",
            "# Triton's interpreter truncates instead: there, the rounding is done on the bits.",
            "@triton.jit", f"def {ROUND_BF16}(x):",
            f"    if {FLAG}:",
            "        bits = x.to(tl.int32, bitcast=True)",
            "        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536",
            "        rounded = bits.to(tl.float32, bitcast=True)",
            "        return tl.where(x == x, rounded, x)  # NaN kept  # noqa: PLR0124",
            "    return x.to(tl.bfloat16).to(tl.float32)"]


def compared_scalars(g: FusionGraph, node: Node) -> tuple[Any, ...]:
    """`node`'s inputs, a number compared with (or a remainder's of) tensors all of one 16-bit
    dtype rounded to it, where eager converts it so (the registry's ``half_scalar``)."""
    spec = SPECS.get(node.op)
    dtypes = {g[r].meta.dtype if g[r].meta is not None else None for r in node.refs}
    if spec is None or not spec.half_scalar or len(dtypes) != 1 or not dtypes <= HALF:
        return node.inputs
    (dtype,) = dtypes
    return tuple(float(torch.tensor(a, dtype=dtype)) if isinstance(a, (int, float))
                 and not isinstance(a, bool) else a for a in node.inputs)
