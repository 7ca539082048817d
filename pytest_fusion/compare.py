"""Compare a test's current fusion snapshot with its baseline, in reviewer's words.

Reads two ``Snapshot``s (baseline, current), the tolerances, the checks to gate
and the current hardware key; returns a ``Comparison``: regressions (fail the
test), improvements (pass, suggest ratcheting), changes (pass, e.g. a cluster
that moved to another module), notes (rejections gone), a note on timings, and the
pairs of cluster identities it matched. Works on parsed data only, never on YAML
text. What became of each cluster is ``verdicts.py``'s (pairing by identity and
sites, the named cause); this module judges the pairs field by field (category,
kernel, traffic) and the rejections, and says the model's totals once when nothing
else did; the timings are ``timing_gate.py``'s. Messages about the items of a repeated
container come out once (``findings.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .construction import construction_change
from .explain import Explainer, fmt_bytes, head
from .findings import LOC, Finding, at, messages
from .locate import locate
from .pairing import match as _match
from .pairing import staged as _staged
from .snapshot import ClusterId, ClusterRec, RejectionRec, Snapshot
from .timing_gate import GAPS, NO_CUDA, REFERENCES, TimingOutcome, other_timing, timings
from .verdicts import ClusterVerdicts, model_change, model_totals

__all__ = ["CHECKS", "GAPS", "NO_CUDA", "REFERENCES", "Comparison", "Tolerances", "compare",
           "fmt_bytes", "frontend_change", "other_timing"]

CHECKS = ("clusters", "rejections", "traffic", "timings")


@dataclass(frozen=True)
class Tolerances:
    traffic: float = 0.0  # relative increase of a cluster's fused bytes that still passes
    timing: float = 0.10  # relative slowdown of a median that still passes
    alpha: float = 0.05  # significance level of the Mann–Whitney test
    # Timings of a kernel moving fewer fused bytes are not judged: at any GPU's bandwidth it
    # finishes within its launch, so its time measures the host (1 MiB: 0.35 µs at 3 TB/s).
    min_bytes: float = float(1 << 20)
    # What a timing is judged against (REFERENCES): "eager", the per-sample ratio to the
    # eager ops it replaces (falls back to absolute where a side lacks eager samples), or
    # "absolute", the µs themselves.
    timing_reference: str = "eager"


@dataclass(frozen=True)
class Comparison:
    regressions: tuple[str, ...]
    improvements: tuple[str, ...]
    changes: tuple[str, ...]
    timing_note: str
    pairs: tuple[tuple[ClusterId, ClusterId], ...] = ()  # (baseline, current) identities
    notes: tuple[str, ...] = ()  # rejections gone: worth a line, never the headline
    timings_judged: int = 0  # timings compared with the baseline's on this hardware
    timing_gap: str = ""  # one of GAPS when none was, else ""

    @property
    def messages(self) -> tuple[str, ...]:
        return self.regressions + self.improvements + self.changes + self.notes

    @property
    def status(self) -> str:
        for status, found in (("regressed", self.regressions),
                              ("improved", self.improvements),
                              ("changed", self.changes + self.notes)):
            if found:
                return status
        return "pass"


class _Diff:
    def __init__(self, base: Snapshot, cur: Snapshot, tol: Tolerances, checks: set[str]):
        self.base, self.cur, self.tol, self.checks = base, cur, tol, checks
        self.findings: list[Finding] = []
        self.explain = Explainer(cur)
        self.pairs: list[tuple[ClusterRec, ClusterRec]] = []

    def say(self, bucket: str, rec: ClusterRec | RejectionRec | None, text: str) -> None:
        self.findings.append(Finding(bucket, text, rec.module if rec else None))

    def clusters(self) -> None:
        gate = "clusters" in self.checks
        verdicts = self.verdicts = ClusterVerdicts(self.base, self.cur, gate, self.explain)
        self.pairs = verdicts.run()
        self.findings += verdicts.findings
        # A kernel that now writes more is no regression when a neighbour's ops left the
        # model and the model as a whole moves fewer bytes, or when the kernels compared move
        # no more in all (a value now stored by one and read by another, not recomputed).
        left = verdicts.ops_left and model_change(self.base, self.cur) == -1
        before = sum(b.fused_bytes for b, _ in self.pairs)
        after = sum(c.fused_bytes for _, c in self.pairs)
        shifted = after <= before * (1 + self.tol.traffic)
        self.excuse = (f", but{model_totals(self.base, self.cur)}" if left else
                       f", but the {len(self.pairs)} kernels compared move {fmt_bytes(before)} → "
                       f"{fmt_bytes(after)} in all" if shifted else "")
        for b, c in self.pairs:
            # Only a kernel that now stores a value another reads (or no longer does) has its
            # growth excused by the kernels compared: another kernel's saving is no excuse.
            excused = left or (shifted and "multi-output" in (b.category, c.category))
            if gate and b.category != c.category:
                self.say("changes" if excused else "regressions", c,
                         f"`{c.chain}`{at(c)} changed category: {b.category} → "
                         f"{c.category}{self.excuse if excused else ''}")
            if gate:
                self._kernel(b, c)
            if "traffic" in self.checks:
                self._traffic(b, c, self.excuse if excused else "")

    def _kernel(self, b: ClusterRec, c: ClusterRec) -> None:
        if b.kernel and not c.kernel:
            self.say("regressions", c, f"`{c.chain}`{at(c)} no longer gets a kernel: "
                                       f"{c.kernel_error or 'code generation failed'}")
        elif c.kernel and not b.kernel:
            self.say("improvements", c, f"`{c.chain}`{at(c)} now gets a kernel ({c.kernel})")
        elif b.kernel != c.kernel:
            self.say("changes", c, f"`{c.chain}`{at(c)}: {b.kernel} kernel → {c.kernel}")

    def _traffic(self, b: ClusterRec, c: ClusterRec, excuse: str) -> None:
        """`excuse`: why more traffic here is no regression ("" when it is one)."""
        if c.fused_bytes > b.fused_bytes * (1 + self.tol.traffic):
            pct = (c.fused_bytes / b.fused_bytes - 1) * 100 if b.fused_bytes else float("inf")
            self.say("changes" if excuse else "regressions", c,
                     f"`{c.chain}`{at(c)} moves more traffic: {fmt_bytes(b.fused_bytes)} → "
                     f"{fmt_bytes(c.fused_bytes)} fused (+{pct:.0f}%, "
                     f"tolerance {self.tol.traffic:.0%}){excuse}")
        elif c.fused_bytes < b.fused_bytes:
            self.say("improvements", c, f"`{c.chain}`{at(c)} moves less traffic: "
                                        f"{fmt_bytes(b.fused_bytes)} → "
                                        f"{fmt_bytes(c.fused_bytes)}")

    def rejections(self) -> None:
        _, gone, new = _staged(
            list(self.base.rejections), list(self.cur.rejections),
            (lambda r: r.ident, lambda r: (r.check, r.sites) if r.sites else None,
             lambda r: (r.check, r.ops, r.lines), lambda r: (r.check, r.ops)))
        # The same check on a group that kept some of its ops at their sites: the candidate
        # changed with the code around it, and is rejected for the same reason.
        changed, gone, new = _match(gone, new, lambda r: r.check,
                                    lambda b, c: bool({o.site for o in locate(b, self.cur)
                                                       .found} & set(c.sites)))
        # A new rejection loses no cluster (a lost one says so itself): it fails only when
        # the model as a whole got worse, else it is a candidate the edit changed.
        change = model_change(self.base, self.cur)
        bucket = "changes" if change is not None and change <= 0 else "regressions"
        for r in new:
            if not any(r is e for e in self.explain.used):
                self.say(bucket, r, f"new rejection{at(r)}: {r.check} on `{r.chain}`, "
                                    f"{head(r.reason)}")
        for r in gone:
            lines = locate(r, self.cur).lines
            where = f" at {lines}" if lines else f" (at {r.lines} when recorded)"
            self.say("notes", r, f"rejection gone: {r.check} on `{r.chain}`{LOC}{where}")


def compiled_findings(base: Snapshot, cur: Snapshot, compiler_change: str) -> list[Finding]:
    """The compiled-record gate for each backend this run took a record on."""
    from .compiled_gate import compare_compiled, from_data  # loads torch: only when used

    found = []
    for key, data in sorted(cur.compiled.items()):
        if key not in base.compiled:
            found.append(Finding("changes", f"compiled record taken on {key}{LOC}, none in the "
                                 "baseline (recorded when the baseline is updated)", None))
            continue
        found += compare_compiled(from_data(key, base.compiled[key]), from_data(key, data),
                                  compiler_change)
    return found


def frontend_change(base: Snapshot, cur: Snapshot) -> str:
    """Why the clusters may differ beyond the model: another frontend ("" when the same
    or unknown, as in baselines written before the frontend was recorded)."""
    if base.frontend and cur.frontend and base.frontend != cur.frontend:
        why = f" ({cur.fallback})" if cur.fallback else ""
        return f"captured through {cur.frontend}{why}, the baseline through {base.frontend}"
    return ""


def compare(base: Snapshot, cur: Snapshot, tol: Tolerances = Tolerances(),
            checks: Iterable[str] = CHECKS, hw_key: str | None = None,
            compiler_change: str = "report") -> Comparison:
    """`compiler_change`: what another torch/triton version than a compiled record's
    baseline does ("report" or "fail"); compiled records are compared when this run took one."""
    checks = set(checks)
    built = construction_change(base, cur)  # the likely cause of what follows
    if base.inputs != cur.inputs:
        # Nothing else is compared, but changed constructor arguments are still said: the
        # record and the report name both changes, as the failure does.
        return Comparison(
            (f"the example inputs changed ({', '.join(base.inputs)} → {', '.join(cur.inputs)}):"
             " the baseline no longer applies",), (), (built,) if built else (), "")
    d = _Diff(base, cur, tol, checks)
    if built:
        d.say("changes", None, built)
    if switched := frontend_change(base, cur):
        d.say("changes", None, switched)
    d.clusters()
    if "rejections" in checks:
        d.rejections()
    outcome = TimingOutcome((), "", 0, "not-checked")
    if "timings" in checks:
        outcome = timings(base, cur, hw_key, tol, d.pairs)
        d.findings += outcome.findings
    if cur.compiled:
        d.findings += compiled_findings(base, cur, compiler_change)
    totals = model_totals(base, cur)
    if ("clusters" in checks and totals and not d.verdicts.totals_said
            and not any(f.bucket == "regressions" for f in d.findings)):
        # Said once, when no message quoted it and no regression explains it.
        better = model_change(base, cur) == -1
        d.say("improvements" if better else "changes", None, totals.strip())
    said = messages(d.findings)
    return Comparison(said["regressions"], said["improvements"], said["changes"], outcome.note,
                      tuple((b.ident, c.ident) for b, c in d.pairs), said["notes"],
                      outcome.judged, outcome.gap)
