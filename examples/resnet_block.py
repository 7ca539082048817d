"""resnet_block: a ResNet basic block with random weights (no downloads), in eval mode.

conv3x3 → BatchNorm → ReLU → conv3x3 → BatchNorm, plus the identity shortcut, then
ReLU. Convolutions stay opaque; each BatchNorm (running statistics, per channel)
fuses with the ReLU and the residual add that follow it.

Input: float32 images of shape (batch, 32, height, width),
e.g. `--input-shape 2,32,16,16 --dtype float32`.
"""

import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, channels: int = 32):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        for bn in (self.bn1, self.bn2):  # non-trivial statistics, as after training
            nn.init.uniform_(bn.weight, 0.5, 1.5)
            nn.init.uniform_(bn.bias, -0.5, 0.5)
            nn.init.uniform_(bn.running_mean, -0.5, 0.5)
            nn.init.uniform_(bn.running_var, 0.5, 1.5)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + x)
