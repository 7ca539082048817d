"""The Linear bias split: only where eager adds the bias in a pass of its own."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fusion_core.pipeline import analyze


class TokenMix(nn.Module):
    """MLP-Mixer token mixing: the Linear reads a transposed (non-contiguous) activation."""

    def __init__(self, transpose: bool = True, act=F.gelu) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 24)
        self.transpose = transpose
        self.act = act

    def forward(self, x):
        h = x.transpose(1, 2) if self.transpose else x
        return self.act(self.fc(h))


class FunctionalLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(24, 16))
        self.b = nn.Parameter(torch.randn(24))

    def forward(self, x):
        return torch.relu(F.linear(x.transpose(1, 2), self.w, self.b))


def ops(a):
    return [c.ops for c in a.clusters]


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_bias_of_linear_on_transposed_input_fuses_into_its_consumer(capture):
    a = analyze(TokenMix(), (2, 16, 8), capture=capture)
    assert ops(a) == [("add", "gelu")]
    c = a.clusters[0]
    bias = [n for n in c.inputs if a.graph[n].meta.shape == (24,)]
    assert len(bias) == 1 and a.graph[bias[0]].kind.value in ("constant", "input")
    # The bias-free GEMM stays opaque and keeps the layer's name.
    matmul = next(n for n in a.graph.nodes if n.name.endswith("_matmul"))
    assert matmul.kind.value == "opaque" and matmul.label == "self.fc"


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_contiguous_input_keeps_the_bias_in_the_gemm(capture):
    # aten::linear uses addmm here: splitting the bias off would move more bytes, not fewer.
    a = analyze(TokenMix(transpose=False), (2, 8, 16), capture=capture)
    assert ops(a) == []
    assert not any(n.name.endswith("_matmul") for n in a.graph.nodes)


def test_no_split_without_a_pointwise_consumer():
    class Plain(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(16, 24)

        def forward(self, x):
            return self.fc(x.transpose(1, 2)).sum(-1)

    a = analyze(Plain(), (2, 16, 8))
    assert not any(n.name.endswith("_matmul") for n in a.graph.nodes)


def test_functional_linear_with_bias_is_split_too():
    a = analyze(FunctionalLinear(), (2, 16, 8))
    assert ops(a) == [("add", "relu")]


@pytest.mark.parametrize("model", [TokenMix(), FunctionalLinear()], ids=["module", "functional"])
def test_rewritten_graph_computes_what_the_model_does(model):
    model.eval()
    a = analyze(model, (2, 16, 8))
    x = torch.randn(2, 16, 8)
    torch.testing.assert_close(a.graph_module(x), model(x))
