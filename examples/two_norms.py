"""two_norms: one input normalized twice, as in a block with parallel attention and MLP.

GPT-NeoX-style blocks feed the attention branch and the MLP branch from two LayerNorms
of the same hidden states; here the hidden states are the previous layer's output plus
its residual, each branch is a Linear, and the block adds both to the residual. Both
norms reduce the same rows, so one kernel can add, normalize twice, and write the sum
and both normalized values.

Inputs: two float32 tensors of shape (batch, tokens, 64) (the previous layer's output
and its residual), e.g. `--input-shape 2,32,64 --input-shape 2,32,64 --dtype float32`.
"""

import torch.nn as nn


class TwoNorms(nn.Module):
    def __init__(self, dim: int = 64):
        super().__init__()
        self.norm_attn = nn.LayerNorm(dim)
        self.norm_mlp = nn.LayerNorm(dim)
        self.attn = nn.Linear(dim, dim)
        self.mlp = nn.Linear(dim, dim)

    def forward(self, x, residual):
        h = x + residual
        return h + self.attn(self.norm_attn(h)) + self.mlp(self.norm_mlp(h))
