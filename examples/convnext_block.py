"""convnext_block: a ConvNeXt-style block with random weights (no downloads), in eval mode.

A 7x7 depthwise convolution, then the channels move last (`permute(0, 2, 3, 1)`) so a
LayerNorm can normalize each pixel's channels and two Linears (an inverted bottleneck
with GELU between them) act per pixel; a learned per-channel scale multiplies the
result, the channels move back (`permute(0, 3, 1, 2)`) and the block's input is added.
Convolutions and matrix products stay opaque; the permutes are index changes inside the
fused groups, not copies: LayerNorm reads the convolution's NCHW output channel by
channel, and the last kernel writes NCHW directly.

Input: float32 images of shape (batch, 32, height, width),
e.g. `--input-shape 2,32,8,8 --dtype float32`.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvNeXtBlock(nn.Module):
    def __init__(self, channels: int = 32, expansion: int = 4):
        super().__init__()
        self.dwconv = nn.Conv2d(channels, channels, 7, padding=3, groups=channels)
        self.norm = nn.LayerNorm(channels, eps=1e-6)
        self.pwconv1 = nn.Linear(channels, expansion * channels)
        self.pwconv2 = nn.Linear(expansion * channels, channels)
        # Layer scale; ConvNeXt starts it at 1e-6, kept near 1 here so errors would show.
        self.gamma = nn.Parameter(torch.rand(channels) + 0.5)

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)  # (N, H, W, C)
        y = self.pwconv2(F.gelu(self.pwconv1(self.norm(y))))
        y = self.gamma * y
        return x + y.permute(0, 3, 1, 2)
