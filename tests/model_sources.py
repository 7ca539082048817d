"""Model files shared by the tests that write one and analyse, map or apply it."""

# A cluster with two results (the residual sum and its LayerNorm), four inputs: `x` also
# feeds a layer, so the kernel stores it beside `h` (a layer cannot recompute it).
RES_NORM = """\
import torch.nn as nn


class ResNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        y = self.proj(x)
        x = x + y
        h = self.norm(x)
        return self.proj(h) - self.proj(x)
"""
