"""Emission of the ``@triton.jit`` kernel: a ``KernelPlan`` → kernel source lines.

Reads a plan (``lower.py``) and whether rows loop over column blocks; writes
the kernel function's text through a ``CodeWriter``, registering the scalar parameters its
index expressions read in a ``KernelParams``, and returns the kernel's ``KernelSignature``
(``signature.py``), from which the launcher (``launcher.py``) writes the call. Each
tensor's load and store (its offset, an ``Index`` of ``Term`` objects, and its mask) come
from ``loads.py``, the reduction itself from ``reduce.py``. Sections carry short comments
(boilerplate, loads, chain, reduction, store); every SSA value is one temporary,
named as in the plan.

Elementwise kernels run a flat grid: ``offs`` is the flat index into the
iteration shape, masked at the tail; a ``tiled`` one (see ``tiling.py``) runs a
2-D grid of ``[ROWS, BLOCK]`` tiles indexed by ``rows`` and ``cols`` as below (the
columns cover the domain's last ``plan.reduced`` dims), without the reduction.
Reduction kernels give each program ``ROWS_PER_PROGRAM`` rows (``rows``, a
``[ROWS, 1]`` column) and a power-of-two block of columns (``cols``,
``[1, BLOCK]``); tail lanes take the reduction's identity before every reduce. A
row wider than one block loops over column blocks: one pass that reads the row
once for all its statistics (per-lane online max and sum for softmax, Welford for
layer_norm, see ``reduce.py``), then a pass that re-reads it (from L2, where the
first pass asked the cache to keep it), recomputes the prologue and writes the results.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from . import cat_bounds
from .interpreted import range_bound
from .loads import aligned_rows, aligned_vec, load, store, streams
from .lower import KernelPlan, Stmt, TensorArg
from .reduce import BLOCK, emitter
from .signature import EVEN_COLS, Family, KernelParams, KernelSignature
from .writer import CodeWriter


def _stmt(s: Stmt) -> str:
    return f"{s.temp} = {s.expr}"


# -- kernel bodies ------------------------------------------------------------------------
def _closure(plan: KernelPlan, targets: Iterable[str]) -> set[str]:
    """Temporaries the targets depend on (through a reduction only if it keeps the row)."""
    deps = {s.temp: s.deps for s in plan.stmts}
    if plan.reduction is not None and not plan.reduction.collapse:
        deps[plan.reduction.temp] = plan.reduction.deps
    seen: set[str] = set()
    work = list(targets)
    while work:
        t = work.pop()
        if t not in seen:
            seen.add(t)
            work.extend(deps.get(t, ()))
    return seen


def kernel(plan: KernelPlan, looped: bool) -> tuple[list[str], KernelSignature]:
    """Kernel source lines and its signature (what the launcher passes for each parameter)."""
    params = KernelParams()
    for scalar in plan.scalars:  # the statements read them by name
        params.scalar(scalar.param, scalar.launch, scalar.floating, scalar.wide)
    cat_bounds.register(plan, params)
    body = CodeWriter()
    if not plan.two_d:
        _elementwise(plan, params, body)
    else:
        write = (_tiled if plan.tiled else _several if plan.steps else _looped if looped
                 else _single)
        write(plan, params, body)
    # The signature comes last: the body registered the scalar parameters it reads.
    signature = params.freeze(plan)
    out = CodeWriter()
    def_line(signature, out)
    with out.indented():
        out.lines(body.result())
    return out.result(), signature


def def_line(signature: KernelSignature, out: CodeWriter) -> None:
    """The decorator and `def` of a `@triton.jit` function, its parameters wrapped, then
    each Python float parameter (``plan.ScalarArg``) cast to fp32, or, where only ops on fp64
    tensors read it (`wide`), its double rebuilt from the two words of its bits the launcher
    passed (`_double_bits`).

    Triton's launch passes a Python float as fp32, the rounding eager gives it beside fp32
    and 16-bit tensors (beside fp64 ones eager keeps the double); torch.compile's launch of
    the same kernel (the package's operator) passes it as fp64, which promotes every value
    it touches to fp64: on an H100 a masked softmax ran 3x slower so, and off the eager
    result. The cast is free where it is fp32 already."""
    out.lines(["@triton.jit", f"def {signature.function}("])
    with out.indented():
        out.wrapped(signature.parameters)
    out.line("):")
    with out.indented():
        for p in signature.scalars:
            if p.half == "hi":  # the low word zero-extended (through uint32), the high shifted
                value = p.name.removesuffix("_hi")
                out.line(f"{value} = tl.cast((tl.cast({p.name}, tl.int64) << 32) | tl.cast(tl.cast("
                         f"{value}_lo, tl.uint32), tl.int64), tl.float64, bitcast=True)")
            elif p.family is Family.SCALAR and p.floating and not p.half:
                out.line(f"{p.name} = tl.cast({p.name}, tl.float32)  # fp64 under torch.compile")


def _start(plan: KernelPlan, size: str) -> str:
    """The program's first row or element; 64-bit when offsets need it."""
    return f"pid.to(tl.int64) * {size}" if plan.int64 else f"pid * {size}"


def _elementwise(plan: KernelPlan, params: KernelParams, out: CodeWriter) -> None:
    out.lines(["# boilerplate (elementwise)", "pid = tl.program_id(0)",
               f"offs = {_start(plan, 'BLOCK_SIZE')} + tl.arange(0, BLOCK_SIZE)",
               "# n_elements is a multiple of N_ALIGN; said so, Triton vectorizes the masked loads",
               "mask = offs < n_elements // N_ALIGN * N_ALIGN", ""])
    _pointwise_body(plan, params, out)


# Which tile a program takes: its lines, then its column block. The grid's first axis, which
# the hardware launches fastest, counts row blocks. "rows first" takes them in that order, so
# the programs in flight hold a few columns of many rows; "columns first" remaps each
# program's linear place in the same grid so that they hold many columns of a few rows. A
# kernel reading a permuted view (`column_strided`) takes columns first: on an H100
# (2026-12-07, benchmarks/tile_order_probe.py) the NHWC -> NCHW add 64x96x56x56 fp32 ran
# 79.3-80.8 µs on every tile that way against 82.6-89.3 rows first, and its 7x7 bf16 twin tied.
TILE_ORDERS = {
    "rows first": (("pid = tl.program_id(0)",), "tl.program_id(1)"),
    "columns first": (("place = tl.program_id(0) + tl.program_id(1) * tl.num_programs(0)",
                       "pid = place // tl.num_programs(1)",
                       "col_block = place % tl.num_programs(1)"), "col_block"),
}


def tile_order(plan: KernelPlan) -> str:
    """The order a tiled kernel's programs take their tiles (TILE_ORDERS)."""
    return "columns first" if plan.column_strided else "rows first"


def _tiled(plan: KernelPlan, params: KernelParams, out: CodeWriter,
           order: str | None = None) -> None:
    what = ["# boilerplate (elementwise, tiles of rows x columns of the last axis)"]
    if plan.reduced > 1:
        what = [f"# boilerplate (elementwise, tiles of rows x columns of the last {plan.reduced} "
                "axes)", "# (a permuted tensor is contiguous down the rows, the rest along "
                "the columns)"]
    order = order or tile_order(plan)
    place, col_block = TILE_ORDERS[order]
    out.lines([*what, f"# programs take their tiles {order} (emit.TILE_ORDERS)", *place,
               f"rows = {_start(plan, 'ROWS_PER_PROGRAM')} + tl.arange(0, ROWS_PER_PROGRAM)"
               "[:, None]",
               _cols(plan, f"{col_block} * BLOCK_SIZE + "),
               *_ROW_MASK, *_ALIGNED_COLS, *_COLS, ""])
    _pointwise_body(plan, params, out)


def _pointwise_body(plan: KernelPlan, params: KernelParams, out: CodeWriter) -> None:
    out.lines(["# loads", *(load(t, plan, params) for t in plan.sources), ""])
    if plan.stmts:
        out.lines(["# chain", *(_stmt(s) for s in plan.stmts), ""])
    out.lines(["# store", *(store(t, plan, params) for t in plan.outputs)])


def rows_boilerplate(plan: KernelPlan, what: str, out: CodeWriter,
                     pid: str = "tl.program_id(0)") -> None:
    """The program's rows and their mask; `what` names the kernel's shape, `pid` is the
    program's place along the rows."""
    out.lines([f"# boilerplate (reduction, {what})", f"pid = {pid}",
               f"rows = {_start(plan, 'ROWS_PER_PROGRAM')} + tl.arange(0, ROWS_PER_PROGRAM)"
               "[:, None]",
               *_ROW_MASK, *_ALIGNED_COLS])


# The grid has cdiv(n_rows, ROWS_PER_PROGRAM) programs along the rows: at one row a program
# no row passes the last, and the constant `| True` lets Triton drop the row from every mask
# (kept, it cost a one-block float32 softmax of 32768 columns 8 registers a thread, 32 more
# instructions and 5% of its time on an H100: benchmarks/softmax_block_probe.py).
_ROW_MASK = ["row_mask = (rows < n_rows) | (ROWS_PER_PROGRAM == 1)"]
# Triton knows an integer argument is a multiple of 16 only when it is one: a row of 1000
# columns would get scalar loads without being told it is a multiple of 8.
_ALIGNED_COLS = ["# n_cols is a multiple of COLS_ALIGN; said so, Triton vectorizes the loads",
                 "n_cols = n_cols // COLS_ALIGN * COLS_ALIGN"]
# EVEN_COLS (the launcher's: n_cols is a multiple of BLOCK_SIZE and of 16) folds the column
# mask the same way where the columns run over whole blocks up to n_cols: at 4096 columns of
# a 16-bit LayerNorm->GELU in one block, 10% of the kernel's instructions.
_COLS = [f"col_mask = (cols < n_cols) | {EVEN_COLS}", "mask = row_mask & col_mask"]


def _cols(plan: KernelPlan, start: str, block: str = BLOCK) -> str:
    """The column index block; 64-bit with the rows when offsets need it (a column times a
    transposed input's row stride can pass 2**31 while both fit 32 bits)."""
    cols = f"{start}tl.arange(0, {block})[None, :]"
    return f"cols = ({cols}).to(tl.int64)" if plan.int64 else f"cols = {cols}"


def _single(plan: KernelPlan, params: KernelParams, out: CodeWriter) -> None:
    r = plan.reduction
    assert r is not None
    rows_boilerplate(plan, "one block per row", out)
    out.lines([_cols(plan, ""), *_COLS, "", "# loads"])
    out.lines(load(t, plan, params) for t in plan.sources)
    pre = [_stmt(s) for s in plan.stmts if s.phase == "pre"]
    post = [_stmt(s) for s in plan.stmts if s.phase == "post"]
    if pre:
        out.lines(["", "# chain (before the reduction)", *pre])
    out.lines(["", *emitter(r).single(r)])
    if post:
        out.lines(["", "# chain (after the reduction)", *post])
    out.lines(["", "# store", *(store(t, plan, params) for t in plan.outputs)])


@dataclass(frozen=True)
class Chunk:
    """Where a column loop runs: the whole row (`bound` n_cols from column 0), or a split
    row's chunk (`chunk_cols` columns from `start`, up to `end`, ``split_rows.py``), in
    steps of `block` columns."""

    bound: str = "n_cols"
    start: str = ""  # added to each block's first column
    end: str = "n_cols"  # the columns' mask: below this
    block: str = BLOCK


WHOLE_ROW = Chunk()


def row_prologue(plan: KernelPlan, params: KernelParams, out: CodeWriter) -> None:
    """Loads of per-row inputs and scalars, and the per-row values computed from them."""
    row_loads = [t for t in plan.sources if _row_load(t)]
    row_pre = [s for s in plan.stmts if s.per_row and s.phase == "pre"]
    if row_loads or row_pre:
        out.lines(["", "# per-row loads and values",
                   *(load(t, plan, params) for t in row_loads), *map(_stmt, row_pre)])


def _row_load(t: TensorArg) -> bool:
    return t.per_row or t.access.is_scalar


def column_loop(plan: KernelPlan, params: KernelParams, out: CodeWriter, targets: Iterable[str],
                extra: Iterable[str], reread: set[str], where: Chunk = WHOLE_ROW,
                vec: int | None = None, body_extra: Iterable[str] | None = None) -> None:
    """A column loop: the loads and pre-reduction statements `targets` need, then `extra`;
    `reread`: the loaded temporaries a later pass reads again. With `vec` (a whole row,
    ``aligned_vec``) the loop runs over the row's aligned body, then over its edges:
    `body_extra` (else `extra`) in the body, `extra` in the edges."""
    need = _closure(plan, targets)
    extra = list(extra)
    blocks = [(None, extra)] if vec is None else [
        (True, extra if body_extra is None else list(body_extra)), (False, extra)]
    for body, lines in blocks:
        if body is None:
            out.line(f"for col0 in range(0, {range_bound(where.bound)}, {where.block}):")
            bound = f"cols < {where.end}"  # a split row's chunk ends anywhere
            head = [_cols(plan, f"{where.start}col0 + ", where.block), "col_mask = " + (
                f"({bound}) | {EVEN_COLS}" if where == WHOLE_ROW else bound)]
        elif body:
            out.lines(["# the row's aligned body",
                       f"for col0 in range(0, {range_bound('n_cols')}, BLOCK_SIZE):"])
            # whole blocks (EVEN_COLS): every row starts aligned and its body is the row
            head = [_cols(plan, "row_head + col0 + "),
                    f"col_mask = (col0 + tl.arange(0, BLOCK_SIZE)[None, :] < row_body) | "
                    f"{EVEN_COLS}"]
        else:  # at most 2 x (vec - 1) columns: before the body and after it; none (no
            # block at all) when n_cols is a multiple of the vector: every row starts aligned
            out.lines(["# the row's edges",
                       f"for col0 in range(0, (COLS_ALIGN % {vec} > 0) * {2 * vec}, BLOCK_SIZE):"])
            head = ["edge = col0 + tl.arange(0, BLOCK_SIZE)[None, :]",
                    _cols(plan, "tl.where(edge < row_head, 0, row_body) + col0 + "),
                    "col_mask = edge < n_cols - row_body"]
        with out.indented():
            out.lines([*head, _COLS[1]])
            out.lines(load(t, plan, params, t.temp not in reread, bool(body))
                      for t in plan.sources if not _row_load(t) and t.temp in need)
            out.lines(_stmt(s) for s in plan.stmts
                      if s.temp in need and not s.per_row and s.phase == "pre")
            out.lines(lines)


def rewritten(plan: KernelPlan) -> set[str]:
    """Temporaries the last pass computes (what per-element outputs depend on)."""
    col_out = [t for t in plan.outputs if not t.per_row]
    return _closure(plan, [t.temp for t in col_out]) if col_out else set()


def last_pass(plan: KernelPlan, params: KernelParams, out: CodeWriter,
              where: Chunk = WHOLE_ROW, vec: int | None = None) -> None:
    """Per-row values after the reduction, then the loop that recomputes the chain,
    finishes the reduction and stores the per-element outputs."""
    r = plan.reduction
    assert r is not None
    row_post = [s for s in plan.stmts if s.per_row and s.phase == "post"]
    if row_post:
        out.lines(["", "# chain (per row, after the reduction)", *map(_stmt, row_post)])
    col_out = [t for t in plan.outputs if not t.per_row]
    if col_out:
        later = rewritten(plan)
        finish = emitter(r).final(r) if r.temp in later and not r.collapse else []
        post = [_stmt(s) for s in plan.stmts
                if s.temp in later and s.phase == "post" and not s.per_row]
        out.lines(["", "# last pass: recompute the chain, finish the reduction, store",
                   *(emitter(r).carry(r) if finish else [])])
        # wide rows' stores give way in the L2 to the row blocks this pass still re-reads
        hint = streams(plan)
        column_loop(plan, params, out, [t.temp for t in col_out],
                    finish + post + [store(t, plan, params, evict_first=hint) for t in col_out],
                    set(), where, vec,
                    finish + post + [store(t, plan, params, True, hint) for t in col_out])


def _looped(plan: KernelPlan, params: KernelParams, out: CodeWriter) -> None:
    r = plan.reduction
    assert r is not None
    rows_boilerplate(plan, "rows loop over column blocks", out)
    vec = aligned_vec(plan)
    if vec is not None:
        out.lines(aligned_rows(vec))
    row_prologue(plan, params, out)
    stats = emitter(r).statistics(r)
    if stats is not None:
        out.lines(["", "# pass 1: the row statistics, per lane of the column block",
                   *stats.before])
        column_loop(plan, params, out, [r.source], stats.inside, rewritten(plan), vec=vec)
        out.lines(stats.after)
    last_pass(plan, params, out, vec=vec)
    row_out = [t for t in plan.outputs if t.per_row]
    if row_out:
        out.lines(["", "# store", *(store(t, plan, params) for t in row_out)])


def _several(plan: KernelPlan, params: KernelParams, out: CodeWriter) -> None:
    """Several reductions over the same rows, the whole row in one block: statements and
    reductions in node order (a reduction may read an earlier one's result)."""
    rows_boilerplate(plan, "one block per row", out)
    out.lines([_cols(plan, ""), *_COLS, "", "# loads"])
    out.lines(load(t, plan, params) for t in plan.sources)
    chain: list[str] = []
    for step in plan.steps:
        if isinstance(step, Stmt):
            chain.append(_stmt(step))
            continue
        if chain:
            out.lines(["", "# chain", *chain])
            chain = []
        out.lines(["", *emitter(step).single(step)])
    if chain:
        out.lines(["", "# chain", *chain])
    out.lines(["", "# store", *(store(t, plan, params) for t in plan.outputs)])
