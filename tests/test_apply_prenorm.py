"""The pre-norm residual of a transformer block (nanoGPT, timm's ViT blocks):

    x = x + self.attn(self.ln_1(x))
    x = x + self.mlp(self.ln_2(x))

fuses the first line's add with the second line's `ln_2` into one kernel of two results. The
edit assigns both on a line of its own and keeps the second line, which reads `x` before it
assigns it again:

    x, fused = cluster0(x, self.attn(self.ln_1(x)), self.ln_2.weight, self.ln_2.bias)
    x = x + self.mlp(fused)

It was refused ("`x` holds the cluster's result `add` but line 15 reassigns it"), which is
true only of a line the edit drops. Kernels run under the Triton interpreter on CPU.
"""

from __future__ import annotations

import pytest
from apply_checks import same_outputs
from click.testing import CliRunner

from fusion_core.cli import cli

BLOCKS = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(16)
        self.attn = nn.Linear(16, 16)
        self.ln_2 = nn.LayerNorm(16)
        self.mlp = nn.Linear(16, 16)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x
"""

REWRITTEN = """\
        x, fused = cluster0(x, self.attn(self.ln_1(x)), self.ln_2.weight, self.ln_2.bias)
        x = x + self.mlp(fused)
        return x
"""


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_the_pre_norm_residual_is_rewritten_and_computes_what_the_blocks_did(tmp_path, capture):
    path = tmp_path / "prenorm.py"
    path.write_text(BLOCKS)
    result = CliRunner().invoke(cli, ["--model", f"{path}:Net", "--input-shape", "4,16",
                                      "--capture", capture, "--no-timing", "--apply", "--yes"])
    assert result.exit_code == 0, result.output
    assert "Applied 1 edit" in result.output
    assert REWRITTEN in path.read_text()
    same_outputs(tmp_path, path, BLOCKS, shape=(4, 16))
