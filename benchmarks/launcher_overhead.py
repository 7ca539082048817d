"""Host time of the generated launchers per call: stubbed on CPU, every launch path on CUDA.

    python benchmarks/launcher_overhead.py [--calls 2000] [--repeat 7] [--cases ExampleNet,Mixer]

For ExampleNet, microgpt, the Mixer and the ConvNeXt block at small shapes it analyzes the model,
generates and loads every cluster's file, then prints two tables.

1. CPU, kernel stubbed out (always): the module's ``@triton.jit`` kernel is replaced with a
   stub whose ``[grid]`` returns a no-op, so only the launcher's own Python work is timed
   (key, checks, output allocation, argument packing), on CPU tensors. "cold" clears the plan
   cache (``LAUNCH_CACHE``) before every call, "warm" keeps it.
2. CUDA, real launches (needs a CUDA GPU; without one it says so and stops): host time per
   warm call, on the same inputs, of
   * ``ours``: the generated launcher (plan lookup, output allocation, direct launch);
   * ``via Triton``: the same launcher with its direct launchers switched off (plan lookup,
     output allocation, ``kernel[grid](...)``), i.e. the launcher before direct launches;
   * ``kernel[grid]``: the kernel called through Triton with the launcher's last arguments
     (no allocation, no plan);
   * ``compiled[grid]``: the ``CompiledKernel`` that call returned, through its own runner;
   * ``.run``: ``CompiledKernel.run`` called as ``JITFunction.run`` calls it (stream looked up
     per call, no launch metadata, no hooks): the floor of Triton's Python launch path;
   * ``C++ launch``: the same compiled kernel through torch's C++ launcher (Inductor's static
     launcher), stream looked up per call. Measured on the H200 (torch 2.11, triton 3.6) it
     was no faster than ``.run`` (5.2-10.3 against 5.8-9.1 µs), so ``ours`` does not use it;
   * ``Inductor``: ``torch.compile`` of the cluster's eager region (its eager op count in the
     ``ops`` column): Dynamo's guards, Inductor's allocations and its launcher(s), per call;
   * ``eager op``: one eager aten op of the kernel's arity on its first input, output
     allocated as ours: relu, add, addcmul, and past three operands ``cat`` of that many
     (the aten op that takes any number of tensors);
   * ``empty``: allocating the launcher's outputs alone (``torch.empty_strided``, as ours
     does through Triton; its direct launches allocate with Inductor's C++ allocator,
     ``_empty_strided_cuda``), which ``ours`` and ``eager op`` include and the direct rows
     do not.
   Inputs are small so the GPU keeps up with the host: a row whose final synchronize waited
   more than a tenth of its loop is marked ``*`` (device-bound: it times the GPU, not the
   host). A split-rows plan with several launches per call has no direct rows.

Each figure is the median over --repeat runs of --calls calls.
"""

from __future__ import annotations

import argparse
import datetime
import os
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
from fusion_core.codegen.reference import capture_values, cluster_inputs, graph_on  # noqa: E402
from fusion_core.ir.shapes import InputSpec  # noqa: E402
from fusion_core.ir.subgraph import eager_subgraph  # noqa: E402
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


def cluster_launchers(label: str, path: str, shape, dtype, work: Path, stub: bool = True):
    """(cluster, kernel, its loaded module, the cluster's inputs) for each cluster of the case's
    model, its kernel launch replaced by `_NoLaunch` where `stub` (host time alone)."""
    spec = InputSpec(shape, dtype)
    analysis = analyze_file(ROOT / path, [spec])
    gen = torch.Generator().manual_seed(0)
    values = capture_values(analysis, *model_inputs(spec, gen))
    for cluster in analysis.clusters:
        kernel = generate(analysis, cluster)
        folder = work / f"{label.split()[0]}{cluster.index}"
        module = load_kernel(write_kernels([kernel], folder)[0])
        if stub:
            setattr(module, f"{kernel.name}_kernel", _NoLaunch())
        yield cluster, kernel, module, cluster_inputs(analysis, cluster, values, gen)


