"""Gates 3 and 4 (CUDA only): time each usable kernel, its eager subgraph and the model.

Reads the ``Recording`` the numerics ran on (on a GPU: the analysed shape), the usable
kernels and the gate results so far; writes the CUDA ``ValidationReport`` with timings,
regime tags, achieved bandwidth and the benchmark and bandwidth gates.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..analysis.types import Cluster
from ..pipeline import Analysis
from . import bench
from .inputs import result_shape
from .numerics import one_line
from .prepare import Recording
from .subgraph import Subgraph, eager_subgraph, launch_args, patch
from .types import GateResult, ModelCheck, ModelTiming, Timing, ValidationReport, ValidationResult


def _args(rec: Recording, sub: Subgraph) -> tuple[list[Any], list[Any]]:
    def val(name: str) -> Any:
        v = rec.values[name]
        return v.clone() if isinstance(v, torch.Tensor) else v
    kernel_args = [val(n) for n in sub.inputs]
    return launch_args(kernel_args, rec.device), kernel_args + [val(n) for n in sub.extras]


def _timings(rec: Recording, c: Cluster, launcher: Callable, sub: Subgraph, inductor: bool,
             model_eager_us: float | None) -> tuple[Timing, float | None]:
    kargs, eargs = _args(rec, sub)
    kernel_us = bench.time_us(lambda: launcher(*kargs))
    eager_us = bench.time_us(lambda: sub.module(*eargs))
    inductor_us: tuple[float, ...] = ()
    if inductor:
        with contextlib.suppress(Exception):
            compiled = torch.compile(sub.module)
            compiled(*eargs)
            inductor_us = bench.time_us(lambda: compiled(*eargs))
    patched_us: tuple[float, ...] = ()
    model_speedup = None
    with contextlib.suppress(Exception):
        one = patch(rec.gm, {c.index: (rec.clusters[c.index], launcher)})
        patched_us = bench.time_us(lambda: one(*rec.inputs))
        if model_eager_us:
            model_speedup = model_eager_us / Timing.median(patched_us)
    return Timing(kernel_us, eager_us, inductor_us, patched_us), model_speedup


def measure_all(analysis: Analysis, rec: Recording, usable: Mapping[int, Callable],
                gates: dict[int, list[GateResult]], model: ModelCheck,
                peak_gbps: float | None, inductor: bool) -> ValidationReport:
    """Gates 3 and 4 for every usable cluster; the others keep the gates they have."""
    dev = bench.device_info(peak_gbps)
    eager_model_us = bench.time_us(lambda: rec.gm(*rec.inputs))
    model_timing = None
    if usable:
        with contextlib.suppress(Exception):
            all_patched = patch(rec.gm, {i: (rec.clusters[i], k) for i, k in usable.items()})
            model_timing = ModelTiming(eager_model_us,
                                       bench.time_us(lambda: all_patched(*rec.inputs)))
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
                                             Timing.median(eager_model_us))
        except Exception as e:  # noqa: BLE001
            gates[c.index].append(GateResult("benchmark", False, one_line(e)))
            results.append(ValidationResult(c.index, "cuda", shape, tuple(gates[c.index]),
                                            fused_bytes=fused))
            continue
        tag = bench.regime(timing.kernel, fused, dev.l2_bytes)
        achieved = bench.gbps(fused, timing.kernel)
        speedup = timing.eager / timing.kernel if timing.kernel else None
        gates[c.index] += [bench.benchmark_gate(speedup, tag),
                           bench.bandwidth_gate(achieved, dev.peak_gbps, tag)]
        results.append(ValidationResult(c.index, "cuda", shape, tuple(gates[c.index]), timing,
                                        tag, fused, achieved, dev.peak_gbps, model_speedup))
    return ValidationReport(tuple(results), model, "cuda", dev.name, model_timing,
                            dev.peak_gbps, dev.peak_source, timed=True)
