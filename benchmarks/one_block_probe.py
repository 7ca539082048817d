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

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import fusion_core.codegen  # noqa: E402,I001,F401  (first: the interpreter before triton loads)
import torch  # noqa: E402

from fusion_core.codegen import Tuning, generate, load_kernel, write_kernels  # noqa: E402
from fusion_core.codegen.reference import capture_values, cluster_inputs, eager_cluster  # noqa: E402
from fusion_core.pipeline import analyze  # noqa: E402
from gpu_clusters import as_tuple, close, copy_us, graph_us, rotating  # noqa: E402
from panel_cases import CASES  # noqa: E402
from panel_timing import candidate_us  # noqa: E402
from shapes_panel import build, case_numbers, fused_cluster  # noqa: E402

DEFAULT_CASES = "9,33,32"  # layer_norm→gelu 1024x16384 bf16, layer_norm*2 2048x16384 bf16, fp16


def files(case, device: str, work: Path):
    """(label, kernel file, launcher name) of the default file and of the one-block file, and
    the cluster's inputs and eager function."""
    gen = torch.Generator().manual_seed(0)
    module, model_inputs = build(case, False, device, gen)
    analysis = analyze(module, *model_inputs)
    cluster, why = fused_cluster(analysis)
    if cluster is None:
        raise SystemExit(f"{case.label}: not one cluster ({why})")
    width = model_inputs[0].shape[-1]
    found = []
    for label, tuning in (("default", None), ("one block", Tuning(loop_above=width))):
        kernel = generate(analysis, cluster, tuning)
        path = write_kernels([kernel], work / label.replace(" ", "_"))[0]
        found.append((f"{label} ({'loop' if kernel.looped else 'one block'})", path, kernel.name))
    values = capture_values(analysis, *model_inputs)
    inputs = cluster_inputs(analysis, cluster, values, torch.Generator(device).manual_seed(1))
    return found, inputs, eager_cluster(analysis, cluster), cluster


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--list", action="store_true", help="the configurations, no timing")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() and not args.list else "cpu"
    if device == "cpu" and not args.list:
        sys.exit("one_block_probe.py times kernels on a CUDA GPU (--list runs without one)")
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size if device == "cuda" else 0
    with tempfile.TemporaryDirectory(prefix="one-block-") as work:
        for i, number in enumerate(case_numbers(args.cases)):
            case = CASES[number]
            found, inputs, eager, cluster = files(case, device, Path(work) / str(i))
            print(f"== {case.label} {str(case.dtype).removeprefix('torch.')}", flush=True)
            if args.list:
                for label, path, _ in found:
                    module = load_kernel(path)
                    print(f"   {label}: kind {module.KIND}, candidates {list(module.CANDIDATES)}")
                continue
            sets = rotating(inputs, l2_bytes)
            want = as_tuple(eager(*inputs))
            print(f"   copy {copy_us(cluster.traffic.fused_bytes, l2_bytes):.1f} µs")
            for label, path, name in found:
                user = getattr(load_kernel(path), name)
                ok, err = close(user(*inputs), want, case.dtype)  # tunes on CUDA
                chosen = list(user.__globals__["CHOSEN"].values())
                print(f"   {label}: the user gets {graph_us(user, sets):.1f} µs at {chosen}"
                      f" ({'ok' if ok else 'WRONG'}, max abs err {err:.3g})")
                for c in candidate_us(path, name, inputs, sets):
                    print(f"      {c['config']}: {c['us']:.1f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
