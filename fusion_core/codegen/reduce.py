"""Reduction emitters: the Triton lines that compute a ``ReductionStep`` over the columns.

Reads a plan's reduction step, whose ``rule`` (``ir/reductions.py``) supplies the
combine, identity, finalize expression and accumulation dtype; writes source lines
(without indentation) for the two kernel shapes ``emit.py`` builds:

* the whole row in one block: ``single``;
* rows looping over column blocks: ``statistics`` (one loop over the row that leaves
  the row's statistics: ``Stats``), ``carry`` (state the last pass carries between
  column blocks: a scan's running sum) and ``final`` (the row-preserving result for the
  current block, in the last pass).

Few wide rows may also be split over several programs (``split_rows.py``): each writes its
chunk's statistics (``Partials``: the same statistics pass over the chunk) to a workspace, and
a second kernel merges a row's partials before its last pass. softmax, log_softmax (the
chunk's max and rescaled sum), layer_norm (the chunk's Welford mean and M2, merged by Chan's
formula), rms_norm (the chunk's sum of squares) and sum/mean/amax/amin (the chunk's
accumulator) have partials; var/std and cumsum do not split.

A looped row reads its columns once for the statistics. Every lane of the column
block keeps its own running statistics (``[ROWS, BLOCK]`` accumulators: a partial sum,
max or sum of squares; an online max and rescaled sum for softmax; Welford's count,
mean and M2 for layer_norm, var and std); the lanes are combined once, after the loop, with block
reductions, so the loop body has no cross-lane work. Tail lanes hold the identity of
the combine (or keep their state) wherever the mask is off.

One emitter per rule family (``EMITTERS``); the rule's fields fill it in, so adding a
collapsing reduction is a registry row, not code here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..ir.reductions import NEG_INF
from ..ir.registry import TL_TYPES
from .lower import KernelPlan, ReductionStep
from .signature import BLOCK_SIZE

_ROW = "[:, None]"  # a row reduction keeps its axis: [ROWS, 1]
# The column block a looped pass steps by: the kernel's own, or a narrower one of a split
# row's fallback (``split_rows._wait``: the registers of a block it rarely runs).
BLOCK = BLOCK_SIZE.name


@dataclass(frozen=True)
class Stats:
    """A looped row's statistics pass: lines before its column loop, in the loop (after the
    loads and the prologue), and after it (the lanes combined into per-row values)."""

    before: tuple[str, ...]
    inside: tuple[str, ...]
    after: tuple[str, ...]


@dataclass(frozen=True)
class Partials:
    """A split row's statistics: `stats` over one chunk of the row (its `after` lines leave
    the per-row values `names`), written to the workspace; `merge` combines a row's partials,
    loaded as `<name>_parts` blocks of [ROWS, SPLITS_BLOCK] (a missing chunk reads as
    `empty`; `parts` is each chunk's index, `part_mask` says which exist, `chunk` is their
    width) into what the row's last pass reads: the per-row values `merged`."""

    stats: Stats
    names: tuple[str, ...]
    empty: tuple[str, ...]
    merge: tuple[str, ...]
    merged: tuple[str, ...]


def splittable(plan: KernelPlan) -> bool:
    """A looped plan whose rows may be split over several programs: its one reduction has
    partials and every output is per element (a per-row result would be written by every
    chunk's program)."""
    r = plan.reduction
    return (plan.skeleton == "reduction" and not plan.steps and r is not None
            and emitter(r).partials(r) is not None and not any(t.per_row for t in plan.outputs))


def _source(r: ReductionStep) -> str:
    return r.source if r.dtype == torch.float32 else f"{r.source}.to({TL_TYPES[r.dtype]})"


def _zero(r: ReductionStep) -> str:
    return "0.0" if r.dtype.is_floating_point else "0"


def _full(r: ReductionStep, value: str) -> str:
    return f"tl.full([ROWS_PER_PROGRAM, 1], {value}, {TL_TYPES[r.dtype]})"


def _lanes(r: ReductionStep, value: str, block: str) -> str:
    """A per-lane accumulator: one running value per row and column of the block."""
    return f"tl.full([ROWS_PER_PROGRAM, {block}], {value}, {TL_TYPES[r.dtype]})"


