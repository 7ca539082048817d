"""A BatchNorm subclass with a forward of its own (norm, then activation, as timm's
BatchNormAct2d) is traced through by FX: its activation is neither lost nor opaque."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from fusion_core.ir.trace import trace_fx
from fusion_core.pipeline import analyze


class NormThenAct(nn.BatchNorm2d):
    """Eval-mode batch norm followed by an activation module, in one layer."""

    def __init__(self, channels: int, act: nn.Module) -> None:
        super().__init__(channels)
        self.act = act
        nn.init.uniform_(self.running_mean, -1.0, 1.0)
        nn.init.uniform_(self.running_var, 0.5, 2.0)

    def forward(self, x):
        torch._assert(x.ndim == 4, "expected an image batch")
        x = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                         self.training, 0.1, self.eps)
        return self.act(x)


class TinyInvertedResidual(nn.Module):
    """Expand, depthwise, squeeze-excite, project, residual: each conv's norm carries its act."""

    def __init__(self, c: int = 4, hidden: int = 8) -> None:
        super().__init__()
        self.expand = nn.Conv2d(c, hidden, 1, bias=False)
        self.bn1 = NormThenAct(hidden, nn.SiLU(inplace=True))
        self.depthwise = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False)
        self.bn2 = NormThenAct(hidden, nn.Hardswish(inplace=True))
        self.squeeze = nn.Conv2d(hidden, 2, 1)
        self.excite = nn.Conv2d(2, hidden, 1)
        self.project = nn.Conv2d(hidden, c, 1, bias=False)
        self.bn3 = NormThenAct(c, nn.Identity())

    def forward(self, x):
        h = self.bn2(self.depthwise(self.bn1(self.expand(x))))
        gate = torch.sigmoid(self.excite(F.relu(self.squeeze(h.mean((2, 3), keepdim=True)))))
        return x + self.bn3(self.project(h * gate))


def test_fx_keeps_the_activation_of_a_batch_norm_subclass():
    torch.manual_seed(0)
    model = TinyInvertedResidual().eval()
    x = torch.randn(2, 4, 6, 6)
    gm = trace_fx(model)
    targets = [getattr(n.target, "__name__", n.target) for n in gm.graph.nodes]
    assert targets.count("batch_norm") == 3
    assert "silu" in targets and "hardswish" in targets
    torch.testing.assert_close(gm(x), model(x))


def test_norm_act_chains_fuse_under_auto_as_under_export():
    torch.manual_seed(0)
    model = TinyInvertedResidual().eval()
    auto = analyze(model, (2, 4, 6, 6))
    assert auto.graph.frontend == "fx" and auto.capture_choice == ""
    chains = [c.chain for c in auto.clusters]
    assert any(chain.startswith("batch_norm → silu") for chain in chains), chains
    assert any(chain.startswith("batch_norm → hardswish") for chain in chains), chains
    assert any(chain.startswith("batch_norm → add") for chain in chains), chains
    exported = analyze(model, (2, 4, 6, 6), capture="export")
    assert sorted(c.ops for c in auto.clusters) == sorted(c.ops for c in exported.clusters)


def test_sync_batch_norm_in_eval_is_a_batch_norm_that_fuses():
    """SyncBatchNorm has its own forward, yet in eval on one process it is F.batch_norm."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.SyncBatchNorm(4), nn.ReLU()).eval()
    a = analyze(model, (1, 3, 8, 8), capture="fx")
    assert [c.ops for c in a.clusters] == [("batch_norm", "relu")]