def run_case(label: str, path: str, shape, dtype, work: Path, calls: int, repeat: int):
    rows = []
    for cluster, kernel, module, inputs in cluster_launchers(label, path, shape, dtype, work):
        launch = getattr(module, kernel.name)
        cache = getattr(module, "LAUNCH_CACHE", None)

        direct = getattr(module, "DIRECT_LAUNCH", {})

        def cold(launch=launch, inputs=inputs, cache=cache, direct=direct):
            if cache is not None:
                cache.clear()
                direct.clear()
            launch(*inputs)

        def warm(launch=launch, inputs=inputs):
            launch(*inputs)

        warm()  # the first call of the process pays one-time costs (torch's lazy paths)
        rows.append((label, cluster.index, cluster.chain, len(cluster.inputs),
                     per_call_us(cold, calls, repeat), per_call_us(warm, calls, repeat),
                     cache is not None))
    return rows


# --- CUDA: every launch path, real launches ------------------------------------------------


class _Spy:
    """Stands in for the jitted kernel and passes every launch on: keeps the last launch's
    grid, arguments and the CompiledKernel Triton returned, and counts launches."""

    def __init__(self, kernel) -> None:
        self.kernel, self.launches, self.last = kernel, 0, None

    def __getattr__(self, name):  # arg_names and the rest, as the kernel has them
        return getattr(self.kernel, name)

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches += 1
            compiled = self.kernel[grid](*args, **kwargs)
            self.last = (grid, args, kwargs, compiled)
            return compiled

        return launch


def host_us(fn, calls: int, repeat: int) -> tuple[float, bool]:
    """Median host µs per call of `fn`, and whether the device fell behind (the final
    synchronize waited more than a tenth of the loop: the figure is then device time)."""
    runs, behind = [], False
    torch.cuda.synchronize()
    for _ in range(repeat):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        queued = time.perf_counter_ns()
        torch.cuda.synchronize()
        waited = time.perf_counter_ns() - queued
        behind |= waited > (queued - start) / 10
        runs.append((queued - start) / calls / 1e3)
    return statistics.median(runs), behind


def _eager_op(inputs: tuple[torch.Tensor, ...]):
    """One eager aten op with as many tensor operands as the kernel has inputs, on its first
    input (the dispatch cost depends on the arity, not on the shape): past three, `cat`."""
    a = next((t for t in inputs if isinstance(t, torch.Tensor)), None)
    if a is None:  # a kernel without tensor inputs: a one-element tensor
        a = torch.ones(1, device="cuda")
    arity = len(inputs)
    if arity <= 1:
        return lambda: torch.relu(a)
    if arity == 2:
        return lambda: torch.add(a, a)
    if arity == 3:
        return lambda: torch.addcmul(a, a, a)
    operands = (a.reshape(-1),) * arity  # cat takes no 0-dim tensor
    return lambda: torch.cat(operands)


def _inductor(analysis, cluster, inputs):
    """torch.compile of the cluster's eager region on CUDA, compiled by a first call; and the
    region's eager op count."""
    sub = eager_subgraph(analysis.graph_module, cluster)
    region = graph_on(sub.module, "cuda")
    ops = sum(n.op in ("call_function", "call_method", "call_module") for n in region.graph.nodes)
    if sub.extras:  # reads a value that is not among the cluster's inputs: no region to run
        return None, ops
    compiled = torch.compile(region)
    with torch.no_grad():
        compiled(*inputs)
    return (lambda: compiled(*inputs)), ops


def gpu_case(label: str, path: str, shape, dtype, work: Path, calls: int, repeat: int):
    spec = InputSpec(shape, dtype)
    analysis = analyze_file(ROOT / path, [spec])
    gen = torch.Generator().manual_seed(0)
    values = capture_values(analysis, *model_inputs(spec, gen))
    rows = []
    for cluster in analysis.clusters:
        kernel = generate(analysis, cluster)
        folder = work / f"gpu{label.split()[0]}{cluster.index}"
        module = load_kernel(write_kernels([kernel], folder)[0])
        inputs = tuple(t.to("cuda") if isinstance(t, torch.Tensor) else t
                       for t in cluster_inputs(analysis, cluster, values, gen))
        ops, direct, times = _gpu_cluster(analysis, cluster, module, kernel.name, inputs,
                                          calls, repeat)
        rows.append((label, cluster.index, cluster.chain, len(inputs), ops, direct, times))
    return rows


