"""One tensor's part of a kernel body: its offset, mask, load and store.

Reads a ``KernelPlan`` (``lower.py``) and one of its ``TensorArg``s; writes the text of the
tensor's load (or, for a generated value such as ``arange``, its computation) and store,
registering the scalar parameters its offset reads in the ``KernelParams`` given. Each
offset is an ``Index`` of ``Term`` objects (``writer.py``); the mask and the shape of a
store's pointer block follow from the axes those terms vary along. Also here: the aligned
row bodies of looped rows, which change how a row-major tensor's offset is written.
``emit.py`` puts these lines into the kernel's sections.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ..ir.registry import SPECS, TL_TYPES
from .cat_bounds import piece_start, piece_stop
from .layout import align
from .lower import KernelPlan, TensorArg
from .plan import PieceRead, Role
from .signature import Family, KernelParams
from .writer import COLS, OFFS, ROW_MAJOR, ROWS, Base, Index, Term, row_remainder, zero_term


def _literal_stride(arg: TensorArg, first: int, last: int, rank: int) -> int:
    """A generated value's stride for its group [first, last): that of the innermost dim it
    has more than one element along, as the launcher reads a tensor's (``_group_strides``).
    A size-1 dim's stride says nothing (an expanded value narrowed to one column has strides
    (0, 1) over (2, 1): its group's step is 0, not 1)."""
    dims, strides = align(arg.shape, arg.stride, rank)
    return next((strides[k] for k in reversed(range(first, last)) if dims[k] != 1), 0)


def index_of(arg: TensorArg, plan: KernelPlan, params: KernelParams) -> Index:
    """Offset of `arg` for the current block; registers the scalars it needs in `params`.

    In a 2-D kernel the rows cover the domain dims before `first_col` and the flat column
    index `cols` the `plan.reduced` dims from it on: a group inside the columns takes
    `cols % span[lo] // span[hi]` (the full domain's spans, which there are the columns'),
    one inside the rows the same over `rows` and the rows' spans."""
    rank, two_d = plan.rank, plan.two_d
    first_col = rank - plan.reduced
    terms = []
    strides = 0
    for g in arg.access.groups:
        lo, hi = g.first, g.last
        if two_d and hi <= first_col:  # dims of the row index only
            base, family, top = ROWS, Family.RSPAN, first_col
        else:
            base, family, top = OFFS, Family.SPAN, rank
            if two_d:
                if lo >= first_col:  # dims of the column index only
                    base, lo = COLS, (lo if lo > first_col else 0)
                else:  # rows within the group, then `cols`
                    base = ROW_MAJOR if lo == 0 else row_remainder(params.span(Family.RSPAN, lo))
                    lo = 0
        # 32-bit index math divides by a span through a multiply-high (``FastDivisor``)
        span = params.span if plan.int64 else params.divisor
        modulo = span(family, lo) if lo > 0 else None
        divisor = span(family, hi) if hi < top else None
        stride = None
        if not g.unit and arg.role == Role.GEN:  # no tensor to read strides from: a literal
            stride = str(_literal_stride(arg, g.first, g.last, rank))
        elif not g.unit:
            stride = params.stride(arg.role, arg.index, strides)
            strides += 1
        terms.append(Term(base, modulo, divisor, stride))
    piece = arg.piece
    if piece is not None and piece.part:  # a cat's first operand starts at 0
        # Straddling groups, only the term of the group's two dims (their flat channel
        # index): shifted, another's remainder would go negative.
        terms = [_shifted(t, piece, plan, params) if not piece.per
                 or (g.first <= piece.dim + 1 and piece.dim < g.last) else t
                 for t, g in zip(terms, arg.access.groups, strict=True)]
    return Index(tuple(terms))


def _shifted(term: Term, piece: PieceRead, plan: KernelPlan, params: KernelParams) -> Term:
    """`term` read at the piece's own coordinate (the domain's minus `piece.start` along its
    dim): the block index the dim is decoded from (`offs`, or in a 2-D kernel `rows` or
    `cols`, whichever covers it) less `start` times the span of the dims inside it. Lanes
    before the piece decode garbage there, which the load's mask hides. `start` is a kernel
    parameter where the cat's bounds follow each call (``cat_bounds.py``). A piece
    straddling group_norm's groups starts at a channel: its shift is along the channel in
    a group (the inner dim), in whichever block index decodes that."""
    k, rank = piece.along, plan.rank
    first_col = rank - plan.reduced
    if not plan.two_d:
        axis, family, top = "offs", Family.SPAN, rank
    elif k >= first_col:
        axis, family, top = "cols", Family.SPAN, rank
    else:
        axis, family, top = "rows", Family.RSPAN, first_col
    start = piece_start(plan, piece)
    shift = start if k + 1 >= top else f"{start} * {params.span(family, k + 1)}"
    text = re.sub(rf"\b{axis}\b", f"({axis} - {shift})", term.base.text)
    return Term(Base(text, term.base.axes, term.base.compound), term.modulo, term.divisor,
                term.stride)


