"""Time one `fusion-advisor` run end to end on the 12-layer GPT-like model (issue 16).

    python benchmarks/cli_big_model.py [--shape 8,512] [--repeat 1] [--json FILE]

Runs the command in this process (click's runner: the same code path as the console
script, stdout captured) on `examples/gpt12.py` (hidden 256, 4 heads, 12 layers, causal
softmax attention in plain torch ops) with int64 token ids: analysis, source mapping,
kernel generation, validation of every cluster (under Triton's interpreter without CUDA)
and the report. Prints, per run, the wall and process CPU seconds (CPU time moves less
with other load on a shared machine), the clusters, the distinct kernels checked, the
model-numerics line and the command's exit status. `import torch` and `import
fusion_core` happen before the clock starts; Triton and Dynamo's lazy imports are inside
the first run, as in a fresh command.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from click.testing import CliRunner  # noqa: E402

from fusion_core.cli import cli  # noqa: E402

MODEL = ROOT / "examples" / "gpt12.py"


def one_run(shape: str, json_path: str | None) -> None:
    args = ["--model", str(MODEL), "--input-shape", shape, "--dtype", "int64"]
    if json_path:
        args += ["--json", json_path]
    wall, cpu = time.perf_counter(), time.process_time()
    result = CliRunner().invoke(cli, args)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    out = result.stdout.splitlines()
    model_line = next((x for x in out if x.startswith("model numerics")), "model numerics: -")
    verified = sum(1 for x in out if x.startswith("cluster ") and ": verified (" in x)
    same = sum(1 for x in out if ": verified (same kernel as cluster" in x)
    clusters = sum(1 for x in out if x.startswith("cluster ") and (": verified (" in x
                                                                    or ": FAILED" in x))
    print(f"gpt12 {shape} int64: {wall:.1f} s wall, {cpu:.1f} s CPU; exit {result.exit_code}; "
          f"{verified}/{clusters} clusters verified ({clusters - same} distinct kernels "
          f"checked); {model_line}", flush=True)
    if result.exit_code != 0:
        print(result.output[-2000:], file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="8,512")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", metavar="FILE")
    opts = parser.parse_args()
    for _ in range(opts.repeat):
        one_run(opts.shape, opts.json)


if __name__ == "__main__":
    main()
