"""Validation in the reports: the console's Numerics/Measured sections and JSON fields.

Reads a ``ValidationReport`` (and optionally the Inductor agreement's per-cluster verdicts);
writes console lines and plain dicts for ``--json``. Also converts a report into the
``measure()`` dict the pytest plugin consumes (see ``pytest_fusion/measure.py``).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from ..report.units import fmt_bytes, speedup_words
from ..units import counted, plural
from .types import LAUNCH_BOUND, ModelCheck, ModelTiming, Timing, ValidationReport, ValidationResult

NO_GPU_LINE = ("Benchmarks need a CUDA GPU: speedups, regimes and bandwidth are measured only "
               "on a machine with CUDA.")
NOT_TIMED_LINE = ("Timings not run (--no-timing): speedups, regimes and bandwidth were not "
                  "measured; run without it to measure them.")


def _err(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2e}"


def _numerics_line(r: ValidationResult) -> str:
    if r.failed is not None:
        return f"cluster {r.cluster}: {r.status}"
    numerics = r.gate("cluster numerics")
    why = f"  ({numerics.detail})" if numerics is not None and numerics.detail else ""
    return f"cluster {r.cluster}: {r.status}  max abs err {_err(r.max_abs_err)}{why}"


def _shapes(shapes: tuple[tuple[int, ...], ...]) -> str:
    return ", ".join("×".join(map(str, s)) for s in shapes)


def _shrunk_words(m: ModelCheck) -> str:
    """` at input 1×16×32, cut from 4×64×32 in dim 0 (4→1) and dim 1 (64→16) so …`: which
    dims the check cut (``shrink.py``) and why, not a bare second shape."""
    several = len(m.inputs) > 1
    cuts = [f"{f'input {i} ' if several else ''}dim {k} ({full}→{small})"
            for i, (ran, analysed) in enumerate(zip(m.inputs, m.analysed_inputs, strict=False))
            for k, (small, full) in enumerate(zip(ran, analysed, strict=False)) if small != full]
    if not cuts:  # another rank or input count: nothing to name dim by dim
        return f" at input {_shapes(m.inputs)}, not {_shapes(m.analysed_inputs)}"
    listed = ", ".join(cuts[:-1]) + " and " + cuts[-1] if len(cuts) > 1 else cuts[0]
    return (f" at input {_shapes(m.inputs)}, cut from {_shapes(m.analysed_inputs)} in {listed} "
            "so Triton's interpreter runs it faster")


def _model_line(report: ValidationReport) -> str:
    m = report.model
    if m.passed is None:
        return "model numerics: no verified kernel to patch in"
    n = len(m.patched)
    at = _shrunk_words(m) if m.shrunk else ""
    if m.passed:
        unchecked = f"; the graph was not compared with the model: {m.detail}" if m.detail else ""
        return (f"model numerics: pass ({counted(n, 'kernel')} patched into the traced "
                f"graph{at}, max abs err {_err(m.max_abs_err)}{_rmse(m)}{unchecked})")
    blamed = ", ".join(map(str, m.blamed))
    line = (f"model numerics: FAILED with {counted(n, 'kernel')} patched{at} (max abs err "
            f"{_err(m.max_abs_err)}; {m.detail}); {plural(len(m.blamed), 'cluster')} {blamed} "
            "not offered")
    if m.offered:  # each blamed cluster's own line above says why
        k = len(m.offered)
        others = "the other kernel passes" if k == 1 else f"the other {k} kernels pass together"
        line += (f"\n  {others} (max abs err "
                 f"{_err(m.offered_max_abs_err)}{_rmse(m)})")
    return line


def _rmse(m: ModelCheck) -> str:
    if m.patched_rmse is None or m.eager_rmse is None:
        return ""
    return (f", RMSE against a float64 run {_err(m.patched_rmse)} where eager's is "
            f"{_err(m.eager_rmse)}")


def _measured_line(r: ValidationResult, inductor: bool, peak_label: str) -> str:
    t = r.timing
    if t is None or r.regime is None:
        return ""
    head = f"  {r.regime:<11} {fmt_bytes(r.fused_bytes):>9}"
    if r.regime == LAUNCH_BOUND:
        text = f"{head}  kernel {t.kernel:.1f} µs (launch overhead dominates: no speedup shown)"
    else:
        text = (f"{head}  fused cluster {speedup_words(r.cluster_speedup, 'x')} than eager "
                f"({t.clock} time)")
        if r.model_speedup is not None:
            text += f"  model {speedup_words(r.model_speedup, 'x')}"
        if r.gbps is not None:
            text += f"  fused cluster bandwidth {r.gbps:.0f} GB/s"
            if r.peak_gbps:
                text += (f" ({r.gbps / r.peak_gbps:.0%} of {r.peak_gbps:.0f} GB/s {peak_label} "
                         "peak memory bandwidth)")
    if inductor and t.inductor is not None:
        text += f"\n  inductor {t.inductor:.1f} µs  ours {t.kernel:.1f} µs  eager {t.eager:.1f} µs"
    return text


HOST_BOUND_FACTOR = 1.1  # wall time past this multiple of device time is host time


def _ms(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} µs"


def _against(ours: float | None, theirs: float | None, name: str) -> str:
    if not ours or not theirs:
        return ""
    return f", {speedup_words(theirs / ours, 'x')} than {name} ({_ms(theirs)})"


def model_time_lines(mt: ModelTiming, kernels: int) -> list[str]:
    """The headline: wall time of the patched model called from Python (what a user gets),
    against eager and torch.compile; then its device time (what it costs as one CUDA graph)
    the same way, and why the two differ when wall time exceeds device time by more than
    HOST_BOUND_FACTOR; then torch.compile of the patched model, when it was timed."""
    wall = Timing.median(mt.patched_host_us)
    if not wall:
        return []
    head = (f"model with every usable kernel ({kernels}): {_ms(wall)} wall"
            f"{_against(wall, Timing.median(mt.eager_host_us), 'eager')}"
            f"{_against(wall, Timing.median(mt.compiled_host_us), 'torch.compile')}")
    lines = [head]
    device = Timing.median(mt.patched_us) if mt.clock == "device" else None
    if device:
        text = (f"  device time {_ms(device)}"
                f"{_against(device, Timing.median(mt.eager_us), 'eager')}"
                f"{_against(device, Timing.median(mt.compiled_us), 'torch.compile')}")
        if wall > HOST_BOUND_FACTOR * device:
            launches = (f"{mt.patched_kernels} launches" if mt.patched_kernels
                        else "launches")
            text += f"; host-bound: {launches} (wall {wall / device:.1f}x device time)"
        lines.append(text)
    applied = Timing.median(mt.compiled_applied_host_us)
    if applied:  # what a user who compiles the rewritten model gets
        on_device = Timing.median(mt.compiled_applied_us) if mt.clock == "device" else None
        lines.append(f"  torch.compile of it: {_ms(applied)} wall"
                     + (f", device time {_ms(on_device)}" if on_device else "")
                     + _against(applied, Timing.median(mt.compiled_host_us),
                                "torch.compile alone"))
    counts = [(n, k) for n, k in (("eager", mt.eager_kernels), ("patched", mt.patched_kernels),
                                  ("torch.compile", mt.compiled_kernels)) if k]
    if counts:
        lines.append("  GPU kernels per forward: " + ", ".join(f"{n} {k}" for n, k in counts))
    return lines


def print_validation(report: ValidationReport, console: Console, inductor: bool = False) -> None:
    console.print()
    if not report.timed:
        console.print("Numerics", highlight=False)
        for r in report.results:
            console.print(_numerics_line(r), highlight=False, markup=False)
        console.print(_model_line(report), highlight=False, markup=False)
        console.print(NOT_TIMED_LINE if report.mode == "cuda" else NO_GPU_LINE, highlight=False)
        return
    console.print("Measured", highlight=False)
    for r in report.results:
        console.print(_numerics_line(r), highlight=False, markup=False)
        label = "given" if report.peak_source == "--peak-gbps" else "detected"
        line = _measured_line(r, inductor, label)
        if line:
            console.print(line, highlight=False, markup=False)
    console.print(_model_line(report), highlight=False, markup=False)
    if report.model_timing is not None:
        for line in model_time_lines(report.model_timing, len(report.usable)):
            console.print(line, highlight=False, markup=False)
    if report.peak_gbps is None:
        console.print("peak memory bandwidth unknown: pass --peak-gbps to compare", highlight=False)


def result_dict(r: ValidationResult) -> dict[str, Any]:
    t = r.timing
    return {
        "cluster": r.cluster, "mode": r.mode, "shape": list(r.shape), "usable": r.usable,
        "status": r.status, "max_abs_err": _num(r.max_abs_err),
        "gates": [{"gate": g.gate, "passed": g.passed, "detail": g.detail,
                   "max_abs_err": _num(g.max_abs_err)} for g in r.gates],
        "regime": r.regime, "fused_bytes": r.fused_bytes, "gbps": r.gbps,
        "peak_gbps": r.peak_gbps, "cluster_speedup": r.cluster_speedup,
        "model_speedup": r.model_speedup, "analysed_shape": list(r.analysed_shape),
        "same_as": r.same_as,
        "timing_us": None if t is None else {
            "kernel": list(t.kernel_us), "eager": list(t.eager_us),
            "inductor": list(t.inductor_us), "model_patched": list(t.model_patched_us)},
    }


def _num(x: float | None) -> float | None:
    """JSON has no NaN: a NaN error is reported as null with the gate's detail."""
    return None if x is None or x != x else x