def _gpu_cluster(analysis, cluster, module, name: str, inputs, calls: int, repeat: int):
    """(eager ops of the region, whether warm calls launched directly, {row: host_us})."""
    real = getattr(module, f"{name}_kernel")
    spy = _Spy(real)
    setattr(module, f"{name}_kernel", spy)
    launch = getattr(module, name)
    launch(*inputs)  # chooses the bucket's configuration (timed), keeps the direct launcher
    result = launch(*inputs)
    outputs = result if isinstance(result, tuple) else (result,)
    before = spy.launches
    launch(*inputs)
    kept = dict(module.DIRECT_LAUNCH)
    # an entry is (guard, scalar values, plan, direct launch or None): `direct_launch._entry`
    direct = spy.launches == before and any(e and e[3] is not None for e in kept.values())
    module.DIRECT_LAUNCH.update(dict.fromkeys(kept, False))  # Triton's path, as before
    before = spy.last, spy.launches
    launch(*inputs)
    one_launch = spy.launches - before[1] == 1  # split rows launch other kernels
    triton_call = spy.last
    setattr(module, f"{name}_kernel", real)  # the spy's own Python is in no figure
    times = {"via Triton": host_us(lambda: launch(*inputs), calls, repeat)}
    module.DIRECT_LAUNCH.update(kept)
    times["ours"] = host_us(lambda: launch(*inputs), calls, repeat)
    compiled = triton_call[3] if one_launch else None
    if callable(getattr(type(compiled), "__getitem__", None)):  # a CompiledKernel
        grid, args, kwargs, _ = triton_call
        times["kernel[grid]"] = host_us(lambda: real[grid](*args, **kwargs), calls, repeat)
        bound = (*args, *(kwargs[n] for n in real.arg_names[len(args):]))
        grid3 = (*grid, 1, 1)[:3] if isinstance(grid, tuple) else (grid, 1, 1)
        runner = compiled[grid3]  # CompiledKernel's runner reads three grid dims
        times["compiled[grid]"] = host_us(lambda: runner(*bound), calls, repeat)
        times[".run"] = host_us(_raw_run(compiled, grid3, bound), calls, repeat)
        if (launch_cxx := _cxx_launch(compiled, grid3, bound)) is not None:
            times["C++ launch"] = host_us(launch_cxx, calls, repeat)
    compiled_region, ops = _inductor(analysis, cluster, inputs)
    if compiled_region is not None:
        times["Inductor"] = host_us(compiled_region, calls, repeat)
    times["eager op"] = host_us(_eager_op(inputs), calls, repeat)
    empties = [(o.shape, o.stride(), o.dtype) for o in outputs]
    times["empty"] = host_us(lambda: [torch.empty_strided(s, st, dtype=d, device="cuda")
                                      for s, st, d in empties], calls, repeat)
    return ops, direct, times


def _raw_run(compiled, grid, bound):
    """`CompiledKernel.run` called the way `JITFunction.run` calls it, minus hooks."""
    import triton

    driver = triton.runtime.driver.active
    device = driver.get_current_device()
    run, function, metadata = compiled.run, compiled.function, compiled.packed_metadata
    g0, g1, g2 = (*grid, 1, 1)[:3]
    stream = driver.get_current_stream
    return lambda: run(g0, g1, g2, stream(device), function, metadata, None, None, None, *bound)


def _cxx_launch(compiled, grid, bound):
    """A launch of `compiled` with `bound` through torch's C++ launcher (Inductor's static
    launcher: the cubin loaded once, constexprs and specialized constants dropped, a None per
    scratch buffer), stream looked up per call; None where this torch cannot take it."""
    import os
    import tempfile

    import triton

    if torch.version.hip is not None or not hasattr(torch._C, "_StaticCudaLauncher"):
        return None
    try:
        try:  # named so since torch 2.12
            import torch._inductor.runtime.static_triton_launcher as launchers
        except ImportError:
            import torch._inductor.runtime.static_cuda_launcher as launchers
        if not hasattr(compiled, "_cubin_path"):
            compiled._cubin_path = None  # Inductor's attribute: None loads the cubin held
        static = launchers.StaticallyLaunchedCudaKernel(compiled)
        driver = triton.runtime.driver.active
        device = driver.get_current_device()
        with tempfile.TemporaryDirectory() as folder:
            static.reload_cubin_from_raw(os.path.join(folder, "kernel.cubin"))
            static.load_kernel(device)
        names = list(compiled.src.fn.arg_names)

        def index(key):  # a parameter's name, its index, or a 1-tuple of either
            key = key[0] if isinstance(key, tuple) else key
            return names.index(key) if isinstance(key, str) else key

        types = {index(k): t for k, t in compiled.src.signature.items()}
        dropped = {index(k) for k in getattr(compiled.src, "constants", {})}
        kept = [i for i in sorted(types) if types[i] != "constexpr" and i not in dropped]
        scratch = (None,) * (bool(getattr(static, "has_global_scratch", False))
                             + bool(getattr(static, "has_profile_scratch", False)))
        args = (*(bound[i] for i in kept), *scratch)
        arg_types = static.arg_tys + "O" * len(scratch)
        launch_kernel = static.C_impl._launch_kernel
    except Exception as e:  # noqa: BLE001 - a row left empty, with the reason said
        print(f"(C++ launch not timed: {type(e).__name__}: {e})")
        return None
    g0, g1, g2 = grid
    stream, function = driver.get_current_stream, static.function
    warps, shared = static.num_warps, static.shared

    def launch():
        launch_kernel(function, g0, g1, g2, warps, shared, arg_types, args, stream(device))

    launch.static = static  # owns the loaded module
    return launch


