"""Emission of the ``@triton.jit`` kernel: a ``KernelPlan`` → kernel source lines.

Reads a plan (``lower.py``) and whether rows loop over column blocks; writes
the kernel function's text and the list of its scalar parameters, which the
launcher (``launcher.py``) passes in the same order. Sections carry short
comments (boilerplate, loads, chain, reduction, store); every SSA value is one
temporary, named as in the plan.

Elementwise kernels run a flat grid: ``offs`` is the flat index into the
iteration shape, masked at the tail; a ``tiled`` one (see ``lower.py``) runs a
2-D grid of ``[ROWS, BLOCK]`` tiles indexed by ``rows`` and ``cols`` as below,
without the reduction. Reduction kernels give each program
``ROWS_PER_PROGRAM`` rows (``rows``, a ``[ROWS, 1]`` column) and a
power-of-two block of columns (``cols``, ``[1, BLOCK]``); tail lanes take the
reduction's identity before every reduce. A row wider than one block loops
over column blocks: one pass for the statistics (online max/sum for softmax;
mean then variance for layer_norm), then a pass that recomputes the prologue
and writes the results.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ..ir.registry import TL_TYPES
from .lower import KernelPlan, ReductionStep, Stmt, TensorArg, wrap_args

NEG_INF, POS_INF = "-float('inf')", "float('inf')"
_IDENTITY = {"softmax": NEG_INF, "log_softmax": NEG_INF, "amax": NEG_INF, "amin": POS_INF}
_ROW = "[:, None]"  # a row reduction keeps its axis: [ROWS, 1]


def _terms(arg: TensorArg, plan: KernelPlan, params: dict[str, str]) -> str:
    """Index of `arg` for the current block; adds the scalars it needs to `params`."""
    rank, reduction = plan.rank, plan.two_d
    out = []
    strides = 0
    for g in arg.access.groups:
        if reduction and g.last < rank:  # dims of the row index only
            base, lo, hi, span = "rows", g.first, g.last, "rspan"
            top = rank - 1
        else:
            base, lo, hi, span, top = "offs", g.first, g.last, "span", rank
            if reduction:  # the group ends at the last dim: rows within it, then `cols`
                if lo == rank - 1:
                    base = "cols"
                elif lo == 0:
                    base = "rows * n_cols + cols"
                else:  # a per-row remainder, not a per-element one
                    base = f"(rows % rspan{lo}) * n_cols + cols"
                    params[f"rspan{lo}"] = f"rspan[{lo}]"
                lo = 0
        term = base
        if lo > 0:
            term = (f"({term})" if "+" in term else term) + f" % {span}{lo}"
            params[f"{span}{lo}"] = f"{span}[{lo}]"
        if hi < top:
            term += f" // {span}{hi}"
            params[f"{span}{hi}"] = f"{span}[{hi}]"
        if not g.unit:
            name = f"{arg.ptr.replace('_ptr', '')}_stride{strides}"
            params[name] = f"{arg.ptr.replace('_ptr', '')}_strides[{strides}]"
            strides += 1
            term = f"({term}) * {name}" if " " in term else f"{term} * {name}"
        out.append(term)
    if not out:
        return "0"
    return " + ".join(out)


def _mask(arg: TensorArg, plan: KernelPlan, idx: str) -> str:
    """The mask matching the pointer block's shape: [ROWS, 1], [1, BLOCK] or the full block."""
    if not plan.two_d:
        return "mask"
    if arg.per_row or (plan.tiled and "cols" not in idx):  # [ROWS, 1]: once per row
        return "row_mask"
    return "mask" if "rows" in idx else "col_mask"  # a row vector: one row of the block


def _load(arg: TensorArg, plan: KernelPlan, params: dict[str, str]) -> str:
    idx = _terms(arg, plan, params)
    mask = _mask(arg, plan, idx)
    if idx == "0":
        text = f"tl.load({arg.ptr})"
    else:
        text = f"tl.load({arg.ptr} + {_paren(idx)}, mask={mask})"
    if arg.compute_dtype != arg.dtype:
        text += f".to({TL_TYPES[arg.compute_dtype]})"
    return f"{arg.temp} = {text}"


def _store(arg: TensorArg, plan: KernelPlan, params: dict[str, str]) -> str:
    idx = _terms(arg, plan, params)
    if idx == "0":  # one element, written by every lane with the same value
        idx = "rows * 0" if plan.two_d else "offs * 0"
    elif plan.two_d and "rows" not in idx:
        idx = f"rows * 0 + {idx}"  # the pointer block takes the value's [ROWS, ...] shape
    if plan.tiled and not arg.access.spans_cols(plan.rank):
        idx += " + cols * 0"  # a broadcast-shaped result: stored under the tile's full mask
    value = arg.temp if arg.compute_dtype == arg.dtype else (
        f"{arg.temp}.to({TL_TYPES[arg.dtype]})")
    mask = "row_mask" if arg.per_row else "mask"
    return f"tl.store({arg.ptr} + {_paren(idx)}, {value}, mask={mask})"