def _affine(r: ReductionStep, y: str) -> str:
    return y + (f" * {r.weight}" if r.weight else "") + (f" + {r.bias}" if r.bias else "")


def _block(r: ReductionStep, value: str) -> str:
    """The rule's block reduction of `value` over the columns, keeping the row axis.

    Triton's tl.sum/tl.max/tl.min reduce integers narrower than 32 bits (bool too) in
    (u)int32; torch's result keeps the dtype (amax of int8 is int8), and the arithmetic that
    reads it must wrap as torch's does, so the result is cast back (exact: a max or min is
    one of the values, a sum wraps to the same bits). A float max or min calls the file's
    NaN-keeping helper (``nan_reduce.py``): tl.max and tl.min skip NaN, torch does not."""
    out = f"{r.rule.combine.block_of(r.dtype)}({value}, axis=1){_ROW}"
    return f"{out}.to({TL_TYPES[r.dtype]})" if widened(r.dtype) else out


def widened(dtype: torch.dtype) -> bool:
    """Whether Triton's block reductions return `dtype` wider (ints under 32 bits, bool)."""
    return not dtype.is_floating_point and not dtype.is_complex and dtype.itemsize < 4


def _head(r: ReductionStep) -> str:
    over = "the last axis" if r.axes == 1 else f"the last {r.axes} axes"
    return f"# {r.rule.name} over {over} (tail lanes hold {r.rule.identity(r.dtype)})"


@dataclass(frozen=True)
class _Collapse:
    """sum, mean, amax, amin: one accumulator per row, merged by the rule's combine."""

    def single(self, r: ReductionStep) -> list[str]:
        acc = _block(r, f"tl.where(mask, {_source(r)}, {r.rule.identity(r.dtype)})")
        return [_head(r), f"{r.temp} = {r.rule.finalize.format(acc=acc, v=r.temp)}"]

    def statistics(self, r: ReductionStep, block: str = BLOCK) -> Stats | None:
        v, rule, identity = r.temp, r.rule, r.rule.identity(r.dtype)
        final = rule.finalize.format(acc=f"{v}_acc", v=v)
        acc = v if final == f"{v}_acc" else f"{v}_acc"  # no finalize: the result itself
        part = f"tl.where(mask, {_source(r)}, {identity})"
        return Stats((f"{v}_lanes = {_lanes(r, identity, block)}",),
                     (f"{v}_lanes = {rule.combine.merge(f'{v}_lanes', part)}",),
                     ("# the lanes combined", f"{acc} = {_block(r, f'{v}_lanes')}",
                      *(() if acc == v else (f"{v} = {final}",))))

    def partials(self, r: ReductionStep, block: str = BLOCK) -> Partials | None:
        """The chunk's accumulator (no finalize: a mean divides the merged sum by the whole
        row's n_cols); split only where the per-row result feeds per-element outputs."""
        v, identity = r.temp, r.rule.identity(r.dtype)
        plain = self.statistics(r, block)
        assert plain is not None
        final = r.rule.finalize.format(acc=f"{v}_acc", v=v)
        acc = v if final == f"{v}_acc" else f"{v}_acc"
        return Partials(
            Stats(plain.before, plain.inside,
                  ("# the lanes combined", f"{v}_part = {_block(r, f'{v}_lanes')}")),
            (f"{v}_part",), (identity,),
            ("# the chunks combined", f"{acc} = {_block(r, f'{v}_part_parts')}",
             *(() if acc == v else (f"{v} = {final}",))), (v,))

    def carry(self, r: ReductionStep) -> list[str]:
        return []

    def final(self, r: ReductionStep) -> list[str]:
        return []  # the result is per row, computed after the passes


