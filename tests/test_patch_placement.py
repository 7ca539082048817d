"""Where `patch` places a cluster's one kernel call among the nodes FX recorded."""

from __future__ import annotations

import torch
from torch import nn

from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze
from fusion_core.validate.inputs import random_inputs
from fusion_core.validate.subgraph import eager_subgraph, patch


class ShapeReadBeforeNorm(nn.Module):
    """A diffusion UNet's attention entry: `x.shape` is read after the residual add and
    before the GroupNorm, whose decomposed weight and bias reshapes FX records there."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 1)
        self.norm = nn.GroupNorm(2, 8)
        self.proj = nn.Conv2d(8, 8, 1)

    def forward(self, x):
        x = x + self.conv(x)
        b, c, h, w = x.shape
        a = self.proj(self.norm(x)).reshape(b, c, h * w)
        return x + a.reshape(b, c, h, w)


def test_a_norm_weight_reshaped_after_a_shape_read_is_computed_before_the_kernel_call():
    analysis = analyze(ShapeReadBeforeNorm().eval(), InputSpec((2, 8, 4, 4)))
    (cluster,) = [c for c in analysis.clusters if "group_norm" in " ".join(c.nodes)]
    assert cluster.nodes[0].startswith("add"), cluster
    gm = analysis.graph_module
    (x,) = random_inputs(analysis.inputs, analysis.module, "cpu", seed=0)
    # Was PatchError: its result `add` is read by `getattr_1` before its input `reshape_3`.
    patched = patch(gm, {cluster.index: (cluster, eager_subgraph(gm, cluster).module)})
    assert not any(n.name in cluster.nodes for n in patched.graph.nodes)
    assert torch.equal(patched(x), gm(x))
