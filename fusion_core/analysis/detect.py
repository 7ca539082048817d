"""Fusion detection: maximal absorbable components, then greedy pruning to legal groups.

Reads a ``FusionGraph``; returns the clusters (legal groups of at least two
compute ops) and the rejections met on the way. A component holding several
reductions is first cut into one region per reduction (prologue, reduction,
epilogue). A candidate failing a check loses the check's culprit nodes and splits
into what stays connected; each piece is checked again, so the legal tail of a
rejected group survives. A group may write several results (multi-output) where
the fan-out check's cost model says storing them pays.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Sequence

from ..ir.graph import FusionGraph, OpKind
from ..ir.spelling import said_all
from .boundary import boundary_views
from .group import (
    MIN_OPS,
    components,
    eager_copies,
    escaping,
    external_inputs,
    members,
    moves_data,
    n_working_ops,
    shape_reads,
    sibling_reductions,
)
from .legality import CHECKS, Check, first_failure
from .metadata_reads import metadata_reads
from .multi_output import lone_nodes, reduction_regions
from .traffic import estimate_traffic
from .types import Cluster, LineSpan, Rejection


def dead_code(g: FusionGraph) -> set[str]:
    """Compute and view nodes whose value reaches neither the model's output nor any op
    that may have an effect (in-place and opaque ops count as effects)."""
    live: set[str] = set()
    stack = [n.name for n in g.nodes if not (n.kind.is_compute or n.kind is OpKind.VIEW)]
    while stack:
        name = stack.pop()
        if name not in live:
            live.add(name)
            stack.extend(g[name].refs)
    return {n.name for n in g.nodes if n.name not in live}


def candidates(g: FusionGraph) -> set[str]:
    """Compute and in-place nodes, plus views (chains of them) from a compute op that moves
    data to compute ops (and reads of their shape) only, and views eager copies before a
    norm or softmax; never dead
    code (a group whose result nothing reads has no output to write). A view of a value
    read from memory stays out: the kernel reads that value through its strides anyway,
    and left outside it does not stop a consumer from recomputing the group's result;
    unless eager copies it (a reshape of a permuted input, `.contiguous()`), and so the
    views after such a copy count as computed."""
    dead = dead_code(g)
    compute = {n.name for n in g.nodes if (n.kind.is_compute or n.kind is OpKind.INPLACE)
               and n.name not in dead}

    def computed(name: str) -> bool:  # reached through views from an op that moves data
        while g[name].kind is OpKind.VIEW and g[name].refs:
            if eager_copies(g, name):  # `.contiguous()` of a permute: eager writes a copy
                return True
            name = g[name].refs[0]
        return name in compute and moves_data(g, name)

    def feeds_compute(name: str) -> bool:  # and nothing else reads it but its shape
        users = g.users[name]
        return bool(users) and all(u in compute or g[u].kind is OpKind.VIEW
                                   or _reads_shape(g, u, name) for u in users) \
            and any(u in compute or feeds_compute(u) for u in users)

    views = {n.name for n in g.nodes if n.kind is OpKind.VIEW
             and (computed(n.name) or eager_copies(g, n.name)) and feeds_compute(n.name)}
    return compute | views


def _reads_shape(g: FusionGraph, user: str, name: str) -> bool:
    """`user` reads only `name`'s shape (`h.shape[-1]`), dtype or device (`h.device`):
    whether the group's inputs answer it is ``outside_users``'s to say once the group is
    known."""
    return (g[user].shape_of == name and name not in g[user].refs[1:]) \
        or g[user].metadata_of == name


def line_span(g: FusionGraph, names: Iterable[str]) -> LineSpan | None:
    locs = [g[n].source for n in names if g[n].source is not None]
    if not locs:
        return None
    file = Counter(loc.file for loc in locs).most_common(1)[0][0]
    lines = [loc.line for loc in locs if loc.file == file]
    return LineSpan(file, min(lines), max(lines))


def category(g: FusionGraph, group: Collection[str]) -> str:
    group = members(group)
    kinds = [g[n].kind for n in group]
    if len(escaping(g, group)) > 1:
        return "multi-output"
    if OpKind.REDUCTION in kinds:
        return "single-reduction-boundary"
    inner_fan = any(sum(u in group for u in g.users[n]) > 1 for n in group)
    inner_join = any(sum(r in group for r in set(g[n].refs)) > 1 for n in group)
    return "elementwise-dag" if inner_fan or inner_join else "elementwise-chain"


def _cut_rejection(g: FusionGraph, component: tuple[str, ...], lone: tuple[str, ...]
                   ) -> Rejection:
    reds = [n for n in component if g[n].kind is OpKind.REDUCTION]
    return Rejection(
        check="reduction", nodes=component, ops=tuple(g[n].op for n in component),
        culprits=lone, lines=line_span(g, component),
        reason=f"{len(reds)} reductions ({said_all(g, reds)}) over "
               "different rows (or one reached from another through ops outside); a "
               "row-per-program kernel reduces one set of rows, so the group was cut into one "
               "region per kernel and these were left alone")


def _dead_rejections(g: FusionGraph) -> list[Rejection]:
    """One rejection per connected piece of unused code that would have been a group."""
    dead = {n for n in dead_code(g) if g[n].kind.is_compute}
    return [Rejection(check="dead-code", nodes=group, ops=tuple(g[n].op for n in group),
                      culprits=group, lines=line_span(g, group),
                      reason="dead code: result unused (nothing on the way to the model's "
                             "output reads it), so there is no kernel to make")
            for group in components(g, dead) if n_working_ops(g, group) >= MIN_OPS]


def _with_boundary_views(g: FusionGraph, group: tuple[str, ...],
                         checks: Sequence[tuple[str, Check]]) -> tuple[str, ...]:
    """`group` with the view inputs ``boundary.py``'s rule pulls in, where it stays legal."""
    views = boundary_views(g, group)
    if not views:
        return group
    grown = tuple(sorted({*group, *views}, key=g.position))
    return grown if first_failure(g, set(grown), checks) is None else group


