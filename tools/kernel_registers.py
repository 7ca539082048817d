"""Registers and spills of generated reduction kernels for an sm_90 GPU, without one.

Run from the repository root (CPU is enough; Triton compiles to PTX, ptxas reports):

    python tools/kernel_registers.py

Reads the cases below: a reduction, its dtype and width, which kernel (one block, the column
loop, or a split row's partials or finish kernel), and a launch configuration (BLOCK_SIZE,
warps). Generates each kernel, compiles it with Triton for
sm_90 in a subprocess (without the interpreter) and runs the ptxas Triton ships on its PTX
with -v. Pointers are marked 16-byte aligned and sizes divisible by 16 where the case's are,
as Triton's launcher specializes them. Prints one line a case: registers a thread and spill
bytes. These are the numbers
behind one_block.py's ONE_BLOCK_BYTES (which rows stay in one block) and tuning.py's candidates.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from codegen_harness import Lambda, launch_signature  # noqa: E402

from fusion_core.codegen import Tuning, generate  # noqa: E402
from fusion_core.codegen.reference import capture_values, cluster_inputs  # noqa: E402
from fusion_core.codegen.split_rows import FALLBACK_BLOCK  # noqa: E402
from fusion_core.pipeline import analyze  # noqa: E402

FNS = {
    "layer_norm->gelu": lambda m, x: F.gelu(F.layer_norm(x, (x.shape[-1],), m.w, m.b)),
    "softmax(x/8)": lambda m, x: torch.softmax(x * 0.125, -1),
    "log_softmax(x.float())": lambda m, x: torch.log_softmax(x.float(), -1),
    "softmax(x/8)*w": lambda m, x: torch.softmax(x * 0.125, -1) * m.w,
    "log_softmax(x/8)": lambda m, x: torch.log_softmax(x * 0.125, -1),
}
BF16, FP16, FP32, FP64 = torch.bfloat16, torch.float16, torch.float32, torch.float64
# The jit function each form compiles (and whether the kernel is generated looping).
FORMS = {"one block": ("kernel", False), "loop": ("kernel", True),
         "split partials": ("partials", True), "split finish": ("finish", True),
         "split joined": ("joined", True)}
CASES = [  # (function, dtype, width, form, BLOCK_SIZE, warps)
    ("layer_norm->gelu", FP32, 8192, "one block", 8192, 8),
    ("layer_norm->gelu", FP32, 8192, "one block", 8192, 16),
    ("layer_norm->gelu", FP32, 8192, "one block", 8192, 32),
    ("layer_norm->gelu", FP32, 16384, "one block", 16384, 16),
    ("layer_norm->gelu", FP32, 16384, "one block", 16384, 32),
    ("layer_norm->gelu", BF16, 16384, "one block", 16384, 16),
    ("layer_norm->gelu", BF16, 16384, "one block", 16384, 32),
    ("layer_norm->gelu", FP32, 32768, "one block", 32768, 32),
    ("softmax(x/8)", BF16, 16384, "one block", 16384, 16),
    # one_block.py's wider block for a softmax (one value per element): 32768 columns
    ("softmax(x/8)", FP32, 32768, "one block", 32768, 16),
    ("softmax(x/8)", FP32, 32768, "one block", 32768, 32),
    ("softmax(x/8)", BF16, 32768, "one block", 32768, 16),
    ("softmax(x/8)", BF16, 32768, "one block", 32768, 32),
    ("softmax(x/8)", FP64, 16384, "one block", 16384, 16),
    ("softmax(x/8)*w", FP32, 32768, "one block", 32768, 32),
    ("softmax(x/8)*w", BF16, 32768, "one block", 32768, 32),
    ("log_softmax(x/8)", FP32, 32768, "one block", 32768, 16),
    ("log_softmax(x/8)", FP32, 32768, "one block", 32768, 32),
    ("log_softmax(x/8)", BF16, 32768, "one block", 32768, 32),
    ("log_softmax(x.float())", BF16, 32768, "one block", 32768, 32),
    ("layer_norm->gelu", FP32, 8192, "loop", 1024, 4),
    ("layer_norm->gelu", FP32, 8192, "loop", 4096, 8),
    ("layer_norm->gelu", FP32, 8192, "loop", 8192, 16),
    ("softmax(x/8)", FP32, 50257, "loop", 8192, 16),
    ("log_softmax(x.float())", BF16, 32768, "loop", 4096, 8),
    # the shapes panel's 64x262144 softmax: the heuristic's split (8 programs a row)
    ("softmax(x/8)", FP16, 262144, "split partials", 8192, 16),
    ("softmax(x/8)", FP16, 262144, "split finish", 8192, 16),
    ("layer_norm->gelu", BF16, 262144, "split partials", 8192, 16),
    ("layer_norm->gelu", BF16, 262144, "split finish", 8192, 16),
    # split rows in one launch (the 2-row harness launches it at 8 programs a row)
    ("layer_norm->gelu", FP32, 65536, "split joined", 8192, 16),
    ("layer_norm->gelu", BF16, 65536, "split joined", 8192, 16),
]

_COMPILE = r"""
import json, os, subprocess, sys
import triton
from triton.backends.compiler import GPUTarget
from fusion_core.codegen import load_kernel
bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
ptxas = next(os.path.join(bin_dir, n) for n in ("ptxas-blackwell", "ptxas")
             if os.path.exists(os.path.join(bin_dir, n)))
