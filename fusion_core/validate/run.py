"""Run the four gates for every cluster of an analysis.

Reads an ``Analysis`` and a kernel provider (by default: ``fusion_core.codegen`` generates
each kernel, writes it to disk and imports it); writes a ``ValidationReport``.

- Without CUDA, kernels run under Triton's interpreter at a reduced shape (the analysis is
  re-run at that shape and clusters are matched by node names); with CUDA, natively at the
  analysed shape.
- Gate 1 compares each kernel with its eager subgraph; gate 2 patches every kernel that
  passed into a copy of the traced graph and compares the model output (and, on failure,
  patches them one at a time to find the culprit); gates 3 and 4 (CUDA only) time the kernel,
  the eager subgraph and the model, and check the achieved bandwidth.
- A failure is recorded in the cluster's result and never raises.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from ..analysis.types import Cluster
from ..codegen.reference import graph_on
from ..pipeline import Analysis, analyze
from . import bench
from .inputs import TARGET_ROWS, random_inputs, record, reduced_specs, result_shape
from .numerics import MODEL_TOL, as_tuple, check_cluster, compare, one_line
from .subgraph import PatchError, Subgraph, eager_subgraph, patch
from .types import GateResult, ModelCheck, ModelTiming, Timing, ValidationReport, ValidationResult


@dataclass(frozen=True)
class LoadedKernel:
    launcher: Callable[..., Any]  # clusterN(*inputs) -> output or tuple of outputs
    module: ModuleType | None  # the module the launcher lives in (its allocations get poisoned)
    path: Path | None = None


KernelProvider = Callable[[Analysis, Cluster, Path], LoadedKernel]


def codegen_provider(analysis: Analysis, cluster: Cluster, workdir: Path) -> LoadedKernel:
    """Generate the cluster's kernel with fusion_core.codegen, write it, import it from disk."""
    from .. import codegen

    kernel = codegen.generate(analysis, cluster)
    codegen.write_kernels([kernel], workdir)
    path = Path(workdir) / f"{kernel.name}.py"
    module = codegen.load_kernel(path)
    return LoadedKernel(getattr(module, kernel.name), module, path)


def use_interpreter_without_cuda() -> None:
    """Triton reads TRITON_INTERPRET when a kernel is decorated: set it before any load."""
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


@dataclass
class _Prepared:
    analysis: Analysis  # the one the numerics run on (reduced under the interpreter)
    clusters: dict[int, Cluster]  # original index -> cluster in `analysis`
    gm: torch.fx.GraphModule
    inputs: list[torch.Tensor]
    model_out: Any
    values: dict[str, Any]


def _numerics_analysis(analysis: Analysis, cuda: bool, target_rows: int
                       ) -> tuple[Analysis, dict[int, Cluster]]:
    same = {c.index: c for c in analysis.clusters}
    if cuda:
        return analysis, same
    specs = reduced_specs(analysis, target_rows)
    if specs == analysis.inputs:
        return analysis, same
    try:
        small = analyze(analysis.module, *specs, capture=analysis.graph.frontend)
    except Exception:  # noqa: BLE001 - keep the full shape if the model rejects the smaller one
        return analysis, same
    by_nodes = {c.nodes: c for c in small.clusters}
    matched = {}
    for c in analysis.clusters:
        sc = by_nodes.get(c.nodes)
        if sc is None or result_shape(small, sc.index)[-1:] != result_shape(analysis, c.index)[-1:]:
            return analysis, same  # structure changed with the shape: validate at full size
        matched[c.index] = sc
    return small, matched


def _prepare(analysis: Analysis, cuda: bool, seed: int, target_rows: int) -> _Prepared:
    num, clusters = _numerics_analysis(analysis, cuda, target_rows)
    device = "cuda" if cuda else "cpu"
    gm = num.graph_module
    if cuda:
        gm = graph_on(gm, device)
    inputs = random_inputs(num.inputs, num.module, device, seed)
    needed = {n for c in clusters.values() for n in c.inputs}
    for c in clusters.values():  # outside values the FX nodes read beyond cluster.inputs
        needed.update(eager_subgraph(gm, c).extras)
    model_out, values = record(gm, inputs, needed)
    return _Prepared(num, clusters, gm, inputs, model_out, values)


def _args(prep: _Prepared, sub: Subgraph) -> tuple[list[Any], list[Any]]:
    def val(name: str) -> Any:
        v = prep.values[name]
        return v.clone() if isinstance(v, torch.Tensor) else v
    kernel_args = [val(n) for n in sub.inputs]
    return kernel_args, kernel_args + [val(n) for n in sub.extras]


def _model_check(prep: _Prepared, loaded: dict[int, LoadedKernel]) -> ModelCheck:
    if not loaded:
        return ModelCheck(None, None, ())

    def run(indices: list[int]) -> tuple[bool, float | None, str]:
        try:
            patched = patch(prep.gm, {i: (prep.clusters[i], loaded[i].launcher)
                                      for i in indices})
            with torch.no_grad():
                out = patched(*[t.clone() for t in prep.inputs])
        except (PatchError, Exception) as e:  # noqa: BLE001
            return False, None, one_line(e)
        return compare(as_tuple(out), as_tuple(prep.model_out), MODEL_TOL)

    indices = sorted(loaded)
    ok, err, why = run(indices)
    if ok:
        return ModelCheck(True, err, tuple(indices))
    blamed = tuple(i for i in indices if not run([i])[0]) if len(indices) > 1 else tuple(indices)
    return ModelCheck(False, err, tuple(indices), blamed or tuple(indices), why)


