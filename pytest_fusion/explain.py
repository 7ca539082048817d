"""Why a baseline cluster's ops no longer fuse as they did, in the model as it is now.

Reads the current ``Snapshot`` (its clusters, rejections, barriers and op index) and
the current ops of a baseline cluster (``locate.py``); names the cause: an op the
analyzer cannot fuse through that now sits between two of its ops (`torch.roll` at
blocks.py:49 between `masked_fill` and `softmax`), an in-place write, an opaque op
that took the place of one that left (a custom op for `torch.sigmoid`), the legality
check that now rejects the group, or the fused library op its ops went into. Every
name is the user's spelling at the line where it is now.
"""

from __future__ import annotations

import re

from fusion_core import fmt_bytes  # noqa: F401  (compare and the report take it from here)

from .locate import Located
from .snapshot import BarrierRec, OpRec, RejectionRec, Snapshot

# Calls that compute what several pointwise and reduction ops did, in one library kernel.
_FUSED_LIBRARY = re.compile(r"attention|fused|flash|::")


def head(reason: str) -> str:
    """The first clause of a legality reason (the part before the pruning details)."""
    return reason.split(";")[0].strip()


def ops_list(ops: list[str] | tuple[str, ...]) -> str:
    return " / ".join(f"`{op}`" for op in dict.fromkeys(ops))


def _inplace_ops(r: RejectionRec) -> list[str]:
    """In-place ops of a rejected group (the analyzer spells them with a trailing `_`)."""
    return [op for op in r.ops if op.endswith("_") and not op.startswith("_")]


def spelled(o: OpRec) -> str:
    """`torch.roll` at blocks.py:49; a layer as `self.fc` (Linear)."""
    layer = f" ({o.op})" if o.spelled.startswith("self.") and o.op != "opaque" else ""
    where = f" at {o.line}" if o.line != "?" else ""
    return f"`{o.spelled}`{layer}{where}"


