"""Which concatenations a kernel can compute: `torch.cat` as a piecewise index map.

Reads a ``FusionGraph`` and a cat node (``OpKind.CONCAT``); says why no kernel can read its
operands as fixed pieces of its result, or None. ``codegen/indexing.py`` raises it while it
spreads index maps, and ``analysis/barriers.py`` names it for a cat left out of every
cluster, so the two never disagree. ``pieces`` gives each operand its chain to the
kernel's domain from the result's. ``reduced_branch`` finds a reduction computed in a cat's
branch (a reduction reading the cat is fine). Whether a group may hold the cat otherwise (a
reshape of its result) is the code generator's to say for that group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .graph import FusionGraph, OpKind
from .sizes import SIZES, Const
from .spelling import said
from .views import INDEX_STEPS, Narrow, Permute, Piece, Split, Squeeze, Step, Strided, Unsqueeze


def cat_dim(g: FusionGraph, name: str) -> int:
    """The cat dim, counted from the start."""
    node = g[name]
    return node.param("dim") % len(node.meta.shape)


def concat_problem(g: FusionGraph, name: str) -> str | None:
    """Why cat `name` is no piecewise index map (a phrase after "it"), or None."""
    node, refs = g[name], g[name].refs
    out = node.meta
    if out is None or not out.shape or not isinstance(node.param("dim"), int):
        return "has no static cat dim or result shape"
    dim = cat_dim(g, name)
    if len(set(refs)) != len(refs):  # the pipeline reads a repeat through an alias first
        repeated = next(r for r in refs if refs.count(r) > 1)
        return (f"repeats {said(g, repeated)}; a kernel reads each operand of a cat through "
                "one piece of the result")
    for r in refs:
        meta = g[r].meta
        if meta is None or len(meta.shape) != len(out.shape) or meta.shape[dim] == 0:
            return (f"concatenates {said(g, r)}, empty or of another rank than the result; a "
                    "kernel reads pieces of equal rank")
        if meta.dtype != out.dtype:
            return (f"concatenates {said(g, r)} of {meta.dtype} into a {out.dtype} result "
                    "(cast it first)")
        sized = _sized_at_run_time(g, r, dim)
        if sized is not None:
            return (f"concatenates along dim {dim} values sized at run time there (by "
                    f"{said(g, sized)}); a kernel fixes each piece's size where a reshape computes "
                    "it (a piece as long as an input is there follows each call)")
    return None


@dataclass(frozen=True)
class Pieces:
    """A cat's operands as pieces of the domain its result is read over (``pieces``)."""

    chains: tuple[tuple[Step, ...], ...]  # per operand: its steps to the domain, its Piece last
    dim: int  # the domain dim the pieces lie along (negative: chains are right-aligned)
    ends: tuple[int, ...]  # where each piece ends along it, in domain coordinates
    per: int = 0  # straddling pieces: `dim` is groups of this many, `ends` count elements


