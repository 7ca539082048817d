"""Panel cases' kernels launched a few times each, for Nsight Compute to read the hardware
counters of the kernel a user gets by default (issue 28 asks why a row misses 85% of a copy,
measured: achieved occupancy, stalls, bytes).

On a CUDA machine, from the repository root (`FUSION_ADVISOR_AUTOTUNE=0`: every launch is the
heuristic's default configuration, none a tuning candidate's):

    FUSION_ADVISOR_AUTOTUNE=0 PYTHONPATH=. ncu --clock-control none --kernel-name regex:cluster \
        --section SpeedOfLight --section Occupancy --section WarpStateStats \
        python benchmarks/ncu_rows.py --cases 9,37

`bash benchmarks/h200_session.sh ncu` runs it a case a process (NCU_CASES, NCU_BUDGET) and
puts the reports in one table (`tools/ncu_table.py`).

Each case is built at its panel shape and dtype (``panel_cases.CASES``), analysed, generated
and launched `--launches` times on the inputs the panel draws. `--list` (no GPU; on a CUDA
machine with TRITON_INTERPRET=1) launches each case once at its tiny shape under Triton's
interpreter and prints its label and the configuration its file's heuristic picked.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import fusion_core.codegen  # noqa: E402,I001,F401  (first: the interpreter before triton loads)
import torch  # noqa: E402

from fusion_core.codegen import generate, load_kernel, write_kernels  # noqa: E402
from panel_cases import CASES  # noqa: E402
from panel_timing import analysed_case, probe_case  # noqa: E402
from shapes_panel import case_numbers  # noqa: E402


def default_config(module) -> tuple:
    """The configuration the file's heuristic picked at its first call: the first of the
    plan's `_configs`, as `LAUNCH_CACHE` keeps it (the plan of the inputs as the kernel reads
    them, through its views: `_plan` of the raw inputs refuses a permuted one)."""
    (kept,) = module.LAUNCH_CACHE.values()
    *_, configs = kept[1] if len(kept) == 2 else kept  # (seats, plan) where it reads views
    return configs[0]


def launched(number: int, device: str, folder: Path, launches: int,
             tiny: bool | None = None) -> str:
    """Generate case `number`'s kernel and launch it `launches` times (at least once: the
    first call keeps its plan); returns a line naming the case and the default configuration.
    `tiny`: the case's tiny shapes (default: off CUDA, where the interpreter runs it)."""
    case = CASES[number]
    tiny = device == "cpu" if tiny is None else tiny
    analysis, cluster, model_inputs = analysed_case(case, device, tiny=tiny)
    kernel = generate(analysis, cluster)
    module = load_kernel(write_kernels([kernel], folder)[0])
    _, inputs, _, _ = probe_case([], analysis, cluster, model_inputs, device)
    launch = getattr(module, kernel.name)
    for _ in range(max(launches, 1)):
        launch(*inputs)
    if device == "cuda":
        torch.cuda.synchronize()
    dtype = str(case.dtype).removeprefix("torch.")
    return f"case {number}: {case.label} {dtype}, default {list(default_config(module))}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="9,37")
    parser.add_argument("--launches", type=int, default=2, help="a kernel's launches (>= 1)")
    parser.add_argument("--list", action="store_true",
                        help="no GPU: each case at its tiny shape, the configuration picked")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() and not args.list else "cpu"
    if device == "cpu" and not args.list:
        sys.exit("ncu_rows.py launches kernels on a CUDA GPU (--list runs without one)")
    interpreted = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on")
    if args.list and not interpreted:  # a CUDA machine: Triton compiles for the GPU
        print("ncu_rows.py: --list launches each case once at its tiny shape under Triton's "
              "interpreter, which is off here: run TRITON_INTERPRET=1 python "
              "benchmarks/ncu_rows.py --list", file=sys.stderr)
        return 2
    if device == "cuda" and os.environ.get("FUSION_ADVISOR_AUTOTUNE") != "0":
        sys.exit("set FUSION_ADVISOR_AUTOTUNE=0: otherwise the first call times every "
                 "candidate, and ncu reads those launches too")
    with tempfile.TemporaryDirectory(prefix="ncu-rows-") as work:
        for i, number in enumerate(case_numbers(args.cases)):
            launches = 1 if args.list else args.launches
            print(launched(number, device, Path(work) / str(i), launches), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
