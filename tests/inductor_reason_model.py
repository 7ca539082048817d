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


class AttentionNet(nn.Module):
    """Projections, a q/k RMSNorm and a rotary-style scale feeding attention (the ops before
    it), then a Linear followed by a GELU (the ops after one)."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.norm_weight = nn.Parameter(torch.rand(self.head_dim) + 0.5)
        self.register_buffer("cos", torch.rand(4, self.head_dim))
        self.register_buffer("sin", torch.rand(4, self.head_dim))
        self.fc = nn.Linear(dim, 2 * dim)

    def split(self, x):
        return x.view(x.shape[0], x.shape[1], self.heads, self.head_dim).transpose(1, 2)

    def norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm_weight

    def forward(self, x):
        q = self.split(self.q_proj(x))  # Inductor loads the projection's output
        k = self.split(self.k_proj(x))
        v = self.split(self.v_proj(x))
        q = self.norm(q) * self.cos  # the ops that feed the attention
        k = self.norm(k) * self.sin
        o = nn.functional.scaled_dot_product_attention(q, k, v)
        o = o.transpose(1, 2).reshape(x.shape)
        h = nn.functional.gelu(self.fc(o))  # the op after a GEMM: its epilogue
        return torch.cumprod(h, -1).exp()  # an op opaque to us between two pointwise ops