GPU_COLUMNS = ("ours", "via Triton", "kernel[grid]", "compiled[grid]", ".run", "C++ launch",
               "Inductor", "eager op", "empty")


def print_gpu(rows) -> None:
    import triton

    print(f"\nCUDA: {torch.cuda.get_device_name()}  triton {triton.__version__}  "
          "host µs per warm call (* device-bound)")
    print("| case | # | cluster | inputs | ops | direct | " + " | ".join(GPU_COLUMNS)
          + " | ours − fastest launch − empty |")
    print("|---|---|---|---|---|---|" + "---|" * (len(GPU_COLUMNS) + 1))
    for label, index, chain, n_in, ops, direct, times in rows:
        cells = [f"{times[c][0]:.1f}{'*' if times[c][1] else ''}" if c in times else "–"
                 for c in GPU_COLUMNS]
        floors = [times[c][0] for c in (".run", "C++ launch") if c in times]
        gap = (f"{times['ours'][0] - min(floors) - times['empty'][0]:+.1f}" if floors else "–")
        print(f"| {label} | {index} | {chain} | {n_in} | {ops} | {'yes' if direct else 'no'} | "
              + " | ".join(cells) + f" | {gap} |")
    print("ours includes the output allocation (`empty`); the goal is ours within 1.5 µs of the "
          "fastest launch (.run or C++) plus empty, and no more than `eager op`.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--cases", default="",
                        help="comma-separated case names to run (first word: ExampleNet, ...)")
    args = parser.parse_args()
    wanted = {c for c in args.cases.split(",") if c}
    cases = [c for c in CASES if not wanted or c[0].split()[0] in wanted]
    if wanted - {c[0].split()[0] for c in CASES}:
        parser.error(f"unknown case in --cases {args.cases!r}; known: "
                     + ", ".join(c[0].split()[0] for c in CASES))
    torch.set_num_threads(1)
    print(f"{datetime.datetime.now(datetime.UTC).isoformat(timespec='minutes')}  "
          f"{platform.processor() or platform.machine()}  Python {platform.python_version()}  "
          f"torch {torch.__version__}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            rows += run_case(*case, Path(tmp), args.calls, args.repeat)
        cached = all(r[-1] for r in rows)
        print("CPU, kernel stubbed out: the launcher's own Python work")
        print("| case | # | cluster | inputs | cold µs/call | warm µs/call | cold/warm |")
        print("|---|---|---|---|---|---|---|")
        for label, index, chain, n_in, cold, warm, _ in rows:
            print(f"| {label} | {index} | {chain} | {n_in} | {cold:.1f} | {warm:.1f} | "
                  f"{cold / warm:.1f}× |")
        if not cached:
            print("(no LAUNCH_CACHE in these launchers: cold and warm both time the plain "
                  "launcher)")
        if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET", "0") == "1":
            print("\nThe launch-path comparison (ours, Triton, the compiled kernel, Inductor, an "
                  "eager op) needs a CUDA GPU without TRITON_INTERPRET=1: skipped here.")
            return
        gpu_rows = []
        with torch.no_grad():  # the launchers are inference only; Inductor's guards see it
            for case in cases:
                gpu_rows += gpu_case(*case, Path(tmp), args.calls, args.repeat)
        print_gpu(gpu_rows)


if __name__ == "__main__":
    main()