class Explainer:
    def __init__(self, cur: Snapshot) -> None:
        self.cur = cur
        self.ops = {o.node: o for o in cur.ops}
        self.used: list[RejectionRec] = []  # rejections quoted in an explanation

    def barrier(self, nodes: set[str]) -> tuple[BarrierRec, str] | None:
        """The op now between two of `nodes`, as `torch.roll` at f.py:12 now sits …"""
        for x in self.cur.barriers:
            before = [b for b in x.before if b[0] in nodes]
            after = [a for a in x.after if a[0] in nodes]
            # An in-place op may take the place of one of the cluster's own ops (`F.relu`
            # with inplace=True keeps the node name `relu`): one side suffices then.
            took_place = x.inplace and (before or after) and x.node in nodes
            if (before and after) or took_place:
                return x, self._describe(x, before or list(x.before), after or list(x.after))
        return None

    def _beside(self, x: BarrierRec, ops: list[tuple[str, str]]) -> str:
        """The ops on one side of `x` at their lines, as the CLI's barrier list says them:
        `silu` (line 7) / `gelu` (line 9); at their file where it is not the barrier's."""
        bar = self.ops.get(x.node)
        file = (bar.line if bar is not None else x.lines).rpartition(":")[0]
        said = []
        for node, op in ops:
            o = self.ops.get(node)
            at, _, line = o.line.rpartition(":") if o is not None else ("", "", "?")
            where = "" if line == "?" else f" (line {line})" if at == file else f" at {o.line}"
            said.append(f"`{op}`{where}")
        return " / ".join(dict.fromkeys(said))

    def _spelled(self, x: BarrierRec) -> str:
        """The barrier as `spelled` names an op, at its line: `torch.roll` at blocks.py:49."""
        o = self.ops.get(x.node)
        if o is not None:
            return spelled(o)
        return f"`{x.target}`" + (f" at {x.lines}" if x.lines != "?" else "")

    def _located(self, reason: str) -> str:
        """A reason about a barrier (`.add_()` (line 10) mutates …) names it at its file and
        line, as the sentences above do: `.add_()` at blocks.py:10 mutates …"""
        # `(blocks.py:10)` where the model's ops span several files (fusion_core's `place`)
        m = re.match(r"`([^`]+)` \((?:line |([^\s():]+):)(\d+)\)", reason)
        if m is None:
            return reason
        for x in self.cur.barriers:
            file, _, line = x.lines.rpartition(":")
            if x.target == m[1] and line == m[3] and m[2] in (None, file.rsplit("/", 1)[-1]):
                return self._spelled(x) + reason[m.end():]
        return reason

    def _describe(self, x: BarrierRec, before: list[tuple[str, str]],
                  after: list[tuple[str, str]]) -> str:
        what, before_, after_ = self._spelled(x), self._beside(x, before), self._beside(x, after)
        if x.inplace:
            return (f"{what} now writes in place between {before_} and {after_}: "
                    "fusion-advisor cannot fuse across an in-place op")
        return f"{what} now sits between {before_} and {after_}: {x.reason}"

    def rejection(self, nodes: set[str], parted: tuple[set[str], ...] = ()
                  ) -> RejectionRec | None:
        """The first rejection of `nodes`; with `parted` (the groups of them that now run
        apart), only one that holds a node of each group: one about other ops says nothing
        of why these parted."""
        for r in self.cur.rejections:
            held = set(r.nodes)
            if held & nodes and all(held & group for group in parted):
                self.used.append(r)
                return r
        return None

    def why(self, nodes: set[str], parted: tuple[set[str], ...] = ()) -> str:
        """`: <what separates the ops>` for the current `nodes` ("" when nothing is known)."""
        found, r = self.barrier(nodes), self.rejection(nodes, parted)
        # A rejection about the barrier itself (`.mul_()` (line 10) mutates …) says it all;
        # one whose path merely passes through it (convexity) does not say where it sits.
        if found and not (r and r.reason.startswith(f"`{found[0].target}`")):
            text = found[1]
            return f": {text} (rejected as {r.check}: {head(r.reason)})" if r else f": {text}"
        if r is None:
            return ""
        reason = self._located(head(r.reason))
        inplace = _inplace_ops(r) if "in place" not in r.reason else []
        note = f" (the group holds the in-place `{inplace[0]}`)" if inplace else ""
        return f": {r.check}, {reason}{note}"

    def newcomers(self, loc: Located) -> list[OpRec]:
        """Opaque calls (not layers) that read one of the found ops or feed one: what may
        have taken the place of the ops that left."""
        nodes = loc.nodes
        feeding = {r for o in loc.found for r in o.reads}
        order = {o.node: i for i, o in enumerate(self.cur.ops)}

        def in_a_gap(o: OpRec) -> bool:
            """Run where a missing op ran: a call that was there all along (a softplus
            feeding another of the found ops) took no one's place."""
            if not (loc.gaps and self.cur.op_index):  # no graph order to place it by
                return True
            at = order[o.node]
            return any(
                (a is None or order.get(a, -1) < at) and (b is None or at < order.get(b, at + 1))
                for a, b in loc.gaps)
        return [o for o in self.cur.ops
                if o.kind in ("opaque", "inplace") and not o.spelled.startswith("self.")
                and (o.node in feeding or nodes & set(o.reads)) and in_a_gap(o)]

    def fused_library(self, modules: set[str]) -> list[OpRec]:
        """Library calls that compute a whole pattern (SDPA, a custom fused op) in `modules`."""
        return [o for o in self.cur.ops if o.kind == "opaque" and o.module in modules
                and _FUSED_LIBRARY.search(o.spelled)]

    def where_they_went(self, loc: Located, modules: set[str]) -> str:
        """`was replaced by …` / `…: … now computes them`, for ops that left the model
        ("" when nothing now stands where they were)."""
        if loc.found:
            came = self.newcomers(loc)
            return (f" was replaced by {' and '.join(spelled(o) for o in came)}, which "
                    "fusion-advisor cannot fuse through") if came else ""
        came = self.fused_library(modules)
        return f"; {' and '.join(spelled(o) for o in came)} now computes them" if came else ""
