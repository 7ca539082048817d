"""Reduction rules: what each reduction op means, for the registry's reduction specs.

A rule says how partial results combine (``COMBINES``: the Triton block reduction, the
pairwise merge of two partials, and the identity element tail lanes hold), how the
result follows from the statistics (``finalize``), which dtype accumulates, and whether
the result keeps the reduced axis (softmax, the norms, cumsum) or collapses it (sum,
mean, amax, amin). ``family`` names the kernel skeleton that computes the statistics
(codegen's ``reduce.py`` has one emitter per family); the rule's fields fill it in.
Read by ``ir/registry.py`` (each reduction ``OpSpec`` carries its rule), by the
lowering, and by the emitter.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

NEG_INF, POS_INF = "-float('inf')", "float('inf')"

# Half precision accumulates in float32; everything else in its own dtype.
ACCUMULATE: dict[torch.dtype, torch.dtype] = {torch.float16: torch.float32,
                                              torch.bfloat16: torch.float32}


@dataclass(frozen=True)
class Combine:
    """How a reduction merges values: over a block axis, and two partials at a time."""

    block: str  # Triton reduction over one axis of a block: tl.sum, tl.max, tl.min
    pair: str  # two partial results `{a}`, `{b}` merged into one
    identity: str  # "zero", "lowest" or "highest": the element that changes nothing
    scan: str | None = None  # Triton's running (inclusive) form, where there is one

    def merge(self, a: str, b: str) -> str:
        return self.pair.format(a=a, b=b)

    def identity_of(self, dtype: torch.dtype) -> str:
        """The identity as a Triton literal of `dtype`."""
        if self.identity == "zero":
            return "0.0" if dtype.is_floating_point else "0"
        if dtype.is_floating_point:
            return NEG_INF if self.identity == "lowest" else POS_INF
        info = torch.iinfo(dtype)
        # Written `(min + 1 - 1)`: the literal `-min` would not fit the signed type.
        return f"({info.min + 1} - 1)" if self.identity == "lowest" else str(info.max)


COMBINES: dict[str, Combine] = {
    "sum": Combine("tl.sum", "{a} + {b}", "zero", scan="tl.cumsum"),
    "max": Combine("tl.max", "tl.maximum({a}, {b})", "lowest"),
    "min": Combine("tl.min", "tl.minimum({a}, {b})", "highest"),
}


@dataclass(frozen=True)
class ReductionRule:
    name: str
    family: str  # "collapse", "softmax", "normalize" or "scan" (codegen's emitters)
    combine: Combine  # the first statistic's combine (tail lanes hold its identity)
    # The result from the statistics, as a Triton expression. `{x}`: the reduced value;
    # `{v}`: the result's temporary (prefix of the statistics' names); `{acc}`: a
    # collapsing rule's accumulated value; `{exp}`: softmax's exp(x - max); `{c}`: the
    # normalized value, centered or not.
    finalize: str
    keeps_row: bool  # one result per element (softmax, norms, cumsum), not one per row
    integers: bool  # integer inputs accumulate in their own dtype (else floats only)
    centered: bool = False  # normalize: subtract the mean first (layer_norm, not rms_norm)

    def identity(self, dtype: torch.dtype) -> str:
        return self.combine.identity_of(dtype)

    def accumulation_dtype(self, result: torch.dtype) -> torch.dtype | None:
        """The dtype the kernel accumulates a result of dtype `result` in; None: no rule."""
        acc = ACCUMULATE.get(result, result)
        return acc if acc.is_floating_point or self.integers else None


RULES: dict[str, ReductionRule] = {r.name: r for r in (
    ReductionRule("sum", "collapse", COMBINES["sum"], "{acc}", False, True),
    ReductionRule("mean", "collapse", COMBINES["sum"], "{acc} / n_cols", False, False),
    ReductionRule("amax", "collapse", COMBINES["max"], "{acc}", False, True),
    ReductionRule("amin", "collapse", COMBINES["min"], "{acc}", False, True),
    # softmax's statistics: the row max (its combine), then the sum of exp(x - max)
    ReductionRule("softmax", "softmax", COMBINES["max"], "{exp} / {v}_sum",
                  True, False),
    ReductionRule("log_softmax", "softmax", COMBINES["max"],
                  "{x} - {v}_max - tl.log({v}_sum)", True, False),
    ReductionRule("layer_norm", "normalize", COMBINES["sum"], "{c} * {v}_rstd",
                  True, False, centered=True),
    ReductionRule("rms_norm", "normalize", COMBINES["sum"], "{c} * {v}_rstd", True, False),
    # A scan: a running sum, one value per element.
    ReductionRule("cumsum", "scan", COMBINES["sum"], "{acc}", True, True),
)}
