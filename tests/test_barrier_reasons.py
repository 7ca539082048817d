"""A barrier between fusable ops says why fusion-advisor cannot fuse through it.

`torch.argmax` or `torch.zeros_like` between two pointwise ops used to read "fusion-advisor
cannot fuse through it" and no more: the reason is that the op registry has no Triton
lowering for the call. A registered op made opaque by one call's arguments says which;
a torch.nn layer kept whole (a Linear) says PyTorch's own kernel runs it.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from codegen_harness import Lambda

from fusion_core.analysis.barriers import find_barriers
from fusion_core.pipeline import analyze


class Unlowered(nn.Module):
    def forward(self, x):
        a = x * 2
        i = torch.argmax(a, dim=-1, keepdim=True)
        b = (i + 1) * 3
        z = torch.zeros_like(a) + a
        o = torch.ones_like(z) * z
        f = torch.full_like(o, 2.0) - o
        return b, f.relu(), torch.argmin(f * 2, dim=-1) * 2


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_an_unlowered_call_between_fusable_ops_names_the_missing_lowering(capture):
    a = analyze(Unlowered(), torch.randn(4, 8), capture=capture)
    said = {b.target: b.describe(a.graph) for b in find_barriers(a.graph, a.clusters)}
    assert len(said) == 5, said  # argmax, zeros_like, ones_like, full_like, argmin
    for target, text in said.items():
        assert text.endswith("fusion-advisor cannot fuse through it (its op registry has no "
                             "Triton lowering for this call)"), (target, text)


def test_a_registered_op_with_a_run_time_argument_says_which():
    # `pow` lowers with a constant exponent; a tensor exponent keeps this call opaque
    fn = Lambda(lambda m, x: (torch.pow(x * 3, x) - 1).relu())
    a = analyze(fn, torch.rand(4, 8))
    (b,) = find_barriers(a.graph, a.clusters)
    assert b.describe(a.graph).endswith(
        ": its `exponent` is computed at run time, and fusion-advisor lowers it with a "
        "constant only"), b.describe(a.graph)


def test_a_training_mode_op_says_so():
    for fn in [lambda m, x: F.batch_norm(x * 2, m.rm, m.rv, training=True) + 1,
               lambda m, x: F.dropout(x * 2, 0.5, training=True) + 1]:
        a = analyze(Lambda(fn, rm=torch.zeros(8), rv=torch.ones(8)), torch.randn(4, 8))
        (b,) = find_barriers(a.graph, a.clusters)
        assert b.describe(a.graph).endswith(
            ": with training=True it is random or updates running statistics, which "
            "fusion-advisor leaves to eager"), b.describe(a.graph)


class Layers(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.conv = nn.Conv1d(4, 4, 1)

    def forward(self, x):
        y = self.fc(F.relu(x * 2)) + 1
        return self.conv(y.sigmoid()) * 3


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_layer_between_fusable_ops_says_pytorch_runs_it(capture):
    a = analyze(Layers(), torch.randn(4, 8), capture=capture)
    said = {(b.target, b.op): b.describe(a.graph) for b in find_barriers(a.graph, a.clusters)}
    assert set(said) == {("self.fc", "Linear"), ("self.conv", "Conv1d")}, said
    for text in said.values():
        assert text.endswith("fusion-advisor cannot fuse through it (it leaves this torch.nn "
                             "layer to PyTorch's own kernel, which writes its result to "
                             "memory)"), text
