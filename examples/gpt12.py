"""gpt12: a 12-layer GPT-like decoder (pre-norm, causal softmax attention in plain torch ops).

The size the CLI's validation is benchmarked at (``benchmarks/cli_big_model.py``):
hidden 256, 4 heads, 12 layers, a small vocabulary. Input: int64 token ids of shape
(batch, tokens), tokens <= 512; e.g. ``--input-shape 8,512 --dtype int64``.
"""

import math

import torch
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, max_tokens: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        allowed = torch.tril(torch.ones(max_tokens, max_tokens, dtype=torch.bool))
        self.register_buffer("allowed", allowed)

    def forward(self, x):
        batch, tokens, hidden = x.shape
        head_dim = hidden // self.heads
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.reshape(batch, tokens, self.heads, head_dim).transpose(1, 2)
        k = k.reshape(batch, tokens, self.heads, head_dim).transpose(1, 2)
        v = v.reshape(batch, tokens, self.heads, head_dim).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(head_dim)
        scores = scores.masked_fill(~self.allowed[:tokens, :tokens], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        mixed = (weights @ v).transpose(1, 2).reshape(batch, tokens, hidden)
        return self.out(mixed)


class Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, max_tokens: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden)
        self.attn = Attention(hidden, heads, max_tokens)
        self.norm2 = nn.LayerNorm(hidden)
        self.up = nn.Linear(hidden, 4 * hidden)
        self.down = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        h = self.up(self.norm2(x))
        h = 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h * h * h)))
        return x + self.down(h)


class GPT12(nn.Module):
    def __init__(self, vocab: int = 128, hidden: int = 256, heads: int = 4, layers: int = 12,
                 max_tokens: int = 512):
        super().__init__()
        self.tokens = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(max_tokens, hidden)
        self.layers = nn.ModuleList(Layer(hidden, heads, max_tokens) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(positions)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))
