"""An in-place op on a tensor the caller passed (`h = torch.relu_(x)` inside a block) also
changes the caller's tensor. torch.export points the caller's later reads at the op's result,
so the written tensor has no reader left but the op, and the source map took it for a
temporary. The edit `h, y = cluster0(x, ...)` then left the caller's tensor unrectified:
`--apply` wrote it and rolled it back when its check failed. The preview showed it as an edit.
Such lines stay a pointer, named by the in-place call.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from fusion_core.pipeline import analyze
from fusion_core.sourcemap import map_clusters


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(16)

    def forward(self, x):
        h = torch.relu_(x)
        y = self.ln(h) * 2.0
        return y


class Caller(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(16, 16)
        self.b = Block()
        self.post = nn.Linear(16, 16)

    def forward(self, x):
        h0 = self.pre(x)
        y = self.b(h0)
        return self.post(y) + self.post(h0)  # reads h0 as relu_ left it


class Temporary(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(16)

    def forward(self, x):
        t = (x * 2.0).relu_()  # a tensor this line made: no one else sees the write
        return self.ln(t)


def test_an_in_place_write_into_the_callers_tensor_stays_a_pointer():
    analysis = analyze(Caller(), (4, 16), capture="export")
    (m,) = [m for m in map_clusters(analysis)
            if any(n.startswith("relu") for n in analysis.clusters[m.cluster_index].nodes)]
    assert not m.exact
    assert "`h = torch.relu_(x)`" in m.reason and "writes its input in place" in m.reason


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_an_in_place_write_into_a_temporary_still_maps(capture):
    (m,) = map_clusters(analyze(Temporary(), (4, 16), capture=capture))
    assert m.exact, m.reason


def test_the_model_reads_the_callers_tensor_after_the_write():
    """The premise: eager's result depends on relu_ rectifying the caller's tensor."""
    torch.manual_seed(0)
    model = Caller().eval()
    x = torch.randn(4, 16)
    with torch.no_grad():
        h0 = model.pre(x)
        unrectified = model.post(model.b.ln(torch.relu(h0)) * 2.0) + model.post(h0)
        assert not torch.allclose(model(x), unrectified)
