"""A group reading a reshape of a permuted value iterates over the merged dims split again.

Reads a group's ``IterationSpace`` (``ir/iteration.py``), the chains a first spread of index
maps gave its values (``indexing._Spread``) and the strides of the values in memory (an
input's own, contiguous for what the kernel writes or generates); returns the space whose
steps end with an ``Unflatten`` of each domain dim that some value in memory reads as a
merge of factors no strides express (``ir/view_factors.py``). Why: `x.permute(0, 2, 1, 3)
.reshape(b, t, h * d)` merges h and d, which are not adjacent in x's memory; over (b, t, h, d)
the chain is the permute alone (``views.applied`` writes it without the merge), and every
other value is split for free where it is contiguous. This is Inductor's div/mod of the flat
coordinate, done once in the iteration space instead of per load. A group whose values all
view through their strides keeps its space: the contiguous merges stay one dim.

A reduced dim split stays reduced, as its parts (a softmax over heads merged). Refused by
name: two values splitting one dim different ways, and a reduced dim split in a group whose
reduction shrinks it (a sum: its result would be split where it has one element). A merge
whose factors a reshape cuts unevenly, or one before a slice or an expand of the merged
value, is left to ``domain_view``'s refusal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ..ir.graph import FusionGraph, OpKind
from ..ir.iteration import IterationSpace
from ..ir.spelling import said, said_all
from ..ir.view_factors import FACTORED, result_factors
from ..ir.views import Step, Unflatten, ViewError, apply, plain, shape_after
from .layout import LoweringError


def _memory(g: FusionGraph, nodes: Sequence[str], inputs: Sequence[str],
            outputs: Sequence[str], chains: Mapping[str, tuple[Step, ...]],
            reads: Mapping[tuple[str, str], tuple[Step, ...]]):
    """(value, steps, strides) of each read or write of memory the kernel makes."""
    for name in inputs:
        yield name, chains[name], tuple(g[name].meta.stride)
    for (_, name), steps in reads.items():
        yield name, steps, tuple(g[name].meta.stride)
    made = [n for n in nodes if g[n].kind is OpKind.GENERATOR]
    for name in (*outputs, *made):
        yield name, chains[name], tuple(torch.empty(g[name].meta.shape, device="meta").stride())


def _tail(steps: tuple[Step, ...], shape: tuple[int, ...]
          ) -> tuple[tuple[Step, ...], tuple[int, ...]]:
    """The chain's last run of factored steps (``view_factors``) and the shape it starts at."""
    k = len(steps)
    while k and isinstance(steps[k - 1], FACTORED):
        k -= 1
    return steps[k:], shape_after(steps[:k], shape)


def _refined(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The common refinement of two factorings of one size, or None where they cross."""
    def cuts(sizes: tuple[int, ...]) -> set[int]:  # inner products: where a dim ends
        out, p = set(), 1
        for s in reversed(sizes):
            p *= s
            out.add(p)
        return out

    ends = sorted(cuts(a) | cuts(b))
    if any(hi % lo for lo, hi in zip(ends, ends[1:], strict=False)):
        return None
    return tuple(reversed([hi // lo for lo, hi in zip([1, *ends], ends, strict=False)]))


def regroup_space(g: FusionGraph, nodes: Sequence[str], inputs: Sequence[str],
                  outputs: Sequence[str], space: IterationSpace,
                  chains: Mapping[str, tuple[Step, ...]],
                  reads: Mapping[tuple[str, str], tuple[Step, ...]]) -> IterationSpace:
    """`space` with the dims split that some value in memory reads as a merge no strides
    express (module docstring); `space` itself where there is none."""
    domain = space.shape
    rank = len(domain)
    views = [n for n in nodes if g[n].kind is OpKind.VIEW]
    splits: dict[int, tuple[tuple[int, ...], str]] = {}  # domain dim -> (sizes, value)
    for name, steps, stride in _memory(g, nodes, inputs, outputs, chains, reads):
        shape = tuple(g[name].meta.shape)
        steps = plain(steps, shape)
        try:
            apply(steps, torch.empty_strided(shape, stride, device="meta"))
            continue
        except ViewError:
            pass
        value = said(g, name) + (f" through {said_all(g, views)}" if views else "")
        run, start = _tail(steps, shape)
        parts = result_factors(run, start) if run else None
        if parts is None:
            continue  # no split helps: ``domain_view`` refuses it by name
        for j, sizes in enumerate(parts):
            if len(sizes) < 2:
                continue
            d = j + rank - len(parts)
            have = splits.get(d, (sizes, name))[0]
            both = _refined(have, sizes)
            if both is None:
                raise LoweringError(
                    f"{value} merges dim {d} of the kernel's iteration space as "
                    f"{'×'.join(map(str, sizes))}, and {said(g, splits[d][1])} as "
                    f"{'×'.join(map(str, have))}; a kernel splits a dim one way",
                    tuple(views) or (name,))
            if d >= rank - space.reduced and (short := _collapsing(g, nodes)) is not None:
                raise LoweringError(
                    f"{value} merges dims that are not adjacent in memory into dim {d}, "
                    f"which {said(g, short)} reduces to one element; a kernel splits a "
                    "reduced dim only for reductions that keep the row's shape (softmax, "
                    "a norm)", tuple(views) or (name,))
            splits[d] = (both, name)
    if not splits:
        return space
    grow = tuple(Unflatten(d, sizes) for d, (sizes, _) in sorted(splits.items(), reverse=True))
    return IterationSpace(space.anchor, space.anchor_shape, space.steps + grow,
                          space.reduced + more_reduced(grow, rank, space.reduced))


def _collapsing(g: FusionGraph, nodes: Sequence[str]) -> str | None:
    """A reduction of the group whose result is smaller than its source (a sum, a mean):
    its result would be read through the split of a dim it reduced to one element."""
    return next((n for n in nodes if g[n].kind is OpKind.REDUCTION
                 and tuple(g[n].meta.shape) != tuple(g[g[n].refs[0]].meta.shape)), None)


def more_reduced(grow: Sequence[Step], rank: int, reduced: int) -> int:
    """How many dims the splits `grow` add to the last `reduced` of a `rank`-d domain: a
    reduced dim split stays reduced, as its parts (the columns cover them all)."""
    return sum(len(s.sizes) - 1 for s in grow
               if isinstance(s, Unflatten) and s.dim >= rank - reduced)


def regrouped_steps(space: IterationSpace, before: IterationSpace) -> tuple[Step, ...]:
    """The unflattens `regroup_space` added to `before`'s steps (() if none)."""
    return space.steps[len(before.steps):]
