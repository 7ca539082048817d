"""channel_softmax: softmax over the channels of an NCHW feature map, as in attention over
channels or a per-pixel class distribution in segmentation heads.

A 1x1 convolution makes the logits; they are scaled by a temperature and shifted by a
per-channel bias (the prologue), softmax runs over dim=1, and the probabilities are
multiplied by the block's input (the epilogue). The reduction axis is not the last one:
each pixel's channels lie H*W elements apart in memory, so the kernel reduces over a
strided axis instead of copying the logits into channels-last order.

Input: float32 images of shape (batch, 16, height, width),
e.g. `--input-shape 2,16,8,8 --dtype float32`.
"""

import torch
import torch.nn as nn


class ChannelSoftmax(nn.Module):
    def __init__(self, channels: int = 16, temperature: float = 0.5):
        super().__init__()
        self.logits = nn.Conv2d(channels, channels, 1)
        self.shift = nn.Parameter(torch.randn(channels, 1, 1))
        self.temperature = temperature

    def forward(self, x):
        logits = self.logits(x) / self.temperature + self.shift
        return x * torch.softmax(logits, dim=1)
