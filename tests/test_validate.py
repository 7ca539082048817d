"""The validation gates on CPU: numerics under the Triton interpreter, poisoned outputs,
NaN, model numerics with patched kernels, reduced shapes, reports and the CLI sections."""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import json
import re
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from rich.console import Console

from fusion_core.cli import cli
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze, analyze_file
from fusion_core.report.json_report import schema, to_document
from fusion_core.validate import LoadedKernel, validate
from fusion_core.validate.inputs import random_inputs, record, reduced_specs
from fusion_core.validate.numerics import (
    CLUSTER_TOL,
    check_cluster,
    compare,
    poisoned_allocations,
)
from fusion_core.validate.report import (
    NO_GPU_LINE,
    _numerics_line,
    print_validation,
    report_dict,
)
from fusion_core.validate.subgraph import eager_subgraph, patch
from fusion_core.validate.types import ValidationResult

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "example_net.py"
MICROGPT = ROOT / "examples" / "microgpt.py"
FIXTURE = Path(__file__).parent / "validate_kernels" / "example_cluster0.py"


def _has_codegen() -> bool:
    try:
        from fusion_core import codegen
    except ImportError:
        return False
    return all(hasattr(codegen, n) for n in ("generate", "write_kernels", "load_kernel"))


needs_codegen = pytest.mark.skipif(not _has_codegen(), reason="fusion_core.codegen not present")


