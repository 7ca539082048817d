"""The timing gate: a test's measured fields against its baseline's, on this hardware.

Reads two ``Snapshot``s (baseline, current), the paired clusters, the tolerances and the
current hardware key; returns a ``TimingOutcome``: findings (a kernel or the model slower
or faster), the report's timings note and how many timings were judged. By default a
kernel is judged by its time relative to the eager ops it replaces, sample by sample
(kernel_i / eager_i; device-time samples are taken in turn, host-time ones one set after
the other): a loaded GPU or another machine
of the same model shifts both, while a slower kernel still shows. Without eager samples
on either side (an old baseline, a hook that times only the kernel), or with
``fusion_timing_reference = absolute``, the absolute medians are judged. The model is
judged the same way against the eager model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import TYPE_CHECKING

from fusion_core.units import counted

from .findings import Finding, at
from .snapshot import ClusterRec, ClusterTiming, Measured, Snapshot
from .timing import TimingVerdict, compare_samples

if TYPE_CHECKING:  # compare.py imports this module
    from .compare import Tolerances

NO_CUDA = "timings not checked: no CUDA device"
# Why a test judged no timing (TestRecord.timing_gap), for the run's summary.
GAPS = ("no-cuda", "not-measured", "no-baseline", "other-timing", "launch-bound",
        "few-samples", "not-checked", "error")
# What a timing is judged against (ini fusion_timing_reference): the eager ops it replaces
# (the speedup), or nothing (absolute µs).
REFERENCES = ("eager", "absolute")
# fusion_core.validate.types.LAUNCH_BOUND, written again: importing it would load torch here
LAUNCH_BOUND = "launch-bound"


@dataclass(frozen=True)
class TimingOutcome:
    findings: tuple[Finding, ...]
    note: str  # the report's timings column
    judged: int  # timings compared
    gap: str  # why none was (one of GAPS), "" when some were


@dataclass(frozen=True)
class Subject:
    """What is judged, and the words for it: a kernel against its eager ops, or the model
    with fused kernels against the eager model."""

    rec: ClusterRec | None  # None: the model
    what: str  # "`mul → relu → add` at model.py:10-12"
    against: str  # "its eager ops"
    own: str  # what the own median is called: "kernel"


Pair = tuple[Sequence[float], Sequence[float]]  # (baseline's samples, this run's)


def paired_ratios(own: Sequence[float], eager: Sequence[float]) -> list[float] | None:
    """own_i / eager_i, or None when the eager samples cannot stand beside the own ones
    (none, another count, or a sample that is not positive)."""
    if not own or len(eager) != len(own) or min(eager) <= 0:
        return None
    return [o / e for o, e in zip(own, eager, strict=True)]


def _fraction(x: float) -> str:
    return f"{x:.2f}" if x >= 0.095 else f"{x:.2g}"


def _speedup(fraction: float) -> str:
    return f"{1 / fraction:.1f}×" if fraction > 0 else "∞×"


def absolute_line(what: str, key: str, v: TimingVerdict, tol: Tolerances) -> str:
    word = {"slower": "is slower", "faster": "is faster"}[v.status]
    p = v.p_slower if v.status == "slower" else v.p_faster
    return (f"{what} {word} on {key}: median {v.base_median:.1f} µs → "
            f"{v.current_median:.1f} µs ({v.change}, tolerance {tol.timing:.0%}, p={p:.3f})")


def relative_line(s: Subject, key: str, v: TimingVerdict, tol: Tolerances, own: Pair,
                  eager: Pair) -> str:
    """`v` judged the ratios own/eager; the message gives the speedup over eager before →
    after and the medians it came from."""
    word = {"slower": "is slower", "faster": "is faster"}[v.status]
    p = v.p_slower if v.status == "slower" else v.p_faster
    ob, oc = (median(x) for x in own)
    eb, ec = (median(x) for x in eager)
    return (f"{s.what} {word} on {key} relative to {s.against}: speedup "
            f"{_speedup(v.base_median)} → {_speedup(v.current_median)} "
            f"({_fraction(v.base_median)} → {_fraction(v.current_median)} of eager's time, "
            f"{v.change}; {s.own} median {ob:.1f} → {oc:.1f} µs, eager {eb:.1f} → {ec:.1f} µs;"
            f" tolerance {tol.timing:.0%}, p={p:.3f})")


def judge_pair(s: Subject, key: str, tol: Tolerances, own: Pair,
               eager: Pair) -> tuple[TimingVerdict, Finding | None]:
    """The verdict on the samples `own`, relative to `eager` (the same callables' eager
    samples) when the setting asks for it and both sides have them, else absolute."""
    base = cur = None
    if tol.timing_reference == "eager":
        base, cur = paired_ratios(own[0], eager[0]), paired_ratios(own[1], eager[1])
    relative = base is not None and cur is not None
    v = (compare_samples(base, cur, tol.timing, tol.alpha) if base is not None and cur is not None
         else compare_samples(list(own[0]), list(own[1]), tol.timing, tol.alpha))
    if v.status not in ("slower", "faster"):
        return v, None
    text = (relative_line(s, key, v, tol, own, eager) if relative
            else absolute_line(s.what, key, v, tol))
    bucket = "regressions" if v.status == "slower" else "improvements"
    return v, Finding(bucket, text, s.rec.module if s.rec else None)


def _timing_of(timings_: tuple[ClusterTiming, ...], c: ClusterRec) -> ClusterTiming | None:
    return next((t for t in timings_ if t.cluster == c.ident), None)


def _too_small(m: Measured, fused_bytes: int, tol: Tolerances) -> bool:
    """Host-timed, a kernel moving under `min_bytes` finishes within its launch: its time is
    the host's. Device time (CUDA-graph replays) has no launch in it."""
    return m.clock == "host" and fused_bytes < tol.min_bytes