def _mask(arg: TensorArg, plan: KernelPlan, idx: Index) -> str:
    """The mask matching the pointer block's shape: [ROWS, 1], [1, BLOCK] or the full block."""
    if not plan.two_d:
        return "mask"
    if arg.per_row or (plan.tiled and not idx.varies("cols")):  # [ROWS, 1]: once per row
        return "row_mask"
    return "mask" if idx.varies("rows") else "col_mask"  # a row vector: one row of the block


# A looped row of any width read with aligned vector loads (``aligned_rows``): in a body
# block, a row-major tensor's offset is the row's first aligned element plus the block's
# lanes, which Triton sees is a multiple of the vector (a `// VEC * VEC`), not `rows * n_cols
# + cols`, which it cannot tell is one when n_cols is odd.
_ROW_MAJOR = Index((Term(ROW_MAJOR),))
_BODY = Index((Term(Base("row_aligned + col0 + tl.arange(0, BLOCK_SIZE)[None, :]",
                         frozenset({"rows", "cols"}), compound=True)),))


def _body_index(idx: Index, body: bool) -> Index:
    return _BODY if body and idx == _ROW_MAJOR else idx


def aligned_vec(plan: KernelPlan) -> int | None:
    """Elements in 16 bytes of the narrowest row-major tensor of a looped plan, whose rows
    then loop over aligned body blocks and an edge block (``aligned_rows``); None where they
    keep the plain column loop: no row-major tensor, or statistics whose lanes count their
    values (layer_norm's and var/std's Welford) or run in column order (cumsum)."""
    r = plan.reduction
    if r is None or plan.steps or plan.tiled or not (
            r.rule.family in ("softmax", "collapse")
            or (r.rule.family == "normalize" and not r.rule.centered)):
        return None
    sizes = _itemsizes(plan, lambda idx: idx == _ROW_MAJOR)
    return 16 // min(sizes) if sizes and min(sizes) <= 8 else None


def _itemsizes(plan: KernelPlan, picks: Callable[[Index], bool]) -> list[int]:
    """Element sizes of the tensors read or written per element (not generated, not per
    row) whose index `picks` takes."""
    scratch = KernelParams()  # the offsets' scalars are registered by the real loads
    return [t.dtype.itemsize for t in (*plan.inputs, *plan.outputs)
            if t.role != Role.GEN and not t.per_row and picks(index_of(t, plan, scratch))]


def aligned_rows(vec: int) -> list[str]:
    """Where each row's aligned body starts and how many columns it has."""
    return [f"# rows start anywhere (n_cols need not be a multiple of {vec}): each row's body",
            f"# starts at its first {vec}-element-aligned element and holds whole vectors;",
            "# the few columns before and after it (the edges) take one more masked block",
            f"row_aligned = (rows * n_cols + {vec - 1}) // {vec} * {vec}",
            "row_head = tl.minimum(row_aligned - rows * n_cols, n_cols)",
            f"row_body = (n_cols - row_head) // {vec} * {vec}"]


def _generate(arg: TensorArg, plan: KernelPlan, params: KernelParams) -> str:
    """A generated value (`arange`): the registry's lowering of the element's own index,
    which is the value's offset as if it were a contiguous tensor (no load, no mask)."""
    gen = arg.generated
    assert gen is not None
    idx = index_of(arg, plan, params)
    dtype = TL_TYPES[arg.compute_dtype]
    index = "tl.full([1], 0, tl.int32)" if idx.is_zero else f"({idx})"
    if gen.offset:
        index = f"({index} + {gen.offset})"
    value = SPECS[gen.op].lower((f"{index}.to({dtype})",), dict(gen.params))
    if arg.dtype != arg.compute_dtype:  # a 16-bit float value: rounded once, as torch does
        value = f"{value}.to({TL_TYPES[arg.dtype]}).to({dtype})"
    return f"{arg.temp} = {value}"


