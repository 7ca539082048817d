"""A 16-bit LayerNorm at 16384 columns in one block against the column loop, on a GPU.

Run on a CUDA machine from the repository root:

    PYTHONPATH=. python benchmarks/one_block_probe.py [--cases 9,33,32] [--list]

A centered norm of 16-bit inputs loops past 8192 columns (``one_block.CENTERED_16BIT_ONE_BLOCK``,
measured at 16 warps on the H200 before the 16-bit GELU took a third of the LayerNorm→GELU
kernel's instructions). For each case this times the kernel the user gets (the loop, after its
own per-shape choice) and every configuration of the same cluster generated to keep the row in
one block (``Tuning(loop_above=...)``: 16 and 32 warps at 16384 columns), as the shapes panel
times (CUDA-graph replays over input copies past the L2), each checked against eager.
``--list`` prints each file's kind and candidates, without a GPU. First run (H100, 2026-12-06,
RESULTS.md "2026-12-06 afternoon"): the loop won every case by 12-18%; the threshold stays.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import fusion_core.codegen  # noqa: E402,I001,F401  (first: the interpreter before triton loads)

from fusion_core.codegen import Tuning, generate, write_kernels  # noqa: E402
from panel_timing import analysed_case, probe_case, run_probe  # noqa: E402

DEFAULT_CASES = "9,33,32"  # layer_norm→gelu 1024x16384 bf16, layer_norm*2 2048x16384 bf16, fp16


def files(case, device: str, work: Path):
    """(label, kernel file, launcher name) of the default file and of the one-block file, and
    the cluster's inputs and eager function."""
    analysis, cluster, model_inputs = analysed_case(case, device, False)
    width = model_inputs[0].shape[-1]
    found = []
    for label, tuning in (("default", None), ("one block", Tuning(loop_above=width))):
        kernel = generate(analysis, cluster, tuning)
        path = write_kernels([kernel], work / label.replace(" ", "_"))[0]
        found.append((f"{label} ({'loop' if kernel.looped else 'one block'})", path, kernel.name))
    return probe_case(found, analysis, cluster, model_inputs, device)


def main() -> int:
    return run_probe("one_block_probe.py", __doc__.splitlines()[0], DEFAULT_CASES, files)


if __name__ == "__main__":
    raise SystemExit(main())
