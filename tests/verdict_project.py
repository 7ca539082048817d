"""A realistic two-part project for the pytester runs of the plugin's verdicts.

`blocks.py` holds a conv → BatchNorm → ReLU(inplace) → squeeze-excite block and two
small transformer blocks; `test_blocks.py` checks both through the marker and the
fixture. Tests record baselines, then make an ordinary edit (``edited``) and read
the failure a developer would get.
"""

from __future__ import annotations

import pytest

BLOCKS = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class SqueezeExcite(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.reduce = nn.Conv2d(c, c // 4, 1)
        self.expand = nn.Conv2d(c // 4, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        s = F.relu(self.reduce(s))
        s = torch.sigmoid(self.expand(s))
        return x * s


class ConvBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)
        self.act = nn.ReLU(inplace=True)
        self.se = SqueezeExcite(c)

    def forward(self, x):
        y = self.act(self.bn(self.conv(x)))
        return self.se(y) + x


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.scale = (d // heads) ** -0.5
        self.register_buffer("mask", torch.tril(torch.ones(64, 64)))
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) * self.scale
        att = att.masked_fill(self.mask[:t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        h = F.gelu(self.fc(self.ln2(x)))
        return x + self.out(h)


class Transformer(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.blocks = nn.Sequential(Block(d, heads), Block(d, heads))

    def forward(self, x):
        return self.blocks(x)


class Conv(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.block = ConvBlock(c)

    def forward(self, x):
        return self.block(x)
"""

TESTS = """\
import pytest
import blocks


CHECKS = ("clusters", "rejections", "traffic")  # structure only: no timing on a GPU run


@pytest.mark.fusion_check(blocks.Conv, (2, 16, 8, 8), checks=CHECKS)
def test_conv():
    pass


@pytest.mark.fusion_check(blocks.Transformer, (2, 8, 32), checks=CHECKS)
def test_transformer():
    pass


def test_transformer_fixture(fusion_advisor):
    r = fusion_advisor.analyze(blocks.Transformer(), (2, 8, 32), measure=False)
    fusion_advisor.check(r, checks=CHECKS)
"""


def project(p: pytest.Pytester) -> None:
    """Write blocks.py and test_blocks.py into the pytester folder."""
    p.makepyfile(blocks=BLOCKS, test_blocks=TESTS)


def edited(p: pytest.Pytester, *edits: tuple[str, str]) -> None:
    """Rewrite blocks.py with each (old, new) replacement; each `old` must occur once."""
    path = p.path / "blocks.py"
    text = path.read_text()
    for old, new in edits:
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in blocks.py"
        text = text.replace(old, new)
    path.write_text(text)
