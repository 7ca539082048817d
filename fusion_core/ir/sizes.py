"""Sizes a view reads at run time, as expressions of tensor shapes.

Under FX capture `b, t, c = x.shape; h.view(b, t, 4, c // 4)` reaches the view as graph
nodes (`getattr(x, "shape")`, `getitem`, `floordiv`), where export records constants.
``read_sizes`` turns each size argument into a ``Size`` expression of tensors' dims
(`x.shape[i]`, `x.size(i)`), constants, `-1` and their products and floor divisions;
``ir/normalize.py`` stores them in the view's params under ``SIZES`` instead of the graph
edges, and ``codegen/run_sizes.py`` checks, for the group being lowered, that they only
restate what the view's index steps imply at any input size. ``refine`` makes the one
split size read at run time a `-1` in the steps (`view(b, t, 4, c // 4)` splits the last
dim into `(4, -1)`), so a launcher stays generic in it too.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from .views import Merge, Reshape, Step, Unflatten

SIZES = "run_time_sizes"  # the params key of a view's size expressions
# The params key of a view's sizes written as numbers (`reshape(1, 5, 2, -1)`): its steps
# follow the input's dims, eager's result only the element count (`codegen/literal_sizes.py`).
LITERAL = "literal_sizes"


@dataclass(frozen=True)
class Dim:
    """`value.shape[dim]` (dim counted from the start)."""

    value: str
    dim: int


@dataclass(frozen=True)
class Const:
    value: int


@dataclass(frozen=True)
class Infer:
    """`-1`: the size the others leave."""


@dataclass(frozen=True)
class Arith:
    """`left * right` or `left // right`."""

    op: str  # "mul" or "floordiv"
    left: Size
    right: Size


Size = Dim | Const | Infer | Arith

_ARITH: dict[Any, str] = {operator.mul: "mul", operator.floordiv: "floordiv"}
# Ops whose view result follows from their size arguments alone.
SIZED_VIEWS = frozenset({"view", "reshape"})


def _rank(n: fx.Node) -> int | None:
    val = n.meta.get("val")
    return val.dim() if isinstance(val, torch.Tensor) else None


def _dim(n: fx.Node, i: Any) -> Size | None:
    rank = _rank(n)
    if rank is None or not isinstance(i, int) or not -rank <= i < rank:
        return None
    return Dim(n.name, i % rank)


def _is_shape(n: Any) -> bool:
    """`x.shape` or `x.size()`: the whole shape of tensor `n.args[0]`."""
    return isinstance(n, fx.Node) and (
        (n.op == "call_function" and n.target is getattr and n.args[1:] == ("shape",))
        or (n.op == "call_method" and n.target == "size" and len(n.args) == 1
            and not n.kwargs))


def size_of(a: Any) -> Size | None:
    """`a` as a ``Size``; None where it is no function of shapes and constants (`.item()`)."""
    if isinstance(a, bool):
        return None
    if isinstance(a, int):
        return Infer() if a == -1 else Const(a)
    if not isinstance(a, fx.Node) or a.kwargs:
        return None
    if a.op == "call_function" and a.target is operator.getitem and _is_shape(a.args[0]):
        return _dim(a.args[0].args[0], a.args[1])
    if a.op == "call_method" and a.target == "size" and len(a.args) == 2:
        return _dim(a.args[0], a.args[1])
    if a.op == "call_function" and a.target in _ARITH and len(a.args) == 2:
        left, right = size_of(a.args[0]), size_of(a.args[1])
        if left is None or right is None or Infer() in (left, right):
            return None
        return Arith(_ARITH[a.target], left, right)
    return None


def read_sizes(n: fx.Node) -> tuple[Size, ...] | None:
    """The target sizes of view/reshape call `n` when some are read at run time and every
    one is a ``Size``; None otherwise (constants only, or a size of unknown origin)."""
    args = list(n.args[1:])
    if "shape" in n.kwargs or "size" in n.kwargs:
        args = [n.kwargs.get("shape", n.kwargs.get("size"))]
    elif n.kwargs:
        return None
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        args = list(args[0])
    if not args or not any(isinstance(a, fx.Node) for a in args):
        return None
    sizes = tuple(size_of(a) for a in args)
    return None if any(s is None for s in sizes) else sizes  # type: ignore[return-value]


def literal_sizes(n: fx.Node) -> tuple[int, ...] | None:
    """The target sizes of view/reshape call `n` when every one is a number; else None."""
    args = [n.kwargs.get("shape", n.kwargs.get("size"))] if n.kwargs else list(n.args[1:])
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        args = list(args[0])
    ok = args and all(isinstance(a, int) and not isinstance(a, bool) for a in args)
    return tuple(args) if ok else None


def tensors(sizes: Sequence[Size]) -> tuple[str, ...]:
    """The tensors whose shapes `sizes` read, in order of first mention."""
    out: dict[str, None] = {}

    def visit(s: Size) -> None:
        if isinstance(s, Dim):
            out.setdefault(s.value)
        elif isinstance(s, Arith):
            visit(s.left)
            visit(s.right)
    for s in sizes:
        visit(s)
    return tuple(out)


def spelled(s: Size) -> str:
    """`s` as Python text (`x.shape[2] // 4`), graph names for values."""
    if isinstance(s, Dim):
        return f"{s.value}.shape[{s.dim}]"
    if isinstance(s, Arith):
        return f"{spelled(s.left)} {'*' if s.op == 'mul' else '//'} {spelled(s.right)}"
    return "-1" if isinstance(s, Infer) else str(s.value)


def evaluate(s: Size, dim: Callable[[str, int], Any]) -> Any:
    """`s` with each ``Dim`` given by `dim` (a sympy expression, an int); None for -1."""
    if isinstance(s, Const):
        return s.value
    if isinstance(s, Dim):
        return dim(s.value, s.dim)
    if isinstance(s, Arith):
        left, right = evaluate(s.left, dim), evaluate(s.right, dim)
        if left is None or right is None:
            return None
        return left * right if s.op == "mul" else left // right
    return None


def refine(steps: tuple[Step, ...], sizes: Sequence[Size], src: tuple[int, ...]
           ) -> tuple[Step, ...]:
    """`steps` of a view to `sizes`, generic where the sizes say so: a split whose one size
    is read at run time splits into `-1` there; a reshape that keeps leading dims becomes a
    merge of the rest and a split of it. Equal at the analysed shape; `run_sizes` checks
    the other sizes restate the steps before a kernel relies on them."""
    if len(steps) == 1 and isinstance(steps[0], Reshape):
        grouped = _grouped(src, steps[0].target)
        if grouped is not None and len(grouped) > 1:
            # Swin's `view(B, H // w, w, W // w, w, C)`: several splits, each refined alone
            return tuple(_free_split(s, sizes, j) if isinstance(s, Unflatten) else s
                         for s, j in grouped)
    if len(steps) == 1 and isinstance(steps[0], Reshape) and len(src) > 1:
        out = steps[0].target
        keep = next((k for k in range(min(len(src), len(out)))
                     if src[k] != out[k] or isinstance(sizes[k], Const)), 0)
        if 0 < keep < len(out):
            steps = (Merge(keep, len(src)), Unflatten(keep, out[keep:]))
    if not steps or not isinstance(steps[-1], Unflatten):
        return steps
    return (*steps[:-1], _free_split(steps[-1], sizes))


def _free_split(split: Unflatten, sizes: Sequence[Size], at: int | None = None) -> Unflatten:
    """`split` with its one size read at run time as -1 (its first dim is `sizes[at]`,
    `split.dim` by default); unchanged where it has none or several."""
    at = split.dim if at is None else at
    span = range(len(split.sizes))
    free = [k for k in span if at + k < len(sizes) and not isinstance(sizes[at + k], Const)]
    if len(free) != 1:
        return split
    return Unflatten(split.dim, tuple(-1 if k == free[0] else split.sizes[k] for k in span))


def _grouped(src: tuple[int, ...], dst: tuple[int, ...]
             ) -> list[tuple[Merge | Unflatten, int]] | None:
    """A reshape as merges and splits of runs of dims, one per run of equal product, each
    with the result index of its first dim; None where a run both merges and splits. A
    size 1 on both sides is one dim kept (a batch of 1); one on one side only joins the run
    after it (or, last, none: None). Written right to left, so each step's dim is its
    source dim."""
    steps: list[tuple[Merge | Unflatten, int]] = []
    i, j = 0, 0
    while i < len(src) and j < len(dst):
        if src[i] == dst[j] == 1:
            i, j = i + 1, j + 1
            continue
        a, b, p, q = i + 1, j + 1, src[i], dst[j]
        while p != q:
            if p < q and a < len(src):
                p, a = p * src[a], a + 1
            elif q < p and b < len(dst):
                q, b = q * dst[b], b + 1
            else:
                return None
        if a - i > 1 and b - j > 1:
            return None
        if a - i > 1:
            steps.insert(0, (Merge(i, a), j))
        elif b - j > 1:
            steps.insert(0, (Unflatten(i, dst[j:b]), j))
        i, j = a, b
    return steps if i == len(src) and j == len(dst) else None
