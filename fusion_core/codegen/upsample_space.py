"""A group holding a nearest upsample iterates over the upsampled dims split again.

Reads a group's ``IterationSpace`` (``ir/iteration.py``) and the chains a first spread of
index maps gave its values (``indexing._Spread``); returns the space whose anchor steps
begin with a ``Split`` of each dim an upsample grew by `s` into (size / s, s). Why: an
upsample's steps end in a merge of (h, s) pairs with stride 0 along `s`
(``ir/upsample.py``), which no strides express; over the split domain the value's chain
begins with that split, the merge and the split cancel (``ir/view_cancel.py``) and the
source is read with stride 0 along `s`, as any expanded operand is. A contiguous value is
split for free, so every other tensor of the group is read as before.

Refused by name: an upsampled dim that reaches the domain through a reshape (no one domain
dim to split), two upsamples growing one dim by different factors, and a reduction whose dims
name one part of a split dim (a softmax along an upsampled dim): its rows would need both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..ir.graph import FusionGraph, OpKind
from ..ir.iteration import IterationSpace, reduction_order
from ..ir.reductions import ReductionRule, reduced_dims, rule_of
from ..ir.spelling import said
from ..ir.upsample import factors_of
from ..ir.views import INDEX_STEPS, Split, Step, shape_after
from .layout import LoweringError

_MARK = 1_000_003  # a size no real dim has: where a dim lands through a chain


def upsamples(g: FusionGraph, nodes: Sequence[str]) -> tuple[str, ...]:
    """The group's upsample views (whose steps repeat elements)."""
    return tuple(n for n in nodes if g[n].kind is OpKind.VIEW
                 and factors_of(tuple(g[n].param(INDEX_STEPS) or ())))


def _lands(steps: Sequence[Step], shape: tuple[int, ...], dim: int, rank: int) -> int | None:
    """The domain dim (of `rank`, chains right-aligned) that dim `dim` of a value of `shape`
    reaches whole through `steps`; None where a reshape or slice changes it."""
    marked = list(shape)
    marked[dim] = _MARK
    after = shape_after(steps, tuple(marked))
    hits = [j for j, v in enumerate(after) if v == _MARK]
    return hits[0] + rank - len(after) if len(hits) == 1 else None


def split_space(g: FusionGraph, nodes: Sequence[str], space: IterationSpace,
                chains: Mapping[str, tuple[Step, ...]]) -> IterationSpace:
    """`space` with the anchor's upsampled dims split (module docstring); `space` itself
    where the group holds no upsample, or no chain reached one."""
    rank = len(space.shape)
    splits: dict[int, tuple[int, str]] = {}  # anchor dim -> (factor, the upsample)
    for u in upsamples(g, nodes):
        own = chains.get(u)
        if own is None:
            continue
        shape = tuple(g[u].meta.shape)
        for d, factor in factors_of(tuple(g[u].param(INDEX_STEPS))).items():
            k = _lands(own, shape, d, rank)
            a = next((a for a in range(len(space.anchor_shape)) if k is not None and
                      _lands(space.steps, space.anchor_shape, a, rank) == k), None)
            if a is None or space.anchor_shape[a] != shape[d]:
                raise LoweringError(f"{said(g, u)} is read through a reshape or slice of the "
                                    f"dim {d} it upsamples; a kernel reads an upsample where "
                                    "its dims stay whole", (u,))
            if splits.get(a, (factor, u))[0] != factor:
                other = splits[a][1]
                raise LoweringError(f"{said(g, u)} and {said(g, other)} upsample one dim by "
                                    f"different factors ({factor} and {splits[a][0]}); a "
                                    "kernel splits it one way", (u,))
            splits[a] = (factor, u)
    if not splits:
        return space
    grow = tuple(Split(a, 0, factor) for a, (factor, _) in sorted(splits.items(), reverse=True))
    shape = shape_after(grow, space.anchor_shape)
    first = next((g[n] for n in nodes if g[n].kind is OpKind.REDUCTION
                  and g[n].inputs and g[n].refs[:1] == (space.anchor,)), None)
    if space.reduced == 0:
        return IterationSpace(space.anchor, space.anchor_shape, grow, 0)
    rule = rule_of(first) if first is not None else None
    order = reduction_order(rule, dict(first.params), shape) if (
        rule is not None and _same_dims(rule, dict(first.params), space.anchor_shape,
                                        sorted(splits))) else None
    if order is None:
        u = next(iter(splits.values()))[1]
        who = said(g, first.name) if first is not None else "a reduction of the group"
        raise LoweringError(f"{who} reduces rows of what {said(g, u)} upsampled; a kernel "
                            "reads an upsample into a reduction that keeps its upsampled "
                            "dims (a sum over the channels) or into group_norm", (u,))
    return IterationSpace(space.anchor, space.anchor_shape, grow + order[0], order[1])


def _same_dims(rule: ReductionRule, params: dict, shape: tuple[int, ...],
               split: list[int]) -> bool:
    """The reduction's params name the same dims of the split anchor as of the anchor (a
    split dim both of its parts), so its own order over the split shape reduces what it
    reduces: group_norm's groups, a sum over the channels; not a softmax over an upsampled
    dim, whose `dim` names one part."""
    if rule.axes == "groups":
        return True
    before = reduced_dims(rule, params, len(shape)) or ()
    after = reduced_dims(rule, params, len(shape) + len(split)) or ()
    image = set()
    for d in before:
        at = d + sum(a < d for a in split)
        image |= {at, at + 1} if d in split else {at}
    return bool(before) and set(after) == image


def split_steps(space: IterationSpace) -> tuple[Step, ...]:
    """The splits `split_space` put first in `space`'s steps (() if none)."""
    out = []
    for s in space.steps:
        if not (isinstance(s, Split) and s.groups == 0):
            break
        out.append(s)
    return tuple(out)
