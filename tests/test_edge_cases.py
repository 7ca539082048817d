"""Model shapes the analyzer must take in stride: several inputs, tuple/dict results,
nn.Sequential, in-place ops, reversed scalar forms and dtype casts."""

from __future__ import annotations

import gc

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from analysis_helpers import run

from fusion_core.errors import InputSpecError
from fusion_core.ir.graph import OpKind
from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x, bias):
        return torch.relu(self.lin(x) + bias) * 2.0


def test_multi_input_model():
    a = analyze(TwoInputs(), InputSpec((4, 8)), InputSpec((8,)))
    assert [n.name for n in a.graph.inputs] == ["x", "bias"]
    c = a.clusters[0]
    assert c.ops == ("add", "relu", "mul")
    assert c.inputs == ("lin", "bias")
    assert c.traffic.fused_bytes == (32 + 8 + 32) * 4


def test_tuple_result_each_chain_its_own_cluster():
    a = run(lambda x: (torch.exp(x) * 2.0, torch.sigmoid(x) - 1.0))
    assert [c.ops for c in a.clusters] == [("exp", "mul"), ("sigmoid", "sub")]


def test_tuple_result_with_an_intermediate_returned_writes_both():
    # Returning `m` and `m + 1`: one kernel storing both beats splitting (multi-output).
    a = run(lambda x: (lambda m: (m, m + 1.0))(torch.relu(x) * 2.0))
    assert [(c.ops, c.outputs) for c in a.clusters] == [
        (("relu", "mul", "add"), ("mul", "add"))]
    assert a.clusters[0].category == "multi-output"
    assert a.clusters[0].traffic.fused_bytes == 3 * 32 * 4  # read x, write mul and add


def test_dict_result():
    a = run(lambda x: {"out": torch.exp(torch.relu(x) * 2.0) - 1.0, "aux": x.sum(dim=-1)})
    assert [c.ops for c in a.clusters] == [("relu", "mul", "exp", "sub")]
    assert a.clusters[0].outputs == ("sub",)


def test_sequential_model():
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(0.1), nn.Linear(16, 8),
                          nn.Tanh(), nn.Softmax(dim=-1))
    a = analyze(model, (4, 8))
    # gelu → dropout is one op that moves data (dropout in eval is an alias): no cluster.
    assert [c.ops for c in a.clusters] == [("tanh", "softmax")]
    assert a.model_name == "Sequential"


class InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        y = x * 2.0
        y.add_(1.0)
        y = F.relu(y, inplace=True)
        y = self.act(y)
        return y * 3.0


def test_inplace_ops_are_rewritten_only_where_nothing_reads_the_old_name():
    a = analyze(InPlace(), (4, 8))
    # `y.add_(1.0)` leaves `y` to be read by the next line: it stays in place. The two
    # ReLUs each overwrite a value nothing reads again: rewritten out of place.
    inplace = [n for n in a.graph.nodes if n.kind is OpKind.INPLACE]
    assert [n.op for n in inplace] == ["add_"]
    assert [c.ops for c in a.clusters] == [("relu", "relu", "mul")]
    assert any(r.check == "aliasing" and "`.add_()`" in r.reason for r in a.rejections)
    x = torch.randn(4, 8)
    torch.testing.assert_close(a.graph_module(x.clone()), InPlace()(x.clone()))


class InPlaceOnInput(nn.Module):
    def forward(self, x):
        x.add_(1.0)  # the caller sees this: no rewrite may drop it
        y = F.relu(x * 2.0)
        return y * 3.0


def test_inplace_op_on_the_input_stays_in_place():
    a = analyze(InPlaceOnInput(), (4, 8))
    inplace = [n for n in a.graph.nodes if n.kind is OpKind.INPLACE]
    assert [n.op for n in inplace] == ["add_"]
    # The ops after it read the mutated input, before the kernel runs: they fuse.
    assert [c.ops for c in a.clusters] == [("mul", "relu", "mul")]


def test_reversed_scalar_forms():
    a = run(lambda x: (2.0 - 1.0 / x) ** 2 * 0.5)
    assert [c.ops for c in a.clusters] == [("div", "sub", "pow", "mul")]
    div = a.graph[a.clusters[0].nodes[0]]
    assert div.inputs[0] == 1.0


def test_scalar_base_pow_is_left_out():
    a = run(lambda x: (2.0 ** torch.exp(x)) * 3.0)
    assert [c.ops for c in a.clusters] == []  # exp -> opaque -> mul: no pair fuses


def test_casts():
    a = run(lambda x: (x.float() * 2.0).to(torch.float16) + 1.0, InputSpec((4, 8), torch.float16))
    c = a.clusters[0]
    assert c.ops == ("to", "mul", "to", "add")
    assert [a.graph[n].meta.dtype for n in c.nodes] == [
        torch.float32, torch.float32, torch.float16, torch.float16]


def test_integer_model():
    a = run(lambda x: (x + 1) * 2, InputSpec((4, 8), torch.int64))
    assert a.clusters[0].traffic.unfused_bytes == 4 * 32 * 8


def test_bool_mask_input():
    a = run(lambda x: torch.where(x, 1.0, 0.0) * 2.0, InputSpec((4, 8), torch.bool))
    assert a.clusters[0].ops == ("where", "mul")


def test_garbage_collection_is_restored_after_analysis_even_on_error():
    assert gc.isenabled()
    run(lambda x: torch.exp(x) * 2.0)
    assert gc.isenabled()
    with pytest.raises(InputSpecError):
        analyze(nn.Linear(8, 4), (4, 5))
    assert gc.isenabled()
