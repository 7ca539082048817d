"""mbconv_se: an EfficientNet-style inverted bottleneck with squeeze-and-excite, in eval mode.

A 1x1 convolution widens the channels, a depthwise 3x3 convolution mixes each channel
spatially, a squeeze-and-excite gate rescales the channels, and a 1x1 convolution
projects back before the residual add. Every convolution is followed by a BatchNorm
(running statistics) and, but for the projection, by SiLU, written in place as
torchvision's blocks do. The gate averages each channel over the image
(`adaptive_avg_pool2d(x, 1)`), passes that through a 1x1 conv, SiLU, another 1x1 conv and
a sigmoid, and multiplies the channels by the result. Convolutions stay opaque; the
BatchNorm → SiLU → average chain, the gate's activations and the rescale each fuse.

Input: float32 images of shape (batch, 16, height, width),
e.g. `--input-shape 2,16,8,8 --dtype float32`.
"""

import torch.nn as nn
import torch.nn.functional as F


def _bn(channels: int) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(channels)
    nn.init.uniform_(bn.weight, 0.5, 1.5)  # statistics as after training, not the defaults
    nn.init.uniform_(bn.bias, -0.5, 0.5)
    nn.init.uniform_(bn.running_mean, -0.5, 0.5)
    nn.init.uniform_(bn.running_var, 0.5, 1.5)
    return bn


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeezed: int):
        super().__init__()
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.expand = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x):
        gate = F.adaptive_avg_pool2d(x, 1)
        gate = F.silu(self.reduce(gate))
        return x * self.expand(gate).sigmoid()


class MBConv(nn.Module):
    def __init__(self, channels: int = 16, expansion: int = 4):
        super().__init__()
        wide = channels * expansion
        self.expand = nn.Conv2d(channels, wide, 1, bias=False)
        self.bn1 = _bn(wide)
        self.depthwise = nn.Conv2d(wide, wide, 3, padding=1, groups=wide, bias=False)
        self.bn2 = _bn(wide)
        self.se = SqueezeExcite(wide, max(1, channels // 4))
        self.project = nn.Conv2d(wide, channels, 1, bias=False)
        self.bn3 = _bn(channels)
        self.act = nn.SiLU(inplace=True)

    def forward(self, x):
        h = self.act(self.bn1(self.expand(x)))
        h = self.act(self.bn2(self.depthwise(h)))
        h = self.se(h)
        return self.bn3(self.project(h)) + x