def pieces(own: Sequence[Step], out: tuple[int, ...], dim: int, sizes: Sequence[int],
           cat: str = "") -> Pieces:
    """Each operand's chain when the cat result (of shape `out`, concatenated along `dim` from
    operands `sizes` long there) is read through `own`: permutes and added or removed dims
    move the cat dim, and a ``Split`` of it (group_norm's channel groups over a cat along the
    channels, a UNet decoder's `cat` → GroupNorm) makes the pieces whole groups, each
    operand split into its own number of groups. Where a group would hold channels of two
    operands (1280 + 640 channels in groups of 60), every piece *straddles* the groups
    instead (``Piece.per``): the split becomes a size-1 dim and each operand is read at its
    channel within the whole cat dim, masked per element. `cat` names the cat in each
    ``Piece`` (its launcher reads the parts' lengths again at each call)."""
    ops = [list(own) for _ in sizes]
    shape, at, unit, per = tuple(out), dim, 1, 0
    inner = None  # straddling: where the channel within a group is
    for k, step in enumerate(own):
        if isinstance(step, Split) and step.dim % len(shape) == at:
            size_per = step.per or shape[at] // step.groups  # `per`: an upsample's split
            if any(size % size_per for size in sizes):
                per, inner = size_per, at + 1  # the group dim stays at `at`, size 1
                for i in range(len(sizes)):
                    ops[i][k] = Unsqueeze((at,))
            else:
                for i, size in enumerate(sizes):
                    ops[i][k] = Split(step.dim, size // size_per, size_per)
                unit *= size_per  # the group dim stays at `at`: the pieces are ranges of groups
        elif not isinstance(step, (Permute, Unsqueeze, Squeeze, Split)):
            raise TypeError(step)  # the caller admits no other step
        else:
            at = _moved(step, shape, at)
            inner = _moved(step, shape, inner) if inner is not None else None
        shape = step.shape(shape)
    if per and inner != at + 1:  # only the reduction's own order follows a split: it keeps
        raise ValueError(own)  # both parts together (``upsample_space._same_dims``)
    at -= len(shape)
    ends = tuple(sum(sizes[:i + 1]) // unit for i in range(len(sizes)))
    chains = tuple(tuple(steps) + ((Piece(at, end - size // unit, out[dim] // unit, cat, part,
                                          per),) if size != out[dim] else ())
                   for part, (steps, size, end) in enumerate(zip(ops, sizes, ends, strict=True)))
    return Pieces(chains, at, ends, per)


def _moved(step: Step, shape: tuple[int, ...], at: int) -> int:
    """Where dim `at` of `shape` lands through a permute or added or removed dims: the one
    dim a longer `at` changes (a lone operand's size-1 dim squeezed: no piece to place)."""
    marked = list(shape)
    marked[at] += 1
    after, longer = step.shape(shape), step.shape(tuple(marked))
    return next((j for j, (a, b) in enumerate(zip(after, longer, strict=True)) if a != b), at)


def reduced_branch(g: FusionGraph, nodes: Sequence[str]) -> tuple[str, str] | None:
    """(a reduction, the cat) where a group computes a reduction in one of its cats'
    branches: it would reduce one operand's piece, where a kernel's rows are the cat's whole
    result (a reduction may read the cat). None if there is none."""
    members = set(nodes)
    for cat in (n for n in nodes if g[n].kind is OpKind.CONCAT):
        todo, seen = list(g[cat].refs), set()
        while todo:
            name = todo.pop()
            if name in seen or name not in members:
                continue
            seen.add(name)
            if g[name].kind is OpKind.REDUCTION:
                return name, cat
            todo.extend(g[name].refs)
    return None


def _sized_at_run_time(g: FusionGraph, operand: str, dim: int) -> str | None:
    """The view that sizes `operand` along `dim` from a tensor's shape (`x.view(b, t, n)`
    along t: it changes from call to call), up through the views and pointwise ops that
    made it (`x.reshape(n, 2 * t, -1) * 2.0`); None. A slice's fixed bounds are the
    launcher's to check."""
    name, at = operand, dim
    node = g[name]
    if node.kind.is_pointwise:  # same size along `dim` as the operands that have it
        length = node.meta.shape[dim] if node.meta is not None else None
        for r in dict.fromkeys(node.refs):
            meta = g[r].meta
            if meta is not None and len(meta.shape) == len(node.meta.shape) and (
                    meta.shape[dim] == length != 1):
                found = _sized_at_run_time(g, r, dim)
                if found is not None:
                    return found
        return None
    while g[name].kind is OpKind.VIEW and g[name].refs and at is not None:
        sizes = g[name].param(SIZES)
        if sizes is not None and at < len(sizes) and not isinstance(sizes[at], Const):
            return name
        at = _source_dim(g[name].param(INDEX_STEPS) or (), at)
        name = g[name].refs[0]
        if g[name].kind.is_pointwise:
            return _sized_at_run_time(g, name, at) if at is not None else None
    return None


def _source_dim(steps: Sequence[Step], at: int) -> int | None:
    """Which dim of a view's source its result's dim `at` walks; None past a reshape."""
    for step in reversed(steps):
        if isinstance(step, Permute):
            at = step.perm[at]
        elif isinstance(step, Strided) and step.dims[at][0] >= 0:
            at = step.dims[at][0]
        elif isinstance(step, Narrow):  # keeps every dim where it is
            continue
        else:
            return None
    return at
