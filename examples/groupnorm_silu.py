"""groupnorm_silu: the residual block of a diffusion UNet (GroupNorm, SiLU, convolutions).

Each half normalizes the channels in groups (statistics of each sample's group over its
channels and the whole image, then a per-channel scale and shift), applies SiLU and a
3x3 convolution; the block adds its input back. Convolutions stay opaque; each
GroupNorm → SiLU pair fuses into one kernel whose rows are (sample, group) pairs (the
residual add is alone after the last convolution, so nothing fuses with it).

Input: float32 feature maps of shape (batch, 32, height, width) (32 channels, 8 groups),
e.g. `--input-shape 2,32,8,8 --dtype float32`.
"""

import torch.nn as nn
import torch.nn.functional as F


class ResBlock(nn.Module):
    def __init__(self, channels: int = 32, groups: int = 8):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, channels)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        for norm in (self.norm1, self.norm2):  # an affine part that is not the identity
            nn.init.uniform_(norm.weight, 0.5, 1.5)
            nn.init.uniform_(norm.bias, -0.5, 0.5)

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return x + h
