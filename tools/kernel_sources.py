"""Write the generated kernel source of every shipped example, for before/after comparisons.

Run from the repository root (CPU is enough, nothing is launched):

    python tools/kernel_sources.py OUT_DIR
    diff -r BEFORE_DIR AFTER_DIR

Reads the example models under ``examples/`` at the shapes their docstrings give (plus a
bf16 ExampleNet); writes one ``<case>__clusterN.py`` per cluster and per forced variant
(the looping form of each reduction, the flat form of each tiled elementwise kernel)
into OUT_DIR. A code generator change that should preserve behaviour must
leave these files identical, or the difference must be explained.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fusion_core.codegen import generate  # noqa: E402
from fusion_core.fileio import write_atomic  # noqa: E402
from fusion_core.ir.shapes import InputSpec  # noqa: E402
from fusion_core.pipeline import analyze_file  # noqa: E402

CASES = [
    ("example_net", "examples/example_net.py", (64, 1024), torch.float32),
    ("example_net_bf16", "examples/example_net.py", (64, 1024), torch.bfloat16),
    ("microgpt", "examples/microgpt.py", (2, 16), torch.int64),
    ("mixer", "examples/mixer_block.py", (2, 64, 128), torch.float32),
    ("llama_block", "examples/llama_block.py", (2, 64, 128), torch.float32),
    ("resnet_block", "examples/resnet_block.py", (2, 32, 16, 16), torch.float32),
    ("dtype_rmsnorm", "examples/dtype_rmsnorm.py", (2, 8, 128), torch.bfloat16),
    ("two_norms", "examples/two_norms.py", [(2, 32, 64)] * 2, torch.float32),
    ("mbconv_se", "examples/mbconv_se.py", (2, 16, 8, 8), torch.float32),
    ("groupnorm_silu", "examples/groupnorm_silu.py", (2, 32, 8, 8), torch.float32),
    ("convnext_block", "examples/convnext_block.py", (2, 32, 8, 8), torch.float32),
    ("channel_softmax", "examples/channel_softmax.py", (2, 16, 8, 8), torch.float32),
]


def main(out_dir: str) -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for case, path, shape, dtype in CASES:
        torch.manual_seed(0)
        shapes = shape if isinstance(shape, list) else [shape]
        analysis = analyze_file(ROOT / path, [InputSpec(sh, dtype) for sh in shapes])
        for cluster in analysis.clusters:
            kernel = generate(analysis, cluster)
            write_atomic(out / f"{case}__{kernel.name}.py", kernel.source)
            written += 1
            variant = None
            if kernel.skeleton == "reduction" and not kernel.looped:
                variant = ("looped", generate(analysis, cluster, looped=True))
            elif kernel.tiled:
                variant = ("flat", generate(analysis, cluster, tiled=False))
            if variant is not None and variant[1].source != kernel.source:  # may not loop
                write_atomic(out / f"{case}__{kernel.name}__{variant[0]}.py", variant[1].source)
                written += 1
    print(f"{written} kernel files written to {out}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tools/kernel_sources.py OUT_DIR")
    sys.exit(main(sys.argv[1]))