def _host_only(m: Measured, snap: Snapshot, tol: Tolerances) -> bool:
    """Every kernel timed in `m` is launch-bound or moves too little to judge."""
    recs = {c.ident: c for c in snap.clusters}
    return bool(m.clusters) and all(
        t.regime == LAUNCH_BOUND or (t.cluster in recs and _too_small(m, recs[t.cluster]
                                                                      .fused_bytes, tol))
        for t in m.clusters)


def other_timing(base: Snapshot, bm: Measured, cur: Snapshot, cm: Measured) -> str:
    """Why `bm` and `cm` are not comparable ("" when they are): timed by another clock or
    at another shape than this run's. Said, never judged."""
    if bm.clock != cm.clock:
        return (f"the baseline's timings are {bm.clock} time, this run's {cm.clock} time")
    taken = bm.inputs or base.inputs, cm.inputs or cur.inputs
    if taken[0] != taken[1]:
        return (f"the baseline's timings were taken at {', '.join(taken[0])}, this run's at "
                f"{', '.join(taken[1])}")
    return ""


def timings(base: Snapshot, cur: Snapshot, hw_key: str | None, tol: Tolerances,
            pairs: list[tuple[ClusterRec, ClusterRec]]) -> TimingOutcome:
    """The findings and note for the measured fields on this hardware."""
    if hw_key is None:
        return TimingOutcome((), NO_CUDA, 0, "no-cuda")
    if hw_key not in cur.measured:
        return TimingOutcome((), f"timings not checked: nothing measured on {hw_key}", 0,
                             "not-measured")
    if hw_key not in base.measured:
        return TimingOutcome((), f"timings not checked: no baseline for {hw_key}", 0,
                             "no-baseline")
    bm, cm = base.measured[hw_key], cur.measured[hw_key]
    if why := other_timing(base, bm, cur, cm):
        return TimingOutcome((), f"timings not checked on {hw_key}: {why} (record this run's "
                             "with --fusion-update-baselines=new)", 0, "other-timing")
    found: list[Finding] = []
    judged = 0

    def judge(s: Subject, own: Pair, eager: Pair) -> None:
        nonlocal judged
        v, finding = judge_pair(s, hw_key, tol, own, eager)
        judged += v.status != "insufficient"
        if finding is not None:
            found.append(finding)

    host_bound = 0  # timings of launch-bound kernels, left unjudged
    device_bound = 0  # kernels whose timings are judged (or would be, given enough samples)
    for b, c in pairs:
        bt, ct = _timing_of(bm.clusters, b), _timing_of(cm.clusters, c)
        if bt is None or ct is None:
            continue
        if LAUNCH_BOUND in (bt.regime, ct.regime) or _too_small(cm, c.fused_bytes, tol):
            host_bound += 1
            continue
        device_bound += 1
        judge(Subject(c, f"`{c.chain}`{at(c)}", "its eager ops", "kernel"),
              (bt.kernel_us, ct.kernel_us), (bt.eager_us, ct.eager_us))
    if bm.model_us and cm.model_us:
        # A model made only of launch-bound kernels is timed by its host's launch rate. When
        # the clusters were regrouped no pair says so: every timed kernel on both sides does.
        if not device_bound and (host_bound or (
                _host_only(bm, base, tol) and _host_only(cm, cur, tol))):
            host_bound += 1
        else:
            judge(Subject(None, "the model with fused kernels", "the eager model", "fused"),
                  (bm.model_us, cm.model_us), (bm.model_eager_us, cm.model_eager_us))
    unjudged = (f"{counted(host_bound, 'launch-bound timing')} not judged: they measure the host's "
                "launch rate, not the kernel") if host_bound else ""
    if judged:
        note = f"timings checked on {hw_key} ({judged} compared" + (
            f"; {unjudged})" if unjudged else ")")
    else:
        note = f"timings not checked on {hw_key}: " + (unjudged or "too few samples")
    gap = "" if judged else "launch-bound" if unjudged else "few-samples"
    return TimingOutcome(tuple(found), note, judged, gap)
