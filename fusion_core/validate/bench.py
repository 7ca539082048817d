"""Benchmark and bandwidth (CUDA only): timings, regime tags, achieved vs peak GB/s.

Reads callables to time and a cluster's fused bytes; writes repeated ``do_bench`` medians
(microseconds: host time, launch included; device time is ``devicetime``'s), the regime
tag, the device's peak bandwidth and the gate results for gates 3 (benchmark) and 4
(bandwidth). Nothing here runs without CUDA.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .types import LAUNCH_BOUND, GateResult

WARMUP_MS, REP_MS = 25, 100  # do_bench's own defaults, passed explicitly
SAMPLES = 5  # do_bench medians per callable: the plugin compares distributions
LAUNCH_BOUND_US = 10.0  # below this a kernel's time is mostly launch overhead
SLOWER_LIMIT = 0.9  # a kernel under 0.9x eager (outside launch-bound) is not worth offering
IMPLAUSIBLE_PEAK = 1.25  # achieved > 1.25x DRAM peak means the byte count or timing is off


@dataclass(frozen=True)
class Device:
    name: str
    capability: tuple[int, int]
    l2_bytes: int | None
    peak_gbps: float | None
    peak_source: str  # "detected", "--peak-gbps", or "" when unknown


def detected_peak_gbps(props: object) -> float | None:
    """2 x memory clock (kHz) x bus width (bits) / 8; None where torch does not expose them."""
    clock_khz = getattr(props, "memory_clock_rate", None)
    width_bits = getattr(props, "memory_bus_width", None)
    if clock_khz and width_bits:
        return 2 * clock_khz * 1e3 * width_bits / 8 / 1e9
    try:
        import triton.testing

        return float(triton.testing.get_dram_gbps())
    except Exception:  # noqa: BLE001 - older triton, no driver query
        return None


def device_info(peak_override: float | None = None) -> Device:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = getattr(props, "L2_cache_size", None) or None
    if peak_override:
        peak, source = float(peak_override), "--peak-gbps"
    else:
        peak = detected_peak_gbps(props)
        source = "detected" if peak else ""
    return Device(props.name, (props.major, props.minor), l2, peak, source)


def time_us(fn: Callable[[], object], samples: int = SAMPLES) -> tuple[float, ...]:
    """`samples` do_bench medians (ms -> µs), each with warm-up and a cold L2."""
    import triton.testing

    out = []
    for _ in range(samples):
        ms = triton.testing.do_bench(fn, warmup=WARMUP_MS, rep=REP_MS, return_mode="median")
        out.append(float(ms) * 1e3)
    return tuple(out)


def times_us_together(fns: Sequence[Callable[[], object]],
                      samples: int = SAMPLES) -> tuple[tuple[float, ...], ...]:
    """``time_us`` of each of `fns`, their samples interleaved: sample i of every callable is
    taken before sample i + 1 of any, so a ratio of their i-th samples shares one window of
    whatever else the machine was doing."""
    out: list[list[float]] = [[] for _ in fns]
    for _ in range(samples):
        for taken, fn in zip(out, fns, strict=True):
            taken.extend(time_us(fn, 1))
    return tuple(tuple(taken) for taken in out)


def regime(kernel_us: float, fused_bytes: int, l2_bytes: int | None,
           resolution_us: float | None = None) -> str:
    """`resolution_us` given: `kernel_us` is device time, launch-bound only when below what
    the timer resolves; else host time, launch-bound below LAUNCH_BOUND_US."""
    if kernel_us < (LAUNCH_BOUND_US if resolution_us is None else resolution_us):
        return LAUNCH_BOUND
    if l2_bytes and fused_bytes <= l2_bytes:
        return "l2-resident"
    return "dram-bound"


def gbps(fused_bytes: int, kernel_us: float) -> float:
    return fused_bytes / (kernel_us * 1e-6) / 1e9


def benchmark_gate(speedup: float | None, tag: str) -> GateResult:
    if speedup is None:
        return GateResult("benchmark", False, "no timing")
    if tag != LAUNCH_BOUND and speedup < SLOWER_LIMIT:
        return GateResult("benchmark", False, f"kernel is slower than eager ({speedup:.2f}x)")
    return GateResult("benchmark", True)


def bandwidth_gate(achieved: float, peak: float | None, tag: str) -> GateResult:
    if peak and tag == "dram-bound" and achieved > IMPLAUSIBLE_PEAK * peak:
        return GateResult("bandwidth", False,
                          f"{achieved:.0f} GB/s exceeds the {peak:.0f} GB/s peak: the fused "
                          "byte count or the timing is wrong")
    return GateResult("bandwidth", True)