def _paren(idx: str) -> str:
    return idx if idx.isidentifier() else f"({idx})"


def _stmt(s: Stmt) -> str:
    return f"{s.temp} = {s.expr}"


# -- reductions: single block -------------------------------------------------------------
def _source(r: ReductionStep) -> str:
    return r.source if r.dtype == torch.float32 else f"{r.source}.to({TL_TYPES[r.dtype]})"




def _zero(r: ReductionStep) -> str:
    return "0.0" if r.dtype.is_floating_point else "0"


def _identity(r: ReductionStep) -> str:
    """What tail lanes hold before the reduce: the rule's identity in the result dtype."""
    if r.rule in ("amax", "amin") and not r.dtype.is_floating_point:
        info = torch.iinfo(r.dtype)
        # Written `(min + 1 - 1)`: the literal `-min` would not fit the signed type.
        return f"({info.min + 1} - 1)" if r.rule == "amax" else str(info.max)
    return _IDENTITY.get(r.rule, _zero(r))


def _affine(r: ReductionStep, y: str) -> str:
    return y + (f" * {r.weight}" if r.weight else "") + (f" + {r.bias}" if r.bias else "")


def reduce_single(r: ReductionStep) -> list[str]:
    v, x, rule = r.temp, _source(r), r.rule
    head = f"# {rule} over the last axis (tail lanes hold {_identity(r)})"
    if rule in ("softmax", "log_softmax"):
        lines = [f"{v}_in = tl.where(mask, {x}, {NEG_INF})",
                 f"{v}_max = tl.max({v}_in, axis=1){_ROW}"]
        if rule == "softmax":
            return [head, *lines, f"{v}_exp = tl.exp({v}_in - {v}_max)",
                    f"{v} = {v}_exp / tl.sum({v}_exp, axis=1){_ROW}"]
        return [head, *lines, f"{v}_sum = tl.sum(tl.exp({v}_in - {v}_max), axis=1){_ROW}",
                f"{v} = {x} - {v}_max - tl.log({v}_sum)"]
    if rule == "layer_norm":
        return [head,
                f"{v}_mean = tl.sum(tl.where(mask, {x}, 0.0), axis=1){_ROW} / n_cols",
                f"{v}_xc = tl.where(mask, {x} - {v}_mean, 0.0)",
                f"{v}_rstd = tl.math.rsqrt(tl.sum({v}_xc * {v}_xc, axis=1){_ROW} / n_cols"
                f" + {r.eps!r})",
                f"{v} = {_affine(r, f'{v}_xc * {v}_rstd')}"]
    if rule == "rms_norm":
        return [head, f"{v}_in = tl.where(mask, {x}, 0.0)",
                f"{v}_rstd = tl.math.rsqrt(tl.sum({v}_in * {v}_in, axis=1){_ROW} / n_cols"
                f" + {r.eps!r})",
                f"{v} = {_affine(r, f'{x} * {v}_rstd')}"]
    if rule == "cumsum":
        return [head, f"{v} = tl.cumsum(tl.where(mask, {x}, {_zero(r)}), axis=1)"]
    fn = {"sum": "tl.sum", "mean": "tl.sum", "amax": "tl.max", "amin": "tl.min"}[rule]
    tail = " / n_cols" if rule == "mean" else ""
    return [head, f"{v} = {fn}(tl.where(mask, {x}, {_identity(r)}), "
                  f"axis=1){_ROW}{tail}"]


# -- reductions: rows looping over column blocks ---------------------------------------------
def _full(r: ReductionStep, value: str) -> str:
    return f"tl.full([ROWS_PER_PROGRAM, 1], {value}, {TL_TYPES[r.dtype]})"


