"""Reduction rules: what each reduction op means, for the registry's reduction specs.

A rule says how partial results combine (``COMBINES``: the Triton block reduction, the
pairwise merge of two partials, and the identity element tail lanes hold), how the
result follows from the statistics (``finalize``), which dtype accumulates, and whether
the result keeps the reduced axis (softmax, the norms, cumsum) or collapses it (sum,
mean, amax, amin, var, std). ``family`` names the kernel skeleton that computes the
statistics (codegen's ``reduce.py`` has one emitter per family); the rule's fields fill it
in. ``axes`` says which of a call's params name the reduced dims (``reduced_dims`` reads
them): any set of dims for the collapsing ops, one dim for softmax and cumsum, the
trailing ``normalized_shape`` for the norms, (C/G, *spatial) for group_norm, all but the
channels for batch statistics.
Read by ``ir/registry.py`` (each reduction ``OpSpec`` carries its rule), by the
analysis passes and the lowering (``node_reduced_dims``: the dims a graph node reduces),
and by the emitter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .graph import Node
from .lowerings import nan_max, nan_min

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
    # The block reduction of floats where `block` skips NaN (tl.max, tl.min) and torch gives
    # NaN: a `@triton.jit` helper the generated file defines (codegen's ``nan_reduce.py``).
    keep_nan: str | None = None

    def merge(self, a: str, b: str) -> str:
        return self.pair.format(a=a, b=b)

    def block_of(self, dtype: torch.dtype) -> str:
        """The block reduction of values of `dtype` (called as `f(x, axis)`)."""
        return self.keep_nan if self.keep_nan and dtype.is_floating_point else self.block

    def identity_of(self, dtype: torch.dtype) -> str:
        """The identity as a Triton literal of `dtype`."""
        if self.identity == "zero":
            return "0.0" if dtype.is_floating_point else "0"
        if dtype.is_floating_point:
            return NEG_INF if self.identity == "lowest" else POS_INF
        if dtype == torch.bool:  # torch.iinfo takes no bool
            return "False" if self.identity == "lowest" else "True"
        info = torch.iinfo(dtype)
        # Written `(min + 1 - 1)`: the literal `-min` would not fit the signed type.
        return f"({info.min + 1} - 1)" if self.identity == "lowest" else str(info.max)


COMBINES: dict[str, Combine] = {
    "sum": Combine("tl.sum", "{a} + {b}", "zero", scan="tl.cumsum"),
    # A NaN among the values makes the result NaN, as torch's amax, amin and max(dim) do.
    "max": Combine("tl.max", nan_max("{a}", "{b}"), "lowest", keep_nan="_max_keep_nan"),
    "min": Combine("tl.min", nan_min("{a}", "{b}"), "highest", keep_nan="_min_keep_nan"),
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
    axes: str = "dims"  # how the call names its reduced dims: a key of AXES
    keepdim: bool = False  # a collapse whose result always keeps the reduced dims (a pool)
    # Its one-block form holds one value per element at a time: softmax's exp(x - max) takes
    # the row's place. Not log_softmax (x stays for x - max - log(sum) while the exps are
    # summed) nor a centered norm (the row and its deviations). Such a block may hold rows
    # twice as wide (codegen's one_block.py: ptxas spills log_softmax there, not softmax).
    holds_one_row: bool = False

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
    # Moments: the mean, then the sum of squared deviations `{m2}` over n - correction.
    ReductionRule("var", "moments", COMBINES["sum"], "{m2} / (n_cols - {correction})",
                  False, False),
    ReductionRule("std", "moments", COMBINES["sum"], "tl.sqrt({m2} / (n_cols - {correction}))",
                  False, False),
    # adaptive_avg_pool2d to 1x1: a mean over (H, W) that keeps both dims.
    ReductionRule("adaptive_avg_pool2d", "collapse", COMBINES["sum"], "{acc} / n_cols", False,
                  False, axes="pool", keepdim=True),
    # softmax's statistics: the row max (its combine), then the sum of exp(x - max)
    ReductionRule("softmax", "softmax", COMBINES["max"], "{exp} / {v}_sum",
                  True, False, axes="dim", holds_one_row=True),
    ReductionRule("log_softmax", "softmax", COMBINES["max"],
                  "{x} - {v}_max - tl.log({v}_sum)", True, False, axes="dim"),
    ReductionRule("layer_norm", "normalize", COMBINES["sum"], "{c} * {v}_rstd",
                  True, False, centered=True, axes="trailing"),
    ReductionRule("rms_norm", "normalize", COMBINES["sum"], "{c} * {v}_rstd", True, False,
                  axes="trailing"),
    # Each (sample, group) normalized over its C/G channels and the spatial dims.
    ReductionRule("group_norm", "normalize", COMBINES["sum"], "{c} * {v}_rstd", True, False,
                  centered=True, axes="groups"),
    # BatchNorm on batch statistics (training mode without running statistics): each
    # channel normalized over the batch and the spatial dims; the affine part is per channel.
    ReductionRule("batch_norm_train", "normalize", COMBINES["sum"], "{c} * {v}_rstd", True,
                  False, centered=True, axes="channels"),
    # A scan: a running sum, one value per element.
    ReductionRule("cumsum", "scan", COMBINES["sum"], "{acc}", True, True, axes="dim"),
)}


def _dims(params: Mapping[str, Any], rank: int) -> tuple[int, ...] | None:
    """`dim=`: an int, a tuple of ints, or None/() for every dim."""
    dim = params.get("dim")
    if dim is None or dim == ():
        return tuple(range(rank))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if not all(isinstance(d, int) and not isinstance(d, bool) and -rank <= d < max(rank, 1)
               for d in dims):
        return None
    found = sorted({d % rank for d in dims}) if rank else []
    return tuple(found) if len(found) == len(dims) else None  # a dim named twice: torch errs


def _one_dim(params: Mapping[str, Any], rank: int) -> tuple[int, ...] | None:
    dim = params.get("dim")
    return _dims(params, rank) if isinstance(dim, int) and not isinstance(dim, bool) else None


def _trailing(params: Mapping[str, Any], rank: int) -> tuple[int, ...] | None:
    shape = params.get("normalized_shape")
    n = 1 if isinstance(shape, int) else len(tuple(shape)) if shape is not None else 0
    return tuple(range(rank - n, rank)) if 0 < n <= rank else None


def _pool(params: Mapping[str, Any], rank: int) -> tuple[int, ...] | None:
    """adaptive_avg_pool2d to one value per plane (`1` or `(1, 1)`): the last two dims."""
    size = params.get("output_size")
    one = size == 1 or (isinstance(size, tuple) and tuple(size) == (1, 1))
    return (rank - 2, rank - 1) if one and rank >= 3 else None


def _groups(params: Mapping[str, Any], rank: int) -> tuple[int, ...] | None:
    """group_norm: the channel dim (its C/G part: `reduced_dims` names dim 1) and the rest."""
    groups = params.get("num_groups")
    return tuple(range(1, rank)) if isinstance(groups, int) and groups > 0 and rank >= 2 \
        else None


def _channels(params: Mapping[str, Any], rank: int) -> tuple[int, ...] | None:
    """Batch statistics: every dim but the channels (dim 1)."""
    return (0, *range(2, rank)) if rank >= 2 else None


AXES: dict[str, Callable[[Mapping[str, Any], int], tuple[int, ...] | None]] = {
    "dims": _dims, "dim": _one_dim, "trailing": _trailing, "pool": _pool, "groups": _groups,
    "channels": _channels}


def reduced_dims(rule: ReductionRule, params: Mapping[str, Any], rank: int
                 ) -> tuple[int, ...] | None:
    """The dims of a rank-`rank` input that the call reduces (sorted, non-negative), or None
    when its params name none this rule can lower (softmax's implicit dim, a pool to 2x2).
    group_norm reduces only the C/G part of dim 1; the code generator splits that dim."""
    return AXES[rule.axes](params, rank)


def rule_of(node: Node) -> ReductionRule | None:
    """The reduction rule of `node`'s op, or None (not a reduction). Read from RULES, not the
    registry (which imports this module): the registry gives each reduction spec the rule
    of its own name."""
    return RULES.get(node.op)


def node_reduced_dims(node: Node, rank: int) -> tuple[int, ...] | None:
    """`reduced_dims` for the reduction `node` over a rank-`rank` input; None when `node`
    is no reduction or its params name no dims its rule can lower."""
    rule = rule_of(node)
    return reduced_dims(rule, dict(node.params), rank) if rule is not None else None


def keeps_dims(rule: ReductionRule, params: Mapping[str, Any]) -> bool:
    """The result keeps the reduced dims (size 1 for a collapse): keepdim, a pool, a norm."""
    return rule.keeps_row or rule.keepdim or bool(params.get("keepdim", False))


def correction(params: Mapping[str, Any]) -> float:
    """var/std's divisor offset: `correction=`, else 1 unless `unbiased=False` (torch's rule)."""
    given = params.get("correction")
    if given is not None:
        return float(given)
    return 0.0 if params.get("unbiased") is False else 1.0


def axes_said(params: Mapping[str, Any]) -> str:
    """The params that name a reduction's dims, as the user wrote them (for messages)."""
    shown = [f"{k}={v!r}" for k, v in params.items()
             if k in ("dim", "normalized_shape", "output_size", "num_groups")]
    return ", ".join(shown) or "no dims"


def dims_said(dims: Sequence[int]) -> str:
    """Reduced dims in words: `dim 1`, `dims 2, 3` (not a Python tuple)."""
    return ("dim " if len(dims) == 1 else "dims ") + ", ".join(map(str, dims))
