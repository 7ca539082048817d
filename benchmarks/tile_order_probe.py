"""The order a tiled kernel's programs walk the tiles, on a GPU: the generated kernel with its
programs taking row blocks first (the grid's first axis, which the hardware launches fastest,
takes the rows) against the same kernel with each program's linear place remapped so that
column blocks come first (the launcher and grid unchanged), and against Inductor, one short
run. A kernel reading a permuted view is generated columns first since 2026-12-07
(`emit.tile_order`); the probe forces each order.

Run on a CUDA machine from the repository root:

    PYTHONPATH=. python benchmarks/tile_order_probe.py [--cases 20,21]

Why: on the H100 panel of 2026-12-07 every tile shape of the NHWC -> NCHW add 64x96x56x56
fp32 took 80.7-86.1 µs and Inductor 78.0. Its kernel walks N x H x W tile by tile with the
channels first, so the programs in flight read a few whole images; ours, rows (N x C) first,
have all 64 images in flight, a few columns of each. Compiled for sm_90 the two issue the
same instructions a tile and load 16 bytes at a time (tools/panel_reasons.py).

For each case: every tiled candidate of both orders, and two tiles Inductor offers
(EXTRA_TILES), timed as the panel times (CUDA-graph replays over input copies past the L2),
each checked equal to the generated kernel's output, and torch.compile of the case's eager
ops. Prints one line a candidate (a tile that fails to compile: its error) and the best of
each order.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import fusion_core.codegen  # noqa: E402,I001,F401  (first: the interpreter before triton, for the CPU test)
import torch  # noqa: E402

from fusion_core.analysis.types import Cluster  # noqa: E402
from fusion_core.codegen import emit, generate, load_kernel, write_kernels  # noqa: E402
from fusion_core.codegen.reference import capture_values, cluster_inputs, eager_cluster  # noqa: E402
from fusion_core.pipeline import Analysis, analyze  # noqa: E402
from gpu_clusters import as_tuple, copy_us, graph_us, rotating  # noqa: E402
from panel_cases import CASES, Case  # noqa: E402
from panel_timing import candidate_us, pinned  # noqa: E402
from shapes_panel import build, case_numbers, fused_cluster  # noqa: E402

DEFAULT_CASES = "20,21"
# Tiles Inductor's pointwise heuristics offer for the NHWC -> NCHW add (128 rows x 32 columns
# and 16 x 256 in our orientation, 8 warps), timed beside the launcher's own candidates; they
# join choices.CANDIDATES["tiled"] only if they win.
EXTRA_TILES = ((4096, 32, 8), (4096, 256, 8))
ORDERS = ("rows first", "columns first")


def kernel_file(analysis: Analysis, cluster: Cluster, folder: Path,
                order: str) -> tuple[Path, str] | None:
    """The cluster's kernel file in `folder`, its programs taking tiles in `order`
    (`emit.TILE_ORDERS`), and its launcher's name; None when the kernel is not tiled."""
    plain = emit._tiled
    emit._tiled = functools.partial(plain, order=order)
    try:
        kernel = generate(analysis, cluster, None)
    finally:
        emit._tiled = plain
    if not kernel.tiled:
        return None
    return write_kernels([kernel], folder)[0], kernel.name


def probe(case: Case, l2_bytes: int, work: Path) -> list[str]:
    """One table line per candidate and order, then Inductor and each order's best."""
    gen = torch.Generator().manual_seed(0)
    module, model_inputs = build(case, False, "cuda", gen)
    analysis = analyze(module, *model_inputs)
    cluster, why = fused_cluster(analysis)
    label = f"{case.label} {str(case.dtype).removeprefix('torch.')}"
    if cluster is None:
        return [f"| {label} | not fused: {why} |"]
    values = capture_values(analysis, *model_inputs)
    inputs = cluster_inputs(analysis, cluster, values, torch.Generator("cuda").manual_seed(1))
    sets = rotating(inputs, l2_bytes)
    lines, best = [], {}
    want = None
    for order in ORDERS:
        made = kernel_file(analysis, cluster, work / order.replace(" ", "_"), order)
        if made is None:
            return [f"| {label} | not a tiled kernel |"]
        path, name = made
        tiles = load_kernel(path).CANDIDATES + EXTRA_TILES
        for c in candidate_us(path, name, inputs, sets, tiles):
            if "error" in c:  # one tile that does not compile is that tile's line only
                lines.append(f"| {label} | {order} | {c['config']} | failed: {c['error']} |")
                continue
            got = as_tuple(pinned(path, name, inputs, c["config"], tiles)(*inputs))
            want = want if want is not None else got
            same = all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
            lines.append(f"| {label} | {order} | {c['config']} | {c['us']:.1f} |"
                         f"{'' if same else ' DIFFERS'}")
            if c["us"] < best.get(order, (float("inf"),))[0]:
                best[order] = (c["us"], c["config"])
    torch._dynamo.reset()
    compiled = torch.compile(eager_cluster(analysis, cluster))
    compiled(*inputs)
    ind = graph_us(compiled, sets)
    copy = copy_us(cluster.traffic.fused_bytes, l2_bytes)
    lines.append(f"| {label} | Inductor | - | {ind:.1f} |")
    lines += [f"| {label} | best {order} | {config} | {us:.1f} ({us / ind:.3f}x Inductor; "
              f"copy {copy:.1f}) |" for order, (us, config) in best.items()]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=DEFAULT_CASES)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("tile_order_probe.py times kernels on a CUDA GPU")
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    print("| case | order | config (cols, rows, warps) | µs |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="tile-order-") as work:
        for i, number in enumerate(case_numbers(args.cases)):
            for line in probe(CASES[number], l2_bytes, Path(work) / str(i)):
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