def _ending_with_lone_values(g: FusionGraph, legal: list[tuple[str, ...]],
                             checks: Sequence[tuple[str, Check]]) -> list[tuple[str, ...]]:
    """`legal`, each value no group holds given to the one group that computes its
    operands and does not read it, where that group stays legal: the group ends with it and
    writes it once for all its readers. A ResNet block's last ReLU, read by the next block's
    convolution and by its residual add, fails the fan-out check in a group with both
    blocks; pruned, it was left to run alone, reading and writing the activation once more.
    Last, so that no group the rounds above form is taken from."""
    groups = [list(grp) for grp in legal]
    holder = {n: i for i, grp in enumerate(groups) for n in grp}
    for n in absorbable_lone_values(g, holder):
        i = holder[next(r for r in g[n].refs if r in holder)]
        grown = sorted({*groups[i], n}, key=g.position)
        # the group's result becomes `n`: one more result (a no-op such as an eval-mode
        # dropout, which writes the same data again) costs more than `n` alone
        if len(escaping(g, grown)) <= len(escaping(g, groups[i])) and first_failure(
                g, set(grown), checks) is None:
            groups[i] = grown
            holder[n] = i
    return [tuple(grp) for grp in groups]


def absorbable_lone_values(g: FusionGraph, holder: dict[str, int]) -> list[str]:
    """Candidates no group holds (`holder`: node -> group) whose in-group operands all lie
    in one group that does not read them, in graph order."""
    out = []
    for n in sorted(candidates(g) - set(holder), key=g.position):
        owners = {holder[r] for r in g[n].refs if r in holder}
        if (len(owners) == 1 and g[n].kind is not OpKind.VIEW and not g[n].copy_of
                and not any(holder.get(u) in owners for u in g.users[n])):
            out.append(n)
    return out


def _without_orphaned_copies(g: FusionGraph, rest: set[str]) -> set[str]:
    """`rest` less a slice's copy of its producer (``slice_recompute.py``) once the slice
    left: alone the copy would only store the value again. It waits for the leftover
    round, with its slice."""
    rest = set(rest)
    gone = True
    while gone:
        gone = {n for n in rest if g[n].copy_of and not any(u in rest for u in g.users[n])
                and all(g[u].kind is OpKind.VIEW or g[u].copy_of for u in g.users[n])}
        rest -= gone
    return rest


