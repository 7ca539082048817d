"""A nested BatchNorm's grouping, matched against Inductor's.

One real CPU compile (module-scoped, ~20 s) of a conv → BatchNorm → ReLU block and an
attention written out as matmul → scale → softmax → matmul, matched against both of our
capture frontends."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fusion_core.inductor.capture import capture
from fusion_core.inductor.match import cluster_keys, match
from fusion_core.pipeline import analyze

SHAPE = (2, 4, 8, 8)  # (batch, heads = channels, sequence, head dim) for the attention


class ConvBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class ConvAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = ConvBlock(SHAPE[1])  # nested: the BatchNorm's module is `block.bn`

    def forward(self, x):
        y = self.block(x)
        att = (y @ y.transpose(-2, -1)) * 0.125
        att = F.softmax(att, dim=-1)
        return att @ y


def _cluster(a, *ops: str):
    return next(c for c in a.clusters if c.ops == ops)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return ConvAttention().eval()


@pytest.fixture(scope="module")
def compiled(model):
    return capture(model, [torch.randn(SHAPE)])


@pytest.fixture(scope="module", params=["fx", "export"])
def analysis(request, model):
    return analyze(model, SHAPE, capture=request.param)


def test_a_nested_batch_norm_is_keyed_by_its_own_module(analysis):
    # FX tracing replaces BatchNorm's forward by F.batch_norm: inside the module's scope,
    # so its key is Inductor's (`block.bn`), not the enclosing block's.
    c = _cluster(analysis, "batch_norm", "relu")
    modules = {op: key[0] for key, op in cluster_keys(analysis, c).values()}
    assert modules == {"batch_norm": "block.bn", "relu": "block.act"}


def test_batch_norm_relu_is_the_same_group(analysis, compiled):
    a = match(analysis, compiled)
    v = a.clusters[_cluster(analysis, "batch_norm", "relu").index]
    assert v.verdict == "same group", v
