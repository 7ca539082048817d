"""An in-place op on one result of `topk` (values and indices) under torch.export.

Mixtral's router renormalizes the chosen weights with `weights /= weights.sum(-1, keepdim=
True)`. Export keeps `aten.div_` on the `getitem` of `topk`'s tuple, which the in-place pass
took for a view: the div stayed in place and the legality check rejected `sum → div_ → to`
as aliasing ("could read stale data"), though nothing else holds that tensor. A result of a
chunk or split is a view and still stays in place.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from fusion_core.ir.graph import OpKind
from fusion_core.pipeline import analyze


class Router(nn.Module):
    def forward(self, logits):
        weights = F.softmax(logits, dim=1, dtype=torch.float)
        weights, selected = torch.topk(weights, 2, dim=-1)
        weights /= weights.sum(dim=-1, keepdim=True)
        return weights.to(logits.dtype), selected


class ChunkWrite(nn.Module):
    def forward(self, x):
        y = x * 2.0
        a, b = y.chunk(2, dim=-1)
        a /= 3.0
        return (y + 1.0).relu(), b


def test_a_division_in_place_of_topk_values_fuses_under_export():
    model = Router()
    a = analyze(model, (6, 4), capture="export")
    assert [c.ops for c in a.clusters] == [("sum", "div", "to")]
    assert not [r for r in a.rejections if r.check == "aliasing"]
    x = torch.randn(6, 4)
    got, want = a.graph_module(x), model(x)
    torch.testing.assert_close(got[0], want[0])
    assert torch.equal(got[1], want[1])


def test_a_write_into_a_chunk_stays_in_place():
    a = analyze(ChunkWrite(), (4, 8), capture="export")
    assert any(n.kind is OpKind.INPLACE for n in a.graph.nodes)
