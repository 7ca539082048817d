"""The fix a reason names for a call only partly fused, when the callee's part of the cluster
is one call on its parameters (a layer's first norm, fused with the caller's sum before it).

Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

import pytest
from test_apply_callsite import CAPTURES, line_of, plan

from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import EXACT, POINTER, map_clusters

FIRST_NORM = """\
import torch
import torch.nn as nn


class Layer(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.mix = nn.Linear(d, d)

    def forward(self, x):
        return x + self.mix(self.norm1(x))


class Net(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.layer = Layer(d)

    def forward(self, x):
        h = x * torch.sigmoid(x)
        return self.layer(h)
"""


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_callees_first_norm_fused_with_the_callers_op_names_the_call_to_move(tmp_path,
                                                                               capture):
    path = tmp_path / "first_norm.py"
    path.write_text(FIRST_NORM)
    analysis, mappings, _ = plan(path, capture, "Net")
    (c,) = [c for c in analysis.clusters if "layer_norm" in c.ops]
    m = mappings[c.index]
    assert m.quality == POINTER
    call = line_of(path, "return self.layer(h)")
    norm = line_of(path, "return x + self.mix(self.norm1(x))")
    assert m.reason.startswith(f"only part of the call at line {call} (`Layer.forward`) is in "
                               "the cluster: `self.mix`"), m.reason
    assert m.reason.endswith(
        f"; the cluster's part of it is only `self.norm1(x)` (line {norm}): to apply, compute "
        f"it in a statement of its own above line {call} and pass the result to the call as an "
        "argument of its own, so one function holds the whole cluster"), m.reason


LAST_LAYER = """\
import torch
import torch.nn as nn


class Layer(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return x + self.fc(x)


class Net(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.layers = nn.ModuleList(Layer(d) for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return torch.tanh(x)
"""


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_loops_last_call_partly_fused_names_that_layer(tmp_path, capture):
    # The calls in the loop share their line; the reason named the first layer's `self.fc`.
    path = tmp_path / "last_layer.py"
    path.write_text(LAST_LAYER)
    analysis, mappings, _ = plan(path, capture, "Net")
    (c,) = [c for c in analysis.clusters if "tanh" in c.ops]
    m = mappings[c.index]
    assert m.quality == POINTER
    assert m.reason.startswith(
        f"only part of the call at line {line_of(path, 'x = layer(x)')} (`Layer.forward` on "
        "`layer` (`self.layers[2]`)) is in the cluster: `self.fc` (`self.layers[2].fc`, line "
        f"{line_of(path, 'return x + self.fc(x)')})"), m.reason


# MLP-Mixer's token mixing: a Linear on a transposed activation adds its bias in a pass of
# its own, which the analysis fuses into the GELU after it.
TRANSPOSED_LINEAR = """\
import torch
import torch.nn as nn


class Mlp(nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.fc1 = nn.Linear(d, 2 * d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class TokenMix(nn.Module):
    def __init__(self, tokens: int = 8):
        super().__init__()
        self.mlp = Mlp(tokens)

    def forward(self, x):
        return self.mlp(x.transpose(1, 2)).transpose(1, 2)
"""
LINE = "return self.fc2(self.act(self.fc1(x)))"


def _gelu_mapping(path, capture):
    analysis = analyze_file(path, [InputSpec((2, 8, 8))], class_name="TokenMix",
                            capture=capture)
    (c,) = [c for c in analysis.clusters if "gelu" in c.ops]
    return map_clusters(analysis)[c.index]


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_linears_split_bias_is_spelled_apart_in_the_edit(tmp_path, capture):
    # The kernel adds the bias the analysis split off `self.fc1`: the edit calls the layer
    # without it (`nn` as the file imports it) and hands the kernel the bias.
    path = tmp_path / "token_mix.py"
    path.write_text(TRANSPOSED_LINEAR)
    m = _gelu_mapping(path, capture)
    assert m.quality == EXACT, m.reason
    assert m.replacement == ("        return self.fc2(cluster0(nn.functional.linear(x, "
                             "self.fc1.weight), self.fc1.bias))")


@pytest.mark.parametrize("capture", CAPTURES)
def test_the_spelling_the_bias_hint_names_maps_exactly(tmp_path, capture):
    path = tmp_path / "token_mix.py"
    path.write_text(TRANSPOSED_LINEAR.replace(
        "self.act(self.fc1(x))",
        "self.act(nn.functional.linear(x, self.fc1.weight) + self.fc1.bias)"))
    m = _gelu_mapping(path, capture)
    assert m.quality == EXACT, m.reason


def test_the_rewrite_the_first_norm_hint_names_maps_exactly(tmp_path):
    path = tmp_path / "first_norm.py"
    path.write_text(FIRST_NORM.replace(
        "    def forward(self, x):\n        return x + self.mix(self.norm1(x))",
        "    def forward(self, x, normed):\n        return x + self.mix(normed)").replace(
        "        return self.layer(h)",
        "        normed = self.layer.norm1(h)\n        return self.layer(h, normed)"))
    analysis, mappings, _ = plan(path, "auto", "Net")
    (c,) = [c for c in analysis.clusters if "layer_norm" in c.ops]
    assert mappings[c.index].quality == EXACT, mappings[c.index].reason