def _timings(prep: _Prepared, c: Cluster, kernel: LoadedKernel, sub: Subgraph,
             inductor: bool, model_eager_us: float | None) -> tuple[Timing, float | None]:
    kargs, eargs = _args(prep, sub)
    kernel_us = bench.time_us(lambda: kernel.launcher(*kargs))
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
        one = patch(prep.gm, {c.index: (prep.clusters[c.index], kernel.launcher)})
        patched_us = bench.time_us(lambda: one(*prep.inputs))
        if model_eager_us:
            model_speedup = model_eager_us / Timing.median(patched_us)
    return Timing(kernel_us, eager_us, inductor_us, patched_us), model_speedup


def validate(analysis: Analysis, provider: KernelProvider | None = None, *,
             workdir: str | Path | None = None, peak_gbps: float | None = None,
             inductor: bool = False, seed: int = 0, target_rows: int = TARGET_ROWS
             ) -> ValidationReport:
    """Run every gate for every cluster; failures are recorded, never raised."""
    provider = provider or codegen_provider
    cuda = torch.cuda.is_available()
    use_interpreter_without_cuda()
    mode = "cuda" if cuda else "interpreter"
    try:
        prep = _prepare(analysis, cuda, seed, target_rows)
    except Exception as e:  # noqa: BLE001 - the model itself fails on random inputs
        return _unrunnable(analysis, mode, f"the model did not run on random inputs: "
                                            f"{one_line(e)}")
    with contextlib.ExitStack() as stack:
        if workdir is None or not cuda:  # reduced-shape kernels never go to the user's dir
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="fusion-validate-"))
        Path(workdir).mkdir(parents=True, exist_ok=True)
        # Inference only: eager timings must not pay for autograd bookkeeping.
        stack.enter_context(torch.no_grad())
        return _validate(analysis, prep, provider, Path(workdir), mode, peak_gbps, inductor)


def _unrunnable(analysis: Analysis, mode: str, why: str) -> ValidationReport:
    results = tuple(ValidationResult(c.index, "skipped", result_shape(analysis, c.index),
                                     (GateResult("cluster numerics", False, why),),
                                     fused_bytes=c.traffic.fused_bytes)
                    for c in analysis.clusters)
    return ValidationReport(results, ModelCheck(None, None, (), detail=why), mode,
                            torch.cuda.get_device_name() if mode == "cuda" else "cpu")


def _validate(analysis: Analysis, prep: _Prepared, provider: KernelProvider, workdir: Path,
              mode: str, peak_gbps: float | None, inductor: bool) -> ValidationReport:
    gates: dict[int, list[GateResult]] = {}
    loaded: dict[int, LoadedKernel] = {}
    subs: dict[int, Subgraph] = {}
    for c in analysis.clusters:
        sc = prep.clusters[c.index]
        try:
            kernel = provider(prep.analysis, sc, workdir)
            subs[c.index] = sub = eager_subgraph(prep.gm, sc)
        except Exception as e:  # noqa: BLE001 - a codegen failure fails gate 1 for this cluster
            gates[c.index] = [GateResult("cluster numerics", False,
                                         f"no kernel: {one_line(e)}")]
            continue
        kargs, eargs = _args(prep, sub)
        g = check_cluster(kernel.launcher, kernel.module, sub.module, kargs, eargs)
        gates[c.index] = [g]
        if g.passed:
            loaded[c.index] = kernel
    model = _model_check(prep, loaded)
    for i in loaded:
        blamed = i in model.blamed
        gates[i].append(GateResult("model numerics", not blamed,
                                   model.detail if blamed else "", model.max_abs_err))
    usable = {i: k for i, k in loaded.items() if i not in model.blamed}
    if mode != "cuda":
        results = tuple(ValidationResult(c.index, mode if c.index in loaded else "skipped",
                                         result_shape(prep.analysis, prep.clusters[c.index].index),
                                         tuple(gates[c.index]),
                                         fused_bytes=c.traffic.fused_bytes)
                        for c in analysis.clusters)
        return ValidationReport(results, model, mode, "cpu")
    return _measure(analysis, prep, usable, subs, gates, model, peak_gbps, inductor)


def _measure(analysis: Analysis, prep: _Prepared, usable: dict[int, LoadedKernel],
             subs: dict[int, Subgraph], gates: dict[int, list[GateResult]], model: ModelCheck,
             peak_gbps: float | None, inductor: bool) -> ValidationReport:
    dev = bench.device_info(peak_gbps)
    eager_model_us = bench.time_us(lambda: prep.gm(*prep.inputs))
    model_timing = None
    if usable:
        with contextlib.suppress(Exception):
            all_patched = patch(prep.gm, {i: (prep.clusters[i], k.launcher)
                                          for i, k in usable.items()})
            model_timing = ModelTiming(eager_model_us,
                                       bench.time_us(lambda: all_patched(*prep.inputs)))
    results = []
    for c in analysis.clusters:
        tc = prep.clusters[c.index]  # the cluster as timed (same as `c` on a GPU)
        shape, fused = result_shape(prep.analysis, tc.index), tc.traffic.fused_bytes
        if c.index not in usable:
            results.append(ValidationResult(c.index, "cuda", shape, tuple(gates[c.index]),
                                            fused_bytes=fused))
            continue
        try:
            timing, model_speedup = _timings(prep, c, usable[c.index], subs[c.index], inductor,
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
                            dev.peak_gbps, dev.peak_source)
