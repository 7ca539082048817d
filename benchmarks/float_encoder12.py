"""A user's own 12-layer causal transformer on float inputs (issue 29's validation-time case).

Hidden 256, 8 heads, 12 post-norm layers; attention writes its causal softmax out in plain
torch ops (max, subtract, exp, sum, divide) over a mask built for the input's own length.
Input: float32 activations of shape (batch, tokens, 256), e.g. ``--input-shape 8,512,256``.
Timed by ``benchmarks/cli_big_model.py`` next to ``examples/gpt12.py``; nothing here is
shared with that file.
"""

import torch
import torch.nn as nn


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.proj = nn.Linear(width, width)

    def split(self, t):
        b, n, w = t.shape
        return t.view(b, n, self.n_heads, w // self.n_heads).permute(0, 2, 1, 3)

    def forward(self, x):
        b, n, w = x.shape
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(2, 3)) * (w // self.n_heads) ** -0.5
        future = torch.ones(n, n, device=x.device).triu(1) * -1e9
        scores = scores + future
        scores = scores - scores.amax(dim=-1, keepdim=True)
        e = torch.exp(scores)
        probs = e / e.sum(dim=-1, keepdim=True)
        mixed = torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(b, n, w)
        return self.proj(mixed)


class Block(nn.Module):
    def __init__(self, width: int, n_heads: int):
        super().__init__()
        self.attn = CausalSelfAttention(width, n_heads)
        self.ln_attn = nn.LayerNorm(width)
        self.fc_in = nn.Linear(width, 4 * width)
        self.fc_out = nn.Linear(4 * width, width)
        self.ln_mlp = nn.LayerNorm(width)

    def forward(self, x):
        x = self.ln_attn(x + self.attn(x))
        return self.ln_mlp(x + self.fc_out(torch.relu(self.fc_in(x))))


class FloatEncoder12(nn.Module):
    def __init__(self, width: int = 256, n_heads: int = 8, depth: int = 12):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width, n_heads) for _ in range(depth))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x
