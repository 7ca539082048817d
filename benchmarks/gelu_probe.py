"""What the 16-bit GELU costs a fused LayerNorm→GELU kernel, by the form of its erfc, on a GPU.

Run on a CUDA machine from the repository root:

    PYTHONPATH=. python benchmarks/gelu_probe.py [--cases 9,6] [--list]

The panel's LayerNorm→GELU rows trail Liger-Kernel's LayerNorm alone (which moves the same
bytes and computes no GELU). The exact GELU of a 16-bit result (``codegen/half_gelu.py``) is a
polynomial and special-function instructions, which an SM issues at an eighth of its
arithmetic rate. For each case this times the kernel the user gets with:

- ``now``: the helper as generated (erfc(z)/2 as 2**P(|x|): one exp2, the -z², 1/√2 and
  log2(e) folded into P's coefficients);
- ``natural exp``: the form before it, exp(L(z) - z²) with z = |x|/√2 (the same fit; three
  more instructions an element);
- ``reciprocal``: the form it replaced, t·P(t)·exp(-z²) with t = 1/(1 + 0.418·z) (a reciprocal
  and an exp; relative error of erfc under 4e-6 in float32 for z <= 4.6);
- ``tanh.approx``: GELU's tanh form through the one-instruction tanh (timing only: its error
  is larger than a 16-bit rounding where x is far below 0; the cheapest GELU there is);
- ``no gelu``: the helper returning its input (timing only: the floor without a GELU).

Each kernel after its own per-shape tuning, CUDA-graph replays over inputs past the L2, as the
shapes panel times, with every candidate configuration; the exact ones checked against eager.
``--list`` prints the configurations, without a GPU. Compiled for sm_90 on the CPU (Triton 3.9,
8 warps, 4096 a step at 1024 x 16384 bf16), the kernel was 912 SASS instructions with 35 MUFU
in the reciprocal form; 904 and 19 in the one-exp form (``natural exp``); 856 and 19 in the
base-2 form (``now``, 2026-12-07); tanh.approx 752 and 19; no GELU (layer_norm*2) 640 and 3.
First run: RESULTS.md (H100, 2026-12-06), which made one exp the form generated.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import fusion_core.codegen  # noqa: E402,I001,F401  (first: the interpreter before triton loads)

from fusion_core.codegen import generate, half_gelu, write_kernels  # noqa: E402
from fusion_core.codegen.interpreted import FLAG  # noqa: E402
from fusion_core.ir.lowerings import GELU_HALF  # noqa: E402
from panel_timing import analysed_case, probe_case, run_probe  # noqa: E402

DEFAULT_CASES = "9,6"  # layer_norm→gelu 1024x16384 bf16, 4096x4096 fp16
# The form before (December 2026): erfc(z)/2 = t·P(t)·exp(-z²), t = 1/(1 + RECIPROCAL_P·z), P of
# degree 5 halved, constant term first
RECIPROCAL_P = 0.418
RECIPROCAL_COEFFICIENTS = (0.11906137317419052, 0.10455744713544846, 0.17110535502433777,
                           -0.06895487010478973, 0.2613724172115326, -0.08714212477207184)


def _natural_exp_lines() -> list[str]:
    """The helper generated from 10df3ad to 2026-12-07: the same fit through z = |x|/√2 and
    exp."""
    return ["@triton.jit", f"def {GELU_HALF}(x):",
            "    z = tl.abs(x) * 0.7071067811865476",
            f"    zc = tl.minimum(z, {half_gelu.Z_FIT!r})",
            f"    g = {half_gelu.log_half_erfc('zc')} - z * z",
            f"    if {FLAG}:",
            "        half_q = tl.exp(g)",
            "    else:",
            "        half_q = libdevice.fast_expf(g)",
            "    return x * tl.where(x >= 0, 1.0 - half_q, half_q)"]


def _reciprocal_lines() -> list[str]:
    expr = repr(RECIPROCAL_COEFFICIENTS[-1])
    for c in reversed(RECIPROCAL_COEFFICIENTS[:-1]):
        expr = f"({c!r} + t * {expr})"
    return ["@triton.jit", f"def {GELU_HALF}(x):",
            "    z = tl.abs(x) * 0.7071067811865476",
            f"    if {FLAG}:",
            f"        t = 1.0 / (1.0 + {RECIPROCAL_P!r} * z)",
            "        e = tl.exp(-z * z)",
            "    else:",
            f"        t = libdevice.fast_dividef(1.0, 1.0 + {RECIPROCAL_P!r} * z)",
            "        e = libdevice.fast_expf(-z * z)",
            f"    half_q = t * {expr} * e",
            "    return x * tl.where(x >= 0, 1.0 - half_q, half_q)"]


def _tanh_approx_lines() -> list[str]:
    """GELU's tanh form through the GPU's one-instruction tanh (timing only: its error is
    larger than a 16-bit rounding where x is far below 0)."""
    return ["@triton.jit", f"def {GELU_HALF}(x):",
            "    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)",
            f"    if {FLAG}:",
            "        t = 2.0 * tl.sigmoid(2.0 * u) - 1.0",
            "    else:",
            "        t = tl.inline_asm_elementwise('tanh.approx.f32 $0, $1;', '=r,r', [u],",
            "                                      dtype=tl.float32, is_pure=True, pack=1)",
            "    return 0.5 * x * (1.0 + t)"]


def _no_gelu_lines() -> list[str]:
    return ["@triton.jit", f"def {GELU_HALF}(x):", "    return x"]


VARIANTS = {"now": None, "natural exp": _natural_exp_lines, "reciprocal": _reciprocal_lines,
            "tanh.approx": _tanh_approx_lines, "no gelu": _no_gelu_lines}
TIMING_ONLY = ("tanh.approx", "no gelu")


def files(case, device: str, work: Path, tiny: bool = False):
    """(variant, kernel file, launcher name) per variant, the cluster's inputs, eager, cluster
    (`tiny`: at the case's tiny shapes)."""
    analysis, cluster, model_inputs = analysed_case(case, device, tiny)
    found, helpers = [], half_gelu.helpers
    try:
        for label, lines in VARIANTS.items():
            if lines is not None:
                half_gelu.helpers = lambda plan, lines=lines: (
                    lines() if half_gelu.called(plan) else [])
            kernel = generate(analysis, cluster, None)
            path = write_kernels([kernel], work / label.replace(" ", "_"))[0]
            found.append((label, path, kernel.name))
    finally:
        half_gelu.helpers = helpers
    return probe_case(found, analysis, cluster, model_inputs, device)


def main() -> int:
    return run_probe("gelu_probe.py", __doc__.splitlines()[0], DEFAULT_CASES, files, TIMING_ONLY)


if __name__ == "__main__":
    raise SystemExit(main())