def detect(g: FusionGraph, checks: Sequence[tuple[str, Check]] = CHECKS,
           lone_values: bool = True) -> tuple[tuple[Cluster, ...], tuple[Rejection, ...]]:
    """Clusters and rejections (module docstring); `checks`: the legality checks in order
    (the pipeline's add the code generator's dry run to legality's own); `lone_values`:
    values no group holds end the group computing them (``_ending_with_lone_values``;
    off while the pipeline plans recomputed copies, which would take them otherwise)."""
    legal: list[tuple[str, ...]] = []
    rejections: list[Rejection] = _dead_rejections(g)
    cuts: list[tuple[tuple[str, ...], tuple[str, ...]]] = []  # (component, nodes left alone)
    work: list[tuple[str, ...]] = []
    for component in components(g, candidates(g)):
        regions = reduction_regions(g, component)
        work += [tuple(sorted(r, key=g.position)) for r in regions]
        if len(regions) > 1 and lone_nodes(g, regions):
            cuts.append((component, lone_nodes(g, regions)))
    tried: set[tuple[str, ...]] = set()
    reported: set[tuple[str, tuple[str, ...]]] = set()
    siblings = False  # the last round joins sibling reductions of one outside value
    while work:
        work.sort(key=lambda c: g.position(c[0]))
        while work:
            group = work.pop(0)
            if n_working_ops(g, group) < MIN_OPS or group in tried:
                continue
            tried.add(group)
            failure = first_failure(g, set(group), checks)
            if failure is None:
                legal.append(group)
                continue
            if (failure.check, group) not in reported:  # the sibling round retries groups
                reported.add((failure.check, group))
                rejections.append(Rejection(
                    check=failure.check, nodes=group, ops=tuple(g[n].op for n in group),
                    culprits=failure.culprits, reason=failure.reason,
                    lines=line_span(g, group)))
            rest = _without_orphaned_copies(g, set(group) - set(failure.culprits))
            work = sorted(work + components(g, rest), key=lambda c: g.position(c[0]))
        # Culprits pruned from different groups may still fuse with each other: give the
        # leftovers one more round, until no new group forms. They are cut into reduction
        # regions as in the first round (that cut was reported already).
        fused = {n for grp in legal for n in grp}
        leftover = {n for comp in components(g, candidates(g)) for n in comp
                    if n not in fused}
        regions = [tuple(sorted(r, key=g.position))
                   for comp in components(g, leftover, siblings)
                   for r in reduction_regions(g, comp, siblings)]
        work = [c for c in regions if c not in tried and n_working_ops(g, c) >= MIN_OPS]
        if not work and not siblings:
            # What is still alone may share a kernel with a sibling reduction: two norms of
            # one GEMM's output read its rows once (GPT-NeoX's parallel residual). Last, so
            # that a sibling joins no group before the ordinary rounds had their say.
            siblings, tried = True, set()
            work = [c for c in (tuple(sorted(r, key=g.position))
                                for comp in components(g, leftover, True)
                                for r in reduction_regions(g, comp, True))
                    if n_working_ops(g, c) >= MIN_OPS and len(c) > 1
                    and sibling_reductions(g, c)]
    if lone_values:
        legal = _ending_with_lone_values(g, legal, checks)
    legal = [_with_boundary_views(g, grp, checks) for grp in legal]
    # A group read only for its shape (`n = h.shape[-1]`, told by its inputs) writes nothing
    # the model uses: no kernel to make (it would have no result to return).
    results = {grp: tuple(escaping(g, grp)) for grp in legal}
    rejections += [Rejection(check="dead-code", nodes=grp, ops=tuple(g[n].op for n in grp),
                             culprits=grp, lines=line_span(g, grp),
                             reason="dead code: only its shape is read, so there is no "
                                    "kernel to make") for grp in legal if not results[grp]]
    legal = [grp for grp in legal if results[grp]]
    legal.sort(key=lambda c: g.position(c[0]))
    # A node the cut left alone may have fused in the second round: name only the rest.
    fused = {n for grp in legal for n in grp}
    cut_rejections = [_cut_rejection(g, comp, alone) for comp, lone in cuts
                      if (alone := tuple(n for n in lone if n not in fused))]
    rejections = cut_rejections + rejections
    clusters = tuple(
        Cluster(index=i, nodes=grp, ops=tuple(g[n].op for n in grp),
                category=category(g, grp), inputs=external_inputs(g, grp),
                outputs=results[grp],
                traffic=estimate_traffic(g, grp, copies=False),
                lines=line_span(g, grp),
                recomputes=tuple(dict.fromkeys(g[n].copy_of for n in grp if g[n].copy_of)),
                shape_reads=shape_reads(g, grp),
                metadata_reads=metadata_reads(g, grp))
        for i, grp in enumerate(legal))
    return clusters, tuple(rejections)