@dataclass(frozen=True)
class _Softmax:
    """softmax, log_softmax: the row max, then the sum of exp(x - max)."""

    def single(self, r: ReductionStep) -> list[str]:
        v, x = r.temp, _source(r)
        return [_head(r), f"{v}_in = tl.where(mask, {x}, {NEG_INF})",
                f"{v}_max = {_block(r, f'{v}_in')}",
                f"{v}_exp = tl.exp({v}_in - {v}_max)",
                f"{v}_sum = tl.sum({v}_exp, axis=1){_ROW}",
                f"{v} = {r.rule.finalize.format(x=x, v=v, exp=f'{v}_exp')}"]

    def statistics(self, r: ReductionStep, block: str = BLOCK) -> Stats | None:
        """Per lane, an online max and the sum of exp(x - max) rescaled as the max grows;
        then the row max over the lanes and each lane's sum rescaled to it."""
        v, x = r.temp, _source(r)
        # A lane's max starts at the lowest finite value, not -inf: exp(smaller - larger)
        # then never meets -inf - -inf (a lane that sees only -inf keeps a zero sum).
        lowest = repr(torch.finfo(r.dtype).min)
        return Stats(
            (f"{v}_lmax = {_lanes(r, lowest, block)}  # lowest finite value",
             f"{v}_lsum = {_lanes(r, '0.0', block)}"),
            (f"{v}_in = tl.where(mask, {x}, {NEG_INF})",
             f"{v}_new = {r.rule.combine.merge(f'{v}_lmax', f'{v}_in')}",
             "# one exp per element: exp(smaller - larger) scales the lane's sum when the",
             "# value raises the lane's max, else it is the value's own term (a NaN makes",
             "# the max, and from it the sum, NaN)",
             f"{v}_e = tl.exp(tl.minimum({v}_lmax, {v}_in) - {v}_new)",
             f"{v}_lsum = tl.where({v}_in > {v}_lmax, {v}_lsum * {v}_e + 1.0, {v}_lsum + {v}_e)",
             f"{v}_lmax = {v}_new"),
            ("# the lanes combined: the row max, and each lane's sum rescaled to it",
             f"{v}_max = {_block(r, f'{v}_lmax')}",
             f"{v}_sum = tl.sum({v}_lsum * tl.exp({v}_lmax - {v}_max), axis=1){_ROW}"))

    def partials(self, r: ReductionStep, block: str = BLOCK) -> Partials | None:
        """The chunk's max and sum of exp(x - max); merged as the lanes are."""
        v = r.temp
        stats = self.statistics(r, block)
        assert stats is not None
        return Partials(stats, (f"{v}_max", f"{v}_sum"), (NEG_INF, "0.0"), (
            "# the row max over its chunks, and each chunk's sum rescaled to it",
            f"{v}_max = {_block(r, f'{v}_max_parts')}",
            f"{v}_sum = tl.sum({v}_sum_parts * tl.exp({v}_max_parts - {v}_max), axis=1){_ROW}"),
            (f"{v}_max", f"{v}_sum"))

    def carry(self, r: ReductionStep) -> list[str]:
        return []

    def final(self, r: ReductionStep) -> list[str]:
        v, x = r.temp, _source(r)
        exp = f"tl.exp({x} - {v}_max)"
        return [f"{v} = {r.rule.finalize.format(x=x, v=v, exp=exp)}"]


