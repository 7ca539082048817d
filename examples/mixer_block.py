"""mixer_block: one MLP-Mixer block with random weights (no downloads).

Pre-norm token mixing (LayerNorm, an MLP across the token axis, residual add) then
pre-norm channel mixing (LayerNorm, GELU MLP across channels, residual add).

Input: float32 patch embeddings of shape (batch, 64, 128): 64 tokens, 128 channels,
e.g. `--input-shape 2,64,128 --dtype float32`.
"""

import torch.nn as nn


class MlpBlock(nn.Module):
    def __init__(self, dim: int = 128, hidden: int = 256, dropout: float = 0.1):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.fc2(self.act(self.fc1(x))))


class MixerBlock(nn.Module):
    def __init__(self, tokens: int = 64, channels: int = 128):
        super().__init__()
        self.norm1 = nn.LayerNorm(channels)
        self.token_mlp = MlpBlock(tokens, 2 * tokens)
        self.norm2 = nn.LayerNorm(channels)
        self.channel_mlp = MlpBlock(channels, 4 * channels)

    def forward(self, x):
        y = self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        x = x + y
        return x + self.channel_mlp(self.norm2(x))
