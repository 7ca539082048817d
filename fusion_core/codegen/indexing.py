"""Index maps: how each value of a group is addressed from the kernel's iteration space.

Reads a group of the ``FusionGraph`` (its nodes, inputs and outputs, the view nodes'
steps from ``ir/views.py`` and the reductions' dims, from the registry's table in
``ir/reductions.py``); returns ``IndexMaps``: the iteration shape (the *domain*), how many
of its trailing dims a reduction's columns cover, and, for every value the group reads,
computes or writes, a chain of view steps that turns a tensor of that value's shape into
one indexed by domain coordinates (right-aligned; size-1 dims broadcast).

The domain comes from the group's anchor (``ir/iteration.py``): a reduction's source in
the reduction's own order, the reduced dims last (softmax over dim 1 of NCHW iterates over
(N, H, W, C); ``mean(dim=(2, 3))`` over (N, C, H, W) with two reduced dims; group_norm over
(N, G, C/G, H, W) with three); without a reduction, the largest result the group writes.
Chains then spread from the anchor through the group until every value has
one: through a pointwise op unchanged (a broadcast operand first gains leading size-1
dims), through a view with its steps (operand side) or their inverse (result side), and
through a reduction by putting its reduced dims back as size 1. A computed value lives
in registers over one index map, so a value reached through two different maps is
refused, naming both; an input read through two maps (`x + x.t()`) is loaded twice.

A `torch.cat` spreads from its result to its operands only: operand i gets the result's
chain, then a ``Piece`` step (``ir/views.py``) saying it covers coordinates [offset_i,
offset_i + size_i) of the cat dim, where it is read at coordinate - offset_i (read through
group_norm's channel groups, operand i is split into its own groups and its piece is a range
of the group dim, or, where a group holds channels of two operands, its piece straddles the
groups, ``cat_pers``: ``ir/concat.pieces``). Everything computed in that branch lives over
that map (so a computed value also needed whole, as `x` in `x * cos + rotate_half(x) * sin`
with `x` computed in the group, is refused as two maps; an input is loaded once per map).
``loads.py`` masks the branch's loads to the piece; ``lower.py`` picks among the branches by
the coordinate (``cat_dims``: the domain dim).

``domain_view.py`` applies a chain to a meta tensor with the value's real strides: torch
composes the strides exactly. A reshape of a permuted value that no strides express splits
the merged dims of the domain again (``regroup_space.py``), over which the chain reads
through the permute alone (``ir/view_factors.py``); one no split helps is refused by name.
``layout.access`` then indexes the result as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..analysis.legality import python_value_read
from ..ir.concat import cat_dim, concat_problem, pieces, reduced_branch
from ..ir.graph import FusionGraph, Node, OpKind
from ..ir.iteration import NoIterationSpace, iteration_space, reduction_order
from ..ir.reductions import keeps_dims, node_reduced_dims, rule_of
from ..ir.run_scalars import run_scalar
from ..ir.sizes import SIZES
from ..ir.spelling import said
from ..ir.views import (
    INDEX_STEPS,
    Merge,
    Permute,
    Piece,
    Reshape,
    Split,
    Squeeze,
    Step,
    Unflatten,
    Unsqueeze,
    inverse,
    shape_after,
)
from .chain_reads import effective, expanded, read_through
from .layout import LoweringError
from .memory_order_space import memory_ordered, right_aligned
from .regroup_space import more_reduced, regroup_space, regrouped_steps
from .run_sizes import check_run_time_sizes
from .upsample_space import split_space, split_steps, upsamples


@dataclass(frozen=True)
class IndexMaps:
    domain: tuple[int, ...]
    reduced: int  # trailing domain dims a reduction's columns cover (0: none)
    chains: dict[str, tuple[Step, ...]]  # value -> steps from its shape to the domain's
    # (reader, input) -> the steps that reader needs, where they differ from `chains`':
    # that input is loaded once more, through them.
    reads: dict[tuple[str, str], tuple[Step, ...]]
    cat_dims: dict[str, int]  # cat node -> the domain dim it concatenates along
    # cat node -> where each operand's piece ends along that dim, in domain coordinates
    # (groups, where group_norm splits the cat dim)
    cat_ends: dict[str, tuple[int, ...]]
    # cat node -> 0, or where its pieces straddle group_norm's groups (``ir/concat.pieces``)
    # the channels per group: its dim is then the groups', its ends count channels
    cat_pers: dict[str, int]


def _shape(g: FusionGraph, name: str) -> tuple[int, ...]:
    meta = g[name].meta
    if meta is None:
        raise LoweringError(f"{said(g, name)} has no tensor metadata (shape propagation missed it)",
                            (name,))
    return tuple(meta.shape)


class _Spread:
    """Chains spread from the anchor until every value of the group has one."""

    def __init__(self, g: FusionGraph, nodes: Sequence[str], inputs: Sequence[str]) -> None:
        self.g, self.nodes, self.members = g, list(nodes), set(nodes)
        self.values = [*inputs, *nodes]
        self.chains: dict[str, tuple[Step, ...]] = {}
        self.reads: dict[tuple[str, str], tuple[Step, ...]] = {}
        self.why: dict[str, str] = {}  # value -> the node its chain came through
        self.cat_dims: dict[str, int] = {}
        self.cat_ends: dict[str, tuple[int, ...]] = {}
        self.cat_pers: dict[str, int] = {}
        self.rank = 0
        self.readers_first = True  # ``run``'s first round

    def offer(self, name: str, steps: tuple[Step, ...], via: str) -> bool:
        """Give `name` a chain; True if it was new. Two different maps raise."""
        have = self.chains.get(name)
        if have is None:
            self.chains[name], self.why[name] = steps, via
            return True
        if have == steps:  # the same chain again (every pass re-offers every edge)
            return False
        shape = _shape(self.g, name)
        if read_through(have, shape, self.rank) != read_through(steps, shape, self.rank):
            if name not in self.members:  # an input: `via` loads it once more, its own way
                self.reads[(via, name)] = steps
                return False
            node = self.g[name]
            if node.kind is OpKind.REDUCTION and not keeps_dims(rule_of(node), dict(node.params)):
                raise LoweringError(f"{said(self.g, via)} broadcasts the per-row result "
                                    f"{said(self.g, name)} along the rows: it would need "
                                    "other rows' results (keepdim=True keeps the reduced "
                                    "axis)",
                                    (via,) if via in self.members else (name,))
            raise LoweringError(
                f"the computed value {said(self.g, name)} is needed through two different "
                f"index maps (by {said(self.g, self.why[name])} and by {said(self.g, via)}); "
                "a kernel holds one", tuple(n for n in (name, via) if n in self.members))
        return False

    def run(self, anchor: str, steps: tuple[Step, ...]) -> None:
        self.rank = len(shape_after(steps, _shape(self.g, anchor)))
        self.offer(anchor, steps, anchor if anchor in self.members else self.nodes[0])
        # A view of an input takes its map from its readers first: the input is loaded once
        # more through it (a slice `rotate_half` makes of `q`); only a view nothing else maps
        # takes its source's.
        for self.readers_first in (True, False):
            changed = True
            while changed:
                changed = False
                for name in self.nodes:
                    changed |= self._through(self.g[name])
        missing = [v for v in self.values if v not in self.chains]
        if missing:
            raise LoweringError(f"no index map reaches {said(self.g, missing[0])} from the "
                                "kernel's iteration space", tuple(
                                    m for m in missing if m in self.members))

    def _through(self, node: Node) -> bool:
        """Spread across `node` in both directions; True if a chain was added."""
        g, name = self.g, node.name
        # A Python number of sizes alone is a kernel scalar: no index map to spread.
        refs = [r for r in dict.fromkeys(node.refs) if run_scalar(g, r) is None]
        own = self.chains.get(name)
        added = False
        if node.kind is OpKind.VIEW:
            steps = node.param(INDEX_STEPS)
            if steps is None:
                raise LoweringError(f"{said(g, name)} is a view the code generator "
                                    "cannot express as an index map", (name,))
            src = node.refs[0]
            if own is not None:
                added |= self.offer(src, tuple(steps) + own, name)
            elif src in self.chains and not (self.readers_first and src not in self.members):
                if node.param(SIZES) is not None and any(isinstance(s, Merge) for s in steps):
                    # Undone, the merge splits again with the analysed sizes: at another
                    # size the launcher's view fails where the user's code reads the sizes.
                    raise LoweringError(f"{said(g, name)} merges dims sized at run time, "
                                        "which the kernel would split again with the "
                                        f"analysed sizes {_shape(g, src)}", (name,))
                back = inverse(steps, _shape(g, src))
                if back is None and name in upsamples(g, [name]):
                    raise LoweringError(f"{said(g, name)} repeats the elements of a value "
                                        "computed in the group over a larger shape than the "
                                        "kernel iterates over; the upsample fuses with the "
                                        "ops after it instead", (name,))
                if back is None:
                    view, whole = said(g, name), said(g, src)
                    # which value, unless the view is said by it (`a piece of `mul``)
                    which = "" if whole in view else f", {whole}"
                    raise LoweringError(f"{view} selects part of a value computed in the "
                                        f"group{which}; the kernel iterates over the whole "
                                        "value", (name,))
                added |= self.offer(name, back + self.chains[src], name)
            return added
        if node.kind is OpKind.REDUCTION:
            return self._reduction(node, own)
        if node.kind is OpKind.CONCAT:
            return self._concat(node, own)
        if own is not None:  # pointwise: operands broadcast to the result
            added |= self._broadcast(refs, _shape(g, name), own, name, expand=True)
        else:
            # A computed value takes its map from its readers first, as a view of an input
            # does: an input two slices' recomputed producers share (`x` under
            # `h[..., :d]` and `h[..., d:]`) would hand the second one the first's map.
            same = [r for r in refs if r in self.chains and _shape(g, r) == _shape(g, name)
                    and not (self.readers_first and r not in self.members)]
            if same:
                added |= self.offer(name, self.chains[same[0]], name)
        return added

    def _reduction(self, node: Node, own: tuple[Step, ...] | None) -> bool:
        g, name = self.g, node.name
        src = node.inputs[0].name
        rule = rule_of(node)
        keeps_row = getattr(rule, "keeps_row", True)
        rank = len(_shape(g, src))
        dims = node_reduced_dims(node, rank) or ()
        # The result's shape -> the source's: the reduced dims back as size 1, counted from
        # the end (right-aligned: a launcher called with fewer leading dims keeps them).
        back: tuple[Step, ...] = ()
        if not keeps_dims(rule, dict(node.params)):
            back = (Unsqueeze(tuple(d - rank for d in dims)),)
        added = False
        if src in self.chains:
            added |= self.offer(name, back + self.chains[src], name)
        elif own is not None and keeps_row:
            added |= self.offer(src, own, name)
        own = self.chains.get(name)
        if own is not None and keeps_row:  # affine operands broadcast to the result
            added |= self._broadcast(node.refs[1:], _shape(g, src), own, name, expand=False)
        return added

    def _concat(self, node: Node, own: tuple[Step, ...] | None) -> bool:
        """Each operand gets the result's chain and then its ``Piece`` of the cat dim; the
        result's map comes from its readers only (an operand's covers part of it)."""
        g, name = self.g, node.name
        problem = concat_problem(g, name)
        if problem is not None:
            raise LoweringError(f"{said(g, name)} {problem}", (name,))
        if own is None:
            return False
        out = _shape(g, name)
        dim = cat_dim(g, name)
        if not all(isinstance(s, (Permute, Unsqueeze, Squeeze, Split)) for s in own):
            # a reshape or slice would need the pieces' bounds through it
            how = ("another cat's piece" if any(isinstance(s, Piece) for s in own) else
                   "a reshape or a slice")
            raise LoweringError(f"{said(g, name)} is read through {how} in the group; a kernel "
                                "reads a cat's operands only through a permute, added dims or "
                                "group_norm's channel groups", (name,))
        refs = node.refs
        cut = pieces(own, out, dim, [_shape(g, r)[dim] for r in refs], name)
        self.cat_dims[name] = self.rank + cut.dim
        self.cat_ends[name] = cut.ends
        self.cat_pers[name] = cut.per
        added = False
        for r, chain in zip(refs, cut.chains, strict=True):
            added |= self.offer(r, chain, name)
        return added

    def _broadcast(self, operands: Sequence[str], out: tuple[int, ...],
                   own: tuple[Step, ...], via: str, expand: bool) -> bool:
        """Offer each operand of `via` the result's chain `own`, after leading size-1 dims
        that bring it to `out`'s rank; `expand`: also to `out`'s full extent where the
        chain reshapes (``chain_reads.expanded``). True if a chain was added."""
        added = False
        for r in operands:
            shape = _shape(self.g, r)
            pad = len(out) - len(shape)
            lead = (Unsqueeze(tuple(range(pad))),) if pad > 0 else ()
            chain = own
            piece = own[-1] if own and isinstance(own[-1], Piece) else None
            # along the piece's dim of the domain (a ``Split`` of the channels before it
            # moves that dim)
            if piece is not None and shape_after(lead + own[:-1], shape)[piece.along] == 1 and (
                    shape_after(own[:-1], out)[piece.along] != 1 or r in self.g.fixed):
                # One element along the cat dim of a longer piece (`s` in `cat((a * s, b))`),
                # or a parameter's in a piece one long (`new * w` of a KV cache: the piece
                # grows with `new`, w does not): every coordinate reads it, so no piece (its
                # mask and shift are the branch's, its stride there the size-1 dim's);
                # `tl.where` drops the lanes of other pieces.
                if expand and any(isinstance(s, (Reshape, Merge, Unflatten)) for s in chain):
                    raise LoweringError(f"{said(self.g, r)} is broadcast along the cat dim "
                                        f"of {said(self.g, via)} before a reshape; a kernel "
                                        "reads each operand of a cat as its piece", (via,))
                chain = own[:-1]
            if expand:
                grown, chain = expanded((1,) * pad + shape, out, chain)
                lead += grown
            added |= self.offer(r, lead + chain, via)
        return added


def index_maps(g: FusionGraph, nodes: Sequence[str], inputs: Sequence[str],
               outputs: Sequence[str]) -> IndexMaps:
    """The domain and every value's chain (module docstring); LoweringError naming the nodes
    to blame when the group has no single iteration space."""
    for name in inputs:
        if g[name].meta is None:
            user = next(n for n in nodes if name in g[n].refs)
            if g[name].kind is OpKind.VIEW:  # `chunk`'s tuple, which `getitem` picks from
                raise LoweringError(f"{said(g, user)} reads {said(g, name)}, a Python tuple "
                                    "made at run time, not a tensor", (user,))
            if g[user].kind is OpKind.VIEW:  # a size it reshapes to: no constant in general
                made = g[name].source  # the line that computed it: `b, c, h, w = x.shape`
                at = f" at line {made.line} (`{made.code}`)" if made else f" ({said(g, name)})"
                raise LoweringError(f"{said(g, user)} reads a Python value computed at run "
                                    f"time{at} (a size), not a tensor", (user,))
            raise LoweringError(python_value_read(g, user, name), (user,))
    for name in nodes:
        node = g[name]
        if node.kind is OpKind.VIEW and len(set(node.refs)) > 1:
            raise LoweringError(f"{said(g, name)} reads {said(g, node.refs[1])} "
                                "only for its shape; a kernel takes tensors it loads", (name,))
    check_run_time_sizes(g, nodes, inputs)
    if (branch := reduced_branch(g, nodes)) is not None:
        raise LoweringError(f"{said(g, branch[0])} reduces one operand of {said(g, branch[1])};"
                            " a kernel reduces rows of the cat's whole result", (branch[0],))
    try:
        space = iteration_space(g, nodes, outputs)
    except NoIterationSpace as e:
        raise LoweringError(str(e), e.nodes) from None
    spread = _Spread(g, nodes, inputs)
    if upsamples(g, nodes):
        # First over the unsplit domain, for where the upsampled dims land in it; then over
        # the domain split there (``upsample_space.py``).
        try:
            spread.run(space.anchor, space.steps)
            failed = None
        except LoweringError as e:
            failed = e
        split = split_space(g, nodes, space, spread.chains)
        if split is space and failed is not None:
            raise failed
        space, spread = split, _Spread(g, nodes, inputs)
    spread.run(space.anchor, space.steps)
    # A reshape of a permuted value in memory: the merged dims split again (``regroup_space``)
    regrouped = regroup_space(g, nodes, inputs, outputs, space, spread.chains, spread.reads)
    if regrouped is not space:
        space, spread, unsplit = regrouped, _Spread(g, nodes, inputs), space
        spread.run(space.anchor, space.steps)
    else:
        unsplit = space
    # Every full-size tensor in one other memory order (channels-last): iterate in it
    ordered = memory_ordered(g, nodes, inputs, outputs, space, spread.chains, spread.reads)
    if ordered is not space:
        space, spread = ordered, _Spread(g, nodes, inputs)
        spread.run(space.anchor, space.steps)
        spread.chains = right_aligned(g, inputs, spread.chains)
    domain = space.shape
    for name in nodes:
        if g[name].kind is OpKind.REDUCTION:
            src = g[name].inputs[0].name
            grown = split_steps(space) if src == space.anchor else ()
            _check_rows(g, g[name], spread.reads.get((name, src), spread.chains[src]), domain,
                        space.reduced, grown, regrouped_steps(space, unsplit))
    return IndexMaps(domain, space.reduced, spread.chains, spread.reads, spread.cat_dims,
                     spread.cat_ends, spread.cat_pers)


def _check_rows(g: FusionGraph, node: Node, chain: tuple[Step, ...],
                domain: tuple[int, ...], reduced: int, grown: tuple[Step, ...] = (),
                regrouped: tuple[Step, ...] = ()) -> None:
    """The reduction's source reaches the domain the way the reduction's own order would
    take it there (``ir/iteration.py``): its rows are the kernel's rows, its reduced dims the
    last `reduced` axes; after `grown`, the upsampled dims split (``upsample_space.py``),
    and then the merged row dims split by `regrouped` (``regroup_space.py``)."""
    shape = _shape(g, node.inputs[0].name)
    own = reduction_order(rule_of(node), dict(node.params), shape_after(grown, shape))
    if own is not None:
        rank = len(shape_after(grown + own[0], shape))
        own = (grown + own[0] + regrouped, own[1] + more_reduced(regrouped, rank, own[1]))
    rank = len(domain)
    if own is None or own[1] != reduced or effective(chain, shape, rank) is None or (
            effective(chain, shape, rank) != effective(own[0], shape, rank)):
        last = "its last axis" if reduced == 1 else f"its last {reduced} axes"
        raise LoweringError(f"{said(g, node.name)} reduces other dims than the kernel's rows "
                            f"(the kernel iterates over {'×'.join(map(str, domain))} and "
                            f"reduces {last})", (node.name,))
