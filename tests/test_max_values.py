"""`x.max(dim).values` is the row maximum `amax`: a softmax written with it fuses whole.

Attention code in diffusion UNets and nanoGPT-style blocks subtracts the row maximum as
`s.max(dim=-1, keepdim=True).values` (or `torch.max(s, -1)[0]`). The call returns values
and indices, so it was an opaque op: the softmax split around it with no barrier named,
and a baseline recorded with `amax` called the edit "replaced by `getattr`".
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from fusion_core.pipeline import analyze
from fusion_core.sourcemap import map_clusters


class RowMaxSoftmax(nn.Module):
    def forward(self, s):
        s = s - s.max(dim=-1, keepdim=True).values
        w = s.exp()
        return w / w.sum(dim=-1, keepdim=True)


class IndexedMax(nn.Module):
    def forward(self, s):
        m = torch.max(s, 1)[0]
        v, _ = torch.min(s, 1)
        return (s - m[:, None]).exp() * (s - v[:, None]).sigmoid()


class ReadsIndices(nn.Module):
    def forward(self, s):
        v, i = s.max(-1)
        return (v.relu() + i).exp()


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_softmax_with_the_row_max_values_fuses_whole(capture):
    model = RowMaxSoftmax()
    a = analyze(model, (4, 16), capture=capture)
    assert [c.ops for c in a.clusters] == [("amax", "sub", "exp", "sum", "div")]
    x = torch.randn(4, 16)
    torch.testing.assert_close(a.graph_module(x), model(x))  # the rewritten graph runs


def test_the_values_of_torch_max_and_min_over_a_dim_fuse():
    model = IndexedMax()
    a = analyze(model, (4, 16))
    assert len(a.clusters) == 1
    assert {"amax", "amin"} <= set(a.clusters[0].ops)
    x = torch.randn(4, 16)
    torch.testing.assert_close(a.graph_module(x), model(x))


def test_the_source_edit_replaces_the_max_values_line():
    (m,) = map_clusters(analyze(RowMaxSoftmax(), (4, 16)))
    assert m.exact, m.reason
    assert (m.start, m.end) == (21, 23)
    assert m.replacement.strip() == "return cluster0(s)"


def test_a_max_whose_indices_are_read_stays_a_max():
    model = ReadsIndices()
    a = analyze(model, (4, 16))
    assert not any(n.op == "amax" for n in a.graph.nodes)
    x = torch.randn(4, 16)
    torch.testing.assert_close(a.graph_module(x), model(x))


def test_messages_name_the_max_as_written():
    class TwoRowMaxes(nn.Module):
        def forward(self, s):
            r = s.max(dim=0, keepdim=True).values
            return (s - s.amax(dim=1, keepdim=True)).exp() + r

    a = analyze(TwoRowMaxes(), (4, 16))
    (rejected,) = [r for r in a.rejections if r.check == "reduction"]
    # the max quoted as written (was `.max()`); the `amax` the user wrote stays `amax`
    assert "`s.max(dim=0, keepdim=True).values` (line" in rejected.reason
    assert "`amax` (line" in rejected.reason
