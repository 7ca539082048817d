"""The kernel plan: the frozen seam between lowering (``lower.py``) and emission.

Holds what ``lower.py`` decides and ``emit.py``/``launcher.py`` write out: each kernel
input, output or generated value (``TensorArg``, with its broadcast ``Access`` and, where
views are fused, its index map), one ``Stmt`` per computed value, the ``ReductionStep``s,
and the ``KernelPlan`` around them; ``live_statements`` drops statements no output needs.
No source text here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import torch

from ..ir.reductions import ACCUMULATE, ReductionRule
from ..ir.views import Step
from .layout import Access
from .signature import pointer_name

if TYPE_CHECKING:  # it reads plans' inputs: a cycle at run time
    from .literal_sizes import Pin

# Half-precision values are computed in float32 and rounded once, at the store.
COMPUTE = ACCUMULATE
# Widest row several reductions share one block in (lowering keeps them apart past it); one
# reduction's rows stay in one block up to one_block.widest_one_block (Tuning.max_block).
MAX_BLOCK = 4096


class Role(StrEnum):
    """What a kernel does with a tensor argument; the value is the prefix of its generated
    names (`in_ptr0`, `out0_strides`)."""

    IN = "in"  # loaded
    OUT = "out"  # stored
    GEN = "gen"  # computed from the index, nothing loaded


@dataclass(frozen=True)
class Generated:
    """How a generator (`arange`) makes its value: the registry lowers `op` with `params`
    from the element's own index, which is `offset` plus the kernel's index into it."""

    op: str
    params: tuple[tuple[str, Any], ...]
    offset: int = 0  # where the kernel's view of the value starts in it (a slice)


@dataclass(frozen=True)
class PieceRead:
    """A concatenation's operand read as its piece of the result (``ir/views.Piece``): it
    covers coordinates [start, stop) of domain dim `dim`, where the kernel reads it at
    coordinate - start; `coordinate` is the generated value holding that coordinate."""

    dim: int
    start: int  # at analysis; a varying cat's bounds are kernel parameters (``cat_bounds``)
    stop: int
    coordinate: TensorArg
    cat: int = 0  # which of the kernel's cats (node order) and which of its operands
    part: int = 0
    # Straddling group_norm's groups of this many (``ir/views.Piece.per``): `dim` is the
    # groups' dim, `dim + 1` the channel in a group; start, stop and `coordinate` count
    # channels, `dim * per + (dim + 1)`.
    per: int = 0

    @property
    def along(self) -> int:
        """The domain dim whose coordinate the piece's length is counted in (the inner of
        a straddling piece's two)."""
        return self.dim + 1 if self.per else self.dim


@dataclass(frozen=True)
class CatBounds:
    """One cat of a kernel: its domain dim, each part's length there at analysis, and per
    part the kernel input (position in ``KernelPlan.inputs``) whose length there it is at
    each call, or None where it is fixed (a literal of the launcher)."""

    dim: int
    lengths: tuple[int, ...]
    sources: tuple[int | None, ...]

    @property
    def varying(self) -> bool:
        """Its bounds are kernel parameters, read from the operands at each call."""
        return any(s is not None for s in self.sources)

    @property
    def ends(self) -> tuple[int, ...]:
        out, end = [], 0
        for n in self.lengths:
            end += n
            out.append(end)
        return tuple(out)


