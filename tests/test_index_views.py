"""Indexing by whole aranges becomes the view it is (``ir/index_views.py``): a mask reading
positions by query and by key (as Hugging Face's masks do) computes them inside its own
kernel instead of gathering them, and the graph still computes what the model does."""

from __future__ import annotations

import torch
import torch.nn as nn

from fusion_core.ir.index_views import arange_indices_as_views
from fusion_core.pipeline import analyze
from fusion_core.validate import validate


class PositionMask(nn.Module):
    """A causal mask from position ids gathered by (batch, query) and (batch, key)."""

    def forward(self, x):
        b, n = x.shape[0], x.shape[-1]
        positions = (torch.arange(n, device=x.device) + 0)[None, :].expand(b, -1)
        batch = torch.arange(b, device=x.device)[:, None, None, None]
        query = torch.arange(n, device=x.device)[None, None, :, None]
        key = torch.arange(n, device=x.device)[None, None, None, :]
        allowed = positions[batch, key] <= positions[batch, query]
        return torch.where(allowed, x[:, None, :, None] * 2.0, -1.0)


def _gathers(gm):
    """Indexing by tensors: aten's `index`, or `src[i, j]` with tensor nodes."""
    return [n for n in gm.graph.nodes if n.op == "call_function" and (
        n.target is torch.ops.aten.index.Tensor or (
            getattr(n.target, "__name__", "") == "getitem" and isinstance(n.args[1], tuple)
            and any(isinstance(i, torch.fx.Node) for i in n.args[1])))]


def test_whole_aranges_index_as_views_and_the_mask_computes_its_positions():
    x = torch.randn(2, 8)
    analysis = analyze(PositionMask(), x, capture="export")  # aten's graph, as HF models get
    assert _gathers(analysis.graph_module) == []
    (mask,) = [c for c in analysis.clusters if "le" in c.ops]
    assert mask.ops.count("arange") >= 2  # the positions by query and by key, both inside
    report = validate(analysis, timing=False)
    assert all(r.usable for r in report.results), [r.status for r in report.results]
    assert report.model.passed, report.model.detail


def test_an_index_that_is_not_a_whole_arange_stays_a_gather():
    class Shifted(nn.Module):
        def forward(self, x):
            n = x.shape[-1]
            positions = (torch.arange(n) + 0)[None, :].expand(x.shape[0], -1)
            batch = torch.arange(x.shape[0])[:, None]
            shifted = (torch.arange(n) + 1) % n  # not the whole dim in order
            return positions[batch, shifted[None, :]] * x

    gm = torch.fx.symbolic_trace(Shifted())
    from torch.fx.passes.shape_prop import ShapeProp

    x = torch.randn(2, 8)
    ShapeProp(gm).propagate(x)
    for n in gm.graph.nodes:  # the pass reads fake-tensor values under "val"
        if "tensor_meta" in n.meta:
            n.meta["val"] = torch.empty(n.meta["tensor_meta"].shape,
                                        dtype=n.meta["tensor_meta"].dtype)
    assert arange_indices_as_views(gm) == []
    assert len(_gathers(gm)) == 1
