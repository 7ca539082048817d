"""Multi-output groups and reduction regions: when one kernel may write several values.

Reads a ``FusionGraph`` and a candidate group; returns a ``StoreVerdict`` or the
group's regions (node-name sets). Two decisions live here:

* ``store_verdict``: a group whose values escape (a residual ``add`` feeding both a
  LayerNorm inside and the next residual outside) may still be one kernel that stores
  each escaping value once. It pays when that kernel's traffic, extra stores included,
  is below the split the fan-out check would otherwise force (its culprits computed
  alone, the remaining pieces fused). A value smaller than the kernel's iteration
  domain (and not a per-row result of its reduction) would be stored by every program:
  it is costed at the domain's size, which is where storing stops paying.
* ``reduction_regions``: a component holding several reductions is cut into one region
  per reduction -- its pointwise prologue (ops feeding it, up to the previous
  reduction), the reduction, and its pointwise epilogue -- before any check runs, so
  a residual stream of LayerNorms becomes one candidate per LayerNorm.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from ..ir.graph import FusionGraph, OpKind
from ..units import fmt_bytes
from .group import (
    MIN_OPS,
    answered,
    check_convexity,
    components,
    n_working_ops,
    reduced_shape,
)
from .traffic import estimate_traffic


@dataclass(frozen=True)
class StoreVerdict:
    fused_bytes: int  # one kernel writing every escaping value (after convexity pruning)
    split_bytes: int  # the culprits alone and the remaining pieces fused

    @property
    def pays(self) -> bool:
        return self.fused_bytes < self.split_bytes

    def __str__(self) -> str:
        return (f"writing every result from one kernel would move "
                f"{fmt_bytes(self.fused_bytes)}, not less than {fmt_bytes(self.split_bytes)} "
                "split")


def store_verdict(g: FusionGraph, group: Collection[str], culprits: Collection[str]
                  ) -> StoreVerdict:
    """Compare keeping the group (multi-output) with dropping the fan-out culprits.

    A kept group that is not convex will still lose the nodes the convexity check
    drops; those run alone in the comparison, as they would in detection.
    """
    kept, alone = set(group), []
    while (failure := check_convexity(g, kept)) is not None:
        kept -= set(failure.culprits)
        alone += failure.culprits
    fused = sum(_piece_bytes(g, {n}) for n in alone)
    fused += sum(_piece_bytes(g, p) for p in components(g, kept, siblings=True))
    split = sum(_piece_bytes(g, {c}) for c in culprits)
    split += sum(_piece_bytes(g, p) for p in components(g, set(group) - set(culprits)))
    return StoreVerdict(fused, split)


def _piece_bytes(g: FusionGraph, piece: Collection[str]) -> int:
    t = estimate_traffic(g, piece)
    return t.fused_bytes if n_working_ops(g, piece) >= MIN_OPS else (
        t.unfused_bytes)


def reduction_regions(g: FusionGraph, component: Collection[str], siblings: bool = False
                      ) -> list[set[str]]:
    """One region per reduction (prologue, reduction, epilogue); others stay whole.
    `siblings`: sibling reductions of one outside value stay in one region."""
    order = sorted(component, key=g.position)
    members = set(order)
    reds = {n for n in order if g[n].kind is OpKind.REDUCTION}
    share = _sharing(g, members, sorted(reds, key=g.position))
    if len(set(share.values())) <= 1:
        return [members]  # no reduction, or all may share one kernel
    # The first reduction each node feeds (prologue) and the last one feeding it (epilogue).
    down: dict[str, str | None] = {}
    for n in reversed(order):
        hits = [down[u] for u in g.users[n] if u in members and down.get(u)]
        down[n] = n if n in reds else min(hits, key=g.position, default=None)
    up: dict[str, str | None] = {}
    for n in order:
        hits = [up[r] for r in g[n].refs if r in members and up.get(r)]
        up[n] = n if n in reds else max(hits, key=g.position, default=None)
    owner = {n: share[r] if (r := down[n] or up[n]) else None for n in order}
    # Side branches touching no reduction join a neighbour's region.
    for sweep in (order, list(reversed(order))):
        for n in sweep:
            if owner[n] is None:
                near = [owner[m] for m in (*g[n].refs, *g.users[n]) if owner.get(m)]
                owner[n] = near[0] if near else None
    regions: dict[str | None, set[str]] = {}
    for n in order:
        regions.setdefault(owner[n], set()).add(n)
    return [p for region in regions.values()
            for p in components(g, region, siblings)]


def _sharing(g: FusionGraph, members: set[str], reds: list[str]) -> dict[str, str]:
    """Each reduction → the first reduction whose kernel it may share: the same rows, and no
    path to it that leaves the component (a residual stream's next norm is reached through a
    GEMM, so it stays apart; two norms of one input, or mean then variance, share)."""
    share: dict[str, str] = {}
    reach: dict[str, set[str]] = {}  # reduction -> nodes it reaches through outside nodes
    for r in reds:
        reach[r] = _through_outside(g, members, r)
        heads = dict.fromkeys(share.values())
        share[r] = next((h for h in heads if reduced_shape(g, h) == reduced_shape(g, r)
                         and not any(r in reach[q] for q, hq in share.items() if hq == h)), r)
    return share


def _through_outside(g: FusionGraph, members: set[str], src: str) -> set[str]:
    """Nodes reachable from `src` only by paths through at least one node outside `members`
    (not through a read of a member's shape, dtype or device that outside values answer)."""
    inside, outside = {src}, set()
    for node in g.nodes[g.position(src) + 1:]:  # graph order is topological
        refs = node.refs
        if any(r in outside for r in refs):
            outside.add(node.name)
        elif (read := node.shape_of or node.metadata_of) in inside \
                and answered(g, members, node.name, read):
            continue
        elif any(r in inside for r in refs):
            (inside if node.name in members else outside).add(node.name)
    return outside


def lone_nodes(g: FusionGraph, regions: list[set[str]]) -> tuple[str, ...]:
    """Compute nodes left alone in their region: cutting the component dropped them."""
    return tuple(sorted((n for r in regions if n_working_ops(g, r) < MIN_OPS
                         for n in r if g[n].kind.is_compute), key=g.position))

