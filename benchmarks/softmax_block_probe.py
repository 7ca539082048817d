"""What makes a one-block float32 softmax slower than Liger-Kernel's, on a GPU: the generated
kernel for softmax(x/8) over 1024 x 32000 and 1024 x 32768 against hand-written one-block
kernels that each differ from it in one respect, and against Liger's own kernel.

Run on a CUDA machine from the repository root (Liger-Kernel importable, as the shapes panel
has it):

    PYTHONPATH=. python benchmarks/softmax_block_probe.py

The shapes panel measured the generated kernel at 1.04-1.05x Liger's softmax on these rows
(both one block of 32 warps per row, 90% of a copy). The variants here, all one row per
program, 32 warps, a block of 32768 columns, each checked against torch:

- ``generated``: the kernel the user gets (its own per-shape choice).
- ``same, by hand``: the generated kernel's structure written out: a [1, BLOCK] row, the
  scale, tail lanes set to -inf with ``tl.where``, a NaN-keeping max, 32-bit row offsets.
- ``1-D``: the same in a 1-D block (Liger's shape of the computation).
- ``other=-inf``: tail lanes from the load's ``other`` (the scale keeps -inf), no ``where``.
- ``tl.max``: the plain max instead of the NaN-keeping combine.
- ``int64 rows``: 64-bit row offsets (Liger's ``program_id(0).to(tl.int64)``).
- ``.cs store``: the store streams (Liger's ``cache_modifier=".cs"``).
- ``Liger's structure + scale``: all of the above together.
- ``Liger``: Liger's kernel on the scaled input (the panel's Liger column leaves the scale
  out: the same bytes).

Prints device µs (CUDA-graph replays over input copies past the L2, as the panel times) and
each variant over the generated kernel. Its first run (H100, 2026-12-06) found the generated
kernel 5% slower than ``same, by hand``, which differed only in having no row mask: since then
the generator lets Triton drop it at one row a program (``emit._ROW_MASK``).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import fusion_core.codegen  # noqa: E402,I001,F401  (first: the interpreter before triton loads)
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from fusion_core.codegen import generate, load_kernel, write_kernels  # noqa: E402
from fusion_core.codegen.reference import capture_values, cluster_inputs  # noqa: E402
from fusion_core.pipeline import analyze  # noqa: E402
from gpu_clusters import copy_us, graph_us, rotating  # noqa: E402
from panel_cases import CASES  # noqa: E402
from shapes_panel import build, fused_cluster  # noqa: E402

BLOCK, WARPS, SCALE = 32768, 32, 0.125
LABELS = ("softmax(x/8) 1024x32000", "softmax(x/8) 1024x32768")


@triton.jit
def _nan_max(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _variant(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr, ONE_D: tl.constexpr,
             OTHER_INF: tl.constexpr, PLAIN_MAX: tl.constexpr, ROWS64: tl.constexpr,
             STREAM: tl.constexpr, AXIS: tl.constexpr):
    row = tl.program_id(0)
    if ROWS64:
        row = row.to(tl.int64)
    if ONE_D:
        cols = tl.arange(0, BLOCK)
    else:
        cols = tl.arange(0, BLOCK)[None, :]
    mask = cols < n_cols
    ptrs = row * n_cols + cols
    if OTHER_INF:
        x = tl.load(x_ptr + ptrs, mask=mask, other=-float("inf")) * 0.125
    else:
        x = tl.where(mask, tl.load(x_ptr + ptrs, mask=mask) * 0.125, -float("inf"))
    if PLAIN_MAX:
        m = tl.max(x, axis=AXIS, keep_dims=True)
    else:
        m = tl.reduce(x, AXIS, _nan_max, keep_dims=True)
    e = tl.exp(x - m)
    y = e / tl.sum(e, axis=AXIS, keep_dims=True)
    if STREAM:
        tl.store(y_ptr + ptrs, y, mask=mask, cache_modifier=".cs")
    else:
        tl.store(y_ptr + ptrs, y, mask=mask)


PLAIN = {"ONE_D": False, "OTHER_INF": False, "PLAIN_MAX": False, "ROWS64": False,
         "STREAM": False}
VARIANTS = {
    "same, by hand": {},
    "1-D": {"ONE_D": True},
    "other=-inf": {"OTHER_INF": True},
    "tl.max": {"PLAIN_MAX": True},
    "int64 rows": {"ROWS64": True},
    ".cs store": {"STREAM": True},
    "Liger's structure + scale": {k: True for k in PLAIN},
}


def by_hand(flags: dict, block: int = BLOCK, warps: int = WARPS):
    """A launcher of `_variant` with `flags` over PLAIN's: one row a program."""
    flags = {**PLAIN, **flags}

    def launch(x):
        y = torch.empty_like(x)
        _variant[(x.shape[0],)](x, y, x.shape[1], BLOCK=block, num_warps=warps,
                                AXIS=0 if flags["ONE_D"] else 1, **flags)
        return y
    return launch


def probe(case, l2_bytes: int, work: Path) -> list[str]:
    gen = torch.Generator().manual_seed(0)
    module, model_inputs = build(case, False, "cuda", gen)
    analysis = analyze(module, *model_inputs)
    cluster, why = fused_cluster(analysis)
    if cluster is None:
        return [f"| {case.label} | not fused: {why} |"]
    kernel = generate(analysis, cluster, None)
    launcher = getattr(load_kernel(write_kernels([kernel], work)[0]), kernel.name)
    values = capture_values(analysis, *model_inputs)
    (x,) = cluster_inputs(analysis, cluster, values, torch.Generator("cuda").manual_seed(1))
    want = torch.softmax(x * SCALE, -1)
    sets = rotating((x,), l2_bytes)
    copy = copy_us(2 * x.numel() * x.element_size(), l2_bytes)
    rows = []

    def row(label: str, fn, sets_) -> float:
        ok = torch.allclose(fn(*sets_[0]), torch.softmax(sets_[0][0] * SCALE, -1),
                            rtol=1e-5, atol=1e-6)
        us = graph_us(fn, sets_)
        rows.append((label, us, ok))
        return us

    base = row("generated " + str(list(launcher.__globals__["CHOSEN"].values())), launcher,
               sets)
    assert torch.allclose(launcher(x), want, rtol=1e-5, atol=1e-6)
    for label, flags in VARIANTS.items():
        row(label, by_hand(flags), sets)
    try:
        from liger_kernel.ops.softmax import LigerSoftmaxFunction
    except ImportError:
        LigerSoftmaxFunction = None  # noqa: N806
    if LigerSoftmaxFunction is not None:  # on inputs scaled beforehand: the scale untimed
        scaled = [(s[0] * SCALE,) for s in sets]
        rows.append(("Liger (input scaled beforehand)",
                     graph_us(lambda s: LigerSoftmaxFunction.apply(s), scaled),
                     torch.allclose(LigerSoftmaxFunction.apply(x * SCALE), want,
                                    rtol=1e-5, atol=1e-6)))
    return [f"| {case.label} | {label} | {us:.1f} | {us / base:.3f} | {copy / us:.0%} | "
            f"{'ok' if ok else 'DIFFERS'} |" for label, us, ok in rows]


def main() -> int:
    if not torch.cuda.is_available():
        sys.exit("softmax_block_probe.py times kernels on a CUDA GPU")
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    print("| case | kernel | device µs | over generated | % of copy | numerics |")
    print("|---|---|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory(prefix="softmax-block-") as work:
        for i, label in enumerate(LABELS):
            case = next(c for c in CASES if c.label == label)
            for line in probe(case, l2_bytes, Path(work) / str(i)):
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
