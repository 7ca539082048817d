"""Whether capping a wide norm's registers (Triton's ``maxnreg``) buys a fuller SM, on a GPU.

Run on a CUDA machine from the repository root:

    PYTHONPATH=. python benchmarks/maxnreg_probe.py [--cases 37] [--list]

The float32 LayerNorm over 256 x 65536 runs in one launch at 4 programs a row, 4096 a step,
16 warps (its default since 2026-12-07): 40 registers a thread, so 3 blocks of 16 warps fit
an SM and its 1024 programs take 2.59 waves, the last 59% full
(``benchmarks/panel_reasons_2026-12-07_morning.md``). Compiled for sm_90 on the CPU (Triton
3.6) with ``maxnreg=32`` the same kernel takes 32 registers and spills nothing: 4 blocks an SM,
1.94 waves. The 16-bit LayerNorms of 512 x 65536 spill at 32 (59 registers without the cap)
and softmax 2048 x 50304 fp32 at 64 spills 4 bytes (73 without). For each case this times the
kernel the user gets as generated (``now``) and with every launch of the file capped
(``maxnreg N``, each after its own tuning, every candidate timed), checked against eager.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import fusion_core.codegen  # noqa: E402,I001,F401  (first: the interpreter before triton loads)

from fusion_core.codegen import generate, write_kernels  # noqa: E402
from panel_timing import analysed_case, probe_case, run_probe  # noqa: E402

DEFAULT_CASES = "37"  # layer_norm*2 256x65536 fp32
CAPS = (32, 40)
LAUNCH_OPTION = "num_warps=num_warps"  # each launch's option in a generated file


def capped(source: str, cap: int) -> str:
    """The file's text with every launch asking Triton for at most `cap` registers a thread
    (the launches through Triton; a kept direct launch reuses what its first launch compiled)."""
    if LAUNCH_OPTION not in source:
        raise ValueError(f"no `{LAUNCH_OPTION}` in the generated file: the probe needs updating")
    return source.replace(LAUNCH_OPTION, f"{LAUNCH_OPTION}, maxnreg={cap}")


def files(case, device: str, work: Path, tiny: bool = False):
    """(variant, kernel file, launcher name) per variant, the cluster's inputs, eager, cluster
    (`tiny`: at the case's tiny shapes)."""
    analysis, cluster, model_inputs = analysed_case(case, device, tiny)
    kernel = generate(analysis, cluster, None)
    found = [("now", write_kernels([kernel], work / "now")[0], kernel.name)]
    for cap in CAPS:
        path = Path(write_kernels([kernel], work / f"maxnreg_{cap}")[0])
        path.write_text(capped(path.read_text(), cap))
        found.append((f"maxnreg {cap}", path, kernel.name))
    return probe_case(found, analysis, cluster, model_inputs, device)


def main() -> int:
    return run_probe("maxnreg_probe.py", __doc__.splitlines()[0], DEFAULT_CASES, files)


if __name__ == "__main__":
    raise SystemExit(main())
