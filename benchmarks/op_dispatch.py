"""Host time per call of the ways a model rewritten by `--apply` can reach a generated kernel.

    python benchmarks/op_dispatch.py [--calls 2000] [--repeat 7] [--cases ExampleNet,Mixer]

For the cases of ``launcher_overhead.py`` it generates and loads every cluster's file,
registers it the way the fused package does (``codegen/operators._register``, the
code the package's ``__init__.py`` holds) and times, per warm call under ``torch.no_grad()``:

* ``launcher``: the kernel file's launcher called directly;
* ``name``: what the rewritten line calls: the eager checks (not compiling, plain
  tensors, no autograd, no mode), the dtype check, then the launcher;
* ``operator``: the registered torch operator (``torch.ops.<ns>.<name>.default``):
  the dispatcher, then the same launcher (what every call cost before the name launched
  directly, and what torch.compile, fx and autograd see);
* ``operator - launcher``: the dispatch alone.

Without CUDA the kernel is stubbed (its ``[grid]`` launches nothing), so only host Python is
timed; with CUDA the launches are real (inputs small enough that the GPU keeps up). Each
figure is the fastest of --repeat runs of --calls calls (the paths taking turns).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from launcher_overhead import CASES, cluster_launchers, per_call_us  # noqa: E402

from fusion_core.codegen import operators  # noqa: E402


def _interleaved(paths: dict, calls: int, repeat: int) -> dict[str, float]:
    """Fastest run's µs per call of each path (a shared host only adds time), the paths
    taking turns (a loaded host drifts)."""
    runs: dict[str, list[float]] = {k: [] for k in paths}
    for _ in range(repeat):
        for k, fn in paths.items():
            runs[k].append(per_call_us(fn, calls, 1))
    return {k: min(v) for k, v in runs.items()}


def run_case(label: str, path: str, shape, dtype, work: Path, calls: int, repeat: int,
             device: str) -> list[tuple]:
    namespace = f"op_dispatch_{uuid.uuid4().hex[:8]}"
    rows = []
    for cluster, kernel, module, given in cluster_launchers(label, path, shape, dtype, work,
                                                            stub=device == "cpu"):
        inputs = tuple(t.to(device) for t in given)
        if not inputs:
            continue
        launch = getattr(module, kernel.name)
        out = launch(*inputs)
        results = len(out) if isinstance(out, tuple) else 1
        name = f"cluster{cluster.index}"
        entry = operators._register(namespace, name, module, kernel.name, results,
                                        tuple(t.dtype for t in inputs))
        paths = {"launcher": lambda launch=launch, inputs=inputs: launch(*inputs),
                 "name": lambda entry=entry, inputs=inputs: entry(*inputs),
                 "operator": lambda op=entry.operator, inputs=inputs: op(*inputs)}
        with torch.no_grad():
            for fn in paths.values():
                fn()  # warm: plans, configurations, direct launchers kept
            us = _interleaved(paths, calls, repeat)
            if device == "cuda":
                torch.cuda.synchronize()
        rows.append((label, cluster.index, cluster.chain, us))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--cases", default="", help="comma-separated prefixes of the case labels")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    wanted = [c for c in args.cases.split(",") if c]
    cases = [c for c in CASES if not wanted or any(c[0].startswith(w) for w in wanted)]
    print(f"torch {torch.__version__}, {device} "
          f"({'real launches' if device == 'cuda' else 'kernel stubbed'}); µs per warm call")
    print(f"{'case':22} {'cluster':28} {'launcher':>9} {'name':>9} {'operator':>9} {'dispatch':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            for label, index, chain, us in run_case(*case, Path(tmp), args.calls, args.repeat,
                                                     device):
                what = f"{index}: {chain}"[:28]
                print(f"{label:22} {what:28} {us['launcher']:9.2f} {us['name']:9.2f} "
                      f"{us['operator']:9.2f} {us['operator'] - us['launcher']:9.2f}")


if __name__ == "__main__":
    main()
