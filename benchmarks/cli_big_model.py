"""Time whole `fusion-advisor` runs on two 12-layer transformers (issues 16 and 29).

    python benchmarks/cli_big_model.py [--model gpt12|float12|all] [--repeat 1] [--json DIR]

Each run is the command itself in a fresh Python process (``fusion_core.cli``, what the
console script calls), so the figures include its imports: analysis, source mapping, kernel
generation, validation of every cluster (under Triton's interpreter without CUDA) and the
report. Models:

- ``gpt12``: ``examples/gpt12.py`` (hidden 256, 4 heads, causal softmax attention in plain
  torch ops) on int64 token ids, ``--input-shape 8,512 --dtype int64``;
- ``float12``: ``benchmarks/float_encoder12.py``, a user's own transformer on float input
  (hidden 256, 8 heads, causal softmax written as max/exp/sum/divide), ``8,512,256``.

Prints, per run, the wall seconds and the CPU seconds of the command's process (user +
system, from ``getrusage(RUSAGE_CHILDREN)``: on a shared machine CPU time moves much less
than wall time), the clusters verified, the distinct kernels checked, the model-numerics
line and the exit status. Reads the model files; writes only the ``--json`` reports asked for.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MODELS = {
    "gpt12": (ROOT / "examples" / "gpt12.py", ["--input-shape", "8,512", "--dtype", "int64"]),
    "float12": (ROOT / "benchmarks" / "float_encoder12.py", ["--input-shape", "8,512,256"]),
}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(name: str, json_dir: str | None) -> int:
    path, shape_args = MODELS[name]
    args = ["--model", str(path), *shape_args]
    if json_dir:
        args += ["--json", str(Path(json_dir) / f"{name}.json")]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    command = [sys.executable, "-m", "fusion_core.cli", *args]
    wall, cpu = time.perf_counter(), children_cpu()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    wall, cpu = time.perf_counter() - wall, children_cpu() - cpu
    out = done.stdout.splitlines()
    model_line = next((x for x in out if x.startswith("model numerics")), "model numerics: -")
    verified = sum(1 for x in out if x.startswith("cluster ") and ": verified (" in x)
    same = sum(1 for x in out if ": verified (same kernel as cluster" in x)
    clusters = sum(
        1 for x in out if x.startswith("cluster ") and (": verified (" in x or ": FAILED" in x)
    )
    print(
        f"{name} {' '.join(shape_args)}: {wall:.1f} s wall, {cpu:.1f} s CPU; exit "
        f"{done.returncode}; {verified}/{clusters} clusters verified ({clusters - same} "
        f"distinct kernels checked); {model_line}",
        flush=True,
    )
    if done.returncode != 0:
        print((done.stdout + done.stderr)[-2000:], file=sys.stderr)
    return done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=[*MODELS, "all"], default="all")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", metavar="DIR", help="write each run's --json report here")
    opts = parser.parse_args()
    names = list(MODELS) if opts.model == "all" else [opts.model]
    worst = 0
    for _ in range(opts.repeat):
        for name in names:
            worst = max(worst, one_run(name, opts.json))
    sys.exit(worst)


if __name__ == "__main__":
    main()
