"""Reduction emitters: the Triton lines that compute a ``ReductionStep`` over the last axis.

Reads a plan's reduction step, whose ``rule`` (``ir/reductions.py``) supplies the
combine, identity, finalize expression and accumulation dtype; writes source lines
(without indentation) for the two kernel shapes ``emit.py`` builds:

* the whole row in one block: ``single``;
* rows looping over column blocks: ``passes`` (statistics, one loop each: online
  max and rescaled sum for softmax, mean then variance for layer_norm), ``carry``
  (state the last pass carries between column blocks: a scan's running sum) and
  ``final`` (the row-preserving result for the current block, in the last pass).

One emitter per rule family (``EMITTERS``); the rule's fields fill it in, so adding a
collapsing reduction is a registry row, not code here. Tail lanes hold the identity
of the combine before every block reduction.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..ir.reductions import NEG_INF
from ..ir.registry import TL_TYPES
from .lower import ReductionStep

_ROW = "[:, None]"  # a row reduction keeps its axis: [ROWS, 1]
Passes = list[tuple[list[str], list[str], list[str]]]  # (before, in the loop, after) each


def _source(r: ReductionStep) -> str:
    return r.source if r.dtype == torch.float32 else f"{r.source}.to({TL_TYPES[r.dtype]})"


def _zero(r: ReductionStep) -> str:
    return "0.0" if r.dtype.is_floating_point else "0"


def _full(r: ReductionStep, value: str) -> str:
    return f"tl.full([ROWS_PER_PROGRAM, 1], {value}, {TL_TYPES[r.dtype]})"


def _affine(r: ReductionStep, y: str) -> str:
    return y + (f" * {r.weight}" if r.weight else "") + (f" + {r.bias}" if r.bias else "")


def _block(r: ReductionStep, value: str) -> str:
    """The rule's block reduction of `value` over the columns, keeping the row axis."""
    return f"{r.rule.combine.block}({value}, axis=1){_ROW}"


def _head(r: ReductionStep) -> str:
    return f"# {r.rule.name} over the last axis (tail lanes hold {r.rule.identity(r.dtype)})"


@dataclass(frozen=True)
class _Collapse:
    """sum, mean, amax, amin: one accumulator per row, merged by the rule's combine."""

    def single(self, r: ReductionStep) -> list[str]:
        acc = _block(r, f"tl.where(mask, {_source(r)}, {r.rule.identity(r.dtype)})")
        return [_head(r), f"{r.temp} = {r.rule.finalize.format(acc=acc, v=r.temp)}"]

    def passes(self, r: ReductionStep) -> Passes:
        v, rule = r.temp, r.rule
        final = rule.finalize.format(acc=f"{v}_acc", v=v)
        acc = v if final == f"{v}_acc" else f"{v}_acc"  # no finalize: accumulate in place
        part = _block(r, f"tl.where(mask, {_source(r)}, {rule.identity(r.dtype)})")
        after = [] if acc == v else [f"{v} = {final}"]
        return [([f"{acc} = {_full(r, rule.identity(r.dtype))}"],
                 [f"{acc} = {rule.combine.merge(acc, part)}"], after)]

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
                f"{v}_max = tl.max({v}_in, axis=1){_ROW}",
                f"{v}_exp = tl.exp({v}_in - {v}_max)",
                f"{v}_sum = tl.sum({v}_exp, axis=1){_ROW}",
                f"{v} = {r.rule.finalize.format(x=x, v=v, exp=f'{v}_exp')}"]

    def passes(self, r: ReductionStep) -> Passes:
        v, x = r.temp, _source(r)
        return [([f"{v}_max = {_full(r, NEG_INF)}", f"{v}_sum = {_full(r, '0.0')}"],
                 [f"{v}_in = tl.where(mask, {x}, {NEG_INF})",
                  f"{v}_new = tl.maximum({v}_max, tl.max({v}_in, axis=1){_ROW})",
                  "# rows still all -inf shift by 0, so no inf - inf",
                  f"{v}_ref = tl.where({v}_new == {NEG_INF}, 0.0, {v}_new)",
                  f"{v}_sum = {v}_sum * tl.exp({v}_max - {v}_ref)"
                  f" + tl.sum(tl.exp({v}_in - {v}_ref), axis=1){_ROW}",
                  f"{v}_max = {v}_new"], [])]

    def carry(self, r: ReductionStep) -> list[str]:
        return []

    def final(self, r: ReductionStep) -> list[str]:
        v, x = r.temp, _source(r)
        exp = f"tl.exp({x} - {v}_max)"
        return [f"{v} = {r.rule.finalize.format(x=x, v=v, exp=exp)}"]


