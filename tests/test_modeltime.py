"""Model-level measurement: wall and device time of the patched model against eager and
torch.compile, kernels per forward, the plain sentence, the JSON and plugin fields.

CPU tests stand stubs in for CUDA (host clock, CUDA-graph timer, torch.compile, profiler);
the GPU test measures ExampleNet for real."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.report.json_report import schema, to_document
from fusion_core.validate import LoadedKernel, validate
from fusion_core.validate.inputs import reduced_specs
from fusion_core.validate.report import measure_dict, model_time_lines, report_dict
from fusion_core.validate.types import ModelTiming

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "example_net.py"
FIXTURE = Path(__file__).parent / "validate_kernels" / "example_cluster0.py"


@pytest.fixture(scope="module")
def kernels():
    spec = importlib.util.spec_from_file_location("modeltime_cluster0_kernels", FIXTURE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules[spec.name] = mod  # as load_kernel does: as_operators finds `traceable` there
    yield mod
    sys.modules.pop(spec.name, None)


def only_cluster0(mod):
    def provider(analysis, cluster, workdir):
        if cluster.index != 0:
            raise NotImplementedError("the fixture only has cluster 0")
        return LoadedKernel(mod.cluster0, mod)

    return provider


def test_sentence_says_wall_first_and_why_it_differs_from_device_time():
    mt = ModelTiming(
        eager_us=(3510.0,),
        patched_us=(2120.0,),
        clock="device",
        eager_host_us=(6210.0,),
        patched_host_us=(5910.0,),
        compiled_us=(2060.0,),
        compiled_host_us=(2640.0,),
        eager_kernels=299,
        patched_kernels=176,
        compiled_kernels=125,
    )
    head, device, counts = model_time_lines(mt, 20)
    assert head == (
        "model with every usable kernel (20): 5.91 ms wall, 1.05x faster than eager "
        "(6.21 ms), 2.24x slower than torch.compile (2.64 ms)"
    )
    assert device.startswith(
        "  device time 2.12 ms, 1.66x faster than eager (3.51 ms), 1.03x "
        "slower than torch.compile (2.06 ms); host-bound: 176 launches"
    )
    assert counts == "  GPU kernels per forward: eager 299, patched 176, torch.compile 125"


def test_no_host_bound_reason_when_wall_is_near_device_time():
    mt = ModelTiming((100.0,), (50.0,), "device", (110.0,), (54.0,))
    lines = model_time_lines(mt, 1)
    assert len(lines) == 2 and "host-bound" not in lines[1]
    assert "torch.compile" not in "".join(lines)  # not compiled: nothing said about it
    host = ModelTiming((100.0,), (50.0,), "host", (100.0,), (50.0,))
    assert model_time_lines(host, 1) == [
        "model with every usable kernel (1): 50.0 µs wall, 2.00x faster than eager (100.0 µs)"
    ]


@pytest.mark.cpu
@pytest.mark.parametrize("compiled", [True, False])
def test_model_timed_both_ways_with_stubs(kernels, monkeypatch, stub_gpu, compiled):
    """Stubs for CUDA: host clock 30 µs for every call, device time 4 µs for graphs, a
    torch.compile that returns the graph, a profiler count of 7. The model's figures go
    to the report, its JSON (schema-valid) and the plugin's measure() dict."""
    from fusion_core.validate import devicetime, modeltime

    example = analyze_file(EXAMPLE, [InputSpec((16384, 1024))])
    compiles: list[object] = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compiles.append(fn) or fn)
    monkeypatch.setattr(modeltime, "kernel_count", lambda fn, args: 7)
    report = validate(example, only_cluster0(kernels), inductor=compiled)
    mt = report.model_timing
    assert mt.clock == "device" and mt.patched_us == (4.0,) * devicetime.SAMPLES
    assert mt.patched_host_us == mt.eager_host_us == (30.0,) * 5
    assert mt.patched_kernels == mt.eager_kernels == 7
    assert bool(mt.compiled_us) is compiled and bool(mt.compiled_host_us) is compiled
    assert (mt.compiled_kernels == 7) is compiled
    assert bool(mt.compiled_applied_us) is compiled
    # the usable cluster's subgraph and, once each, the whole traced graph and the patched
    # graph (more nodes than the subgraph)
    assert len(compiles) == (3 if compiled else 0)
    if compiled:
        sizes = [len(fn.graph.nodes) for fn in compiles]
        assert max(sizes) > min(sizes)
    lines = model_time_lines(mt, 1)
    assert lines[0].startswith("model with every usable kernel (1): 30.0 µs wall")
    assert "host-bound: 7 launches (wall 7.5x device time)" in lines[1]
    if compiled:
        assert lines[2] == ("  torch.compile of it: 30.0 µs wall, device time 4.0 µs, "
                            "1.00x faster than torch.compile alone (30.0 µs)")
    doc = report_dict(report)["model"]
    assert doc["patched_wall_us"] == [30.0] * 5 and doc["clock"] == "device"
    assert doc["kernels_per_forward"]["patched"] == 7
    pytest.importorskip("jsonschema").validate(
        json.loads(json.dumps(to_document(example, {"validation": report_dict(report)}))), schema()
    )
    measured = measure_dict(report, (9, 0))
    assert measured["clock"] == "device" and measured["model"]["fused_us"] == list(mt.patched_us)
    assert measured["model"]["compiled_host_us"] == list(mt.compiled_host_us)


