"""Where a cat's operands lie along its dim: fixed at analysis, or read at each call.

A KV cache grows by a token a call: `k = torch.cat((past_k, k_new), dim=2)` has another
`past_k` length every time. Each operand (a *part* of the cat) is as long along the cat dim
as the inputs its branch reads through its piece (``ir/views.Piece``), so a launcher can
read those lengths from the tensors it is given, add them up into where each part ends,
and pass the ends to the kernel, whose loads shift and mask by them (``loads.py``) and
whose `tl.where` picks the part by them (``lower.py``). The result's length along the cat
dim, their sum, is then the iteration shape's there, and everything after the cat (a
softmax over the cat dim included: its row length is `n_cols`) follows it as for any
other run-time size.

A part's length varies when some input read through its piece is as long there as the
input's own dims make it: its chain to the domain, applied to a shape of symbols, leaves a
symbol there. Through a slice of fixed bounds (`q[..., :h]`, the halves of a rotary
embedding) or an expand it is a constant: a cat whose parts are all such (or generated,
`arange`) keeps literal bounds, and its launcher refuses other lengths by name.

Reads a lowered group's inputs (``plan.TensorArg`` with their ``PieceRead``); returns
``plan.CatBounds`` for the plan, and the kernel's and the launcher's text for them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import sympy

from ..ir.graph import FusionGraph
from ..ir.views import Split, Step, shape_after, split_piece
from .indexing import IndexMaps
from .plan import CatBounds, KernelPlan, PieceRead, Role, TensorArg
from .signature import PIECE_ENDS as ENDS
from .signature import KernelParams, piece_end_name


def cat_bounds(g: FusionGraph, cats: Sequence[str], maps: IndexMaps,
               inputs: Sequence[TensorArg], rank: int, fixed: Collection[str]
               ) -> tuple[CatBounds, ...]:
    """The bounds of the group's `cats` (node order: ``PieceRead.cat`` counts them so),
    given their index maps, the group's loaded `inputs` and the values whose shape never
    changes (`fixed`)."""
    out = []
    for c, name in enumerate(cats):
        refs = g[name].refs
        ends = maps.cat_ends[name]
        lengths = tuple(b - a for a, b in zip((0, *ends[:-1]), ends, strict=True))
        sources: list[int | None] = []
        # Read through group_norm's channel groups, a part is a range of groups: the
        # launcher splits each operand into groups of a fixed size and refuses another
        # number of them, so those bounds stay literals.
        # Straddling them (``PieceRead.per``), the same.
        grouped = maps.cat_pers[name] > 0 or any(
            isinstance(s, Split) and s.per for t in inputs
            if t.piece is not None and t.piece.cat == c for s in t.view)
        for part, operand in enumerate(refs):
            found = [t for t in inputs if t.role == Role.IN and t.piece is not None
                     and (t.piece.cat, t.piece.part) == (c, part) and _varies(t, rank)]
            # The operand itself first, then what is not a parameter: a (1, 1, 1, d) weight
            # in a branch one token long is no measure of the branch at the next call.
            found.sort(key=lambda t: (t.value != operand, t.value in fixed))
            sources.append(found[0].index if found and not grouped else None)
        out.append(CatBounds(maps.cat_dims[name], lengths, tuple(sources)))
    return tuple(out)


def piece_read(steps: Sequence[Step] | None, shape: tuple[int, ...], rank: int,
               coords: Mapping[tuple[int, int], TensorArg], cat_names: Sequence[str]
               ) -> PieceRead | None:
    """Where a cat's operand of `shape`, seen through `steps` (its chain), lies along the
    cat's domain dim, whose coordinate is `coords`' (by dim and ``Piece.per``); None for no
    cat operand."""
    own, piece = split_piece(steps or ())
    if piece is None:
        return None
    dim = rank + piece.dim
    size = shape_after(own, shape)[piece.along]
    return PieceRead(dim, piece.start, piece.start + size, coords[(dim, piece.per)],
                     cat_names.index(piece.cat), piece.part, piece.per)


def _varies(t: TensorArg, rank: int) -> bool:
    """The input's length along its piece's dim, through its chain, follows its own dims."""
    assert t.piece is not None
    dims = tuple(sympy.Symbol(f"d{k}", integer=True, positive=True)
                 for k in range(len(t.value_shape)))
    try:
        length = shape_after(t.view, dims)[t.piece.along - rank]
    except (IndexError, TypeError, ValueError):  # no symbolic shape: read it at each call
        return True
    return not sympy.sympify(length).is_number


def regrown(stride: tuple[int, ...], piece: PieceRead, rank: int,
            shape: tuple[int, ...]) -> tuple[int, ...]:
    """`stride` (an input of `shape` seen through its piece's chain) as if its piece were two
    long where it is one: one long, its strides do not say which dims lie outside the cat dim
    in memory (contiguous (2, 3, 1) has strides (3, 1, 1), so dim 1 looks innermost, and the
    kernel would index it with a unit stride that a longer cache no longer has). The dims
    outside it double: a larger stride, an equal one of a dim longer than one (inside the
    cat dim it would make the cat dim's stride larger: `(B, H, D, T)` storage read as
    `(B, H, T, D)`), or an equal one of one element before it, as a stable sort orders
    them. The index groups come from these; the launcher checks them at each call."""
    if piece.stop - piece.start != 1 or piece.per:  # straddling: its strides are its own
        return stride
    c = len(stride) + piece.dim - rank  # the viewed layout is right-aligned to the domain
    own = stride[c]
    if own == 0:
        return stride
    return tuple(2 * s if k != c and (s > own or (s == own and (shape[k] > 1 or k < c)))
                 else s for k, s in enumerate(stride))


# -- the kernel -------------------------------------------------------------------------

def register(plan: KernelPlan, params: KernelParams) -> None:
    """The varying cats' ends as kernel parameters (a cat's `tl.where` reads them by name,
    ``cat_ends``, whether or not a load does)."""
    for c, b in enumerate(plan.cats):
        if b.varying:
            for i in range(len(b.lengths) - 1):  # the last end is the dim's own size
                params.piece_end(c, i)


def cat_ends(b: CatBounds, c: int) -> tuple[int | str, ...]:
    """Where each part of cat `c` ends, as the kernel reads it (the last: the dim's size)."""
    return tuple(piece_end_name(c, i) if b.varying and i < len(b.lengths) - 1 else end
                 for i, end in enumerate(b.ends))


def piece_start(plan: KernelPlan, piece: PieceRead) -> str | None:
    """Where the piece starts along its dim; None for a cat's first part (at 0)."""
    return None if piece.part == 0 else str(cat_ends(plan.cats[piece.cat],
                                                     piece.cat)[piece.part - 1])


def piece_stop(plan: KernelPlan, piece: PieceRead) -> str | None:
    """Where the piece stops; None for a cat's last part (it ends with the dim)."""
    ends = cat_ends(plan.cats[piece.cat], piece.cat)
    return None if piece.part == len(ends) - 1 else str(ends[piece.part])


# -- the launcher -----------------------------------------------------------------------

def ends_lines(plan: KernelPlan, names: Sequence[str]) -> list[str]:
    """`piece_ends`: each cat's ends from this call's operands' lengths (varying cats)."""
    if not any(b.varying for b in plan.cats):
        return []
    items = []
    for b in plan.cats:
        lengths = [f"{names[s]}.shape[{b.dim - plan.rank}]" if s is not None else str(n)
                   for s, n in zip(b.sources, b.lengths, strict=True)]
        items.append("(" + "".join(" + ".join(lengths[:i + 1]) + ", "
                                   for i in range(len(lengths))).rstrip() + ")")
    return ["# where each cat's operands end along its dim: as long as this call's (a cache",
            "# grows), the kernel shifts and masks its loads by them",
            f"{ENDS} = (" + "".join(f"{e}, " for e in items).rstrip() + ")"]


def total(plan: KernelPlan, piece: PieceRead) -> str:
    """The cat's length along its dim, as the launcher knows it."""
    b = plan.cats[piece.cat]
    return f"{ENDS}[{piece.cat}][-1]" if b.varying else str(b.ends[-1])


def length(plan: KernelPlan, piece: PieceRead) -> str:
    """The piece's length along its dim, as the launcher knows it."""
    b, c, i = plan.cats[piece.cat], piece.cat, piece.part
    if not b.varying:
        return str(b.lengths[i])
    return f"{ENDS}[{c}][0]" if i == 0 else f"{ENDS}[{c}][{i}] - {ENDS}[{c}][{i - 1}]"


def coordinate_piece(plan: KernelPlan, t: TensorArg) -> PieceRead | None:
    """A piece of the varying cat whose coordinate `t` is (its length along the cat's dim
    is the cat's), else None."""
    for s in plan.sources:
        p = s.piece
        if p is not None and p.coordinate.value == t.value and plan.cats[p.cat].varying:
            return p
    return None


def follows_call(plan: KernelPlan, t: TensorArg) -> bool:
    """`t` is as long as this call's operands along a varying cat's dim: read through a
    piece of such a cat, or (a generated value) its coordinate. Only generated values are
    coordinates: an input named like one (`cat_index2`) is not."""
    if t.piece is not None:
        return plan.cats[t.piece.cat].varying
    return t.role == Role.GEN and coordinate_piece(plan, t) is not None
