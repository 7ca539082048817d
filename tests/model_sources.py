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


# A residual add, then the user's own RMSNorm module: the cluster runs in two functions
# (`Block.forward` and `RMSNorm.forward`) and holds every op of the norm's call.
USER_NORM = """\
import torch
import torch.nn as nn


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(d) + 0.5)
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_like = nn.Linear(8, 8)
        self.norm = RMSNorm(8)

    def forward(self, x):
        h = x + self.attn_like(x)
        h = self.norm(h)
        return self.attn_like(h)
"""

# The decoder-layer spelling (LLaMA's): the residual kept under a second name, the norm
# converting to float32 and back (a no-op at float32, which torch.export records as the
# argument's new name).
DECODER_NORM = """\
import torch
import torch.nn as nn


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(d) + 0.5)
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.Linear(8, 8)
        self.mlp = nn.Linear(8, 8)
        self.post_attention_layernorm = RMSNorm(8)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = self.attn(hidden_states)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states
"""

# A scale computed from a shape at run time (line 8's `h * s`, the graph's `mul_1`) by a call
# ir/run_scalars.py does not model (`math.log2`; `(x.shape[-1] // 2) ** -0.5` fuses as a
# kernel scalar): the shapes check drops it, and the report names it by op and line.
RUNTIME_SCALE = """\
import math
import torch.nn as nn

class M(nn.Module):
    def forward(self, x):
        h = x * 3.0
        s = math.log2(x.shape[-1] // 2)
        return (h * s).softmax(-1)
"""