@pytest.mark.cpu
def test_each_kernel_and_the_model_share_their_device_samples_with_their_eager_side(
    kernels, monkeypatch, stub_gpu
):
    """The pairs the plugin judges as ratios are timed in one ``device_times`` call each
    (their samples interleaved): the kernel beside its eager subgraph, the patched model
    beside the traced graph."""
    from fusion_core.validate import devicetime

    together: list[list[object]] = []
    stubbed = devicetime.device_times

    def recording(calls, samples=devicetime.SAMPLES):
        together.append([fn for fn, _ in calls])
        return stubbed(calls, samples)

    monkeypatch.setattr(devicetime, "device_times", recording)
    example = analyze_file(EXAMPLE, [InputSpec((16384, 1024))])
    report = validate(example, only_cluster0(kernels))
    pairs = [fns for fns in together if len(fns) == 2]
    assert len(pairs) == 2, together
    launcher = next(fns for fns in pairs if not isinstance(fns[0], torch.fx.GraphModule))
    assert launcher[0] is kernels.cluster0  # the kernel, then its eager subgraph
    assert isinstance(launcher[1], torch.fx.GraphModule)
    (model,) = [fns for fns in pairs if fns is not launcher]
    assert all(isinstance(fn, torch.fx.GraphModule) for fn in model)  # traced, then patched
    assert len(model[1].graph.nodes) < len(model[0].graph.nodes)  # three ops became one call
    assert report.model_timing.eager_us == report.model_timing.patched_us == (
        (4.0,) * devicetime.SAMPLES
    )


def test_figures_follow_the_shared_clock_in_measure_dict():
    """A device-timed cluster beside a host-timed model: every judged figure is host time
    (the clock the dict names), never device samples labelled host."""
    from fusion_core.validate.types import ModelCheck, Timing, ValidationReport, ValidationResult

    t = Timing((4.0,), (8.0,), (), (), "device", (30.0,), (40.0,))
    r = ValidationResult(0, "cuda", (2, 2), (), t, "l2-resident", 16, 1.0, 2.0)
    mt = ModelTiming((100.0,), (90.0,), "host", (100.0,), (90.0,))
    report = ValidationReport((r,), ModelCheck(None, None, ()), "cuda", "Stub", mt, timed=True)
    measured = measure_dict(report, (9, 0))
    assert measured["clock"] == "host"
    assert measured["clusters"][0]["kernel_us"] == [30.0]
    assert measured["clusters"][0]["eager_us"] == [40.0]


