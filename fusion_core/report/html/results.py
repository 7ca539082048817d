"""What a page shows beside the analysis, taken as the pipeline's own typed results.

Reads ``PageResults``: the source mappings, the kernels generated once (``KernelSet``), the
validation report, the Inductor agreement and timings measured elsewhere (the pytest plugin's
``measure``, as ``ClusterTimes``); writes the per-cluster sections of the page's data (numerics,
timing, Inductor's verdict and kernels) and the Inductor kernels we did not propose, as plain
JSON-able dicts for the page's scripts. Nothing here reads the CLI's ``--json`` document.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # results of other passes: only their attributes are read here
    from ...analysis.types import Cluster
    from ...inductor.match import Agreement, KernelMatch
    from ...pipeline import Analysis
    from ...sourcemap import SourceMapping
    from ...validate.kernels import KernelSet
    from ...validate.types import ValidationReport, ValidationResult


@dataclass(frozen=True)
class ClusterTimes:
    """One cluster's timings as a page shows them: repeated samples in µs, the achieved
    bandwidth and the ceilings it is drawn against."""

    cluster: int
    kernel_us: tuple[float, ...]
    eager_us: tuple[float, ...] = ()
    inductor_us: tuple[float, ...] = ()
    gbps: float | None = None
    peak_gbps: float | None = None  # the device's (the CLI's validation)
    copy_gbps: float | None = None  # a copy of the same bytes, where a measurement gives one
    regime: str | None = None

    @classmethod
    def of(cls, r: ValidationResult) -> ClusterTimes | None:
        """A validated cluster's timings; None where the kernel was not timed."""
        t = r.timing
        if t is None or not t.kernel_us:
            return None
        return cls(r.cluster, t.kernel_us, t.eager_us, t.inductor_us, r.gbps, r.peak_gbps,
                   regime=r.regime)

    def view(self) -> dict[str, Any]:
        return {"kernel_us": list(self.kernel_us), "eager_us": list(self.eager_us),
                "inductor_us": list(self.inductor_us), "gbps": self.gbps,
                "peak_gbps": self.peak_gbps, "copy_gbps": self.copy_gbps, "regime": self.regime}


def measured_times(measurement: Mapping[str, Any] | None) -> tuple[ClusterTimes, ...]:
    """The clusters' timings of a measurement in the plugin's format (``measure``, or a
    ``pytest_fusion_measure`` hook): ``clusters`` entries with ``index``, ``kernel_us``,
    ``eager_us`` and optionally ``gbps``, ``copy_gbps``, ``regime``."""
    return tuple(ClusterTimes(int(r["index"]), tuple(r.get("kernel_us") or ()),
                              tuple(r.get("eager_us") or ()), gbps=r.get("gbps"),
                              copy_gbps=r.get("copy_gbps"), regime=r.get("regime"))
                 for r in (measurement or {}).get("clusters", []))


@dataclass(frozen=True)
class PageResults:
    """What the steps after the analysis found, each optional: the CLI passes its run's
    results, the pytest plugin its measurement."""

    mappings: Sequence[SourceMapping] | None = None  # None: the page maps the clusters
    kernels: KernelSet | None = None  # None: the page generates each cluster's kernel
    report: ValidationReport | None = None  # the validation gates (numerics, timings)
    agreement: Agreement | None = None  # the comparison with Inductor (--vs-inductor)
    measured: tuple[ClusterTimes, ...] = ()  # timings from elsewhere (the plugin's hook)

    def timings(self) -> dict[int, ClusterTimes]:
        """Per cluster: the validation's timings, else the measurement's."""
        out = {t.cluster: t for t in self.measured}
        if self.report is not None:
            out.update({t.cluster: t for t in map(ClusterTimes.of, self.report.results) if t})
        return out


def _num(x: float | None) -> float | None:
    """JSON has no NaN: a NaN error shows as none, its gate's detail says what happened."""
    return None if x is None or x != x else x


def numerics_view(r: ValidationResult | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"status": r.status, "max_abs_err": _num(r.max_abs_err),
            "gates": [{"gate": g.gate, "passed": g.passed, "detail": g.detail,
                       "max_abs_err": _num(g.max_abs_err)} for g in r.gates]}


def kernel_view(k: KernelMatch, reason: str | None = None) -> dict[str, Any]:
    """An Inductor kernel; `reason` replaces the match's own (a missed kernel's)."""
    return {"name": k.kernel, "status": k.status, "clusters": list(k.clusters),
            "ops": list(k.ops), "lines": list(k.lines),
            "reason": reason if reason is not None else (k.reason or None)}


def inductor_view(agreement: Agreement | None, c: Cluster) -> dict[str, Any]:
    """The cluster's verdict against Inductor and the Inductor kernels overlapping it."""
    if agreement is None:
        return {"inductor": None, "inductor_kernels": []}
    verdict = next((v for v in agreement.clusters if v.cluster == c.index), None)
    return {"inductor": None if verdict is None else {
                "cluster": verdict.cluster, "verdict": verdict.verdict,
                "kernels": list(verdict.kernels), "detail": verdict.detail},
            "inductor_kernels": [kernel_view(k) for k in agreement.kernels
                                 if c.index in k.clusters]}


def missed(analysis: Analysis, agreement: Agreement) -> list[dict[str, Any]]:
    """Inductor kernels we did not propose, each with the rejection on its lines if any."""
    out = []
    for k in agreement.kernels:
        if k.status != "missed":
            continue
        lines = set(k.lines)
        hit = next((r for r in analysis.rejections if r.lines and lines & set(
            range(r.lines.start, r.lines.end + 1))), None)
        why = (f"we rejected a candidate on these lines: {hit.check}, {hit.reason}" if hit
               else k.reason  # the comparison's own (an epilogue, a concatenation)
               or "no candidate of ours covers these ops (no rejection names these lines)")
        out.append(kernel_view(k, why))
    return out