def reduce_passes(r: ReductionStep) -> list[tuple[list[str], list[str], list[str]]]:
    """(before, in-loop, after) lines of each statistics pass over the row."""
    v, x, rule = r.temp, _source(r), r.rule
    if rule in ("softmax", "log_softmax"):
        return [([f"{v}_max = {_full(r, NEG_INF)}", f"{v}_sum = {_full(r, '0.0')}"],
                 [f"{v}_in = tl.where(mask, {x}, {NEG_INF})",
                  f"{v}_new = tl.maximum({v}_max, tl.max({v}_in, axis=1){_ROW})",
                  "# rows still all -inf shift by 0, so no inf - inf",
                  f"{v}_ref = tl.where({v}_new == {NEG_INF}, 0.0, {v}_new)",
                  f"{v}_sum = {v}_sum * tl.exp({v}_max - {v}_ref)"
                  f" + tl.sum(tl.exp({v}_in - {v}_ref), axis=1){_ROW}",
                  f"{v}_max = {v}_new"], [])]
    if rule == "layer_norm":
        return [([f"{v}_acc = {_full(r, '0.0')}"],
                 [f"{v}_acc = {v}_acc + tl.sum(tl.where(mask, {x}, 0.0), axis=1){_ROW}"],
                 [f"{v}_mean = {v}_acc / n_cols"]),
                ([f"{v}_var = {_full(r, '0.0')}"],
                 [f"{v}_xc = tl.where(mask, {x} - {v}_mean, 0.0)",
                  f"{v}_var = {v}_var + tl.sum({v}_xc * {v}_xc, axis=1){_ROW}"],
                 [f"{v}_rstd = tl.math.rsqrt({v}_var / n_cols + {r.eps!r})"])]
    if rule == "rms_norm":
        return [([f"{v}_acc = {_full(r, '0.0')}"],
                 [f"{v}_in = tl.where(mask, {x}, 0.0)",
                  f"{v}_acc = {v}_acc + tl.sum({v}_in * {v}_in, axis=1){_ROW}"],
                 [f"{v}_rstd = tl.math.rsqrt({v}_acc / n_cols + {r.eps!r})"])]
    if rule == "cumsum":  # no statistics: the last pass carries the running sum
        return []
    ident = _identity(r)
    acc = f"{v}_acc" if rule == "mean" else v
    fn = {"sum": "tl.sum", "mean": "tl.sum", "amax": "tl.max", "amin": "tl.min"}[rule]
    part = f"{fn}(tl.where(mask, {x}, {ident}), axis=1){_ROW}"
    step = {"amax": f"tl.maximum({acc}, {part})", "amin": f"tl.minimum({acc}, {part})"}.get(
        rule, f"{acc} + {part}")
    return [([f"{acc} = {_full(r, ident)}"], [f"{acc} = {step}"],
             [f"{v} = {acc} / n_cols"] if rule == "mean" else [])]


def reduce_carry(r: ReductionStep) -> list[str]:
    """State the last pass carries from one column block to the next (a scan's sum)."""
    return [f"{r.temp}_carry = {_full(r, _zero(r))}"] if r.rule == "cumsum" else []


def reduce_final(r: ReductionStep) -> list[str]:
    """The row-preserving result for the current column block, after the passes."""
    v, x = r.temp, _source(r)
    if r.rule == "cumsum":
        return [f"{v}_part = tl.where(mask, {x}, {_zero(r)})",
                f"{v} = {v}_carry + tl.cumsum({v}_part, axis=1)",
                f"{v}_carry = {v}_carry + tl.sum({v}_part, axis=1){_ROW}"]
    return {
        "softmax": [f"{v} = tl.exp({x} - {v}_max) / {v}_sum"],
        "log_softmax": [f"{v} = {x} - {v}_max - tl.log({v}_sum)"],
        "layer_norm": [f"{v} = {_affine(r, f'({x} - {v}_mean) * {v}_rstd')}"],
        "rms_norm": [f"{v} = {_affine(r, f'{x} * {v}_rstd')}"],
    }.get(r.rule, [])


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


def kernel(plan: KernelPlan, looped: bool) -> tuple[list[str], dict[str, str]]:
    """Kernel source lines and its scalar parameters {name: launcher expression}."""
    params: dict[str, str] = {}
    if not plan.two_d:
        body = _elementwise(plan, params)
        sizes = ["n_elements"]
        consts = ["BLOCK_SIZE: tl.constexpr"]
    else:
        body = (_tiled if plan.tiled else _looped if looped else _single)(plan, params)
        sizes = ["n_rows", "n_cols"]
        consts = ["BLOCK_SIZE: tl.constexpr", "ROWS_PER_PROGRAM: tl.constexpr"]
    ptrs = [t.ptr for t in plan.inputs] + [t.ptr for t in plan.outputs]
    args = ptrs + sizes + list(params) + consts
    head = ["@triton.jit", f"def {plan.name}_kernel(", *wrap_args(args, "    "), "):"]
    return head + ["    " + line if line else "" for line in body], params


def _elementwise(plan: KernelPlan, params: dict[str, str]) -> list[str]:
    start = "pid.to(tl.int64) * BLOCK_SIZE" if plan.int64 else "pid * BLOCK_SIZE"
    lines = ["# boilerplate (elementwise)", "pid = tl.program_id(0)",
             f"offs = {start} + tl.arange(0, BLOCK_SIZE)", "mask = offs < n_elements", ""]
    return lines + _pointwise_body(plan, params)