@pytest.fixture(scope="module")
def kernels():
    spec = importlib.util.spec_from_file_location("example_cluster0_kernels", FIXTURE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def example():
    return analyze_file(EXAMPLE, [InputSpec((16384, 1024))])


def only_cluster0(mod, name):
    def provider(analysis, cluster, workdir):
        if cluster.index != 0:
            raise NotImplementedError("the fixture only has cluster 0")
        return LoadedKernel(getattr(mod, name), mod)
    return provider


def test_reduced_shape_keeps_row_length(example):
    assert reduced_specs(example) == (InputSpec((64, 1024)),)
    gpt = analyze_file(MICROGPT, [InputSpec((2, 128), torch.int64)])
    assert reduced_specs(gpt) == (InputSpec((1, 128), torch.int64),)


def test_random_inputs_are_valid_tokens_and_never_zero():
    gpt = analyze_file(MICROGPT, [InputSpec((2, 128), torch.int64)])
    (tokens,) = random_inputs(gpt.inputs, gpt.module, "cpu", seed=1)
    assert tokens.dtype == torch.int64 and int(tokens.max()) < 256 and int(tokens.min()) >= 0
    assert len(torch.unique(tokens)) > 10
    (x,) = random_inputs((InputSpec((8, 16)),), gpt.module, "cpu", seed=1)
    assert bool((x != 0).all())


@pytest.mark.cpu
def test_handwritten_kernel_verified_at_reduced_shape(example, kernels):
    report = validate(example, only_cluster0(kernels, "cluster0"))
    r0 = report.result(0)
    assert r0.usable and r0.status == "verified (interpreter, 64×1024 of 16384×1024)"
    assert r0.max_abs_err == 0.0
    assert report.model.passed and report.model.patched == (0,)
    # Clusters without a kernel fail gate 1 with the reason and are not usable.
    for i in (1, 2):
        r = report.result(i)
        assert not r.usable and r.failed.gate == "cluster numerics"
        assert "no kernel" in r.failed.detail


@pytest.fixture
def tf32_on():
    """TF32 allowed, through whichever switches this torch has (never both kinds)."""
    from fusion_core.validate.run import float32_switches

    switches = float32_switches()
    saved = [getattr(obj, name) for obj, name, _ in switches]
    allowed = {"fp32_precision": "tf32", "allow_tf32": True}
    for obj, name, _ in switches:
        setattr(obj, name, allowed[name])
    yield switches
    for (obj, name, _), value in zip(switches, saved, strict=True):
        setattr(obj, name, value)


def test_numerics_run_without_tf32_and_the_settings_come_back(example, kernels, tf32_on):
    """TF32 convolutions would amplify a kernel's last-bit differences in a deep CNN."""
    def state():
        return [getattr(obj, name) for obj, name, _ in tf32_on]

    before, seen = state(), []

    def provider(analysis, cluster, workdir):
        inner = only_cluster0(kernels, "cluster0")(analysis, cluster, workdir)

        def launcher(*args):
            seen.append(state())
            return inner.launcher(*args)
        return LoadedKernel(launcher, inner.module)

    report = validate(example, provider, timing=False)  # with CUDA, timings keep TF32
    assert report.model.passed and len(seen) >= 2  # the cluster check and the model check
    assert seen[-1] == [exact for _, _, exact in tf32_on] != before
    assert state() == before


def test_wrong_kernel_fails_with_max_error(example, kernels):
    r0 = validate(example, only_cluster0(kernels, "cluster0_wrong")).result(0)
    assert not r0.usable and r0.failed.gate == "cluster numerics"
    assert r0.max_abs_err > 1.0  # relu dropped: negatives off by |2x|
    assert "FAILED cluster numerics (max abs err" in r0.status


def test_nan_never_passes(example, kernels):
    r0 = validate(example, only_cluster0(kernels, "cluster0_nan")).result(0)
    assert not r0.usable and "NaN" in r0.failed.detail


def test_poisoned_output_catches_unwritten_elements(example, kernels):
    r0 = validate(example, only_cluster0(kernels, "cluster0_half")).result(0)
    assert not r0.usable and "NaN" in r0.failed.detail


def test_poison_only_touches_the_launcher_module(kernels):
    with poisoned_allocations(kernels):
        mine = torch.empty(4)
        fill = torch.empty_like(mine).fill_(1.0)
    assert not torch.isnan(fill).any() and mine.shape == (4,)


def test_model_numerics_blames_kernel_wrong_in_the_model(example, kernels):
    report = validate(example, only_cluster0(kernels, "cluster0_second_call_wrong"))
    r0 = report.result(0)
    assert r0.gate("cluster numerics").passed
    assert report.model.passed is False and report.model.blamed == (0,)
    assert not r0.usable and r0.failed.gate == "model numerics"


def test_compare_rules():
    x = torch.tensor([1.0, float("inf"), -2.0])
    assert compare((x.clone(),), (x,), CLUSTER_TOL)[0]
    nan = x.clone()
    nan[0] = float("nan")
    ok, err, why = compare((nan,), (nan.clone(),), CLUSTER_TOL)
    assert ok  # eager's own NaN kept (a softmax over a fully masked row)
    ok, err, why = compare((x.clone(),), (nan,), CLUSTER_TOL)
    assert not ok
    ok, err, why = compare((nan[:1],), (nan[:1].clone(),), CLUSTER_TOL)
    assert not ok and "NaN" in why  # all NaN, as eager: nothing was compared
    ok, err, why = compare((-nan,), (x,), CLUSTER_TOL)
    assert not ok and "NaN" in why  # NaN where eager has a number
    ok, err, why = compare((x[:2],), (x,), CLUSTER_TOL)
    assert not ok and "shape" in why
    half = torch.tensor([1.0], dtype=torch.float16)
    assert compare((half + 5e-3,), (half,), CLUSTER_TOL)[0]  # fp16 tolerance is loose
    assert not compare((x + 1e-3,), (x,), CLUSTER_TOL)[0]  # fp32 is not


def _cancelling_rows() -> torch.Tensor:
    """Rows of 8192 large values whose exact sum is about 0: float32 sums err far beyond the
    plain tolerance, by an amount that depends on the order of the additions."""
    x = torch.randn(64, 8192, generator=torch.Generator().manual_seed(0)) * 100
    x[:, -1] = -x[:, :-1].double().sum(1).float()
    return x


def test_a_sum_rounded_in_another_order_passes_against_float64():
    x = _cancelling_rows()
    eager = lambda t: t.sum(-1)  # noqa: E731
    exact = x.double().sum(-1).float()  # a kernel that adds in another (better) order
    assert not compare((exact,), (eager(x),), CLUSTER_TOL)[0]  # the plain rule refuses it
    gate = check_cluster(lambda t: t.double().sum(-1).float(), None, eager, [x], [x])
    assert gate.passed and "float64" in gate.detail, gate
    result = ValidationResult(0, "interpreter", (64,), (gate,))
    assert "against float64" in _numerics_line(result)  # the pass line says why


def test_a_sum_further_from_float64_than_eager_fails():
    x = _cancelling_rows()
    eager = lambda t: t.sum(-1)  # noqa: E731
    err = float((eager(x).double() - x.double().sum(-1)).abs().max())
    gate = check_cluster(lambda t: t.sum(-1) + 3 * err, None, eager, [x], [x])
    assert not gate.passed and "beyond atol" in gate.detail, gate


def _softmax_and_its_float(t):
    s = torch.softmax(t * 0.125, dim=-1)
    return s, s.float() * 2.0


def _kernel_keeping_float32(t, bf16_shift=0.0):
    """What a kernel computes: the softmax in float32, rounded to bf16 only where stored."""
    s = torch.softmax(t.float() * 0.125, dim=-1)
    return (s + bf16_shift).to(torch.bfloat16), s * 2.0


def test_a_float32_output_beside_a_bf16_one_is_judged_against_float64():
    """eager rounds the bf16 softmax before `float()`, the kernel does not: output 1 is
    beyond float32's tolerance of eager, yet nearer float64 than eager is."""
    x = torch.randn(64, 256).to(torch.bfloat16)
    assert not compare(_kernel_keeping_float32(x), _softmax_and_its_float(x), CLUSTER_TOL)[0]
    gate = check_cluster(_kernel_keeping_float32, None, _softmax_and_its_float, [x], [x])
    assert gate.passed and "against float64 (eager rounds to the narrower dtype first" in (
        gate.detail), gate


def test_a_wrong_bf16_output_fails_whatever_its_float32_sibling_says():
    x = torch.randn(64, 256).to(torch.bfloat16)
    gate = check_cluster(lambda t: _kernel_keeping_float32(t, bf16_shift=0.05), None,
                         _softmax_and_its_float, [x], [x])
    assert not gate.passed and "output 0" in gate.detail, gate


def test_an_overflow_in_eager_excuses_no_kernel_error():
    """eager's exp(100) is inf in float32 and finite in float64: no excuse for a kernel that
    is wrong elsewhere (a largest-error rule would have passed it)."""
    x = torch.tensor([100.0, 1.0, 2.0])
    gate = check_cluster(lambda t: torch.tensor([float("inf"), 5.0, -3.0]), None, torch.exp,
                         [x], [x])
    assert not gate.passed, gate


def test_a_large_eager_error_on_one_element_excuses_no_other_element():
    x = _cancelling_rows()
    eager = lambda t: t.sum(-1)  # noqa: E731
    wrong = x.double().sum(-1).float()
    wrong[0] += 1e-3  # far beyond this row's float64 distance, below the worst row's
    gate = check_cluster(lambda t: wrong, None, eager, [x], [x])
    assert not gate.passed, gate


@pytest.mark.parametrize(("cuda", "advice"), [(False, "set it in the environment"),
                                               (True, "on a machine with CUDA")])
def test_a_kernel_decorated_the_other_way_says_how_to_set_the_interpreter(monkeypatch, cuda,
                                                                           advice):
    """What triton raises when TRITON_INTERPRET changed after it loaded (the kernel is
    interpreted, tl's own @jit functions are not, or the reverse): the advice depends on
    whether CUDA is there (set the variable first, or leave it unset)."""
    from triton.runtime.errors import InterpreterError

    def mixed(t):
        raise InterpreterError(repr(RuntimeError(
            "Cannot call @triton.jit'd outside of the scope of a kernel")))

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    x = torch.ones(4)
    gate = check_cluster(mixed, None, torch.exp, [x], [x])
    assert not gate.passed and "outside of the scope of a kernel" in gate.detail, gate
    assert advice in gate.detail and "TRITON_INTERPRET=1" in gate.detail, gate


def test_eager_subgraph_and_patch_reproduce_the_model(example):
    small = analyze_file(EXAMPLE, [InputSpec((8, 1024))])
    gm = small.graph_module
    (x,) = random_inputs(small.inputs, small.module, "cpu", seed=3)
    c = small.clusters[1]
    out, values = record(gm, [x], set(c.inputs) | set(c.outputs))
    sub = eager_subgraph(gm, c)
    assert torch.equal(sub.module(*[values[n] for n in c.inputs]), values[c.outputs[-1]])
    # Patching every cluster with its own eager subgraph leaves the model output unchanged.
    subs = {k.index: (k, eager_subgraph(gm, k).module) for k in small.clusters}
    patched = patch(gm, subs)
    names = {n.name for n in patched.graph.nodes}
    assert not any(n in names for k in small.clusters for n in k.nodes)
    assert torch.equal(patched(x), out)


@pytest.mark.cpu
def test_console_and_json(example, kernels):
    from io import StringIO

    from rich.console import Console

    report = validate(example, only_cluster0(kernels, "cluster0"))
    buf = StringIO()
    print_validation(report, Console(file=buf, width=200))
    text = buf.getvalue()
    assert "Numerics" in text and NO_GPU_LINE in text and not report.timed
    assert "cluster 0: verified (interpreter, 64×1024 of 16384×1024)" in text
    assert "cluster 1: FAILED cluster numerics" in text
    doc = to_document(example, {"validation": report_dict(report)})
    assert doc["validation"]["clusters"][0]["usable"] is True
    pytest.importorskip("jsonschema").validate(json.loads(json.dumps(doc)), schema())


@needs_codegen
@pytest.mark.cpu
@pytest.mark.parametrize("path,shape,dtype", [(EXAMPLE, (16384, 1024), torch.float32),
                                              (MICROGPT, (2, 128), torch.int64)])
def test_generated_kernels_verified_end_to_end(path, shape, dtype):
    analysis = analyze_file(path, [InputSpec(shape, dtype)])
    report = validate(analysis)
    assert report.mode == "interpreter"
    bad = [r.status for r in report.results if not r.usable]
    assert not bad, bad
    assert report.model.passed and len(report.model.patched) == len(analysis.clusters)


@needs_codegen
@pytest.mark.cpu
def test_cli_numerics_section_and_json(tmp_path):
    out = tmp_path / "o.json"
    res = CliRunner().invoke(cli, ["--model", str(EXAMPLE), "--input-shape", "256,1024",
                                   "--out-dir", str(tmp_path / "gen"), "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "verified (interpreter, 64×1024 of 256×1024)" in res.output and NO_GPU_LINE in res.output
    assert sorted(p.name for p in (tmp_path / "gen").glob("cluster*.py")) == [
        "cluster0.py", "cluster1.py", "cluster2.py"]
    doc = json.loads(out.read_text())
    assert [c["usable"] for c in doc["validation"]["clusters"]] == [True, True, True]
    pytest.importorskip("jsonschema").validate(doc, schema())


@pytest.mark.cpu
def test_measure_is_none_without_cuda(example):
    import fusion_core

    assert fusion_core.measure(example) is None


@pytest.mark.cpu
def test_measured_path_logic_with_a_stub_timer(example, kernels, monkeypatch, stub_gpu):
    """The CUDA-only steps (timings, regime, bandwidth, model speedup, the Measured section)
    driven on CPU: do_bench replaced by one wall-clock call, the device by a fixed one, no
    CUDA-graph capture (host time)."""
    import time
    from io import StringIO

    from rich.console import Console

    from fusion_core.validate import bench

    def stub_time_us(fn, samples=3):
        out = []
        for _ in range(samples):
            t = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t) * 1e6 + 20.0)  # keep it above launch-bound
        return tuple(out)

    monkeypatch.setattr(bench, "time_us", stub_time_us)
    monkeypatch.setattr(torch, "compile", lambda fn: fn)  # Inductor's compile is tested elsewhere
    stub_gpu.uncapturable.append(object)
    report = validate(example, only_cluster0(kernels, "cluster0"), peak_gbps=None,
                      inductor=True)
    r0 = report.result(0)
    assert report.mode == "cuda" and report.device == "Stub GPU" and report.timed
    # the kernel and its eager ops: host samples taken in turn, one at a time
    assert len(r0.timing.kernel_us) == bench.SAMPLES == len(r0.timing.eager_us)
    assert r0.timing.inductor_us and r0.timing.model_patched_us
    assert r0.regime == "l2-resident"  # 512 KB at the reduced shape fits the stub's L2
    assert r0.gbps == pytest.approx(r0.fused_bytes / (r0.timing.kernel * 1e-6) / 1e9)
    assert r0.cluster_speedup == pytest.approx(r0.timing.eager / r0.timing.kernel)
    assert r0.model_speedup is not None and report.model_timing.speedup is not None
    assert {g.gate for g in r0.gates} == {"cluster numerics", "model numerics", "benchmark",
                                          "bandwidth"}
    assert not report.result(1).usable and report.result(1).timing is None
    buf = StringIO()
    print_validation(report, Console(file=buf, width=300), inductor=True)
    text = buf.getvalue()
    assert "Measured" in text and "fused cluster " in text and "inductor" in text
    # A ratio is worded by its direction, never as "0.69x faster".
    assert re.search(r"fused cluster \d+\.\d\dx (faster|slower) than eager \(host time\)", text)
    assert "of 4000 GB/s detected peak memory bandwidth" in text
    pytest.importorskip("jsonschema").validate(json.loads(json.dumps(
        to_document(example, {"validation": report_dict(report)}))), schema())


@pytest.mark.cpu
def test_device_clock_with_a_stub_device_timer(example, kernels, stub_gpu):
    """Kernel and eager subgraph captured (a stub stands for CUDA graphs): judged by device
    time, launch-bound only below the timer's resolution, host figures kept beside; where
    the eager side cannot be captured both sides fall back to host time."""
    from fusion_core.validate import devicetime
    from fusion_core.validate.report import measure_dict
    from fusion_core.validate.types import LAUNCH_BOUND

    # stub_gpu: host clock 30 µs, device time 4 µs, the GPU's per-kernel floor 1 µs
    report = validate(example, only_cluster0(kernels, "cluster0"))
    r0 = report.result(0)
    assert r0.timing.clock == "device" and r0.timing.kernel_us == (4.0,) * devicetime.SAMPLES
    assert r0.timing.kernel_host_us == r0.timing.eager_host_us == (30.0,) * 5
    assert r0.timing.resolution_us == devicetime.FLOOR_FACTOR * 1.0  # the floor, not 0.01
    assert r0.regime == "l2-resident"  # 4 µs: launch-bound by the host rule, not the device's
    stub_gpu.floor_us = 3.0  # 4 µs is then mostly the per-kernel floor: not judged
    assert validate(example, only_cluster0(kernels, "cluster0")).result(0).regime == LAUNCH_BOUND
    assert report.model_timing.clock == "device"
    measured = measure_dict(report, (9, 0))
    assert measured["clock"] == "device"
    assert measured["clusters"][0]["kernel_host_us"] == [30.0] * 5
    assert measured["model"]["fused_host_us"] == [30.0] * 5

    stub_gpu.uncapturable.append(torch.fx.GraphModule)  # eager subgraphs and the model
    report = validate(example, only_cluster0(kernels, "cluster0"))
    r0 = report.result(0)
    assert r0.timing.clock == "host" and r0.timing.kernel_us == (30.0,) * 5
    assert r0.timing.resolution_us is None and report.model_timing.clock == "host"
    assert measure_dict(report, (9, 0))["clock"] == "host"


@pytest.mark.cpu
def test_timing_false_on_cuda_checks_numerics_and_times_nothing(example, kernels, monkeypatch,
                                                                 stub_gpu):
    """`validate(timing=False)` on a (stubbed) CUDA machine: gates 1 and 2 only, no timer or
    device query called, and the console, JSON and HTML data say the timings were not run."""
    from fusion_core.report.html import PageResults, page_data
    from fusion_core.validate import bench, devicetime
    from fusion_core.validate.report import NOT_TIMED_LINE

    timed = []
    monkeypatch.setattr(bench, "time_us", lambda fn, samples=5: timed.append(fn) or (20.0,))
    monkeypatch.setattr(bench, "device_info", lambda peak=None: timed.append(peak))
    monkeypatch.setattr(devicetime, "device_time", lambda *a, **k: timed.append(a))
    monkeypatch.setattr(devicetime, "device_times", lambda *a, **k: timed.append(a))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Stub GPU")
    report = validate(example, only_cluster0(kernels, "cluster0"), timing=False)
    assert timed == []
    assert report.mode == "cuda" and report.device == "Stub GPU" and not report.timed
    r0 = report.result(0)
    assert r0.usable and r0.status == "verified (cuda)" and r0.timing is None
    assert [g.gate for g in r0.gates] == ["cluster numerics", "model numerics"]
    assert report.model.passed and report.model_timing is None
    assert [r.mode for r in report.results] == ["cuda"] * 3 and not report.result(1).usable
    buf = io.StringIO()
    print_validation(report, Console(file=buf, width=300))
    text = buf.getvalue()
    assert "Numerics" in text and "Measured" not in text and "cluster speedup" not in text
    assert NOT_TIMED_LINE in text and NO_GPU_LINE not in text
    doc = json.loads(json.dumps(to_document(example, {"validation": report_dict(report)})))
    assert doc["validation"]["timed"] is False and doc["validation"]["mode"] == "cuda"
    assert all(c["timing_us"] is None for c in doc["validation"]["clusters"])
    pytest.importorskip("jsonschema").validate(doc, schema())
    page = page_data(example, PageResults(report=report))
    assert page["mode"] == "cuda" and page["timed"] is False


def test_regime_and_gates():
    from fusion_core.validate import bench

    assert bench.regime(5.0, 10**9, 60 * 2**20) == "launch-bound"
    assert bench.regime(50.0, 2**20, 60 * 2**20) == "l2-resident"
    assert bench.regime(50.0, 2**30, 60 * 2**20) == "dram-bound"
    assert not bench.benchmark_gate(0.5, "dram-bound").passed
    assert bench.benchmark_gate(0.5, "launch-bound").passed  # no speedup claimed there
    assert not bench.bandwidth_gate(6000.0, 4000.0, "dram-bound").passed
    assert bench.bandwidth_gate(6000.0, 4000.0, "l2-resident").passed

    class Props:
        memory_clock_rate = 2_619_000  # kHz
        memory_bus_width = 6144  # bits

    assert bench.detected_peak_gbps(Props()) == pytest.approx(2 * 2.619e9 * 768 / 1e9)


def test_a_model_that_fails_on_random_inputs_is_reported_not_raised(example, monkeypatch):
    from fusion_core.validate import prepare

    def broken(*args, **kwargs):
        raise IndexError("index out of range in self")

    monkeypatch.setattr(prepare, "record", broken)
    report = validate(example, lambda *a: pytest.fail("no kernel should be built"))
    assert all(not r.usable for r in report.results)
    assert "did not run on random inputs: IndexError" in report.results[0].failed.detail


def test_cluster_reading_a_parameter_fetched_late_patches_into_the_model(tmp_path):
    """two_norms: FX fetches the second LayerNorm's weight and bias where `norm_mlp` runs,
    after `attn` already read the first norm; the patch moves those fetches before the
    cluster, so its one kernel call fits (was a PatchError)."""
    res = CliRunner().invoke(cli, ["--model", str(ROOT / "examples" / "two_norms.py"),
                                   "--input-shape", "2,16,64", "--input-shape", "2,16,64",
                                   "--out-dir", str(tmp_path / "gen")])
    assert res.exit_code == 0, res.output
    assert "model numerics: pass (2 kernels patched" in res.output
    assert "PatchError" not in res.output


@needs_codegen
def test_a_graph_that_is_not_the_model_fails_model_numerics():
    """Model numerics compares patched against unpatched graph; a graph that differs from
    the model (here: a constant FX baked in, changed on the model afterwards) must not pass."""
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = 2.0

        def forward(self, x):
            return torch.relu(x * self.scale) + 1.0

    model = Scaled().eval()
    analysis = analyze(model, InputSpec((4, 64)))
    assert validate(analysis).model.passed
    model.scale = 3.0
    report = validate(analysis)
    check = report.model
    assert check.passed is False and check.blamed == (0,)  # not offered: nothing vouches for it
    assert "the traced graph differs from the model itself" in check.detail
    assert not report.result(0).usable


def test_a_recorded_output_written_over_later_is_said_to_be_that_not_a_capture_problem():
    """The H100 once failed a model check as "a capture problem" where the model and a
    fresh run of its graph agree: the output recorded earlier had changed. Said as such; and
    a graph that no longer runs after the kernels did is not called the capture's fault."""
    from fusion_core.validate.capture_check import (
        GRAPH_FAILS_AGAIN,
        RECORDING_CHANGED,
        graph_matches_model,
    )
    from fusion_core.validate.prepare import recording

    class Scaled(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x * 2.0) + 1.0

    analysis = analyze(Scaled(), InputSpec((4, 64)))
    rec = recording(analysis, [], keep_rows=True, device="cpu", seed=0)
    assert graph_matches_model(rec)[0] is True
    rec.model_out.zero_()  # written over, as an out-of-bounds store would
    same, err, why = graph_matches_model(rec)
    assert same is False and err is not None and err > 0
    assert why.startswith(RECORDING_CHANGED) and "beyond atol" in why, why

    def failing(*inputs):  # as a graph does after a kernel left a CUDA error behind
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    same, _, why = graph_matches_model(dataclasses.replace(rec, gm=failing))
    assert same is False and why.startswith(GRAPH_FAILS_AGAIN), why
    assert "an illegal memory access" in why and "beyond atol" in why, why


@needs_codegen
def test_a_model_that_cannot_be_compared_with_its_graph_says_so_on_the_pass_line():
    class TracesButFailsEagerly(torch.nn.Module):
        def forward(self, x):
            if not torch.fx._symbolic_trace.is_fx_tracing():
                raise RuntimeError("needs the traced graph")
            return torch.relu(x * 2.0) + 1.0

    report = validate(analyze(TracesButFailsEagerly(), InputSpec((4, 64)), capture="fx"))
    assert report.model.passed
    out = io.StringIO()
    print_validation(report, Console(file=out, width=400))
    (line,) = [ln for ln in out.getvalue().splitlines() if ln.startswith("model numerics")]
    assert ("the graph was not compared with the model: the model itself did not run: "
            "RuntimeError: needs the traced graph") in line


def test_input_copies_rotate_past_the_l2():
    from fusion_core.validate.devicetime import MAX_COPIES, copy_count, rotating

    l2 = 60 * 2**20
    assert copy_count(4 * 2**20, l2) == MAX_COPIES  # 45 would be needed: capped
    assert copy_count(30 * 2**20, l2) == 6  # 6 x 30 MiB = 3 x the L2
    assert copy_count(2**30, l2) == 2  # past the L2 alone: two copies still alternate
    assert copy_count(2**20, None) == 2  # L2 unknown
    x = torch.ones(4)  # not on a GPU: nothing to keep out of its L2, shared as it is
    assert all(s[0] is x for s in rotating([x], l2))


def _launcher_module(writes: str) -> object:
    """A launcher module whose outputs come from `torch.empty` (so they are poisoned) and
    get `writes` done to them: how a kernel that skips some elements looks to the gate."""
    import types

    module = types.ModuleType("fake_launcher")
    exec(  # noqa: S102 - the test's own literal code
        "import torch\n"
        "def launch(x):\n"
        "    out = torch.empty(x.shape)\n"
        f"    {writes}\n"
        "    return out\n", module.__dict__)
    return module


def _masked_softmax(x):
    """Rows 0 and 1 fully masked: eager's softmax is NaN there."""
    mask = torch.zeros_like(x, dtype=torch.bool)
    mask[:2] = True
    return torch.softmax(x.masked_fill(mask, float("-inf")), dim=-1)


def test_a_nan_row_the_kernel_never_wrote_fails_though_eager_is_nan_there():
    """Eager is NaN on the masked rows; a kernel that skips those rows leaves the poison,
    also NaN: once that agreed. Run again on outputs poisoned with a number, it shows."""
    x = torch.randn(4, 8)
    skips = _launcher_module("out[2:] = torch.softmax(x[2:], dim=-1)")
    gate = check_cluster(skips.launch, skips, _masked_softmax, [x], [x])
    assert not gate.passed and "never written" in gate.detail, gate
    writes = _launcher_module("out.copy_(_masked(x))")
    writes._masked = _masked_softmax
    gate = check_cluster(writes.launch, writes, _masked_softmax, [x], [x])
    assert gate.passed, gate