def report_dict(report: ValidationReport) -> dict[str, Any]:
    m, mt = report.model, report.model_timing
    return {
        "mode": report.mode, "device": report.device, "peak_gbps": report.peak_gbps,
        "peak_source": report.peak_source, "timed": report.timed,
        "clusters": [result_dict(r) for r in report.results],
        "model": {"passed": m.passed, "max_abs_err": _num(m.max_abs_err),
                  "patched": list(m.patched), "blamed": list(m.blamed), "detail": m.detail,
                  "inputs": [list(s) for s in m.inputs],
                  "analysed_inputs": [list(s) for s in m.analysed_inputs],
                  "details": [{"cluster": i, "detail": d} for i, d in m.details],
                  "patched_rmse": _num(m.patched_rmse), "eager_rmse": _num(m.eager_rmse),
                  "offered_max_abs_err": _num(m.offered_max_abs_err),
                  "eager_us": list(mt.eager_us) if mt else [],
                  "patched_us": list(mt.patched_us) if mt else [],
                  "speedup": mt.speedup if mt else None,
                  "clock": mt.clock if mt else None,
                  "eager_wall_us": list(mt.eager_host_us) if mt else [],
                  "patched_wall_us": list(mt.patched_host_us) if mt else [],
                  "compiled_us": list(mt.compiled_us) if mt else [],
                  "compiled_wall_us": list(mt.compiled_host_us) if mt else [],
                  "compiled_applied_us": list(mt.compiled_applied_us) if mt else [],
                  "compiled_applied_wall_us": list(mt.compiled_applied_host_us) if mt else [],
                  "wall_speedup": mt.wall_speedup if mt else None,
                  "kernels_per_forward": {
                      "eager": mt.eager_kernels if mt else None,
                      "patched": mt.patched_kernels if mt else None,
                      "compiled": mt.compiled_kernels if mt else None}},
    }


