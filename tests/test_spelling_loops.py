"""Layers reached through a loop and maxima the capture rewrote are named as the user wrote
them: an `nn.ModuleList` item as the source indexes it (`self.blocks[0]`, not the module path
`self.blocks.0`), by the loop variable that called it (`norm` (`self.norms[0]`, line 30)),
not by the op its forward lowers to (`layer_norm`); `torch.max(x, 1)[0]` by that text, not
the `amax` the pipeline made of it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from fusion_core.analysis.barriers import Barrier
from fusion_core.ir.shapes import InputSpec
from fusion_core.ir.spelling import said
from fusion_core.pipeline import analyze_file

SOURCE = textwrap.dedent('''\
    import torch
    import torch.nn as nn


    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.ln = nn.LayerNorm(d)
            self.fc = nn.Linear(d, d)

        def forward(self, x):
            return x + self.fc(torch.relu(self.ln(x)))


    class Blocks(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([Block(32) for _ in range(2)])
            self.norm = nn.LayerNorm(32)

        def forward(self, x):
            for blk in self.blocks:
                x = blk(x)
            s = x.sum(-1, keepdim=True)
            m = torch.max(x, 1)[0]
            return torch.softmax(self.norm(x) * 2, -1) + m.unsqueeze(1) + s


    class Layers(nn.Module):
        def __init__(self):
            super().__init__()
            self.norms = nn.ModuleList([nn.LayerNorm(32) for _ in range(2)])
            self.acts = nn.ModuleList([nn.GELU() for _ in range(2)])
            self.proj = nn.ModuleList([nn.Linear(32, 32) for _ in range(2)])

        def forward(self, x):
            for i, norm in enumerate(self.norms):
                h = self.acts[i](norm(x))
                x = x + h * h.sum(1, keepdim=True)
            for proj in reversed(self.proj):
                x = proj(x)
            return x.max(-1).values * 2
''')
CAPTURES = ["fx", "export"]


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(SOURCE.splitlines(), 1) if text in line)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("loops") / "net.py"
    path.write_text(SOURCE)
    return path


def _analysis(model_file: Path, cls: str, capture: str = "fx"):
    return analyze_file(model_file, [InputSpec((2, 8, 32))], cls, capture=capture)


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_layer_called_through_a_loop_variable_is_named_by_it(model_file, capture):
    a = _analysis(model_file, "Layers", capture)
    spelled = {said(a.graph, n.name) for n in a.graph.nodes}
    norm, proj = line_of("self.acts[i](norm(x))"), line_of("x = proj(x)")
    # was `layer_norm` (line 30), `gelu` (line 30) and `self.proj.1` (line 33)
    assert {f"`norm` (`self.norms[{i}]`, line {norm})" for i in (0, 1)} <= spelled
    assert {f"`self.acts[i]` (`self.acts[{i}]`, line {norm})" for i in (0, 1)} <= spelled
    assert {f"`proj` (`self.proj[{i}]`, line {proj})" for i in (0, 1)} <= spelled
    reasons = " ".join(r.reason for r in a.rejections)
    assert f"where `norm` (`self.norms[0]`, line {norm}) reduces dim 2" in reasons
    assert "`layer_norm`" not in reasons and "`gelu`" not in reasons


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_layer_of_a_block_is_named_as_its_line_calls_it_and_by_its_path(model_file, capture):
    a = _analysis(model_file, "Blocks", capture)
    spelled = {said(a.graph, n.name) for n in a.graph.nodes}
    line = line_of("self.fc(torch.relu(self.ln(x)))")
    # was `self.blocks[0].fc` (line 12), which the line does not spell, and `self.ln`
    # (line 12), which does not say which block's
    for i in (0, 1):
        assert f"`self.fc` (`self.blocks[{i}].fc`, line {line})" in spelled
        assert f"`self.ln` (`self.blocks[{i}].ln`, line {line})" in spelled
    assert f"`self.norm` (line {line_of('self.norm(x) * 2')})" in spelled  # its own path


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_max_the_pipeline_made_amax_is_quoted_as_written(model_file, capture):
    a = _analysis(model_file, "Blocks", capture)
    (amax,) = [n.name for n in a.graph.nodes if n.op == "amax"]
    at = line_of("torch.max(x, 1)[0]")
    assert said(a.graph, amax) == f"`torch.max(x, 1)[0]` (line {at})"
    reasons = [r.reason for r in a.rejections]
    # was "`amax` (line 25) reduces dim 1 where `sum` (line 24) reduces dim 2"
    assert any(r.startswith(f"`torch.max(x, 1)[0]` (line {at}) reduces dim 1") for r in reasons)
    assert not any("amax" in r for r in reasons)
    assert any(c.ops[-1] == "amax" for c in a.clusters)  # the table keeps op names
    layers = _analysis(model_file, "Layers", capture)
    (amax,) = [n.name for n in layers.graph.nodes if n.op == "amax"]
    assert said(layers.graph, amax) == f"`x.max(-1).values` (line {line_of('x.max(-1)')})"


def test_calls_in_a_loop_are_said_by_the_loop_variable_and_the_indexed_path(model_file):
    from fusion_core.cli_run import mapping_dict
    from fusion_core.report.html import page_data
    from fusion_core.sourcemap import map_clusters

    a = _analysis(model_file, "Blocks")
    call = line_of("x = blk(x)")
    maps = map_clusters(a)
    joined = next(m.reason for m in maps if "joins" in (m.reason or ""))
    # was "on `self.blocks.0`", a path no Python spells
    assert (f"of the call at line {call} (`x = blk(x)`) on `blk` (`self.blocks[0]`) with "
            in joined)
    assert "(`x = blk(x)`) on `blk` (`self.blocks[1]`) of `Block.forward`" in joined
    assert joined in {mapping_dict(m)["reason"] for m in maps}  # --json's `source_map`
    # the call a cluster takes only part of: which module it ran on, as the loop calls it
    part = f"only part of the call at line {call} (`Block.forward` on `blk` (`self.blocks["
    assert any(m.reason.startswith(part) for m in maps if m.reason), [m.reason for m in maps]
    graph = page_data(a)["graph"]
    info = {row[0]: row[3] for row in graph["info"]}
    assert info["self.blocks[0].fc"] == "self.blocks[0]"  # was `self.blocks.0.fc`, `blocks.0`
    assert not any(".0" in row[0] + row[3] for row in graph["info"])


def test_a_call_through_a_variable_says_so_and_how_to_edit_it(model_file):
    from fusion_core.sourcemap import map_clusters

    a = _analysis(model_file, "Layers")
    line = line_of("self.acts[i](norm(x))")
    reasons = [m.reason for m in map_clusters(a) if m.reason]
    # was "`self.acts[i](...)` at line 30 is not `gelu` (line 30)": it is that call
    assert any(r.startswith(f"`self.acts[i](...)` at line {line} calls `self.acts[i]` (`self."
                            f"acts[") and "through a variable" in r for r in reasons), reasons
    assert not any(" is not `self.acts[i]`" in r for r in reasons)


def test_a_barrier_layer_in_a_loop_is_named_by_its_variable(model_file):
    a = _analysis(model_file, "Layers")
    (linear,) = [n for n in a.graph.nodes if n.target == "self.proj.1"]
    b = Barrier(linear.name, linear.op, linear.target, False, None, (), ())
    # was `self.proj.1`
    assert b.describe(a.graph).startswith("`proj` (`self.proj[1]`) ")


def test_an_inductor_site_names_its_module_as_indexed():
    from fusion_core import OpSite

    # was "blocks.0.attn model.py:10" in the compiled gate's kernel lines
    assert OpSite("mul", "blocks.0.attn", "model.py", 10).where == "self.blocks[0].attn model.py:10"
    assert OpSite("mul", "", "model.py", 10).where == "model.py:10"


class _Mixer(torch.nn.Module):
    """A Linear on a transposed input: the pipeline splits its bias add off."""

    def __init__(self):
        super().__init__()
        self.fcs = torch.nn.ModuleList([torch.nn.Linear(8, 8)])

    def forward(self, x):
        return torch.nn.functional.gelu(self.fcs[0](x.transpose(1, 2)))


def test_a_split_bias_is_named_after_its_layer_as_indexed():
    import fusion_core

    a = fusion_core.analyze(_Mixer(), InputSpec((2, 8, 8)), capture="fx")
    # was `self.fcs.0`: the pytest plugin's "the bias add of …" names it so
    assert list(fusion_core.split_biases(a.graph_module).values()) == ["self.fcs[0]"]


def test_a_layer_that_rejects_its_input_is_named_as_indexed():
    from fusion_core.errors import InputSpecError
    from fusion_core.pipeline import analyze

    with pytest.raises(InputSpecError, match=r"layer `self\.fcs\[0\]` at "):
        analyze(_Mixer(), InputSpec((2, 5, 5)), capture="fx")