def _tiled(plan: KernelPlan, params: dict[str, str]) -> list[str]:
    start = "pid.to(tl.int64) * ROWS_PER_PROGRAM" if plan.int64 else "pid * ROWS_PER_PROGRAM"
    lines = ["# boilerplate (elementwise, tiles of rows x columns of the last axis)",
             "pid = tl.program_id(0)",
             f"rows = {start} + tl.arange(0, ROWS_PER_PROGRAM)[:, None]",
             _cols(plan, "tl.program_id(1) * BLOCK_SIZE + "),
             "row_mask = rows < n_rows", *_COLS, ""]
    return lines + _pointwise_body(plan, params)


def _pointwise_body(plan: KernelPlan, params: dict[str, str]) -> list[str]:
    lines = ["# loads", *(_load(t, plan, params) for t in plan.inputs), ""]
    if plan.stmts:
        lines += ["# chain", *(_stmt(s) for s in plan.stmts), ""]
    return lines + ["# store", *(_store(t, plan, params) for t in plan.outputs)]


def _rows_boilerplate(plan: KernelPlan, looped: bool) -> list[str]:
    start = "pid.to(tl.int64) * ROWS_PER_PROGRAM" if plan.int64 else "pid * ROWS_PER_PROGRAM"
    what = "rows loop over column blocks" if looped else "one block per row"
    return [f"# boilerplate (reduction, {what})", "pid = tl.program_id(0)",
            f"rows = {start} + tl.arange(0, ROWS_PER_PROGRAM)[:, None]",
            "row_mask = rows < n_rows"]


_COLS = ["col_mask = cols < n_cols", "mask = row_mask & col_mask"]


def _cols(plan: KernelPlan, start: str) -> str:
    """The column index block; 64-bit with the rows when offsets need it (a column times a
    transposed input's row stride can pass 2**31 while both fit 32 bits)."""
    cols = f"{start}tl.arange(0, BLOCK_SIZE)[None, :]"
    return f"cols = ({cols}).to(tl.int64)" if plan.int64 else f"cols = {cols}"


def _single(plan: KernelPlan, params: dict[str, str]) -> list[str]:
    r = plan.reduction
    assert r is not None
    lines = _rows_boilerplate(plan, False) + [_cols(plan, ""),
                                              *_COLS, "", "# loads"]
    lines += [_load(t, plan, params) for t in plan.inputs]
    pre = [_stmt(s) for s in plan.stmts if s.phase == "pre"]
    post = [_stmt(s) for s in plan.stmts if s.phase == "post"]
    if pre:
        lines += ["", "# chain (before the reduction)", *pre]
    lines += ["", *reduce_single(r)]
    if post:
        lines += ["", "# chain (after the reduction)", *post]
    return lines + ["", "# store", *(_store(t, plan, params) for t in plan.outputs)]


def _looped(plan: KernelPlan, params: dict[str, str]) -> list[str]:
    r = plan.reduction
    assert r is not None
    row_loads = [t for t in plan.inputs if t.per_row or t.access.is_scalar]
    col_loads = [t for t in plan.inputs if t not in row_loads]
    row_pre = [s for s in plan.stmts if s.per_row and s.phase == "pre"]
    lines = _rows_boilerplate(plan, True)
    if row_loads or row_pre:
        lines += ["", "# per-row loads and values",
                  *(_load(t, plan, params) for t in row_loads), *map(_stmt, row_pre)]

    def block(targets: Iterable[str], extra: list[str]) -> list[str]:
        """A column loop: the loads and pre-reduction statements `targets` need, then `extra`."""
        need = _closure(plan, targets)
        body = [_cols(plan, "col0 + "), *_COLS]
        body += [_load(t, plan, params) for t in col_loads if t.temp in need]
        body += [_stmt(s) for s in plan.stmts
                 if s.temp in need and not s.per_row and s.phase == "pre"]
        return ["for col0 in range(0, n_cols, BLOCK_SIZE):",
                *("    " + line for line in body + extra)]

    for i, (before, inside, after) in enumerate(reduce_passes(r)):
        lines += ["", f"# pass {i + 1}: row statistics", *before,
                  *block([r.source], inside), *after]
    row_post = [s for s in plan.stmts if s.per_row and s.phase == "post"]
    if row_post:
        lines += ["", "# chain (per row, after the reduction)", *map(_stmt, row_post)]
    col_out = [t for t in plan.outputs if not t.per_row]
    if col_out:
        need = _closure(plan, [t.temp for t in col_out])
        finish = reduce_final(r) if r.temp in need and not r.collapse else []
        post = [_stmt(s) for s in plan.stmts
                if s.temp in need and s.phase == "post" and not s.per_row]
        stores = [_store(t, plan, params) for t in col_out]
        lines += ["", "# last pass: recompute the chain, finish the reduction, store",
                  *(reduce_carry(r) if finish else []),
                  *block([t.temp for t in col_out], finish + post + stores)]
    row_out = [t for t in plan.outputs if t.per_row]
    if row_out:
        lines += ["", "# store", *(_store(t, plan, params) for t in row_out)]
    return lines