@dataclass(frozen=True)
class _Normalize:
    """layer_norm (centered: mean, then variance) and rms_norm (mean of squares)."""

    def single(self, r: ReductionStep) -> list[str]:
        v, x = r.temp, _source(r)
        if r.rule.centered:
            stats = [f"{v}_mean = {_block(r, f'tl.where(mask, {x}, 0.0)')} / n_cols",
                     f"{v}_xc = tl.where(mask, {x} - {v}_mean, 0.0)"]
            c, sq = f"{v}_xc", f"{v}_xc * {v}_xc"
        else:
            stats, c, sq = [f"{v}_in = tl.where(mask, {x}, 0.0)"], x, f"{v}_in * {v}_in"
        rstd = f"{v}_rstd = tl.math.rsqrt({_block(r, sq)} / n_cols + {r.eps!r})"
        return [_head(r), *stats, rstd,
                f"{v} = {_affine(r, r.rule.finalize.format(x=x, v=v, c=c))}"]

    def passes(self, r: ReductionStep) -> Passes:
        v, x = r.temp, _source(r)
        if not r.rule.centered:
            return [([f"{v}_acc = {_full(r, '0.0')}"],
                     [f"{v}_in = tl.where(mask, {x}, 0.0)",
                      f"{v}_acc = {v}_acc + {_block(r, f'{v}_in * {v}_in')}"],
                     [f"{v}_rstd = tl.math.rsqrt({v}_acc / n_cols + {r.eps!r})"])]
        return [([f"{v}_acc = {_full(r, '0.0')}"],
                 [f"{v}_acc = {v}_acc + {_block(r, f'tl.where(mask, {x}, 0.0)')}"],
                 [f"{v}_mean = {v}_acc / n_cols"]),
                ([f"{v}_var = {_full(r, '0.0')}"],
                 [f"{v}_xc = tl.where(mask, {x} - {v}_mean, 0.0)",
                  f"{v}_var = {v}_var + {_block(r, f'{v}_xc * {v}_xc')}"],
                 [f"{v}_rstd = tl.math.rsqrt({v}_var / n_cols + {r.eps!r})"])]

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

    def passes(self, r: ReductionStep) -> Passes:
        return []  # no statistics: the last pass carries the running sum

    def carry(self, r: ReductionStep) -> list[str]:
        return [f"{r.temp}_carry = {_full(r, _zero(r))}"]

    def final(self, r: ReductionStep) -> list[str]:
        v, combine = r.temp, r.rule.combine
        acc = combine.merge(f"{v}_carry", f"{combine.scan}({v}_part, axis=1)")
        return [f"{v}_part = tl.where(mask, {_source(r)}, {_zero(r)})",
                f"{v} = {r.rule.finalize.format(acc=acc, v=v)}",
                f"{v}_carry = {combine.merge(f'{v}_carry', _block(r, f'{v}_part'))}"]


EMITTERS = {"collapse": _Collapse(), "softmax": _Softmax(), "normalize": _Normalize(),
            "scan": _Scan()}


def emitter(r: ReductionStep) -> _Collapse | _Softmax | _Normalize | _Scan:
    return EMITTERS[r.rule.family]
