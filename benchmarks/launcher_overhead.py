"""Host (Python) time of the generated launchers, per call, with the kernel launch stubbed out.

    python benchmarks/launcher_overhead.py [--calls 2000] [--repeat 7]

For ExampleNet, microgpt, the Mixer and the ConvNeXt block at small shapes it analyzes the model,
generates and loads every cluster's file, and replaces the module's ``@triton.jit``
kernel with a stub whose ``[grid]`` returns a no-op, so only the launcher's own Python
work is timed (key, checks, output allocation, argument packing), on CPU tensors.

Two numbers per cluster, in the same process: "cold" clears the launcher's plan cache
(``LAUNCH_CACHE``) before every call, i.e. every call redoes the shape, stride and grid
work as the launcher did before the cache; "warm" keeps it. For files generated before
the cache existed (no ``LAUNCH_CACHE``), both columns time the plain launcher. Each figure
is the median over --repeat runs of --calls calls. This is CPU time of the Python side
only: Triton's own dispatch and the CUDA launch are not in it.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fusion_core.codegen import generate, load_kernel, write_kernels  # noqa: E402
from fusion_core.codegen.reference import capture_values, cluster_inputs  # noqa: E402
from fusion_core.ir.shapes import InputSpec  # noqa: E402
from fusion_core.pipeline import analyze_file  # noqa: E402

CASES = [
    ("ExampleNet 8x1024", "examples/example_net.py", (8, 1024), torch.float32),
    ("microgpt 2x32", "examples/microgpt.py", (2, 32), torch.int64),
    ("Mixer 2x64x128", "examples/mixer_block.py", (2, 64, 128), torch.float32),
    # Its clusters read inputs through views (permutes of NCHW values, the layer scale).
    ("ConvNeXt 2x32x8x8", "examples/convnext_block.py", (2, 32, 8, 8), torch.float32),
]


class _NoLaunch:
    """Stands in for the jitted kernel: `kernel[grid](...)` does nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def per_call_us(fn, calls: int, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter_ns() - start) / calls / 1e3)
    return statistics.median(runs)


def model_inputs(spec: InputSpec, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    if spec.dtype.is_floating_point:
        return (torch.randn(spec.shape, generator=gen).to(spec.dtype),)
    return (torch.randint(0, 256, spec.shape, generator=gen, dtype=spec.dtype),)


def run_case(label: str, path: str, shape, dtype, work: Path, calls: int, repeat: int):
    spec = InputSpec(shape, dtype)
    analysis = analyze_file(ROOT / path, [spec])
    gen = torch.Generator().manual_seed(0)
    values = capture_values(analysis, *model_inputs(spec, gen))
    rows = []
    for cluster in analysis.clusters:
        kernel = generate(analysis, cluster)
        folder = work / f"{label.split()[0]}{cluster.index}"
        module = load_kernel(write_kernels([kernel], folder)[0])
        setattr(module, f"{kernel.name}_kernel", _NoLaunch())
        launch = getattr(module, kernel.name)
        inputs = cluster_inputs(analysis, cluster, values, gen)
        cache = getattr(module, "LAUNCH_CACHE", None)

        def cold(launch=launch, inputs=inputs, cache=cache):
            if cache is not None:
                cache.clear()
            launch(*inputs)

        def warm(launch=launch, inputs=inputs):
            launch(*inputs)

        warm()  # the first call of the process pays one-time costs (torch's lazy paths)
        rows.append((label, cluster.index, cluster.chain, len(cluster.inputs),
                     per_call_us(cold, calls, repeat), per_call_us(warm, calls, repeat),
                     cache is not None))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{datetime.datetime.now(datetime.UTC).isoformat(timespec='minutes')}  "
          f"{platform.processor() or platform.machine()}  Python {platform.python_version()}  "
          f"torch {torch.__version__}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            rows += run_case(*case, Path(tmp), args.calls, args.repeat)
    cached = all(r[-1] for r in rows)
    print("| case | # | cluster | inputs | cold µs/call | warm µs/call | cold/warm |")
    print("|---|---|---|---|---|---|---|")
    for label, index, chain, n_in, cold, warm, _ in rows:
        print(f"| {label} | {index} | {chain} | {n_in} | {cold:.1f} | {warm:.1f} | "
              f"{cold / warm:.1f}× |")
    if not cached:
        print("(no LAUNCH_CACHE in these launchers: cold and warm both time the plain launcher)")


if __name__ == "__main__":
    main()