def _welford(r: ReductionStep, width: str = "n_cols", block: str = BLOCK) -> Stats:
    """Welford per lane (the lane's mean and M2, the sum of squared deviations from it),
    combined over the lanes with Chan's formula into `{v}_mean` and `{v}_m2`: no
    E[x^2] - E[x]^2, which loses the variance of large-mean rows. `width`: the columns the
    loop covers (a split row's chunk); `block`: the loop's step."""
    v, x = r.temp, _source(r)
    count = f"(col0 // {block} + 1)"
    # fp32: one division per block, not per element (a float literal over the int count
    # is fp32; fp64 divides each element, so as not to round the weight to fp32)
    weight = [f"{v}_w = 1.0 / {count}"] if r.dtype == torch.float32 else []
    step = f"{v}_delta * {v}_w" if weight else f"{v}_delta / {count}"
    return Stats(
        (f"{v}_lmean = {_lanes(r, '0.0', block)}", f"{v}_lm2 = {_lanes(r, '0.0', block)}"),
        (f"# Welford per lane: each unmasked lane takes its {count}-th value",
         *weight,
         f"{v}_delta = {x} - {v}_lmean",
         f"{v}_lmean = tl.where(mask, {v}_lmean + {step}, {v}_lmean)",
         f"{v}_lm2 = tl.where(mask, {v}_lm2 + {v}_delta * ({x} - {v}_lmean), {v}_lm2)"),
        ("# the lanes combined (Chan): lane j took n_j values, and the row's M2 is the",
         "# sum of M2_j + n_j * (mean_j - mean)^2",
         f"{v}_left = tl.maximum({width} - tl.arange(0, {block})[None, :], 0)",
         f"{v}_n = (({v}_left + {block} - 1) // {block}).to({TL_TYPES[r.dtype]})",
         f"{v}_mean = tl.sum({v}_n * {v}_lmean, axis=1){_ROW} / {width}",
         f"{v}_dev = {v}_lmean - {v}_mean",
         f"{v}_m2 = {_block(r, f'{v}_lm2')} + {_block(r, f'{v}_n * {v}_dev * {v}_dev')}"))


def _centered(r: ReductionStep) -> list[str]:
    """A single-block row's mean `{v}_mean` and its values less the mean `{v}_xc` (0.0 in
    the masked lanes), for a centered norm and for var/std."""
    v, x = r.temp, _source(r)
    return [f"{v}_mean = {_block(r, f'tl.where(mask, {x}, 0.0)')} / n_cols",
            f"{v}_xc = tl.where(mask, {x} - {v}_mean, 0.0)"]


@dataclass(frozen=True)
class _Normalize:
    """layer_norm (centered: mean, then variance) and rms_norm (mean of squares)."""

    def single(self, r: ReductionStep) -> list[str]:
        v, x = r.temp, _source(r)
        if r.rule.centered:
            stats, c, sq = _centered(r), f"{v}_xc", f"{v}_xc * {v}_xc"
        else:
            stats, c, sq = [f"{v}_in = tl.where(mask, {x}, 0.0)"], x, f"{v}_in * {v}_in"
        rstd = f"{v}_rstd = tl.math.rsqrt({_block(r, sq)} / n_cols + {r.eps!r})"
        return [_head(r), *stats, rstd,
                f"{v} = {_affine(r, r.rule.finalize.format(x=x, v=v, c=c))}"]

    def statistics(self, r: ReductionStep, block: str = BLOCK) -> Stats | None:
        """rms_norm: per-lane sums of squares. layer_norm: Welford per lane (``_welford``)."""
        v, x = r.temp, _source(r)
        if not r.rule.centered:
            return Stats((f"{v}_lsq = {_lanes(r, '0.0', block)}",),
                         (f"{v}_in = tl.where(mask, {x}, 0.0)",
                          f"{v}_lsq = {v}_lsq + {v}_in * {v}_in"),
                         ("# the lanes combined",
                          f"{v}_rstd = tl.math.rsqrt({_block(r, f'{v}_lsq')} / n_cols"
                          f" + {r.eps!r})"))
        welford = _welford(r, block=block)
        return Stats(welford.before, welford.inside, (
            *welford.after, f"{v}_rstd = tl.math.rsqrt({v}_m2 / n_cols + {r.eps!r})"))

    def partials(self, r: ReductionStep, block: str = BLOCK) -> Partials | None:
        """rms_norm: the chunk's sum of squares. layer_norm: the chunk's Welford mean and M2
        (over `chunk_cols` columns), merged by Chan's formula over the chunks' widths."""
        v, rstd = r.temp, f"{r.temp}_rstd = tl.math.rsqrt({{}} / n_cols + {r.eps!r})"
        if not r.rule.centered:
            plain = self.statistics(r, block)
            assert plain is not None
            stats = Stats(plain.before, plain.inside,
                          ("# the lanes combined", f"{v}_ssq = {_block(r, f'{v}_lsq')}"))
            return Partials(stats, (f"{v}_ssq",), ("0.0",), (
                "# the row's sum of squares over its chunks",
                rstd.format(_block(r, f"{v}_ssq_parts"))), (f"{v}_rstd",))
        n = "tl.where(part_mask, tl.minimum(chunk, n_cols - parts * chunk), 0)"
        welford = _welford(r, "chunk_cols", block)
        return Partials(welford, (f"{v}_mean", f"{v}_m2"), ("0.0", "0.0"), (
            "# the chunks combined (Chan): chunk j took n_j columns",
            f"{v}_n_parts = {n}.to({TL_TYPES[r.dtype]})",
            f"{v}_mean = tl.sum({v}_n_parts * {v}_mean_parts, axis=1){_ROW} / n_cols",
            f"{v}_dev = {v}_mean_parts - {v}_mean",
            f"{v}_m2 = {_block(r, f'{v}_m2_parts')} + "
            f"{_block(r, f'{v}_n_parts * {v}_dev * {v}_dev')}",
            rstd.format(f"{v}_m2")), (f"{v}_mean", f"{v}_rstd"))

    def carry(self, r: ReductionStep) -> list[str]:
        return []

    def final(self, r: ReductionStep) -> list[str]:
        v, x = r.temp, _source(r)
        c = f"({x} - {v}_mean)" if r.rule.centered else x
        return [f"{v} = {_affine(r, r.rule.finalize.format(x=x, v=v, c=c))}"]


