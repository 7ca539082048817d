"""Why a baseline cluster no longer fuses: what now separates its ops.

Reads the current ``Snapshot`` (its clusters, rejections and barriers) and a
baseline ``ClusterRec`` that has no counterpart; returns the current clusters
holding its ops and the reason in words. An op the analyzer cannot fuse through
that now sits between two of the cluster's ops is named first, with its source
line (`torch.roll` between `silu` and `mul`); an in-place write is named as such,
also when a rejection blames something else (fan-out on the value it overwrote).
The current rejection covering the cluster's ops follows.
"""

from __future__ import annotations

from fusion_core import fmt_bytes  # noqa: F401  (compare and the report take it from here)

from .snapshot import BarrierRec, ClusterRec, RejectionRec, Snapshot


def head(reason: str) -> str:
    """The first clause of a legality reason (the part before the pruning details)."""
    return reason.split(";")[0].strip()


def pairs(rec: ClusterRec | RejectionRec) -> set[tuple[str, str]]:
    """(node, op) pairs: the same node name with the same op is the same computation."""
    return set(zip(rec.nodes, rec.ops, strict=False))


def _ops(side: list[tuple[str, str]]) -> str:
    return " / ".join(f"`{op}`" for op in dict.fromkeys(op for _, op in side))


def _inplace_ops(r: RejectionRec) -> list[str]:
    """In-place ops of a rejected group (the analyzer spells them with a trailing `_`)."""
    return [op for op in r.ops if op.endswith("_") and not op.startswith("_")]


class Explainer:
    def __init__(self, cur: Snapshot) -> None:
        self.cur = cur
        self.used: list[RejectionRec] = []  # rejections quoted in an explanation

    def parts(self, b: ClusterRec) -> tuple[list[ClusterRec], list[ClusterRec]]:
        """Current clusters sharing ops with `b`, and those among them holding all of it."""
        mine = pairs(b)
        found = [c for c in self.cur.clusters if pairs(c) & mine]
        return found, [c for c in found if mine <= pairs(c)]

    def barrier(self, b: ClusterRec) -> tuple[BarrierRec, str] | None:
        """The op now between two of `b`'s ops, and `torch.roll` at f.py:12 now sits …"""
        mine, names = pairs(b), set(b.nodes)
        for x in self.cur.barriers:
            before = [p for p in x.before if p in mine]
            after = [p for p in x.after if p in mine]
            # An in-place op may take the place of one of the cluster's own ops (`F.relu`
            # with inplace=True keeps the node name `relu`): one side suffices then.
            took_place = x.inplace and x.node in names and (before or after)
            if (before and after) or took_place:
                return x, self._describe(x, before or list(x.before), after or list(x.after))
        return None

    @staticmethod
    def _describe(x: BarrierRec, before: list, after: list) -> str:
        where = f" at {x.lines}" if x.lines != "?" else ""
        if x.inplace:
            return (f"`{x.target}`{where} now writes in place between {_ops(before)} and "
                    f"{_ops(after)}: fusion-advisor cannot fuse across an in-place op")
        layer = f" ({x.op})" if x.target.startswith("self.") else ""  # `self.lin` (Linear)
        return (f"`{x.target}`{layer}{where} now sits between {_ops(before)} and "
                f"{_ops(after)}: fusion-advisor cannot fuse through it")

    def rejection(self, b: ClusterRec) -> RejectionRec | None:
        mine = pairs(b)
        for r in self.cur.rejections:
            if pairs(r) & mine:
                self.used.append(r)
                return r
        return None

    def why(self, b: ClusterRec) -> str:
        """`: <what separates the ops>` (empty when nothing is known)."""
        found, r = self.barrier(b), self.rejection(b)
        if found and not (r and f"`{found[0].target}`" in r.reason):
            text = found[1]
            return f": {text} (rejected as {r.check}: {head(r.reason)})" if r else f": {text}"
        if r is None:
            return ""
        inplace = _inplace_ops(r) if "in place" not in r.reason else []
        note = f" (the group holds the in-place `{inplace[0]}`)" if inplace else ""
        return f": {r.check}, {head(r.reason)}{note}"
