"""Gates 3 and 4 (CUDA only): time each usable kernel, its eager subgraph and the model.

Reads the ``Recording`` the numerics ran on (on a GPU: the analysed shape), the usable
kernels and the gate results so far; writes the CUDA ``ValidationReport`` with timings,
regime tags, achieved bandwidth and the benchmark and bandwidth gates. Timings are device
time (``devicetime``: CUDA-graph replays over inputs past the L2) wherever both sides of a
comparison could be captured, host time (do_bench) otherwise; the host figures are kept
beside the device ones either way. A kernel and its eager subgraph take their device
samples interleaved, so the plugin can judge their per-sample ratio.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..analysis.types import Cluster
from ..compile_quiet import quiet
from ..pipeline import Analysis
from . import bench, devicetime
from .inputs import result_shape
from .modeltime import MODEL_COPIES, measure_model
from .numerics import one_line
from .prepare import Recording
from .subgraph import Subgraph, eager_subgraph, launch_args, patch
from .types import GateResult, ModelCheck, Timing, ValidationReport, ValidationResult


@dataclass(frozen=True)
class Clocked:
    """One callable timed both ways: device time (None when it could not be captured)."""

    device: devicetime.DeviceTime | None
    host_us: tuple[float, ...]


def clocked(fn: Callable[..., object], args: Sequence[Any], l2_bytes: int | None,
            max_copies: int = devicetime.MAX_COPIES) -> Clocked:
    host = bench.time_us(lambda: fn(*args))
    try:
        device = devicetime.device_time(fn, devicetime.rotating(args, l2_bytes, max_copies))
    except devicetime.CaptureError:
        device = None
    return Clocked(device, host)


def devices_together(calls: Sequence[tuple[Callable[..., object], Sequence[Any]]],
                     l2_bytes: int | None, max_copies: int = devicetime.MAX_COPIES
                     ) -> tuple[devicetime.DeviceTime | None, ...]:
    """Device time of each `(fn, args)`, their samples interleaved
    (``devicetime.device_times``): a ratio of their i-th samples was taken in one window.
    When any cannot be captured none has a device time (``pick`` would take the host's)."""
    try:
        return devicetime.device_times(
            [(fn, devicetime.rotating(args, l2_bytes, max_copies)) for fn, args in calls])
    except devicetime.CaptureError:
        return (None,) * len(calls)


def clocked_together(calls: Sequence[tuple[Callable[..., object], Sequence[Any]]],
                     l2_bytes: int | None) -> tuple[Clocked, ...]:
    """``clocked`` for each `(fn, args)`, the device samples interleaved
    (``devices_together``) and the host samples too (``bench.times_us_together``): where a
    capture fails the comparison falls back on host samples taken in shared windows."""
    hosts = bench.times_us_together([lambda fn=fn, args=args: fn(*args) for fn, args in calls])
    return tuple(Clocked(d, h) for d, h in
                 zip(devices_together(calls, l2_bytes), hosts, strict=True))


def pick(a: Clocked, b: Clocked) -> tuple[str, tuple[float, ...], tuple[float, ...]]:
    """(clock, a's samples, b's samples): device time when both have it, else host time
    (a ratio of the two clocks would mean nothing)."""
    if a.device is not None and b.device is not None:
        return "device", a.device.samples_us, b.device.samples_us
    return "host", a.host_us, b.host_us


def _args(rec: Recording, sub: Subgraph) -> tuple[list[Any], list[Any]]:
    def val(name: str) -> Any:
        v = rec.values[name]
        return v.clone() if isinstance(v, torch.Tensor) else v
    kernel_args = [val(n) for n in sub.inputs]
    return launch_args(kernel_args, rec.device), kernel_args + [val(n) for n in sub.extras]


def _timings(rec: Recording, c: Cluster, launcher: Callable, sub: Subgraph, inductor: bool,
             model_eager: Clocked, l2_bytes: int | None) -> tuple[Timing, float | None]:
    kargs, eargs = _args(rec, sub)
    # Interleaved: sample i of the kernel and of its eager ops share a window on the GPU.
    kernel, eager = clocked_together([(launcher, kargs), (sub.module, eargs)], l2_bytes)
    clock, kernel_us, eager_us = pick(kernel, eager)
    inductor_us: tuple[float, ...] = ()
    if inductor:
        with contextlib.suppress(Exception), quiet():  # Dynamo's chatter, not the user's
            compiled = torch.compile(sub.module)
            compiled(*eargs)
            theirs = clocked(compiled, eargs, l2_bytes)
            inductor_us = (theirs.device.samples_us if clock == "device" and theirs.device
                           else theirs.host_us)
    patched_us: tuple[float, ...] = ()
    model_speedup = None
    with contextlib.suppress(Exception):
        one = patch(rec.gm, {c.index: (rec.clusters[c.index], launcher)})
        patched = clocked(one, rec.inputs, l2_bytes, MODEL_COPIES)
        _, eager_model_us, patched_us = pick(model_eager, patched)
        model_speedup = Timing.median(eager_model_us) / Timing.median(patched_us)
    resolution = (devicetime.judged_resolution(kernel.device)
                  if clock == "device" and kernel.device else None)
    return Timing(kernel_us, eager_us, inductor_us, patched_us, clock, kernel.host_us,
                  eager.host_us, resolution), model_speedup


def measure_all(analysis: Analysis, rec: Recording, usable: Mapping[int, Callable],
                gates: dict[int, list[GateResult]], model: ModelCheck,
                peak_gbps: float | None, inductor: bool) -> ValidationReport:
    """Gates 3 and 4 for every usable cluster; the others keep the gates they have."""
    dev = bench.device_info(peak_gbps)
    eager_model = clocked(rec.gm, rec.inputs, dev.l2_bytes, MODEL_COPIES)
    model_timing = measure_model(rec, usable, eager_model, dev.l2_bytes, inductor)
    results = []
    for c in analysis.clusters:
        tc = rec.clusters[c.index]  # the cluster as timed (same as `c` on a GPU)
        shape, fused = result_shape(rec.analysis, tc.index), tc.traffic.fused_bytes
        if c.index not in usable:
            results.append(ValidationResult(c.index, "cuda", shape, tuple(gates[c.index]),
                                            fused_bytes=fused))
            continue
        try:
            sub = eager_subgraph(rec.gm, tc)
            timing, model_speedup = _timings(rec, c, usable[c.index], sub, inductor,
                                             eager_model, dev.l2_bytes)
        except Exception as e:  # noqa: BLE001
            gates[c.index].append(GateResult("benchmark", False, one_line(e)))
            results.append(ValidationResult(c.index, "cuda", shape, tuple(gates[c.index]),
                                            fused_bytes=fused))
            continue
        tag = bench.regime(timing.kernel, fused, dev.l2_bytes, timing.resolution_us)
        achieved = bench.gbps(fused, timing.kernel)
        speedup = timing.eager / timing.kernel if timing.kernel else None
        gates[c.index] += [bench.benchmark_gate(speedup, tag),
                           bench.bandwidth_gate(achieved, dev.peak_gbps, tag)]
        results.append(ValidationResult(c.index, "cuda", shape, tuple(gates[c.index]), timing,
                                        tag, fused, achieved, dev.peak_gbps, model_speedup))
    return ValidationReport(tuple(results), model, "cuda", dev.name, model_timing,
                            dev.peak_gbps, dev.peak_source, timed=True)
