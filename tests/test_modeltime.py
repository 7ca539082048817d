"""Model-level measurement: wall and device time of the patched model against eager and
torch.compile, kernels per forward, the plain sentence, the JSON and plugin fields.

CPU tests stand stubs in for CUDA (host clock, CUDA-graph timer, torch.compile, profiler);
the GPU test measures ExampleNet for real."""

from __future__ import annotations

import importlib.util
import json
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
    return mod


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
def test_model_timed_both_ways_with_stubs(kernels, monkeypatch, compiled):
    """Stubs for CUDA: host clock 30 µs for every call, device time 4 µs for graphs, a
    torch.compile that returns the graph, a profiler count of 7. The model's figures go
    to the report, its JSON (schema-valid) and the plugin's measure() dict."""
    from fusion_core.validate import bench, devicetime, modeltime, run
    from fusion_core.validate.prepare import recording

    monkeypatch.setattr(bench, "time_us", lambda fn, samples=5: (30.0,) * samples)
    monkeypatch.setattr(
        bench,
        "device_info",
        lambda peak=None: bench.Device("Stub GPU", (9, 0), 60 * 2**20, 4000.0, "detected"),
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(devicetime, "floor_us", lambda index=0: 1.0)
    example = analyze_file(EXAMPLE, [InputSpec((16384, 1024))])
    monkeypatch.setattr(
        run,
        "recording",
        lambda analysis, candidates, **kw: recording(
            analysis, [reduced_specs(analysis)], **{**kw, "device": "cpu"}
        ),
    )

    def stub_device_time(fn, arg_sets, samples=devicetime.SAMPLES):
        fn(*arg_sets[0])
        return devicetime.DeviceTime((4.0,) * samples, 0.01, len(arg_sets))

    compiles: list[object] = []
    monkeypatch.setattr(devicetime, "device_time", stub_device_time)
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compiles.append(fn) or fn)
    monkeypatch.setattr(modeltime, "kernel_count", lambda fn, args: 7)
    report = validate(example, only_cluster0(kernels), inductor=compiled)
    mt = report.model_timing
    assert mt.clock == "device" and mt.patched_us == (4.0,) * devicetime.SAMPLES
    assert mt.patched_host_us == mt.eager_host_us == (30.0,) * 5
    assert mt.patched_kernels == mt.eager_kernels == 7
    assert bool(mt.compiled_us) is compiled and bool(mt.compiled_host_us) is compiled
    assert (mt.compiled_kernels == 7) is compiled
    # the usable cluster's subgraph and, once, the whole traced graph (more nodes)
    assert len(compiles) == (2 if compiled else 0)
    if compiled:
        sizes = [len(fn.graph.nodes) for fn in compiles]
        assert max(sizes) > min(sizes)
    lines = model_time_lines(mt, 1)
    assert lines[0].startswith("model with every usable kernel (1): 30.0 µs wall")
    assert "host-bound: 7 launches (wall 7.5x device time)" in lines[1]
    doc = report_dict(report)["model"]
    assert doc["patched_wall_us"] == [30.0] * 5 and doc["clock"] == "device"
    assert doc["kernels_per_forward"]["patched"] == 7
    pytest.importorskip("jsonschema").validate(
        json.loads(json.dumps(to_document(example, {"validation": report_dict(report)}))), schema()
    )
    measured = measure_dict(report, (9, 0))
    assert measured["clock"] == "device" and measured["model"]["fused_us"] == list(mt.patched_us)
    assert measured["model"]["compiled_host_us"] == list(mt.compiled_host_us)


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

    from pytest_fusion.records import TestRecord
    from pytest_fusion.report import table_lines

    rec = TestRecord(**{
        "nodeid": "t.py::t",
        "model": "Net",
        "clusters": 1,
        "saved_bytes": 0,
        "status": "pass",
        "timing_note": "timings checked",
        "model_speedup": 1.66,
        "model_wall_speedup": 0.95,
    })
    row = table_lines([rec])[1]
    assert "model 1.05× slower fused (wall time; device time 1.66× faster)" in row
    assert "timings checked" in row
    rec = replace(rec, model_wall_speedup=None)  # host-judged: one figure, as before
    assert "model 1.66× faster fused; timings checked" in table_lines([rec])[1]
