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


IN_PLACE_INPUT = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_2 = nn.LayerNorm(16)
        self.mlp = nn.Linear(16, 16)

    def forward(self, x):
        h = torch.relu_(x)
        h = self.mlp(self.ln_2(h))
        return h


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(16, 16)
        self.b = Block()
        self.post = nn.Linear(32, 16)

    def forward(self, x):
        h = self.pre(x)
        y = self.b(h)
        z = torch.cat([y, h], -1)
        return y + self.post(torch.clamp(-z - 100.0, min=0.0))
"""


def test_a_result_the_kept_line_does_not_read_still_refuses(tmp_path):
    """Export makes `relu_`'s write into the caller's `h` a result of its own, which only
    the caller reads; the kept line assigns Block's `h` before reading it, so
    `h, fused = cluster0(x, ...)` then `h = self.mlp(fused)` would drop that write (the
    caller's `h` no longer rectified; `--apply`'s check, at small inputs, passed it)."""
    from fusion_core.ir.shapes import InputSpec
    from fusion_core.pipeline import analyze_file
    from fusion_core.sourcemap import map_clusters

    path = tmp_path / "in_place.py"
    path.write_text(IN_PLACE_INPUT)
    analysis = analyze_file(path, [InputSpec((4, 16))], "Net", capture="export")
    block = [m for m in map_clusters(analysis) if m.start == 12]
    assert block and not any(m.exact for m in block)