@pytest.mark.gpu
def test_model_time_on_the_gpu(kernels):
    """ExampleNet with cluster 0 patched, on CUDA: wall and device time for eager, patched
    and torch.compile, and a kernel count per forward from the profiler."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    example = analyze_file(EXAMPLE, [InputSpec((4096, 1024))])
    mt = validate(example, only_cluster0(kernels), inductor=True).model_timing
    assert mt is not None and mt.clock == "device"
    assert mt.patched_host_us and mt.compiled_host_us and mt.compiled_us
    assert mt.eager_kernels and mt.patched_kernels and mt.compiled_kernels
    assert mt.patched_kernels < mt.eager_kernels  # cluster 0's ops became one kernel
    assert model_time_lines(mt, 1)[1].startswith("  device time ")


def test_plugin_row_leads_with_wall_time_when_judged_by_device_time():
    from dataclasses import replace

    from fusion_plugin_helpers import timed_record

    from pytest_fusion.report import table_lines

    rec = timed_record(1.66, model_wall_speedup=0.95)
    row = table_lines([rec])[1]
    assert "model 1.05× slower fused (wall time; device time 1.66× faster)" in row
    assert "timings checked" in row
    rec = replace(rec, model_host_factor=2.79)  # wall time 2.79x the device time: host-bound
    assert ("model 1.05× slower fused (wall time; device time 1.66× faster; host-bound: "
            "wall 2.79× device time); timings checked") in table_lines([rec])[1]
    rec = replace(rec, model_launches=152)  # the profiler's count, when measured
    assert ("(wall time; device time 1.66× faster; host-bound: 152 launches, wall 2.79× device "
            "time); timings checked") in table_lines([rec])[1]
    rec = replace(rec, model_host_factor=1.05)  # within HOST_BOUND_FACTOR: nothing to explain
    assert "host-bound" not in table_lines([rec])[1]
    rec = replace(rec, model_wall_speedup=None)  # host-judged: one figure, as before
    assert "model 1.66× faster fused; timings checked" in table_lines([rec])[1]


@pytest.mark.cpu  # interpreter kernels on CPU tensors; the CUDA path: the gpu test below
def test_the_patched_graph_compiles_with_our_kernels_as_operators(tmp_path):
    """What `torch.compile of it` times: the traced graph with each usable kernel as the
    fused package's operator. Here on CPU with a real generated kernel: no graph break
    under fullgraph, the operator in Dynamo's graph, and the eager graph's result."""
    from fusion_core.validate import codegen_provider
    from fusion_core.validate.modeltime import as_operators
    from fusion_core.validate.prepare import recording
    from fusion_core.validate.subgraph import patch

    example = analyze_file(EXAMPLE, [InputSpec((4, 1024))])
    rec = recording(example, [reduced_specs(example)], keep_rows=False, device="cpu", seed=0)
    launcher = codegen_provider(example, example.clusters[0], tmp_path).launcher
    ops = as_operators(rec, {0: launcher})
    assert ops[0][1].operator.name().endswith("::cluster0")
    applied = patch(rec.gm, ops)
    torch._dynamo.reset()
    with torch.no_grad():
        explained = torch._dynamo.explain(applied)(*rec.inputs)
        assert explained.graph_break_count == 0, explained.break_reasons
        assert any("cluster0" in str(n.target) for g in explained.graphs for n in g.graph.nodes)
        torch._dynamo.reset()
        got = torch.compile(applied, backend="aot_eager", fullgraph=True)(*rec.inputs)
        torch.testing.assert_close(got, rec.gm(*rec.inputs), atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
def test_torch_compile_of_the_applied_model_on_the_gpu():
    """ExampleNet with every kernel generated: torch.compile of the patched graph (our
    kernels as operators Inductor traces into) is timed both ways and said in the line."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from fusion_core.validate import codegen_provider

    example = analyze_file(EXAMPLE, [InputSpec((4096, 1024))])
    report = validate(example, codegen_provider, inductor=True)
    mt = report.model_timing
    assert mt is not None and mt.compiled_applied_host_us and mt.compiled_applied_us
    lines = model_time_lines(mt, len(report.usable))
    assert any(line.startswith("  torch.compile of it: ") for line in lines), lines