def measure_dict(report: ValidationReport, capability: tuple[int, int]) -> dict[str, Any]:
    """The pytest plugin's format: repeated samples per cluster, in microseconds, by the
    clock every judged figure shares ("device" only where each one was device time), with
    the host-timed figures beside them."""
    clusters = []
    timed = [r for r in report.results if r.timing is not None]
    mt = report.model_timing
    clocks = {r.timing.clock for r in timed} | ({mt.clock} if mt else set())
    clock = "device" if clocks == {"device"} else "host"

    def judged(own_clock: str, by_clock: tuple[float, ...], host: tuple[float, ...]) -> list:
        # One clock for every judged figure: device samples only when all of them are.
        return list(by_clock if own_clock == clock else host)

    for r in timed:
        t = r.timing
        clusters.append({"index": r.cluster,
                         "kernel_us": judged(t.clock, t.kernel_us, t.kernel_host_us),
                         "eager_us": judged(t.clock, t.eager_us, t.eager_host_us),
                         "gbps": r.gbps, "regime": r.regime, "usable": r.usable,
                         "kernel_host_us": list(t.kernel_host_us),
                         "eager_host_us": list(t.eager_host_us)})
    model = {"fused_us": judged(mt.clock, mt.patched_us, mt.patched_host_us),
             "eager_us": judged(mt.clock, mt.eager_us, mt.eager_host_us),
             "fused_host_us": list(mt.patched_host_us),
             "eager_host_us": list(mt.eager_host_us),
             "compiled_us": judged(mt.clock, mt.compiled_us, mt.compiled_host_us),
             "compiled_host_us": list(mt.compiled_host_us),
             "compiled_applied_us": judged(mt.clock, mt.compiled_applied_us,
                                           mt.compiled_applied_host_us),
             "compiled_applied_host_us": list(mt.compiled_applied_host_us),
             "kernels_per_forward": {"eager": mt.eager_kernels, "fused": mt.patched_kernels,
                                     "compiled": mt.compiled_kernels}} if mt else {}
    return {"device": {"name": report.device, "capability": list(capability)},
            "clock": clock, "clusters": clusters, "model": model}
