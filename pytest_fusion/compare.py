"""Compare a test's current fusion snapshot with its baseline, in reviewer's words.

Reads two ``Snapshot``s (baseline, current), the tolerances, the checks to gate
and the current hardware key; returns a ``Comparison``: regressions (fail the
test), improvements (pass, suggest ratcheting), changes (pass, e.g. a cluster
whose source lines moved) and a note on timings. Works on parsed data only,
never on YAML text. Clusters pair up by (ops, lines), then by ops alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .snapshot import ClusterRec, ClusterTiming, RejectionRec, Snapshot
from .timing import TimingVerdict, compare_samples

CHECKS = ("clusters", "rejections", "traffic", "timings")
NO_CUDA = "timings not checked: no CUDA device"


@dataclass(frozen=True)
class Tolerances:
    traffic: float = 0.0  # relative increase of a cluster's fused bytes that still passes
    timing: float = 0.10  # relative slowdown of a median that still passes
    alpha: float = 0.05  # significance level of the Mann–Whitney test


@dataclass(frozen=True)
class Comparison:
    regressions: tuple[str, ...]
    improvements: tuple[str, ...]
    changes: tuple[str, ...]
    timing_note: str

    @property
    def status(self) -> str:
        for status, found in (("regressed", self.regressions),
                              ("improved", self.improvements), ("changed", self.changes)):
            if found:
                return status
        return "pass"


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def _pairs(rec: ClusterRec | RejectionRec) -> set[tuple[str, str]]:
    """(node, op) pairs: the same node name with the same op is the same computation."""
    return set(zip(rec.nodes, rec.ops, strict=False))


def _match(base: list, cur: list, key) -> tuple[list[tuple], list, list]:
    """Pair items with equal keys in order; return pairs and the leftovers of each side."""
    pairs, rest_cur = [], list(cur)
    rest_base = []
    for b in base:
        hit = next((c for c in rest_cur if key(c) == key(b)), None)
        if hit is None:
            rest_base.append(b)
        else:
            rest_cur.remove(hit)
            pairs.append((b, hit))
    return pairs, rest_base, rest_cur


def _head(reason: str) -> str:
    """The first clause of a legality reason (the part before the pruning details)."""
    return reason.split(";")[0].strip()


class _Diff:
    def __init__(self, base: Snapshot, cur: Snapshot, tol: Tolerances, checks: set[str]):
        self.base, self.cur, self.tol, self.checks = base, cur, tol, checks
        self.regressions: list[str] = []
        self.improvements: list[str] = []
        self.changes: list[str] = []
        self.explained_rejections: list[RejectionRec] = []
        self.pairs: list[tuple[ClusterRec, ClusterRec]] = []

    def clusters(self) -> None:
        exact, lost, found = _match(list(self.base.clusters), list(self.cur.clusters),
                                    lambda c: (c.ops, c.lines))
        moved, lost, found = _match(lost, found, lambda c: c.ops)
        self.pairs = exact + moved
        gate = "clusters" in self.checks
        for b, c in moved:
            self.changes.append(f"`{b.chain}` moved from {b.lines} to {c.lines}")
        for b, c in self.pairs:
            if gate and b.category != c.category:
                self.regressions.append(f"`{c.chain}` at {c.lines} changed category: "
                                        f"{b.category} → {c.category}")
            if gate:
                self._kernel(b, c)
            if "traffic" in self.checks:
                self._traffic(b, c)
        explained: set[int] = set()
        for b in lost:
            explained |= self._lost(b, gate)
        for c in found:
            if id(c) not in explained and gate:
                self.improvements.append(f"new cluster `{c.chain}` ({c.category}) at {c.lines}")

    def _kernel(self, b: ClusterRec, c: ClusterRec) -> None:
        if b.kernel and not c.kernel:
            self.regressions.append(f"`{c.chain}` at {c.lines} no longer gets a kernel: "
                                    f"{c.kernel_error or 'code generation failed'}")
        elif c.kernel and not b.kernel:
            self.improvements.append(f"`{c.chain}` at {c.lines} now gets a kernel ({c.kernel})")
        elif b.kernel != c.kernel:
            self.changes.append(f"`{c.chain}` at {c.lines}: {b.kernel} kernel → {c.kernel}")

    def _traffic(self, b: ClusterRec, c: ClusterRec) -> None:
        if c.fused_bytes > b.fused_bytes * (1 + self.tol.traffic):
            pct = (c.fused_bytes / b.fused_bytes - 1) * 100 if b.fused_bytes else float("inf")
            self.regressions.append(
                f"`{c.chain}` at {c.lines} moves more traffic: {fmt_bytes(b.fused_bytes)} → "
                f"{fmt_bytes(c.fused_bytes)} fused (+{pct:.0f}%, "
                f"tolerance {self.tol.traffic:.0%})")
        elif c.fused_bytes < b.fused_bytes:
            self.improvements.append(f"`{c.chain}` at {c.lines} moves less traffic: "
                                     f"{fmt_bytes(b.fused_bytes)} → {fmt_bytes(c.fused_bytes)}")

    def _lost(self, b: ClusterRec, gate: bool) -> set[int]:
        """Explain a baseline cluster with no counterpart; return ids of clusters it explains."""
        mine = _pairs(b)
        parts = [c for c in self.cur.clusters if _pairs(c) & mine]
        bigger = [c for c in parts if mine <= _pairs(c)]
        why = self._why(b)
        if bigger:
            c = bigger[0]
            if gate:
                self.improvements.append(f"`{b.chain}` at {b.lines} now fuses into the larger "
                                         f"`{c.chain}` at {c.lines}")
            return {id(c)}
        if not gate:
            return {id(c) for c in parts}
        if len(parts) > 1:
            into = " + ".join(f"`{p.chain}` ({p.lines})" for p in parts)
            self.regressions.append(f"`{b.chain}` at {b.lines} split into {into}{why}")
        elif parts:
            p = parts[0]
            self.regressions.append(f"`{b.chain}` at {b.lines} no longer fuses as one: now "
                                    f"`{p.chain}` ({p.lines}){why}")
        elif why:
            self.regressions.append(f"`{b.chain}` at {b.lines} no longer fuses{why}")
        else:
            self.regressions.append(f"`{b.chain}` at {b.lines} no longer fuses (no rejection "
                                    "names its ops: they may have changed or left the model)")
        return {id(c) for c in parts}

    def _why(self, b: ClusterRec) -> str:
        """`: fan-out, `relu` is also used by …` from the current rejection covering `b`."""
        mine = _pairs(b)
        for r in self.cur.rejections:
            if _pairs(r) & mine:
                self.explained_rejections.append(r)
                return f": {r.check}, {_head(r.reason)}"
        return ""

    def rejections(self) -> None:
        _, gone, new = _match(list(self.base.rejections), list(self.cur.rejections),
                              lambda r: (r.check, r.ops, r.lines))
        for r in new:
            if not any(r is e for e in self.explained_rejections):
                self.regressions.append(f"new rejection at {r.lines}: {r.check} on `{r.chain}`, "
                                        f"{_head(r.reason)}")
        for r in gone:
            self.changes.append(f"rejection gone: {r.check} on `{r.chain}` at {r.lines}")


def _timing_line(what: str, key: str, v: TimingVerdict, tol: Tolerances) -> str:
    word = {"slower": "is slower", "faster": "is faster"}[v.status]
    p = v.p_slower if v.status == "slower" else v.p_faster
    return (f"{what} {word} on {key}: median {v.base_median:.1f} µs → "
            f"{v.current_median:.1f} µs ({v.change}, tolerance {tol.timing:.0%}, p={p:.3f})")


def timings(base: Snapshot, cur: Snapshot, hw_key: str | None, tol: Tolerances,
            pairs: list[tuple[ClusterRec, ClusterRec]]) -> tuple[list[str], list[str], str]:
    """(regressions, improvements, note) for the measured fields on this hardware."""
    if hw_key is None:
        return [], [], NO_CUDA
    if hw_key not in cur.measured:
        return [], [], f"timings not checked: nothing measured on {hw_key}"
    if hw_key not in base.measured:
        return [], [], f"timings not checked: no baseline for {hw_key}"
    bm, cm = base.measured[hw_key], cur.measured[hw_key]
    slow: list[str] = []
    fast: list[str] = []
    judged = 0

    def judge(what: str, b: tuple[float, ...], c: tuple[float, ...]) -> None:
        nonlocal judged
        v = compare_samples(list(b), list(c), tol.timing, tol.alpha)
        judged += v.status != "insufficient"
        if v.status in ("slower", "faster"):
            (slow if v.status == "slower" else fast).append(_timing_line(what, hw_key, v, tol))

    for b, c in pairs:
        bt, ct = _timing_of(bm.clusters, b, base.clusters), _timing_of(cm.clusters, c,
                                                                        cur.clusters)
        if bt is not None and ct is not None:
            judge(f"`{c.chain}` at {c.lines}", bt.kernel_us, ct.kernel_us)
    if bm.model_us and cm.model_us:
        judge("the model with fused kernels", bm.model_us, cm.model_us)
    note = (f"timings checked on {hw_key} ({judged} compared)" if judged
            else f"timings not checked: too few samples on {hw_key}")
    return slow, fast, note


def _timing_of(timings_: tuple[ClusterTiming, ...], c: ClusterRec,
               clusters: tuple[ClusterRec, ...]) -> ClusterTiming | None:
    """The timing entry of cluster `c`: same ops and lines, same ordinal among equals."""
    equals = [x for x in clusters if (x.ops, x.lines) == (c.ops, c.lines)]
    nth = next(i for i, x in enumerate(equals) if x is c)
    same = [t for t in timings_ if (t.ops, t.lines) == (c.ops, c.lines)]
    return same[nth] if nth < len(same) else None


def frontend_change(base: Snapshot, cur: Snapshot) -> str:
    """Why the clusters may differ beyond the model: another frontend ("" when the same
    or unknown, as in baselines written before the frontend was recorded)."""
    if base.frontend and cur.frontend and base.frontend != cur.frontend:
        return f"captured through {cur.frontend}, the baseline through {base.frontend}"
    return ""


def compare(base: Snapshot, cur: Snapshot, tol: Tolerances = Tolerances(),
            checks: Iterable[str] = CHECKS, hw_key: str | None = None) -> Comparison:
    checks = set(checks)
    if base.inputs != cur.inputs:
        return Comparison(
            (f"the example inputs changed ({', '.join(base.inputs)} → {', '.join(cur.inputs)}):"
             " the baseline no longer applies",), (), (), "")
    d = _Diff(base, cur, tol, checks)
    if switched := frontend_change(base, cur):
        d.changes.append(switched)
    d.clusters()
    if "rejections" in checks:
        d.rejections()
    note = ""
    if "timings" in checks:
        slow, fast, note = timings(base, cur, hw_key, tol, d.pairs)
        d.regressions += slow
        d.improvements += fast
    return Comparison(tuple(d.regressions), tuple(d.improvements), tuple(d.changes), note)
