"""A read of a cluster value's device (`torch.arange(n, device=h.device)`, Hugging Face's
`device=hidden_states.device`, `mask.to(h.device)`) is no use of its data: any tensor input
the value is computed from answers it (one kernel's tensors live on one device). Analysis
under both frontends, the patched graph, numerics under the interpreter, and `--apply`."""

from __future__ import annotations

import ast
import textwrap

import pytest
import torch
import torch.nn as nn
from click.testing import CliRunner

from fusion_core.cli import cli
from fusion_core.ir.subgraph import eager_subgraph
from fusion_core.pipeline import analyze
from fusion_core.sourcemap.pysource import metadata_read_only
from fusion_core.validate import validate
from fusion_core.validate.subgraph import patch

CAPTURES = ["fx", "export"]
SHAPE = (8, 64)

# The review's repro: positions made on the device of `h`, which the kernel computes.
SOURCE = textwrap.dedent('''\
    import torch
    from torch import nn


    class Positions(nn.Module):
        def forward(self, x):
            h = torch.relu(x * 2.0)
            pos = torch.arange(h.shape[-1], device=h.device)
            return torch.sigmoid(h) + pos
''')
namespace: dict = {}
exec(compile(SOURCE, "positions.py", "exec"), namespace)  # noqa: S102 - the model under test
Positions = namespace["Positions"]


class MaskToDevice(nn.Module):
    """A buffer moved to the device of a value the cluster computes."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mask", torch.tril(torch.ones(16, 16)))

    def forward(self, x):
        h = torch.relu(x * 2.0)
        return torch.sigmoid(h) * self.mask.to(h.device)


class FromIndex(nn.Module):
    """`h` is computed from positions alone: no tensor input of its cluster tells its device."""

    def forward(self, x):
        h = torch.sin(torch.arange(64, dtype=torch.float32, device=x.device) * 0.1)
        h = torch.cos(h) * 2.0
        return torch.relu(x) + h, torch.zeros(3, device=h.device)


def _returned(a) -> tuple[str, ...]:
    (out,) = [n for n in a.graph.nodes if n.op == "output"]
    return out.refs


@pytest.mark.parametrize("capture", CAPTURES)
def test_the_positions_on_hs_device_store_only_what_the_model_returns(capture):
    a = analyze(Positions(), SHAPE, capture=capture)
    (c,) = a.clusters
    assert c.outputs == _returned(a) and "relu" in c.nodes
    assert c.category != "multi-output"
    if capture == "fx":  # under export the read is a constant already
        assert [(r.attribute, r.of, r.source) for r in c.metadata_reads] == [
            ("device", "relu", "x")]
        assert c.device_reads == c.metadata_reads and c.dtype_reads == ()
        assert a.graph[c.device_reads[0].read].device_of == "relu"


def test_both_frontends_fuse_the_same_ops():
    """Export fixes `arange`'s end (64) and computes it in the kernel; FX reads the size at
    run time (`h.shape[-1]`), so there the positions are the kernel's input."""
    fx_c, = analyze(Positions(), SHAPE, capture="fx").clusters
    export_c, = analyze(Positions(), SHAPE, capture="export").clusters
    assert set(export_c.nodes) - set(fx_c.nodes) == {"arange"}
    assert fx_c.inputs == ("x", "arange") and export_c.inputs == ("x",)


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_mask_moved_to_hs_device_does_not_store_h(capture):
    a = analyze(MaskToDevice(), (4, 16, 16), capture=capture)
    (c,) = a.clusters
    assert c.outputs == _returned(a) and "relu" in c.nodes
    if capture == "fx":
        assert [(r.of, r.source) for r in c.device_reads] == [("relu", "x")]


def test_a_value_computed_from_positions_alone_is_stored_for_its_device():
    """No tensor input of the cluster reaches `h`: the read stays a use, `h` is written."""
    a = analyze(FromIndex(), SHAPE, capture="fx")
    (read,) = [n for n in a.graph.nodes if n.device_of and n.device_of != "x"]
    (c,) = [c for c in a.clusters if read.device_of in c.nodes]
    assert read.device_of in c.outputs and c.metadata_reads == ()


def test_the_patched_graph_reads_the_inputs_device_and_matches_eager():
    model, x = Positions(), torch.randn(SHAPE)
    a = analyze(model, x)
    (c,) = a.clusters
    (r,) = c.device_reads
    gm = a.graph_module
    patched = patch(gm, {c.index: (c, eager_subgraph(gm, c).module)})
    (read,) = [n for n in patched.graph.nodes if n.name == r.read]
    assert read.args == (patched.graph.find_nodes(op="placeholder")[0], "device")
    assert torch.equal(patched(x), model(x))


@pytest.mark.cpu
@pytest.mark.parametrize("model, shape", [(Positions(), SHAPE), (MaskToDevice(), (4, 16, 16))])
def test_the_kernel_verifies_and_model_numerics_pass(model, shape):
    a = analyze(model, shape)
    report = validate(a, timing=False)
    assert [r.usable for r in report.results] == [True]
    assert report.model.passed and report.model.patched == (0,)


@pytest.mark.cpu
def test_apply_refuses_naming_the_read_of_h_and_the_fix(tmp_path):
    """`h` is gone from the rewritten lines: the positions' line must read an input's size
    and device, which the refusal names at its line (before: the line was "not in the
    cluster", and the cluster stored `h`)."""
    path = tmp_path / "positions.py"
    path.write_text(SOURCE)
    result = CliRunner().invoke(cli, ["--model", str(path), "--input-shape", "8,64",
                                      "--apply", "--yes"])
    assert "model numerics: pass" in result.output, result.output
    assert ("input `torch.arange(h.shape[-1], device=h.device)` at line 8 reads `h`, which "
            "an earlier line of the range reassigns (only its shape and device: read them from "
            "a value assigned before these lines, such as an input's `.shape` and `.device`"
            in " ".join(result.output.split())), result.output
    assert path.read_text() == SOURCE


@pytest.mark.cpu
def test_apply_writes_the_edit_the_refusal_asks_for(tmp_path):
    path = tmp_path / "positions.py"
    path.write_text(SOURCE.replace("arange(h.shape[-1], device=h.device)",
                                   "arange(x.shape[-1], device=x.device)"))
    result = CliRunner().invoke(cli, ["--model", str(path), "--input-shape", "8,64",
                                      "--apply", "--yes"])
    assert "rewritten model matches the original" in result.output, result.output
    assert "return cluster0(x, torch.arange(x.shape[-1], device=x.device))" in path.read_text()


@pytest.mark.parametrize("text,kinds", [
    ("torch.arange(h.shape[-1], device=h.device)", ("shape", "device")),
    ("torch.zeros(3, device=h.device, dtype=h.dtype)", ("dtype", "device")),
    ("self.mask.to(h.device)", ("device",)),
    ("h.to(h.device)", ()),  # `h` itself too
    ("torch.arange(x.shape[-1], device=x.device)", ()),  # no `h` at all
])
def test_metadata_read_only_tells_what_of_h_an_expression_reads(text, kinds):
    assert metadata_read_only(ast.parse(text, mode="eval"), "h") == kinds