def load(arg: TensorArg, plan: KernelPlan, params: KernelParams,
          last_read: bool | None = None, body: bool = False) -> str:
    """`arg`'s load; `last_read` (looped rows only) gives the L2 a hint: keep the lines of
    a row read again in a later pass and of column vectors every row reads, let the last
    pass's row blocks go first; `body`: in an aligned body block (``aligned_rows``). A
    generated value is computed instead."""
    if arg.role == Role.GEN:
        return _generate(arg, plan, params)
    idx = _body_index(index_of(arg, plan, params), body)
    if idx.is_zero:
        text = f"tl.load({arg.ptr})"
    else:
        mask = _mask(arg, plan, idx)
        # the hint by the row mask's kind, before a cat piece's bounds join it
        evict = "" if last_read is None or mask == "row_mask" else (
            ', eviction_policy="evict_first"' if last_read and mask == "mask"
            else ', eviction_policy="evict_last"')
        if arg.piece is not None:  # a cat's operand: only its own piece of the domain
            coord, piece = index_of(arg.piece.coordinate, plan, params), arg.piece
            start, stop = piece_start(plan, piece), piece_stop(plan, piece)
            bounds = ([f"({coord} >= {start})"] if start is not None else []) + (
                [f"({coord} < {stop})"] if stop is not None else [])
            mask = " & ".join([mask, *bounds]) + ", other=0"
        text = f"tl.load({idx.offset(arg.ptr)}, mask={mask}{evict})"
    if arg.compute_dtype != arg.dtype:
        text += f".to({TL_TYPES[arg.compute_dtype]})"
    return f"{arg.temp} = {text}"


# A looped row's last pass stores with `evict_first` from rows of this many bytes (the widest
# tensor a row reads or writes, at the analysed width). H100, 2026-12-06: softmax(x/8)
# 2048x50257 fp32 ran 7% faster with the hint, the 65536-wide norms 1-5%, log_softmax 512x32768
# bf16 (fp32 out) 2%; the 16384-wide 16-bit LayerNorm rows (32 KiB) -0.4% to +1.8% (two
# machines), and without it at 1.00x Inductor where they had been 1.01-1.02 (bf16).
STREAM_ROW_BYTES = 64 * 1024


def streams(plan: KernelPlan) -> bool:
    """Whether a looped row's last pass stores with `evict_first` (``STREAM_ROW_BYTES``): the
    tensors that change from row to row count, not a weight every row shares (a bf16
    LayerNorm's float32 weight keeps its 32 KiB rows unhinted). A split row decides on its
    whole row as the looped kernel does (its chunks' stores not measured apart)."""
    return plan.n_cols * row_itemsize(plan) >= STREAM_ROW_BYTES


def row_itemsize(plan: KernelPlan) -> int:
    """The widest element of the tensors that change from row to row (0: none)."""
    return max(_itemsizes(plan, lambda idx: idx.varies("rows")), default=0)


def store(arg: TensorArg, plan: KernelPlan, params: KernelParams, body: bool = False,
          evict_first: bool = False) -> str:
    """`arg`'s store; `evict_first` (a wide looped row's last pass, ``streams``) asks the L2 to
    let the written lines go first, keeping the lines of rows the pass still re-reads:
    softmax(x/8) 2048x50257 fp32 ran 7% faster so on an H100 (2026-12-06,
    ``benchmarks/store_hint_probe.py``), and a row kept in one block, which re-reads nothing,
    2% slower (not hinted)."""
    idx = _body_index(index_of(arg, plan, params), body)
    if idx.is_zero:  # one element, written by every lane with the same value
        idx = Index((zero_term(ROWS if plan.two_d else OFFS),))
    elif plan.two_d and not idx.shaped("rows"):
        idx = idx.plus(before=(zero_term(ROWS),))  # the pointer block takes [ROWS, ...]
    if plan.tiled and not idx.shaped("cols"):
        idx = idx.plus(after=(zero_term(COLS),))  # broadcast-shaped: under the tile's mask
    value = arg.temp if arg.compute_dtype == arg.dtype else (
        f"{arg.temp}.to({TL_TYPES[arg.dtype]})")
    mask = "row_mask" if arg.per_row else "mask"
    hint = ', eviction_policy="evict_first"' if evict_first else ""
    return f"tl.store({idx.offset(arg.ptr)}, {value}, mask={mask}{hint})"
