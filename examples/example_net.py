"""ExampleNet: three fusable regions separated by two Linear layers."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ExampleNet(nn.Module):
    def __init__(self, d_in: int = 1024, d_hidden: int = 512):
        super().__init__()
        self.proj1 = nn.Linear(d_in, d_hidden)
        self.proj2 = nn.Linear(d_hidden, d_hidden)

    def forward(self, x):
        x = x * 2.0
        x = F.relu(x)
        x = x + 1.0

        x = self.proj1(x)
        x = F.gelu(x)
        x = torch.sigmoid(x)
        x = x * 0.5

        x = self.proj2(x)
        x = torch.tanh(x)
        x = x * 3.0
        return F.softmax(x, dim=-1)