@dataclass(frozen=True)
class TensorArg:
    """A kernel input (loaded), output (stored), or generated value (computed from its
    index like an input's offset, with nothing to load: role "gen")."""

    value: str  # graph value name
    role: Role
    index: int  # position among the inputs or the outputs
    temp: str  # SSA temporary loaded into / stored from
    shape: tuple[int, ...]  # as the kernel indexes it (through `view`)
    stride: tuple[int, ...]
    dtype: torch.dtype
    access: Access
    per_row: bool  # one value per row (reduction skeleton only)
    # Index map (``indexing.py``): view steps from the value's own shape to the domain's;
    # `shape`/`stride` above are then the value seen through them. () when right-aligned.
    view: tuple[Step, ...] = ()
    # The value's own shape, where the kernel indexes it through `view`
    user_shape: tuple[int, ...] | None = None
    generated: Generated | None = None  # role "gen" only
    piece: PieceRead | None = None  # a cat's operand: its part of the domain (inputs only)
    # A result's own dims from outermost to innermost in memory, where eager lays it out in
    # another order than the contiguous one (a channels-last result); None: contiguous
    memory_order: tuple[int, ...] | None = None

    @property
    def value_shape(self) -> tuple[int, ...]:
        """The graph value's shape (what the launcher returns or takes)."""
        return self.shape if self.user_shape is None else self.user_shape

    @property
    def ptr(self) -> str:
        """The kernel's pointer parameter: in_ptr0, out_ptr0."""
        return pointer_name(self.role, self.index)

    @property
    def compute_dtype(self) -> torch.dtype:
        return COMPUTE.get(self.dtype, self.dtype)


@dataclass(frozen=True)
class ScalarArg:
    """A Python number of sizes alone the kernel reads (``ir/run_scalars.py``): the launcher
    takes it from its caller as parameter `launch` and passes it as kernel parameter
    `param` (a Python float is fp32 there, the rounding eager gives it beside fp32 tensors)."""

    value: str  # the graph value
    param: str  # "scalar0"
    launch: str  # "scalar_sqrt"
    spelled: str  # "math.sqrt(q.shape[2])", for the launcher's docstring
    # a Python float at the analysed shapes: the kernel casts it to fp32 (both launches
    # pass an int as an int)...
    floating: bool = False
    # ...unless every op reading it meets it with fp64 tensors: then it travels as its
    # double's bits in two int32 words (`_double_bits`) the kernel joins and reinterprets,
    # the double eager uses there (readers of both kinds: fp32 for all, as before)
    wide: bool = False


@dataclass(frozen=True)
class Stmt:
    temp: str
    expr: str
    node: str  # graph node name, for the comment
    op: str
    deps: tuple[str, ...]  # temporaries read
    per_row: bool
    phase: str  # "pre" or "post" (the reduction)
    # Helpers of the generated file `expr` calls (``ir/rounding.Calls``: the divisions', and
    # bfloat16 rounding), as its lowering said: the file defines those its statements record
    helpers: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReductionStep:
    rule: ReductionRule  # the registry's rule: combine, identity, finalize, accumulation
    temp: str
    node: str
    source: str  # temporary reduced over the row
    weight: str | None  # layer_norm / rms_norm affine operands (temporaries or None)
    bias: str | None
    eps: float
    dtype: torch.dtype  # accumulation dtype of the result
    axes: int = 1  # trailing domain dims it reduces (the columns)
    correction: float = 0.0  # var / std: the divisor is n - correction

    @property
    def collapse(self) -> bool:
        """One value per row (sum, mean, amax, amin), not one per element."""
        return not self.rule.keeps_row

    @property
    def deps(self) -> tuple[str, ...]:
        return tuple(t for t in (self.source, self.weight, self.bias) if t is not None)


