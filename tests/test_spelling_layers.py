"""Parameters, buffers and torch's own layers are named as the user wrote them: a buffer by
its attribute path (`self.down[1].running_mean`), not the traced node's name
(`down_1_running_mean`); an eval-mode BatchNorm by the layer's call (`self.bn` (line 12)),
not the `batch_norm` its forward lowers to, which no line of the model spells."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fusion_core.ir.graph import OpKind
from fusion_core.ir.shapes import InputSpec
from fusion_core.ir.spelling import said
from fusion_core.pipeline import analyze_file

SOURCE = textwrap.dedent('''\
    import torch
    import torch.nn as nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(8)
            self.down = nn.ModuleList([nn.BatchNorm1d(8), nn.BatchNorm1d(8)])
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            d = self.bn(x * 2.0)
            e = self.down[1](d) * self.fc.weight
            return e * torch.tensor([3.0]), d


    class Rolled(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(8)

        def forward(self, x):
            d = self.bn(x - 1.0)
            return torch.roll(d, 1, 0) + torch.sigmoid(d)


    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, x):
            h, _ = self.attn(x, x, x)
            return torch.sigmoid(h) * 2
''')
CAPTURES = ["fx", "export"]


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(SOURCE.splitlines(), 1) if text in line)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("layers") / "net.py"
    path.write_text(SOURCE)
    return path


def spelled(model_file: Path, capture: str, cls: str = "Net", shape=(8, 8)) -> dict[str, str]:
    """Each node's `said`, keyed by node name."""
    g = analyze_file(model_file, [InputSpec(shape)], cls, capture=capture).graph
    return {n.name: said(g, n.name) for n in g.nodes}


@pytest.mark.parametrize("capture", CAPTURES)
def test_parameters_and_buffers_are_named_by_their_attribute_path(model_file, capture):
    s = spelled(model_file, capture)
    # was `bn_running_mean`, `down_1_weight`, `fc_weight`: the traced node names
    assert s["bn_running_mean"] == "`self.bn.running_mean`"
    assert s["bn_weight"] == "`self.bn.weight`"
    assert s["down_1_running_var"] == "`self.down[1].running_var`"
    assert s["fc_weight"] == "`self.fc.weight`"


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_tensor_the_forward_makes_is_named_by_its_line(model_file, capture):
    # FX stores `torch.tensor([3.0])` as `_tensor_constant0`, export as `lifted_tensor_0`
    g = analyze_file(model_file, [InputSpec((8, 8))], "Net", capture=capture).graph
    (made,) = [n.name for n in g.nodes if n.kind is OpKind.CONSTANT and "tensor" in n.name]
    assert said(g, made) == f"a tensor made at line {line_of('torch.tensor([3.0])')}"


@pytest.mark.parametrize("capture", CAPTURES)
def test_an_eval_batch_norm_is_named_by_the_layer_call(model_file, capture):
    s = spelled(model_file, capture)
    # was `batch_norm` (line 13): the line says `self.bn(x * 2.0)`
    assert s["batch_norm"] == f"`self.bn` (line {line_of('self.bn(x * 2.0)')})"
    assert s["batch_norm_1"] == f"`self.down[1]` (line {line_of('self.down[1](d)')})"
    assert s["mul"] == f"`mul` (line {line_of('self.bn(x * 2.0)')})"  # the line's own op


@pytest.mark.parametrize("capture", CAPTURES)
def test_messages_name_the_layer_and_its_parameters(model_file, capture):
    from fusion_core.analysis.barriers import find_barriers
    from fusion_core.report.html import page_data

    a = analyze_file(model_file, [InputSpec((8, 8))], "Rolled", capture=capture)
    bn, roll = line_of("d = self.bn(x - 1.0)"), line_of("torch.roll(d, 1, 0)")
    (b,) = find_barriers(a.graph, a.clusters)
    assert b.describe(a.graph) == (f"`torch.roll` at {model_file}:{roll} sits between `self.bn` "
                                   f"(line {bn}) and `add` (line {roll}): fusion-advisor "
                                   "cannot fuse through it (its op registry has no Triton "
                                   "lowering for this call)")
    (r,) = a.rejections
    assert r.reason == (f"path `self.bn` (line {bn}) → `torch.roll` (line {roll}) → `add` "
                        f"(line {roll}) leaves the group and re-enters")
    (c,) = page_data(a)["clusters"]
    assert c["reads"] == ["`x`", "`self.bn.running_mean`", "`self.bn.running_var`",
                          "`self.bn.weight`", "`self.bn.bias`"]
    assert c["writes"] == [f"`self.bn` (line {bn})", f"`sigmoid` (line {roll})"]


def test_an_op_of_a_layer_that_runs_several_is_named_in_the_layer(model_file):
    s = spelled(model_file, "export", "Attention", (2, 4, 8))
    line = line_of("self.attn(x, x, x)")
    assert s["softmax"] == f"`softmax` in `self.attn` (line {line})"
    assert s["attn_in_proj_weight"] == "`self.attn.in_proj_weight`"
    assert s["attn_out_proj_bias"] == "`self.attn.out_proj.bias`"
