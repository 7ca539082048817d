"""llama_block: one LLaMA-style decoder block with random weights (no downloads).

Pre-norm RMSNorm (written out: x * rsqrt(mean(x²) + eps) * w), rotary position
embeddings on q and k, causal multi-head attention and a SiLU-gated MLP
(down(silu(gate(x)) * up(x))), each with a residual add.

Input: float32 hidden states of shape (batch, tokens, 128), tokens <= 256,
e.g. `--input-shape 2,64,128 --dtype float32`.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim: int = 128, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * rms * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, d_model: int = 128, n_heads: int = 4, max_ctx: int = 256):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.k = nn.Linear(d_model, d_model, bias=False)
        self.v = nn.Linear(d_model, d_model, bias=False)
        self.o = nn.Linear(d_model, d_model, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        angles = torch.outer(torch.arange(max_ctx).float(), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())
        future = torch.triu(torch.ones(max_ctx, max_ctx, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal_mask", future)

    def forward(self, x):
        B, T, C = x.shape
        q = self.q(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.cos[:T], self.sin[:T]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = (q @ k.transpose(-2, -1)) * self.head_dim ** -0.5
        scores = scores.masked_fill(self.causal_mask[:T, :T], float("-inf"))
        probs = F.softmax(scores, dim=-1)
        out = (probs @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.o(out)


class GatedMLP(nn.Module):
    def __init__(self, d_model: int = 128, d_hidden: int = 344):
        super().__init__()
        self.gate = nn.Linear(d_model, d_hidden, bias=False)
        self.up = nn.Linear(d_model, d_hidden, bias=False)
        self.down = nn.Linear(d_hidden, d_model, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class LlamaBlock(nn.Module):
    def __init__(self, d_model: int = 128, n_heads: int = 4, max_ctx: int = 256):
        super().__init__()
        self.attn_norm = RMSNorm(d_model)
        self.attn = Attention(d_model, n_heads, max_ctx)
        self.mlp_norm = RMSNorm(d_model)
        self.mlp = GatedMLP(d_model)

    def forward(self, x):
        h = x + self.attn(self.attn_norm(x))
        return h + self.mlp(self.mlp_norm(h))
