"""Indexing by whole aranges becomes the view it is (``ir/index_views.py``): a mask reading
positions by query and by key (as Hugging Face's masks do) computes them inside its own
kernel instead of gathering them, and the graph still computes what the model does."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

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


class Gathered(nn.Module):
    """Positions gathered by (batch, key): with `shift` the key index is not the whole arange
    in order; with `flat` the result is read through `view`, which needs eager's fresh
    contiguous layout (the source is expanded)."""

    def __init__(self, shift: bool = False, flat: bool = False):
        super().__init__()
        self.shift, self.flat = shift, flat

    def forward(self, x):
        b, n = x.shape
        positions = (torch.arange(n, device=x.device) + 0)[None, :].expand(b, -1)
        batch = torch.arange(b, device=x.device)[:, None]
        key = torch.arange(n, device=x.device)
        key = (key + 1) % n if self.shift else key
        picked = positions[batch, key[None, :]]
        return (picked.view(-1) if self.flat else picked) * 2.0 + x.reshape(-1 if self.flat
                                                                            else (b, n))


@pytest.mark.parametrize("kind", ["shifted", "viewed"])
def test_a_gather_that_is_no_plain_view_stays_a_gather(kind):
    """A shifted key index picks other elements than a view would; a result read through
    `view` needs the gather's contiguous layout (the expanded source's view would refuse
    it): both stay gathers, and the model still verifies."""
    x = torch.randn(2, 8)
    model = Gathered(shift=kind == "shifted", flat=kind == "viewed")
    analysis = analyze(model, x, capture="export")
    assert len(_gathers(analysis.graph_module)) == 1
    report = validate(analysis, timing=False)
    assert report.model.passed, report.model.detail


def test_a_viewed_result_would_not_run_as_a_view():
    """Why the `view` reader blocks the rewrite: on the expanded source the view refuses."""
    positions = (torch.arange(8) + 0)[None, :].expand(2, -1)
    assert positions[torch.arange(2)[:, None], torch.arange(8)[None, :]].view(-1).shape == (16,)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        positions.view(-1)
