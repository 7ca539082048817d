"""The torch.export frontend: aten ops through the same registry, the same clusters as FX
on the acceptance models, params as constants, the auto fallback, and its errors."""

from __future__ import annotations

import inspect
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from click.testing import CliRunner

from fusion_core.analysis.detect import detect
from fusion_core.cli import FIXES, cli
from fusion_core.errors import CaptureError, Fix, InputSpecError, ShapePropagationError
from fusion_core.ir import targets as T
from fusion_core.ir.export import _single_results, export_graph
from fusion_core.ir.graph import OpKind
from fusion_core.ir.normalize import to_fusion_graph
from fusion_core.ir.shapes import InputSpec
from fusion_core.load import load_model
from fusion_core.pipeline import analyze, analyze_file
from fusion_core.report.console import header
from fusion_core.report.json_report import to_document
from fusion_core.sourcemap.mapping import map_clusters
from pytest_fusion.fixture import fixes

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
aten = torch.ops.aten


def summary(a):
    """What must agree between frontends: node names differ, everything else must not."""
    return [(c.ops, c.category, c.traffic, str(c.lines), len(c.outputs),
             [a.graph[n].op for n in c.outputs]) for c in a.clusters]


# --- registry ------------------------------------------------------------------

@pytest.mark.parametrize("overload, spec", [
    (aten.add.Tensor, "add"), (aten.mul.Scalar, "mul"), (aten.rsub.Scalar, "rsub"),
    (aten._softmax.default, "softmax"), (aten.softmax.int, "softmax"),
    (aten.layer_norm.default, "layer_norm"), (aten.gelu.default, "gelu"),
    (aten.silu.default, "silu"), (aten.rsqrt.default, "rsqrt"),
    (aten.pow.Tensor_Scalar, "pow"), (aten.mean.dim, "mean"), (aten.to.dtype, "to"),
    (aten._to_copy.default, "to"), (aten.dropout.default, "dropout"),
    (aten.masked_fill.Scalar, "masked_fill"), (aten.where.self, "where"),
    (aten.hardtanh.default, "clamp"), (aten.batch_norm.default, "batch_norm"),
])
def test_aten_overloads_resolve_to_the_same_specs_as_fx_spellings(overload, spec):
    found = T.lookup(overload)
    assert isinstance(found, tuple) and found[0].name == spec


@pytest.mark.parametrize("overload", [
    aten.view.default, aten.expand.default, aten.permute.default, aten.transpose.int,
    aten.unsqueeze.default, aten.slice.Tensor, aten.select.int, aten.split.Tensor,
])
def test_aten_views_are_views(overload):
    assert T.lookup(overload) == "view"


def test_aten_arguments_bind_to_canonical_names():
    spec, sig = T.lookup(aten.dropout.default)
    assert T.bind(spec, sig, ("x", 0.1, False), {})["training"] is False  # schema says `train`
    spec, sig = T.lookup(aten.where.self)
    values = T.bind(spec, sig, ("c", "x", "y"), {})
    assert (values["condition"], values["input"], values["other"]) == ("c", "x", "y")
    spec, sig = T.lookup(aten.hardtanh.default)
    values = T.bind(spec, sig, ("x", -2.0, 2.0), {})
    assert (values["min"], values["max"]) == (-2.0, 2.0)


# --- same clusters on both frontends ---------------------------------------------

def test_example_net_same_clusters_on_both_frontends():
    spec = InputSpec((64, 1024))
    fx_a = analyze_file(EXAMPLES / "example_net.py", [spec], capture="fx")
    ex_a = analyze_file(EXAMPLES / "example_net.py", [spec], capture="export")
    assert (fx_a.graph.frontend, ex_a.graph.frontend) == ("fx", "export")
    assert summary(ex_a) == summary(fx_a)
    assert [c.ops for c in ex_a.clusters] == [
        ("mul", "relu", "add"), ("gelu", "sigmoid", "mul"), ("tanh", "mul", "softmax")]


def test_microgpt_same_clusters_on_both_frontends():
    spec = InputSpec((2, 128), torch.int64)
    fx_a = analyze_file(EXAMPLES / "microgpt.py", [spec], capture="fx")
    ex_a = analyze_file(EXAMPLES / "microgpt.py", [spec], capture="export")
    assert summary(ex_a) == summary(fx_a)
    attn = [c for c in ex_a.clusters if "softmax" in c.ops]
    assert [c.ops for c in attn] == [("mul", "masked_fill", "softmax", "dropout")] * 2


