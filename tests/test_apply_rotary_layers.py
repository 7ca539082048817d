"""Hugging Face's rotary embedding in a model of several layers: each attention calls the
plain function `apply_rotary_pos_emb`, which calls `rotate_half`. The calls of every layer
come from the same lines, so telling them apart takes the module of the method that called
the plain function. Without it the layers' calls were one, the other layer's slices seemed
left out of the cluster, and the line stayed a pointer ("only part of the call at line 14
(`rotate_half`) is in the cluster: a slice (line 6) is a view made inside the call"): HF
LLaMA, Mistral, Qwen2 and Phi-3 had 4 verified clusters each left so. Kernels run under the
Triton interpreter on CPU.
"""

from __future__ import annotations

import pytest
from apply_checks import apply_net, bn_args, same_outputs

from fusion_core.ir.shapes import InputSpec
from fusion_core.pipeline import analyze_file
from fusion_core.sourcemap import map_clusters

ROTARY = """\
import torch
from torch import nn


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(16, 16)
        self.k = nn.Linear(16, 16)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, 2, 8).transpose(1, 2)
        k = self.k(x).view(b, t, 2, 8).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        return x + (q @ k.transpose(-1, -2)).mean(dim=(1, 3)).unsqueeze(-1)


class Net(nn.Module):
    def __init__(self, layers=2):
        super().__init__()
        self.layers = nn.ModuleList([Attention() for _ in range(layers)])
        freqs = torch.arange(6.0)[:, None] * torch.linspace(0.1, 1.0, 4)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos()[None], persistent=False)
        self.register_buffer("sin", emb.sin()[None], persistent=False)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        return x
"""


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_the_rotary_lines_of_every_layer_are_one_edit(tmp_path, capture):
    path = tmp_path / "rotary.py"
    path.write_text(ROTARY)
    analysis = analyze_file(path, [InputSpec((2, 6, 16))], class_name="Net", capture=capture)
    rotary = [m for m in map_clusters(analysis) if m.start in (14, 15)]
    assert sorted(m.start for m in rotary) == [14, 14, 15, 15]  # q and k, in both layers
    assert all(m.exact for m in rotary), [m.reason for m in rotary]
    assert {m.replacement for m in rotary} == {"    q_embed = cluster0(q, cos, sin)",
                                               "    k_embed = cluster1(k, cos, sin)"}


def test_applied_to_every_layer_it_computes_what_the_lines_did(tmp_path):
    path = tmp_path / "rotary.py"
    path.write_text(ROTARY)
    result = apply_net(path, "2,6,16")
    assert result.exit_code == 0, result.output
    assert "Applied 2 edits" in result.output
    text = path.read_text()
    assert "rotate_half(q)" not in text and "rotate_half(k)" not in text
    same_outputs(tmp_path, path, ROTARY, shape=(2, 6, 16))


# A call whose nodes disagree on the module: `step` is called directly, not through the
# module's call, so only the ops inside `self(h)` ran in an instance of `Block` on the stack.
# Keyed node by node, the call split in two and the slice `forward` makes went unseen: the
# edit `return cluster0(h)` dropped it (wrong at any other length than the traced 6).
STEP_CALLED_DIRECTLY = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 16))

    def forward(self, x):
        return x[:, :6]

    def step(self, x):
        def inner(h):
            return self(h) * 2

        def outer(h):
            return torch.sigmoid(inner(h))

        return outer(x) @ self.w


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blk = Block()

    def forward(self, x):
        return self.blk.step(x)
"""

# The same through the root's own forward: FX's stack has no entry for the root.
NESTED_ROOT = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, top=True):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 16))
        self.sub = Net(top=False) if top else None

    def forward(self, x):
        if self.sub is None:
            return x[:, :6]

        def inner(h):
            return self.sub(h) * 2

        def outer(h):
            return torch.sigmoid(inner(h))

        return outer(x) @ self.w
"""


@pytest.mark.parametrize("capture", ["fx", "export"])
@pytest.mark.parametrize("source", [STEP_CALLED_DIRECTLY, NESTED_ROOT], ids=["step", "root"])
def test_a_call_whose_ops_ran_in_and_out_of_an_instance_stays_one_call(tmp_path, capture,
                                                                       source):
    path = tmp_path / "calls.py"
    path.write_text(source)
    analysis = analyze_file(path, [InputSpec((2, 6, 16))], class_name="Net", capture=capture)
    (m,) = map_clusters(analysis)
    assert not m.exact
    assert "only part of the call" in m.reason and "is a view made inside the call" in m.reason


# A norm-and-activation module called in two blocks, its result fused with the caller's
# line: the analysis reshapes the norm's weights in nodes of its own, with no module stack.
# Those values of the parameters alone must not make the blocks' calls one call.
NORM_ACT = """\
import torch
import torch.nn.functional as F
from torch import nn


class BatchNormAct(nn.BatchNorm2d):
    def forward(self, x):
        x = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                         False, 0.0, self.eps)
        return F.silu(x)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.pw = nn.Conv2d(8, 8, 1)
        self.bn1 = BatchNormAct(8)

    def forward(self, x):
        x = self.pw(x)
        return self.bn1(x) * 2.0 + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(Block(), Block())

    def forward(self, x):
        return self.blocks(x)
"""


def test_weight_reshapes_without_a_module_stack_keep_the_blocks_calls_apart(tmp_path):
    path = tmp_path / "norm_act.py"
    path.write_text(NORM_ACT)
    maps = map_clusters(analyze_file(path, [InputSpec((2, 8, 6, 6))], class_name="Net"))
    assert len(maps) == 2 and all(m.exact for m in maps), [m.reason for m in maps]
    # The BatchNorm runs on its running statistics: the kernel in eval mode only, the line
    # as written otherwise (sourcemap/train_mode.py), read from the layer `self.bn1`.
    assert maps[0].replacement == ("        if not self.bn1.training:\n"
                                   f"            return cluster0(x, {bn_args('self.bn1')})\n"
                                   "        else:\n"
                                   "            return self.bn1(x) * 2.0 + x"), maps[0].replacement
