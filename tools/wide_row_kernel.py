"""Print the kernel the generator writes for a LayerNorm -> GELU whose rows loop over column
blocks: the wide-row kernel the README shows and explains.

Run from the repository root (CPU is enough, nothing is launched):

    python tools/wide_row_kernel.py

Reads nothing but this file's model: rows of 8192 fp32 columns, the column loop forced (at
8192 fp32 the generator would keep the row in one block; wider rows get this same kernel, whose
text does not depend on the width). Writes the `@triton.jit` function to stdout.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch.nn.functional as F  # noqa: N812
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fusion_core.codegen import generate  # noqa: E402
from fusion_core.pipeline import analyze  # noqa: E402

ROWS, WIDTH = 2048, 8192


class LayerNormGelu(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return F.gelu(self.norm(x))


def kernel_text() -> str:
    """The generated file's `@triton.jit` function, as it stands in the file."""
    analysis = analyze(LayerNormGelu(WIDTH), (ROWS, WIDTH))
    (cluster,) = analysis.clusters
    source = generate(analysis, cluster, looped=True).source
    start = source.index("@triton.jit")
    return source[start:source.index("\n\n\n", start)] + "\n"


if __name__ == "__main__":
    sys.stdout.write(kernel_text())