class Fn(nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.mark.parametrize("fn", [
    lambda x: torch.where(x > 0, x * 2.0, -x) + 1.0,
    lambda x: (x.half() * 2.0).float() + 1.0,
    lambda x: 1.0 - torch.sigmoid(x),  # rsub in aten
    lambda x: F.relu6(x) + F.hardswish(x),
    lambda x: F.hardtanh(x - 1.0) * 2.0,
    lambda x: x - x.mean(-1, keepdim=True),
    lambda x: x.masked_fill(x > 1.0, 0.0) * 2.0,
    lambda x: F.log_softmax(x * 2.0, dim=-1),
    lambda x: F.rms_norm(x * 2.0, (8,)),
    lambda x: torch.amax(x.abs(), dim=-1) + 1.0,
], ids=["where", "casts", "rsub", "relu6", "hardtanh", "mean", "masked_fill", "log_softmax",
        "rms_norm", "amax"])
def test_small_functions_same_clusters_on_both_frontends(fn):
    fx_a, ex_a = (analyze(Fn(fn), (4, 8), capture=c) for c in ("fx", "export"))
    assert fx_a.clusters and summary(ex_a) == summary(fx_a)
    # Same operands and params too, so codegen lowers both graphs alike.
    for c_fx, c_ex in zip(fx_a.clusters, ex_a.clusters, strict=True):
        for n_fx, n_ex in zip(c_fx.nodes, c_ex.nodes, strict=True):
            a, b = fx_a.graph[n_fx], ex_a.graph[n_ex]
            assert [type(i).__name__ if not isinstance(i, float) else i for i in a.inputs] == [
                type(i).__name__ if not isinstance(i, float) else i for i in b.inputs]


def test_export_of_a_large_shape_costs_nothing():
    # 16384x1024 fp32 is 64 MiB per value: fake tensors, so only the traffic is big.
    a = analyze_file(EXAMPLES / "example_net.py", [InputSpec((16384, 1024))], capture="export")
    assert [c.traffic.unfused_bytes for c in a.clusters] == [384 * 2**20, 192 * 2**20,
                                                              192 * 2**20]


# --- the exported graph ------------------------------------------------------------

def test_params_and_buffers_are_constants_and_the_graph_runs():
    model = load_model(EXAMPLES / "microgpt.py")
    a = analyze(model, InputSpec((2, 16), torch.int64), capture="export")
    kinds = {n.name: n.kind for n in a.graph.nodes}
    assert [n.name for n in a.graph.inputs] == ["idx"]
    consts = [n for n in a.graph.nodes if n.kind is OpKind.CONSTANT]
    assert any(n.target == "blocks.0.attn.causal_mask" for n in consts)
    assert any(n.target == "blocks.0.ln1.weight" for n in consts)
    assert all(kinds[i] is not OpKind.INPUT or i == "idx"
               for c in a.clusters for i in c.inputs)
    # Opaque layers carry the module path and class, as the FX frontend shows them.
    assert any(n.target == "self.blocks.0.attn.qkv" and n.op == "Linear" for n in a.graph.nodes)
    idx = torch.randint(0, 256, (2, 16))
    torch.testing.assert_close(a.graph_module(idx), model(idx))


def test_nodes_without_a_stack_trace_get_no_source_and_do_not_crash():
    model = load_model(EXAMPLES / "example_net.py")
    gm = export_graph(model, [InputSpec((8, 1024))])
    for n in gm.graph.nodes:
        n.meta.pop("stack_trace", None)
    g = to_fusion_graph(gm, "ExampleNet", frontend="export")
    clusters, _ = detect(g)
    assert len(clusters) == 3
    assert all(n.source is None for n in g.nodes) and all(c.lines is None for c in clusters)
    a = replace(analyze(model, (8, 1024), capture="export"), graph=g, clusters=clusters)
    assert [m.quality for m in map_clusters(a)] == ["pointer"] * 3


class LN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(8)

    def forward(self, x):
        return self.ln(x * 2.0)


def test_tuple_results_become_single_result_ops():
    x = torch.randn(4, 8)
    model = LN().eval()
    gm = torch.export.export(model, (x,), strict=False).run_decompositions().module()
    assert aten.native_layer_norm.default in {n.target for n in gm.graph.nodes}
    _single_results(gm.graph)
    gm.recompile()
    targets = {n.target for n in gm.graph.nodes}
    assert aten.layer_norm.default in targets and aten.native_layer_norm.default not in targets
    torch.testing.assert_close(gm(x), model(x))


# --- choosing a frontend -------------------------------------------------------------

class ShapeBranch(nn.Module):
    """FX cannot follow `if` on a traced size; export sees a concrete one."""

    def forward(self, x):
        if x.shape[-1] > 4:
            x = x * 2.0
        return torch.relu(x) + 1.0


class DataBranch(nn.Module):
    """Control flow on tensor *values*: neither frontend can capture it."""

    def forward(self, x):
        if x.sum() > 0:
            return torch.relu(x)
        return -x


def test_auto_falls_back_to_export_when_fx_fails():
    with pytest.raises(CaptureError, match="cannot trace ShapeBranch"):
        analyze(ShapeBranch(), (4, 8), capture="fx")
    a = analyze(ShapeBranch(), (4, 8))
    assert a.graph.frontend == "export"
    assert [c.ops for c in a.clusters] == [("mul", "relu", "add")]


class Autocast(nn.Module):
    """A bf16 autocast block: FX runs the `with` at trace time and records none of it, so its
    graph computed in float32 and failed the model check as 'a capture problem'."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.relu(self.fc(x)) * 2.0
        return y.float().softmax(-1)


def test_fx_refuses_an_autocast_block_and_auto_uses_export():
    line = inspect.getsourcelines(Autocast.forward)[1] + 2
    with pytest.raises(CaptureError, match=rf":{line} .*runs under `torch.autocast`, which "
                                           "FX tracing does not record"):
        analyze(Autocast(), (4, 8), capture="fx")
    a = analyze(Autocast(), (4, 8))
    assert a.graph.frontend == "export"
    assert "`torch.autocast`" in a.capture_fallback
    assert not torch.is_autocast_enabled("cpu")  # the refused trace left autocast as it was


def test_an_enabled_autocast_block_left_whole_is_said_at_its_line():
    # The block stays one call under export (autocast picks dtypes as ops run): the ops in
    # it went unanalysed without a word.
    from fusion_core.report.console import header

    a = analyze(Autocast(), (4, 8), capture="export")
    (kept,) = [n for n in a.graph.nodes if n.target == "wrap_with_autocast"]
    line = inspect.getsourcelines(Autocast.forward)[1] + 2
    assert kept.source is not None and kept.source.line == line
    (note,) = [h for h in header(a) if h.startswith("Left unfused")]
    assert "the enabled `torch.autocast` block at " in note
    assert f"test_capture_export.py:{line} (`y = " in note
    assert "run the model in the autocast dtype" in note


def test_autocast_around_the_whole_analysis_is_no_block_fx_drops():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert analyze(LN(), (4, 8), capture="fx").graph.frontend == "fx"


def test_fx_first_when_it_works():
    assert analyze(LN(), (4, 8)).graph.frontend == "fx"


def test_the_header_names_the_frontend_and_why_auto_fell_back():
    fell_back = analyze(ShapeBranch(), (4, 8))
    # The FX failure in one line: the user's line and the tracer's error.
    why = fell_back.capture_fallback
    assert "\n" not in why and f"{__file__}:" in why
    assert "`if x.shape[-1] > 4:`" in why and "TraceError" in why
    assert header(fell_back) == [
        "ShapeBranch (5 nodes, 1 fusable cluster, captured with torch.export)",
        f"FX could not capture it, so torch.export was used: {why}"]
    assert to_document(fell_back)["capture_fallback"] == why
    # Asked for export, or FX worked: nothing fell back, the header says which was used.
    chosen = analyze(ShapeBranch(), (4, 8), capture="export")
    assert chosen.capture_fallback == "" and to_document(chosen)["capture_fallback"] is None
    assert header(chosen) == [
        "ShapeBranch (5 nodes, 1 fusable cluster, captured with torch.export)"]
    fx_run = analyze(LN(), (4, 8))
    assert fx_run.capture_fallback == ""
    assert header(fx_run)[1:] == [] and header(fx_run)[0].endswith(", captured with FX tracing)")


def test_cli_header_on_fallback(tmp_path):
    model = tmp_path / "branchy.py"
    model.write_text("import torch\nimport torch.nn as nn\n\n\n"
                     "class Branchy(nn.Module):\n"
                     "    def forward(self, x):\n"
                     "        if x.shape[-1] > 4:\n"
                     "            x = x * 2.0\n"
                     "        return torch.relu(x) + 1.0\n")
    out = tmp_path / "a.json"
    result = CliRunner().invoke(cli, ["--model", str(model), "--input-shape", "4,8",
                                      "--json", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "Branchy (5 nodes, 1 fusable cluster, captured with torch.export)"
    assert lines[1].startswith(f"FX could not capture it, so torch.export was used: {model}:7 ")
    assert "(`if x.shape[-1] > 4:`): TraceError: " in lines[1]
    assert json.loads(out.read_text())["capture_fallback"] in lines[1]


def test_both_frontends_failing_is_one_line_naming_both_reasons():
    with pytest.raises(CaptureError) as err:
        analyze(DataBranch(), (4, 8))
    msg = str(err.value)
    assert "\n" not in msg
    assert "neither FX (TraceError: " in msg and "nor torch.export (GuardOnDataDependent" in msg
    assert f"`if x.sum() > 0:` at {__file__}:{line_of(DataBranch, 'if x.sum() > 0:')} " in msg


def line_of(cls: type, code: str) -> int:
    """The line of `cls`'s source that holds `code` (once)."""
    lines, first = inspect.getsourcelines(cls)
    (line,) = [first + i for i, text in enumerate(lines) if code in text]
    return line


class DebugPrint(nn.Module):
    """A debug print of a value: FX traces `.item()` as a node its fake tensors cannot run."""

    def forward(self, x):
        y = torch.relu(x) * 2.0
        print(y.max().item())
        return y + 1.0


class MaskedMean(nn.Module):
    """A boolean mask makes a shape out of values: FX's fake tensors cannot size it."""

    def forward(self, x):
        y = torch.relu(x) * 2.0
        kept = y[y > 0.5]
        return y + kept.mean()


@pytest.mark.parametrize("model, code, what", [
    (DebugPrint, "print(y.max().item())", "`.item()` reads a tensor's value"),
    (MaskedMean, "kept = y[y > 0.5]", "`getitem` makes a shape out of a tensor's values"),
])
def test_auto_falls_back_to_export_when_fx_cannot_propagate_shapes(model, code, what):
    """FX traces these, then fails on a construct of the model's: not the input's fault."""
    a = analyze(model(), (4, 8))
    assert a.graph.frontend == "export"
    assert ("relu", "mul") == a.clusters[0].ops[:2]
    why = a.capture_fallback
    assert why.startswith(f"{__file__}:{line_of(model, code)} (`{code}`): {what}"), why
    assert header(a)[1] == f"FX could not capture it, so torch.export was used: {why}"
    with pytest.raises(ShapePropagationError) as err:  # a CaptureError, not an InputSpecError
        analyze(model(), (4, 8), capture="fx")
    assert str(err.value).startswith(
        f"cannot capture {model.__name__} with FX at {__file__}:{line_of(model, code)} "
        f"(`{code}`): ")
    assert str(err.value).endswith('; try torch.export instead (capture="export")')
    assert err.value.worded(FIXES).endswith("; try torch.export instead (--capture export)")


class DebugCheck(nn.Module):
    def forward(self, x):
        y = torch.relu(x) * 2.0
        assert (y >= 0).all(), "relu went negative"
        return y + 1.0


class GuardedDebugCheck(nn.Module):
    def forward(self, x):
        y = torch.relu(x) * 2.0
        if not torch.compiler.is_compiling():
            assert (y >= 0).all(), "relu went negative"
        return y + 1.0


def test_a_value_read_neither_frontend_captures_is_named_with_its_line_and_fix():
    with pytest.raises(CaptureError) as err:
        analyze(DebugCheck(), (4, 8))
    msg = str(err.value)
    code = 'assert (y >= 0).all(), "relu went negative"'
    where = f"{__file__}:{line_of(DebugCheck, code)}"
    assert msg.startswith(f"cannot capture DebugCheck: `{code}` at {where} reads a tensor's "
                          "value in Python")
    assert msg.endswith("compute it with tensor ops instead (torch.where for a branch); if it is "
                        "a debug print or check, move it out of forward or guard it with `if "
                        "not torch.compiler.is_compiling():`, which torch.export skips")
    assert not isinstance(err.value, InputSpecError) and "example input" not in msg
    # The fix it names works: export skips the guarded check, FX still cannot trace it.
    a = analyze(GuardedDebugCheck(), (4, 8))
    assert a.graph.frontend == "export" and [c.ops for c in a.clusters] == [("relu", "mul", "add")]
    assert "TraceError" in a.capture_fallback


class TwoLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(16, 32)
        self.out = nn.Linear(32, 16)

    def forward(self, x):
        return self.out(torch.relu(self.inp(x)))


def test_an_input_the_model_rejects_is_still_blamed_on_the_input():
    """Only the input's fault falls back to nothing; each caller words the fix its way."""
    with pytest.raises(InputSpecError) as err:
        analyze(TwoLayers(), (4, 8))
    e = err.value
    assert e.fix is Fix.INPUTS
    assert e.problem.startswith("the example input does not fit the model: layer `self.inp` at "
                                f"{__file__}:{line_of(TwoLayers, 'self.inp(x)')} rejected it")
    assert e.worded(FIXES) == f"{e.problem}; check --input-shape and --dtype"
    plugin = e.worded(fixes("fusion_advisor.analyze(...)"))
    assert plugin == (f"{e.problem}; check the example inputs given to "
                      "fusion_advisor.analyze(...): their shapes and dtypes")
    assert str(e) == f"{e.problem}; check the example inputs' shapes and dtypes"


def test_unknown_capture_is_rejected():
    with pytest.raises(CaptureError, match="unknown capture frontend 'jit'"):
        analyze(LN(), (4, 8), capture="jit")


def test_cli_capture_option(tmp_path):
    runner = CliRunner()
    args = ["--model", str(EXAMPLES / "example_net.py"), "--input-shape", "8,1024",
            "--out-dir", str(tmp_path), "--json", str(tmp_path / "a.json")]
    result = runner.invoke(cli, [*args, "--capture", "export"])
    assert result.exit_code == 0, result.output
    assert "3 fusable clusters" in result.output
    bad = runner.invoke(cli, [*args, "--capture", "jit"])
    assert bad.exit_code == 2 and "jit" in bad.output


def test_relu_after_batch_norm_reads_channels_on_dim_1():
    # Per-channel statistics must broadcast along C (dim 1), not along W.
    class BN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = nn.BatchNorm2d(4)
            nn.init.uniform_(self.bn.running_mean, -1.0, 1.0)

        def forward(self, x):
            return F.relu(self.bn(x)) * 2.0

    model = BN().eval()
    x = torch.randn(2, 4, 3, 4)  # W == C: a wrong broadcast would still type-check
    for capture in ("fx", "export"):
        a = analyze(model, x, capture=capture)
        assert [c.ops for c in a.clusters] == [("batch_norm", "relu", "mul")], capture
        stats = [a.graph[i].meta.shape for i in a.clusters[0].inputs[1:]]
        assert stats == [(4, 1, 1)] * 4, capture
        torch.testing.assert_close(a.graph_module(x), model(x))


@pytest.mark.parametrize("shape, stats", [((4, 6), (6,)), ((4, 6, 5), (6, 1))])
def test_batch_norm_1d_statistics_broadcast_along_channels(shape, stats):
    class BN1(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = nn.BatchNorm1d(6)

        def forward(self, x):
            return torch.sigmoid(self.bn(x)) + 1.0

    model = BN1().eval()
    x = torch.randn(shape)
    for capture in ("fx", "export"):
        a = analyze(model, x, capture=capture)
        c = a.clusters[0]
        assert c.ops == ("batch_norm", "sigmoid", "add"), capture
        assert {a.graph[i].meta.shape for i in c.inputs[1:]} == {stats}, capture
        torch.testing.assert_close(a.graph_module(x), model(x))


def test_export_leaves_no_torch_trace_records_in_the_callers_log(caplog):
    # pytest shows every captured record of a failing test: export's structured-trace
    # records are empty DEBUG lines that bury the failure.
    import logging

    class Small(nn.Module):
        def forward(self, x):
            return torch.relu(x * 2.0) + 1.0

    caplog.set_level(logging.DEBUG)
    analyze(Small(), (4, 8), capture="export")
    assert not [r for r in caplog.records if r.name.startswith("torch.__trace")]


class _Positions(nn.Module):
    def forward(self, x):
        pos = torch.arange(x.shape[-1], device=x.device)  # export bakes in device=cpu
        return torch.relu(x + pos) * 2


def test_exported_graph_moves_its_factory_calls_to_the_target_device():
    """Validation on a GPU runs a copy of the captured graph there; export recorded
    `arange(..., device=cpu)`, which `Module.to` leaves behind. "meta" stands in for cuda."""
    import copy

    from fusion_core.codegen.reference import graph_on

    analysis = analyze(_Positions(), InputSpec((2, 8), torch.float32), capture="export")
    gm = analysis.graph_module
    x = torch.empty(2, 8, device="meta")
    with pytest.raises(RuntimeError):  # what the plain `.to` leaves: cpu + meta tensors
        copy.deepcopy(gm).to("meta")(x)
    moved = graph_on(gm, "meta")
    out = moved(x)
    out = out if isinstance(out, torch.Tensor) else out[0]
    assert out.device.type == "meta" and out.shape == (2, 8)
    assert str(gm(torch.ones(2, 8)).device) == "cpu"  # the original is untouched
