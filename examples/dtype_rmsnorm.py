"""dtype_rmsnorm: a gated MLP between two RMSNorms that remember their input's dtype.

The norm follows the shape of Hugging Face's LlamaRMSNorm: it reads `x.dtype`, does
the statistics in float32, and casts the normalized value back to the remembered dtype
before the weight multiply. Under FX the `x.dtype` read is its own graph node, a
Python value the fused cluster depends on (the eager reference recomputes it).

Input: hidden states of shape (batch, tokens, 128) in float32, float16 or bfloat16,
e.g. `--input-shape 4,64,128 --dtype bfloat16`.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class DtypeRMSNorm(nn.Module):
    def __init__(self, dim: int = 128, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        kept = x.dtype
        wide = x.to(torch.float32)
        scale = torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * (wide * scale).to(kept)


class DtypeNormMLP(nn.Module):
    def __init__(self, dim: int = 128, hidden: int = 256):
        super().__init__()
        self.norm_in = DtypeRMSNorm(dim)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        self.norm_out = DtypeRMSNorm(dim)

    def forward(self, x):
        h = self.norm_in(x)
        h = x + self.down(F.silu(self.gate(h)) * self.up(h))
        return self.norm_out(h)
