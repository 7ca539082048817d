"""A model whose lines give each reason we may not propose an Inductor kernel."""

from __future__ import annotations

import torch
import torch.nn as nn


class ReasonNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x, y):
        h = torch.relu(self.lin(x))  # line 15: Inductor folds the ReLU into the GEMM
        g = x.mul_(2.0).sigmoid()  # line 16: in place on the input: rejected by aliasing
        c = torch.cumprod(h, -1)  # line 17: opaque to us
        a = torch.exp(y)  # lines 18 and 19: independent ops sharing a loop
        b = torch.cos(y)
        return h, g, c, a, b
