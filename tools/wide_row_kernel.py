"""Print the kernels the generator writes for rows wider than one block: the wide-row kernels
docs/kernels.md shows and explains.

Run from the repository root (CPU is enough, nothing is launched):

    python tools/wide_row_kernel.py          # LayerNorm -> GELU, rows looping over blocks
    python tools/wide_row_kernel.py --split  # softmax(x/8) over few wide rows, split rows

Reads nothing but this file's models. Without --split: rows of 8192 fp32 columns, the column
loop forced (at 8192 fp32 the generator would keep the row in one block; wider rows get this
same kernel, whose text does not depend on the width); writes its `@triton.jit` function.
With --split: the shapes panel's softmax(x/8) over 64 x 262144 fp16, whose file also holds
the kernels of a row split over several programs; writes those three.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fusion_core.codegen import generate  # noqa: E402
from fusion_core.pipeline import analyze  # noqa: E402

ROWS, WIDTH = 2048, 8192
SPLIT_ROWS, SPLIT_WIDTH = 64, 262144


class LayerNormGelu(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return F.gelu(self.norm(x))


class ScaledSoftmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x * 0.125, -1)


def _jit_functions(source: str, first: str) -> str:
    """The file's `@triton.jit` functions from the one named `first` up to the launcher."""
    start = source.rindex("@triton.jit", 0, source.index(f"def {first}("))
    return source[start:source.index("\n\n\nNAME =", start)] + "\n"


def kernel_text() -> str:
    """The generated file's looping `@triton.jit` function, as it stands in the file."""
    analysis = analyze(LayerNormGelu(WIDTH), (ROWS, WIDTH))
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster, looped=True)
    source = kernel.source  # after the module-level helpers (`_range_bound`)
    start = source.rindex("@triton.jit", 0, source.index(f"def {kernel.name}_kernel("))
    return source[start:source.index("\n\n\n", start)] + "\n"


def split_text() -> str:
    """The split-row kernels (partials, finish, then the two joined in one launch) of the
    wide softmax's file."""
    x = torch.empty(SPLIT_ROWS, SPLIT_WIDTH, dtype=torch.float16)
    analysis = analyze(ScaledSoftmax(), x)
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster)
    return _jit_functions(kernel.source, f"{kernel.name}_partials")


if __name__ == "__main__":
    sys.stdout.write(split_text() if sys.argv[1:] == ["--split"] else kernel_text())