@dataclass(frozen=True)
class _Scan:
    """cumsum: the combine's running form; a looped row carries the sum between blocks."""

    def single(self, r: ReductionStep) -> list[str]:
        scan = r.rule.combine.scan
        acc = f"{scan}(tl.where(mask, {_source(r)}, {_zero(r)}), axis=1)"
        return [_head(r), f"{r.temp} = {r.rule.finalize.format(acc=acc, v=r.temp)}"]

    def statistics(self, r: ReductionStep, block: str = BLOCK) -> Stats | None:
        return None  # no statistics: the last pass carries the running sum

    def partials(self, r: ReductionStep, block: str = BLOCK) -> Partials | None:
        return None  # its rows are not split

    def carry(self, r: ReductionStep) -> list[str]:
        return [f"{r.temp}_carry = {_full(r, _zero(r))}"]

    def final(self, r: ReductionStep) -> list[str]:
        v, combine = r.temp, r.rule.combine
        acc = combine.merge(f"{v}_carry", f"{combine.scan}({v}_part, axis=1)")
        return [f"{v}_part = tl.where(mask, {_source(r)}, {_zero(r)})",
                f"{v} = {r.rule.finalize.format(acc=acc, v=v)}",
                f"{v}_carry = {combine.merge(f'{v}_carry', _block(r, f'{v}_part'))}"]


@dataclass(frozen=True)
class _Moments:
    """var, std: the mean, then the sum of squared deviations from it (Welford per lane
    when rows loop), finished by the rule over `n - correction`."""

    def _finish(self, r: ReductionStep, m2: str) -> str:
        return r.rule.finalize.format(m2=m2, v=r.temp, correction=repr(r.correction))

    def single(self, r: ReductionStep) -> list[str]:
        v = r.temp
        return [_head(r), *_centered(r),
                f"{v} = {self._finish(r, _block(r, f'{v}_xc * {v}_xc'))}"]

    def statistics(self, r: ReductionStep, block: str = BLOCK) -> Stats | None:
        welford = _welford(r, block=block)
        return Stats(welford.before, welford.inside,
                     (*welford.after, f"{r.temp} = {self._finish(r, f'{r.temp}_m2')}"))

    def partials(self, r: ReductionStep, block: str = BLOCK) -> Partials | None:
        return None  # its rows are not split

    def carry(self, r: ReductionStep) -> list[str]:
        return []

    def final(self, r: ReductionStep) -> list[str]:
        return []  # one value per row, computed after the statistics


EMITTERS = {"collapse": _Collapse(), "softmax": _Softmax(), "normalize": _Normalize(),
            "scan": _Scan(), "moments": _Moments()}


def emitter(r: ReductionStep) -> _Collapse | _Softmax | _Normalize | _Scan | _Moments:
    return EMITTERS[r.rule.family]
