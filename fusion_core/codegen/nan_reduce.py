"""Max and min block reductions that keep NaN: the helpers a generated file defines for them.

Triton's ``tl.max`` and ``tl.min`` skip NaN (their combine is maxnum / minnum), so a fused
amax, amin or ``max(dim).values`` of a row holding a NaN gave the row's largest (smallest)
other value where eager gives NaN. ``reduce.py`` calls a helper instead wherever it reduces
floats by a combine that names one (``Combine.keep_nan``); ``helpers`` writes the helpers a
plan's reductions call, once per file, ahead of its kernels (after the switch between the two
forms below, ``interpreted.module_lines``).

Compiled, a helper is ``tl.reduce`` with a combine that keeps NaN (``tl.maximum(...,
propagate_nan=ALL)``: what ``tl.max`` does with one NaN-keeping max instruction a step, as
Inductor's ``triton_helpers.max2``). Triton's interpreter runs a custom combine once per
element in Python (100x ``tl.max`` on a 4 x 1024 block), so there a helper is ``tl.max`` plus
a sum that is NaN exactly where some value is (0 elsewhere): the same result.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir.reductions import COMBINES
from .interpreted import FLAG
from .plan import KernelPlan
from .writer import CodeWriter


@dataclass(frozen=True)
class NanReduction:
    """One helper: `name(xs, axis)` reduces like `skips` but gives NaN where a value is."""

    name: str
    skips: str  # Triton's reduction that skips NaN: tl.max, tl.min
    pair: str  # the combine's merge of `lhs` and `rhs`, which keeps NaN

    @property
    def combine(self) -> str:
        return f"{self.name}_combine"


HELPERS: dict[str, NanReduction] = {
    c.keep_nan: NanReduction(c.keep_nan, c.block, c.merge("lhs", "rhs"))
    for c in COMBINES.values() if c.keep_nan is not None}


def used(plan: KernelPlan) -> list[NanReduction]:
    """The helpers the plan's reductions call (its float max and min reductions)."""
    names = {r.rule.combine.block_of(r.dtype) for r in plan.reductions}
    return [h for name, h in HELPERS.items() if name in names]


def helpers(plan: KernelPlan) -> list[str]:
    """The module-level lines defining the helpers the plan calls (none: no lines)."""
    found = used(plan)
    if not found:
        return []
    out = CodeWriter()
    out.lines(["# Max and min over an axis that give NaN where a value is NaN, as torch's do",
               "# (tl.max and tl.min skip it). Compiled: tl.reduce with a NaN-keeping combine,",
               "# as fast as tl.max. The interpreter runs such a combine once per element in",
               "# Python, so there: tl.max, plus a sum that is NaN exactly where a value is."])
    for i, h in enumerate(found):
        if i:
            out.lines(["", ""])
        out.lines(["@triton.jit", f"def {h.combine}(lhs, rhs):"])
        with out.indented():
            out.line(f"return {h.pair}")
        out.lines(["", "", "@triton.jit", f"def {h.name}(xs, axis: tl.constexpr):"])
        with out.indented():
            out.line(f"if {FLAG}:")
            with out.indented():
                out.lines(["nans = tl.sum(tl.where(xs == xs, 0.0, xs), axis)  # NaN or 0  "
                           "# noqa: PLR0124",
                           f"reduced = {h.skips}(xs, axis) + nans"])
            out.line("else:")
            with out.indented():
                # as tl.max does: 16-bit floats reduce in float32 (what follows, tl.exp
                # of a softmax among it, takes float32 and float64 only when compiled)
                out.lines(["if xs.dtype.primitive_bitwidth < 32:",
                           "    xs = xs.to(tl.float32)",
                           f"reduced = tl.reduce(xs, axis, {h.combine})"])
            out.line("return reduced")
    return out.result()