for path, name, sig, consts, warps, aligned in json.loads(sys.stdin.read()):
    fn = getattr(load_kernel(path), name)
    # What Triton's launcher specializes at run time: 16-byte aligned pointers and integer
    # arguments divisible by 16 marked so (unmarked, the loads compile scalar)
    attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
    src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    with open(path + ".ptx", "w") as f:
        f.write(ptx.asm["ptx"])
    out = subprocess.run([ptxas, "-v", "--gpu-name", "sm_90a", path + ".ptx", "-o", os.devnull],
                         capture_output=True, text=True).stderr
    print(json.dumps(out), flush=True)
"""


def _job(fn: str, dtype: torch.dtype, width: int, form: str, block: int, warps: int,
         work: Path):
    """The compile job of one case. Split forms run the launcher on 2 rows, which it splits
    (only the caught kernel's launch is skipped: a finish case runs the partials kernel under
    the interpreter first)."""
    suffix, looped = FORMS[form]
    model = Lambda(FNS[fn], w=torch.randn(width).to(dtype), b=torch.randn(width).to(dtype))
    x = torch.randn(2, width).to(dtype)
    analysis = analyze(model, x)
    (cluster,) = analysis.clusters
    # 2 rows of a loop case would be split too: not there (the row loop's kernel is the case)
    unsplit = {"split_min_cols": 1 << 30} if suffix == "kernel" else {}
    widest = 1 << (width - 1).bit_length()  # blocks are powers of two
    kernel = generate(analysis, cluster, Tuning(max_block=widest, **unsplit), looped=looped)
    args = cluster_inputs(analysis, cluster, capture_values(analysis, x))
    return kernel_job(kernel, args, work, suffix, block, warps)


def kernel_job(kernel, args: tuple, work: Path, suffix: str, block: int, warps: int):
    """The compile job of a generated kernel's jit function `suffix` ("kernel", "partials",
    "finish", "joined") launched on `args` (2 rows), at BLOCK_SIZE `block`, one row a
    program."""
    path, sig, consts = launch_signature(kernel, work, args, suffix)
    # the pointers (torch allocations are aligned) and the sizes at the case's width; a split
    # row's chunk is a multiple of 16 by construction (split_rows.CHUNK_ALIGN), and Triton
    # specializes it so: unmarked, the chunk's loads compiled scalar
    sizes = {"n_rows": 4096, "n_cols": args[0].shape[-1], "chunk": 16}
    aligned = [i for i, (name, kind) in enumerate(sig.items())
               if kind.startswith("*") or sizes.get(name, 1) % 16 == 0]
    consts = {**consts, "BLOCK_SIZE": block, "ROWS_PER_PROGRAM": 1}
    if FALLBACK_BLOCK.name in consts:  # the joined kernel's: derived from the block
        consts[FALLBACK_BLOCK.name] = eval(FALLBACK_BLOCK.launch, {"block": block})  # noqa: S307
    return (path, f"{kernel.name}_{suffix}", sig, consts, warps, aligned)


def usage(jobs: list) -> list[tuple[int, int]]:
    """(registers a thread, spill bytes) of each job, compiled for sm_90 and read from ptxas
    -v; raises RuntimeError with the compiler's error where it fails."""
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    proc = subprocess.run([sys.executable, "-c", _COMPILE], input=json.dumps(jobs),
                          capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return [_usage(json.loads(out)) for out in proc.stdout.splitlines()]


def _usage(ptxas_output: str) -> tuple[int, int]:
    """Registers and spill bytes from ptxas -v."""
    regs = spill = -1
    for line in ptxas_output.splitlines():
        if "Used" in line and "registers" in line:
            regs = int(line.split("Used")[1].split("registers")[0])
        if "spill stores" in line:
            spill = int(line.split("bytes stack frame,")[1].split("bytes spill stores")[0])
    return regs, spill


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [_job(*case, Path(tmp) / f"k{i}") for i, case in enumerate(CASES)]
        try:
            found = usage(jobs)
        except RuntimeError as err:
            print(err, file=sys.stderr)
            return 1
        for case, (regs, spill) in zip(CASES, found, strict=True):
            fn, dtype, width, form, block, warps = case
            print(f"{fn} {str(dtype).removeprefix('torch.')} x{width} ({form}, BLOCK_SIZE "
                  f"{block}, {warps} warps): {regs} registers, {spill} bytes spilled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
