"""Models whose Inductor kernels need the concatenation, extern-epilogue and sibling-norm
reasons (`tests/test_inductor_cat_reasons.py`); the comments say what each line shows."""

from __future__ import annotations

import torch
import torch.nn as nn


class CatNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 1)
        self.bn = nn.BatchNorm2d(8)
        self.bn2 = nn.BatchNorm2d(8)
        self.e1 = nn.Conv2d(8, 4, 1)
        self.e3 = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        h = torch.relu(self.conv(x))  # a lone activation after a convolution
        a = self.bn(self.conv2(h))  # a BatchNorm written into the cat's output
        b = self.bn2(h)  # the same; our cluster reads both through the cat's pieces
        c = torch.cat([a, b], 1) * 2.0
        e = torch.relu(self.e1(h))  # two activations written into a cat's output, as
        f = torch.relu(self.e3(h))  # our cluster writes it (SqueezeNet's Fire module)
        return c, torch.cat([e, f], 1)


class CatSum(nn.Module):
    """Two activations written into a cat that a sum reads: Inductor's sum kernel writes
    them into the cat's output; we fuse a cat into elementwise kernels only."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)
        self.e1 = nn.Conv2d(8, 4, 1)
        self.e3 = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        h = torch.relu(self.conv(x))
        e = torch.relu(self.e1(h))
        f = torch.relu(self.e3(h))
        return torch.cat([e, f], 1).sum(1)


class NeoXNorms(nn.Module):
    """GPT-NeoX's parallel residual: both norms read the projection's output."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn, self.mlp = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        h = self.proj(x)
        a = self.attn(self.ln1(h))
        m = self.mlp(self.ln2(h))
        return h + a + m


class NormCatRelu(nn.Module):
    """A BatchNorm and its input concatenated, then a ReLU: Inductor pushes the ReLU through
    the cat (a pattern rewrite, no source line on the new nodes) and writes both into it."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        h = self.bn(x)
        return torch.cat((h, x), dim=1).relu()
