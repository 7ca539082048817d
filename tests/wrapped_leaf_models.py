"""Models whose forward calls a `torch.fx.wrap`-ed function (FX keeps it one opaque call)."""

from __future__ import annotations

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F


def skip_rows(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Zero whole samples at random while training (stochastic depth); the identity in eval."""
    if not training or p == 0.0:
        return x
    keep = torch.empty(x.shape[0], *([1] * (x.dim() - 1)), device=x.device).bernoulli_(1 - p)
    return x * keep / (1 - p)


def token_mix(h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    if h.shape != x.shape:  # FX cannot trace a shape test; wrapped, it need not
        raise ValueError("shapes differ")
    return h @ x.transpose(-1, -2)


torch.fx.wrap("skip_rows")
torch.fx.wrap("token_mix")


class ResidualWithSkip(nn.Module):
    """A residual branch through stochastic depth, as torchvision's ConvNeXt and Swin do."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        h = F.gelu(self.proj(x) * 2.0)
        h = skip_rows(h, 0.1, self.training)
        return torch.sigmoid(x + h)


class WrappedMix(nn.Module):
    """A wrapped function export sees through, finding only a matmul: nothing more fuses."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        h = torch.tanh(self.proj(x)) * 3.0
        return token_mix(h, x)