@dataclass(frozen=True)
class KernelPlan:
    name: str  # "cluster0"
    cluster_index: int
    skeleton: str  # "elementwise" | "reduction"
    domain: tuple[int, ...]  # iteration shape at analysis time
    inputs: tuple[TensorArg, ...]
    stmts: tuple[Stmt, ...]
    reduction: ReductionStep | None  # the first reduction (the only one a looped kernel has)
    outputs: tuple[TensorArg, ...]
    int64: bool  # index math needs 64 bits
    chain: str
    tiled: bool = False  # elementwise over 2-D tiles (see the module docstring)
    # Statements and reductions in node order, when the kernel holds several reductions
    # over the same rows (emitted in one block, one after another); () otherwise.
    steps: tuple[Stmt | ReductionStep, ...] = ()
    # Trailing domain dims the columns cover: a reduction's reduced dims (its index map's
    # order puts them last, ``indexing.py``), a tiled elementwise kernel's (``tiling.py``).
    col_dims: int = 1
    # Values the kernel computes from their index (role "gen"): each load of the inputs
    # writes them too, where it runs (``sources``).
    generated: tuple[TensorArg, ...] = ()
    # Python numbers of sizes alone it reads as scalar parameters (``ScalarArg``).
    scalars: tuple[ScalarArg, ...] = ()
    # Its cats' bounds (``PieceRead.cat`` indexes them).
    cats: tuple[CatBounds, ...] = ()
    # Input dims its views sized by numbers need as analysed (``literal_sizes.py``).
    pins: tuple[Pin, ...] = ()

    @property
    def sources(self) -> tuple[TensorArg, ...]:
        """What the kernel reads before its statements: the inputs, then generated values."""
        return self.inputs + self.generated

    @property
    def reduced(self) -> int:
        """Trailing domain dims the columns cover: a reduction's reduced dims, a tiled
        kernel's column dims, 1 for a flat elementwise kernel."""
        return self.col_dims if self.two_d else 1

    @property
    def n_cols(self) -> int:
        """Columns of a row at analysis time: the product of the reduced dims."""
        return math.prod(self.domain[self.rank - self.reduced:]) if self.domain else 1

    @property
    def reductions(self) -> tuple[ReductionStep, ...]:
        if self.steps:
            return tuple(s for s in self.steps if isinstance(s, ReductionStep))
        return () if self.reduction is None else (self.reduction,)

    @property
    def rank(self) -> int:
        return len(self.domain)

    @property
    def can_loop(self) -> bool:
        """Rows may loop over column blocks: one reduction (several need the row in one
        block)."""
        return self.skeleton == "reduction" and not self.steps

    @property
    def two_d(self) -> bool:
        """Indexed by `rows` and `cols` (reductions and tiled elementwise kernels)."""
        return self.skeleton == "reduction" or self.tiled

    def followed(self, t: TensorArg) -> int:
        """``followed_dims`` of result `t` (per-row only under a reduction)."""
        return followed_dims(self.rank, self.reduced,
                             t.per_row and self.skeleton == "reduction")

    @property
    def column_strided(self) -> bool:
        """A tensor steps through memory along the last axis (a transposed view, or the
        channels of NCHW reduced in a kernel's own order): it is contiguous along the rows
        instead, so tiles should be square (or hold many rows), not row-shaped. Inputs, and in
        a tiled kernel also results (stored through a permute)."""
        args = self.inputs + (self.outputs if self.tiled else ())
        return any(steps_along_cols(t, self.rank) for t in args)


def followed_dims(rank: int, reduced: int, per_row: bool) -> int:
    """The leading domain dims a result's shape follows at any size (the launcher takes it
    from the iteration shape): a per-row result is 1 long along the `reduced` trailing dims,
    also where they were 1 long at analysis."""
    return rank - reduced if per_row else rank


def steps_along_cols(t: TensorArg, rank: int) -> bool:
    """`t` is strided along the domain's last axis and has stride 1 along an earlier dim."""
    groups = t.access.groups
    return bool(groups) and groups[-1].last == rank and not groups[-1].unit and any(
        g.unit for g in groups[:-1])


def needs_int64(domain: tuple[int, ...], inputs: Sequence[TensorArg]) -> bool:
    """Whether the kernel's index math needs 64 bits (``KernelPlan.int64``): the domain's
    flat index, or the farthest element an input reaches, passes int32."""
    extent = math.prod(domain)
    for t in inputs:
        extent = max(extent, 1 + sum((d - 1) * abs(s) for d, s in zip(t.shape, t.stride,
                                                                       strict=True)))
    return extent >= 2**31


def live_statements(stmts: list[Stmt], reductions: Sequence[ReductionStep],
                    outputs: Sequence[TensorArg]) -> list[Stmt]:
    """Drop statements no output depends on (a cluster never has them; cheap insurance)."""
    need = {o.temp for o in outputs}

    def through_reductions() -> None:
        for r in reversed(reductions):
            if r.temp in need:
                need.update(r.deps)

    through_reductions()
    for s in reversed(stmts):
        if s.temp in need:
            need.update(s.deps)
        through_reductions()
    return [s for s in stmts if s.temp in need]
