"""What became of each baseline cluster, in reviewer's words.

Reads the baseline and current ``Snapshot``s; pairs their clusters by what they are
(identity, then sites, then ops for a cluster that moved to another module) and says,
for each baseline cluster without a counterpart, what happened and why: it grew into
a larger cluster or merged with another (an improvement), it is still one kernel with
some ops spelled another way (a change), it shrank, split or no longer fuses (a
regression naming the cause), or its ops left the model. Ops that left are judged by
the model as a whole (``Snapshot.totals``): fewer kernels or less traffic is an
improvement (attention moved into `F.scaled_dot_product_attention`), the same is a
change, more is a regression naming what took their place. Returns ``Finding``s and
the (baseline, current) pairs. Ops are found again by site (``locate.py``); node names
are compared across the two runs only for baselines written before sites were recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .explain import Explainer, fmt_bytes, ops_list, spelled
from .findings import LOC, Finding
from .locate import Located, locate, site_module, unprimed
from .pairing import match as _match
from .pairing import staged as _staged
from .snapshot import ClusterRec, OpRec, Snapshot


def model_change(base: Snapshot, cur: Snapshot) -> int | None:
    """-1: the model as a whole runs fewer kernels or moves fewer bytes (and neither more),
    0: the same, 1: more of either; None when the baseline recorded no totals."""
    if base.totals is None or cur.totals is None:
        return None
    b, c = base.totals, cur.totals
    if (c.kernels, c.traffic_bytes) == (b.kernels, b.traffic_bytes):
        return 0
    return -1 if c.kernels <= b.kernels and c.traffic_bytes <= b.traffic_bytes else 1


@dataclass
class ClusterVerdicts:
    base: Snapshot
    cur: Snapshot
    gate: bool  # the `clusters` check is on: say what changed
    explain: Explainer
    findings: list[Finding] = field(default_factory=list)
    pairs: list[tuple[ClusterRec, ClusterRec]] = field(default_factory=list)
    ops_left: bool = False  # some baseline cluster's ops are no longer in the model
    totals_said: bool = False  # a finding quotes the model's totals
    unpaired: set[int] = field(default_factory=set)  # ids of current clusters not yet paired

    def say(self, bucket: str, rec: ClusterRec | None, text: str) -> None:
        self.findings.append(Finding(bucket, text, rec.module if rec else None))

    def run(self) -> list[tuple[ClusterRec, ClusterRec]]:
        """Pair the clusters and say what became of the rest; the pairs' clusters are
        compared field by field by the caller."""
        # The same identity at the same sites; the same sites (a changed ordinal: a cluster
        # before it left); the same identity (ops shifted by an op added before them).
        exact, lost, found = _staged(list(self.base.clusters), list(self.cur.clusters), (
            lambda c: (c.ident, c.sites) if c.sites else None, lambda c: c.sites or None))
        # Written before sites: the same ops on the same nodes first, so an identity shared
        # by two clusters (`nth`) does not pair the wrong one.
        unsited = [b for b in lost if not b.sites]
        by_nodes, unsited, found = _match(unsited, found, lambda c: (c.ops, c.nodes))
        lost = [b for b in lost if b.sites] + unsited
        more, lost, found = _match(lost, found, lambda c: c.ident)
        exact += more
        # Written before sites: the same ops at the same lines, or the same ops.
        old = [b for b in lost if not b.sites]
        by_lines, old, found = _match(old, found, lambda c: (c.ops, c.lines))
        by_ops, old, found = _match(old, found, lambda c: c.ops)
        lost = [b for b in lost if b.sites] + old
        # A cluster none of whose ops is where it was, with its ops in a new module: moved.
        gone = [b for b in lost if b.sites and not locate(b, self.cur).found]
        moved, gone, found = _match(gone, found, lambda c: c.ops)
        lost = [b for b in lost if all(b is not g for g, _ in moved)]
        self.pairs = exact + by_nodes + by_lines + by_ops + moved
        for b, c in by_nodes + by_lines + by_ops + moved:
            if self.gate and b.module is not None and (b.module, b.function) != (
                    c.module, c.function):
                self._moved(b, c)
        self.unpaired = {id(c) for c in found}  # a current cluster pairs with one at most
        explained: set[int] = set()
        for b in lost:
            explained |= self.lost(b)
        for c in found:
            if id(c) not in explained and self.gate:
                self.say("improvements", c, f"new cluster `{c.chain}` ({c.category}){LOC} "
                                            f"at {c.lines}")
        return self.pairs

    def _moved(self, b: ClusterRec, c: ClusterRec) -> None:
        """`mul → add` in blocks.0 moved from attn.forward to attention.forward: said from
        the module both share, so the same move in every item of a container is one line."""
        old, new = (b.module or "").split("."), (c.module or "").split(".")
        n = 0
        while n < min(len(old), len(new)) and old[n] == new[n] and old[n]:
            n += 1
        shared = ".".join(old[:n])

        def rest(parts: list[str], function: str | None) -> str:
            return ".".join(p for p in (*parts[n:], function) if p) or "the model"

        self.findings.append(Finding("changes", f"`{c.chain}`{LOC} moved from "
                                     f"{rest(old, b.function)} to {rest(new, c.function)}",
                                     shared or None))

    # ------------------------------------------------------------ one baseline cluster
    @property
    def recorded(self) -> set[str]:
        """The sites of every op a baseline record names: ops that were there before."""
        return {unprimed(s) for r in (*self.base.clusters, *self.base.rejections)
                for s in r.sites if s}

    def holders(self, loc: Located) -> list[ClusterRec]:
        """Current clusters holding any of the found ops."""
        return [c for c in self.cur.clusters if any(holds(c, o) for o in loc.found)]

    def lost(self, b: ClusterRec) -> set[int]:
        """Say what became of `b`; return the ids of the current clusters that says it of."""
        loc = locate(b, self.cur)
        parts = self.holders(loc)
        if loc.missing:
            self.ops_left = True
            return self._ops_left(b, loc, parts)
        at = f"{LOC} at {loc.lines}" if loc.lines else f"{LOC} (at {b.lines} when recorded)"
        parts = [c for c in parts if any(holds(c, o) for o in loc.own)]
        whole = [c for c in parts if all(holds(c, o) for o in loc.own)]
        if whole and same_ops(b, whole[0]) and id(whole[0]) in self.unpaired:
            # The same cluster, found by its ops; it may read a value it recomputed before.
            c = whole[0]
            self.unpaired.discard(id(c))
            self.pairs.append((b, c))
            dropped = [o.op for o in loc.recomputed if not holds(c, o)]
            if dropped and self.gate:
                self.say("changes", b, f"`{b.chain}`{at} no longer recomputes "
                                       f"{ops_list(dropped)}: `{c.chain}` reads its stored value")
            return {id(c)}
        if whole:
            c = whole[0]
            if self.gate:
                self.say("improvements", b, f"`{b.chain}`{at} now fuses into the larger "
                                            f"`{c.chain}` at {c.lines}")
            return {id(c)}
        if not self.gate:
            return {id(c) for c in parts}
        why = self.explain.why(loc.nodes)
        # A view the user changed is a likely cause, though no rejection names it.
        at += "".join(f" (its `{op}` is now {spelled(v)})" for op, v in loc.changed_views)
        if len(parts) > 1:
            into = " + ".join(f"`{p.chain}` ({p.lines})" for p in parts)
            self.say("regressions", b, f"`{b.chain}`{at} split into {into}{why}")
        elif parts:
            p = parts[0]
            left = [o for o in loc.own if not holds(p, o)]
            why = self.explain.why(loc.nodes, ({o.node for o in left},
                                               {o.node for o in loc.own if holds(p, o)}))
            out = ops_list([o.op for o in left])
            if len(p.ops) < len(b.ops):
                self.say("regressions", b, f"`{b.chain}`{at} shrank to `{p.chain}`, without "
                                           f"{out}{why}")
            else:  # the rest fuses with ops it did not have: no shrinking
                self.say("regressions", b, f"`{b.chain}`{at} no longer holds {out}; its other "
                                           f"ops now fuse in `{p.chain}` ({p.lines}){why}")
        else:
            self.say("regressions", b, f"`{b.chain}`{at} no longer fuses"
                                       f"{why or NO_CAUSE}")
        return {id(c) for c in parts}

    def _left(self, loc: Located) -> str:
        """The ops that left, in the user's words: a bias add our capture split off a layer
        is `the bias add of `self.embed` (Linear)` (the layer now adds it itself)."""
        layers = {o.module: o for o in self.cur.ops
                  if o.kind == "opaque" and o.spelled.startswith("self.")}
        names = []
        for op, site in loc.missing:
            layer = layers.get(site_module(site) or "") if op == "add" else None
            names.append(f"the bias add of `{layer.spelled}` ({layer.op}), which the layer "
                         "now adds itself," if layer else f"`{op}`")
        return " / ".join(dict.fromkeys(names))

    def _silent(self, b: ClusterRec, loc: Located) -> str:
        """` (`self.ln2` no longer runs)` for the submodules of `b` the missing ops ran in
        that run no op now."""
        from fusion_core.names import module_written  # here: a run without fusion tests loads none

        running = {o.module for o in self.cur.ops}
        inside = f"{b.module}." if b.module else ""
        where = [m for _, s in loc.missing if (m := site_module(s)) is not None]
        gone = [m[len(inside):] for m in dict.fromkeys(where)
                if m not in running and m.startswith(inside) and m != b.module]
        names = ", ".join(f"`{module_written(m)}`" for m in gone)
        return f" ({names} no longer run{'s' if len(gone) == 1 else ''})" if gone else ""

    def _ops_left(self, b: ClusterRec, loc: Located, parts: list[ClusterRec]) -> set[int]:
        """Some of `b`'s ops are no longer in the model: spelled another way inside one
        kernel (a change), or gone, judged by the model as a whole."""
        if not self.gate:
            return {id(c) for c in parts}
        left = self._left(loc) + self._silent(b, loc)
        whole = [c for c in parts if all(holds(c, o) for o in loc.found)]
        if loc.found and whole:
            c = whole[0]
            sites = c.sites or ("?",) * len(c.nodes)  # unknown: every node counts
            known = self.recorded | {o.site for o in loc.found}
            came = [n for n, s in zip(c.nodes, sites, strict=False)
                    if s and n not in loc.nodes and unprimed(s) not in known]
            # Ops (not views) that were not in `b` took the place of those that left, and no
            # call outside the kernel stands where they were (`silu` as `expit(g) * g` with
            # an unknown `expit`: a kernel more, not a respelling).
            if came and not self.explain.newcomers(loc):
                self.say("changes", b, f"`{b.chain}`{LOC} at {c.lines} is still one kernel, "
                                       f"now `{c.chain}` ({left} spelled another way)")
                return {id(c)}
        modules = {m for _, s in loc.missing if (m := site_module(s)) is not None}
        went = self.explain.where_they_went(loc, modules)
        if loc.found:
            where = f"at {loc.lines}" if loc.lines else f"(at {b.lines} when recorded)"
            text = f"`{b.chain}`{LOC} {where}: {left}{went or ' left the model'}"
        else:
            text = (f"`{b.chain}`{LOC}: its ops left the model (at {b.lines} when the baseline "
                    f"was recorded){went}")
        if parts:
            text += "; the rest fuses as " + " + ".join(f"`{p.chain}` ({p.lines})"
                                                         for p in parts)
        elif loc.found:
            text += f"; the rest no longer fuses{self.explain.why(loc.nodes)}"
        change = model_change(self.base, self.cur)
        bucket = {-1: "improvements", 0: "changes"}.get(change, "regressions")  # type: ignore
        totals = model_totals(self.base, self.cur)
        self.totals_said |= bool(totals)
        self.say(bucket, b, text + (f" ({totals.strip()})" if totals else ""))
        return {id(c) for c in parts}


# The last resort, when nothing recorded in the current run separates the ops.
NO_CAUSE = (": no rejection names its ops and no op the analyzer cannot fuse through sits "
            "between them")


def same_ops(b: ClusterRec, c: ClusterRec) -> bool:
    """`c` computes no op at a site `b` did not (copies aside): the same cluster."""
    if not (b.sites and c.sites):
        return c.ops == b.ops
    return {unprimed(s) for s in c.sites if s} <= {unprimed(s) for s in b.sites if s}


def holds(c: ClusterRec, o: OpRec) -> bool:
    """Whether current cluster `c` computes op `o` (itself, or a recomputed copy of it)."""
    return o.node in c.nodes or bool(o.site) and o.site in {unprimed(s) for s in c.sites}


def model_totals(base: Snapshot, cur: Snapshot) -> str:
    """` the model as a whole runs 21 → 17 kernels and moves 1.0 MB → 0.9 MB` ("" unknown)."""
    if base.totals is None or cur.totals is None:
        return ""
    b, c = base.totals, cur.totals
    parts = [f"runs {b.kernels} → {c.kernels} kernels"] if b.kernels != c.kernels else []
    if b.traffic_bytes != c.traffic_bytes:
        parts.append(f"moves {fmt_bytes(b.traffic_bytes)} → {fmt_bytes(c.traffic_bytes)}")
    return f" the model as a whole {' and '.join(parts)}" if parts else ""
