"""A NaN goes through a fused max or min reduction as it goes through eager: amax, amin and
`max(dim).values` give NaN for a row holding one, and softmax / log_softmax give a row of NaN,
in every kernel kind (one block per row, rows looping over column blocks, rows split over
programs). Triton's tl.max / tl.min skip NaN, so such a row came out as its largest (smallest)
other value. Rows of -inf (masked attention) and of inf keep their eager results: no NaN where
eager has none. Compiled, the reduction's combine must be the NaN-keeping `arith.maximumf`."""

import pytest
import torch
import torch.nn.functional as F
from codegen_harness import (
    DEVICE,
    Lambda,
    compile_for_gpu,
    compiled_ir,
    poison_empty,
    to_device,
)

from fusion_core.codegen import Tuning, generate, load_kernel, write_kernels
from fusion_core.codegen.reference import capture_values, eager_cluster
from fusion_core.pipeline import analyze

NAN, INF = float("nan"), float("inf")
# Rows of 256 columns in one block; wider ones loop (never split) or split four ways.
ONE_BLOCK = Tuning()
LOOPED = Tuning(max_block=256, loop_block=256, split_min_cols=1 << 30)
SPLIT = Tuning(max_block=256, loop_block=256, split_min_cols=1024)
DTYPES = [torch.float32, torch.bfloat16]

COLLAPSE = {  # (model, the dim each row runs along)
    "amax-last": (lambda m, x: torch.amax(x * 1.0, -1), -1),
    "amin-last": (lambda m, x: torch.amin(x * 1.0, -1), -1),
    "max.values-last": (lambda m, x: (x * 1.0).max(-1).values, -1),
    "amax-dim0": (lambda m, x: torch.amax(x * 1.0, 0), 0),
    "min.values-dim0": (lambda m, x: (x * 1.0).min(0).values, 0),
    # a per-row max feeding every element: the kind that splits
    "x-amax": (lambda m, x: x - torch.amax(x * 2.0, -1, keepdim=True), -1),
    "x*amin": (lambda m, x: x * torch.amin(x + 1.0, -1, keepdim=True), -1),
}
SOFTMAX = {"softmax": lambda m, x: F.softmax(x * 1.0, dim=-1),
           "log_softmax": lambda m, x: F.log_softmax(x * 1.0, dim=-1)}


def _rows(n: int, dim: int, dtype: torch.dtype) -> torch.Tensor:
    """Six rows of `n` along `dim`: a NaN, all -inf, an inf, -inf and a NaN, plain, and half
    -inf (masked attention)."""
    torch.manual_seed(5)
    x = torch.randn(6, n)
    x[0, n // 3] = NAN  # inside the row, not its first block
    x[1] = -INF
    x[2, 1] = INF
    x[3, :] = -INF
    x[3, n - 1] = NAN  # in the last block
    x[5, n // 2:] = -INF
    x = x.to(dtype)
    return x if dim == -1 else x.t().contiguous()


def _run(fn, x: torch.Tensor, tuning: Tuning, tmp_path) -> tuple[torch.Tensor, torch.Tensor,
                                                                  object]:
    """The kernel's result and eager's on `x`, and the loaded module."""
    analysis = analyze(Lambda(fn), x)
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster, tuning)
    module = load_kernel(write_kernels([kernel], tmp_path)[0])
    poison_empty(module)
    module._timing_on = lambda device: False  # the heuristic's picks, also on CUDA
    values = capture_values(analysis, x)
    args = tuple(values[n] for n in cluster.inputs)
    (want,) = eager_cluster(analysis, cluster)(*args)
    got = getattr(module, kernel.name)(*map(to_device, args)).cpu()
    return got, want, module


def _splits(module) -> list[int | None]:
    return [c[3] if len(c) == 4 else None for c in module.CHOSEN.values()]


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", COLLAPSE)
def test_a_nan_row_reduces_to_nan_in_one_block(name, dtype, tmp_path):
    fn, dim = COLLAPSE[name]
    got, want, _ = _run(fn, _rows(40, dim, dtype), ONE_BLOCK, tmp_path)
    assert want.isnan().any()
    torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", [n for n, (_, dim) in COLLAPSE.items() if dim == -1])
def test_a_nan_row_reduces_to_nan_in_a_column_loop(name, dtype, tmp_path):
    """600 columns: blocks of 256, the last one partly masked; the NaN in the second block."""
    fn, _ = COLLAPSE[name]
    got, want, module = _run(fn, _rows(600, -1, dtype), LOOPED, tmp_path)
    assert _splits(module) in ([None], [1])  # looped (a per-row output never splits)
    assert module.CHOSEN and not any(c[0] >= 600 for c in module.CHOSEN.values())
    torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("name", ["x-amax", "x*amin"])
def test_a_nan_in_one_chunk_reaches_the_whole_split_row(name, tmp_path):
    """4096 columns in four chunks: the NaN's chunk has it, the merge of the chunks must
    keep it (row 0's NaN is in chunk 1, row 3's in chunk 3)."""
    fn, _ = COLLAPSE[name]
    got, want, module = _run(fn, _rows(4096, -1, torch.float32), SPLIT, tmp_path)
    assert _splits(module) == [4]
    torch.testing.assert_close(got, want, equal_nan=True)


KINDS = {"looped": (LOOPED, 600, 1), "split": (SPLIT, 4096, 4)}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", SOFTMAX)
def test_softmax_of_a_nan_row_is_nan_and_of_minus_inf_rows_as_eager(name, kind, tmp_path):
    """Rows 0 and 3 (a NaN) are NaN throughout, as in eager; row 1 (all -inf) is NaN in
    eager too; rows 2 (an inf), 4 and 5 (half -inf) keep eager's values, NaN where it has
    them. (In one block a NaN already reached the whole row through the sum of exp(x - max);
    a looping row's per-lane max skipped it.)"""
    tuning, width, splits = KINDS[kind]
    got, want, module = _run(SOFTMAX[name], _rows(width, -1, torch.float32), tuning, tmp_path)
    assert _splits(module) == [splits]
    assert want[0].isnan().all() and want[3].isnan().all() and not want[4:].isnan().any()
    assert got.isnan().eq(want.isnan()).all()
    torch.testing.assert_close(got, want, equal_nan=True)


def test_the_compiled_form_of_the_helpers_keeps_nan_too(tmp_path):
    """Under the interpreter the helpers reduce with tl.max and a NaN-making sum (a custom
    combine runs once per element in Python there); the compiled form, tl.reduce with a
    NaN-keeping combine, runs here too when the file's switch says so."""
    fn, _ = COLLAPSE["amax-last"]
    x = _rows(16, -1, torch.float32)
    analysis = analyze(Lambda(fn), x)
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster)
    module = load_kernel(write_kernels([kernel], tmp_path)[0])
    if DEVICE == "cpu":
        module._INTERPRETED = module.tl.constexpr(False)
    got = getattr(module, kernel.name)(to_device(x)).cpu()
    torch.testing.assert_close(got, torch.amax(x, -1), equal_nan=True)


COMPILED = [  # (model, tuning, width, jit function, the NaN-skipping op it must not hold)
    ("amax-last", ONE_BLOCK, 40, "kernel", "maxnumf"),
    ("amin-last", LOOPED, 600, "kernel", "minnumf"),
    ("softmax", LOOPED, 600, "kernel", "maxnumf"),
    ("x-amax", SPLIT, 4096, "partials", "maxnumf"),
    ("x*amin", SPLIT, 4096, "finish", "minnumf"),
    ("softmax", SPLIT, 4096, "finish", "maxnumf"),
]


def test_the_compiled_reductions_keep_nan(tmp_path):
    """Compiled for sm_90, each max (min) reduction's combine and lane merge is the
    NaN-keeping `arith.maximumf` (`minimumf`), never tl.max's `maxnumf` (`minnumf`): one
    block, a column loop, a split row's chunks and their merge."""
    jobs = []
    for i, (name, tuning, width, suffix, _) in enumerate(COMPILED):
        fn = SOFTMAX[name] if name in SOFTMAX else COLLAPSE[name][0]
        x = torch.randn(3, width)
        analysis = analyze(Lambda(fn), x)
        (cluster,) = analysis.clusters
        kernel = generate(analysis, cluster, tuning)
        values = capture_values(analysis, x)
        args = tuple(values[n] for n in cluster.inputs)
        jobs.append((kernel, tmp_path / str(i), args, suffix, {}, 4))
    for (name, _, _, suffix, skips), found in zip(COMPILED, compiled_ir(jobs), strict=True):
        ttgir = found["ttgir"]
        keeps = skips.replace("num", "imum")
        assert "tt.reduce" in ttgir and f"arith.{keeps}" in ttgir, (name, suffix)
        assert f"arith.{skips}" not in ttgir, (name, suffix, ttgir)


@pytest.mark.parametrize("run_dtype", [torch.float16, torch.bfloat16])
def test_a_kernel_analysed_in_float32_compiles_for_16_bit_inputs(run_dtype, tmp_path):
    """A launcher takes other dtypes than the analysed one (its own direct launcher each).
    The compiled helpers reduce 16-bit floats in float32 as tl.max does: a helper that kept
    float16 made softmax's `tl.exp(x - max)` a float16 exp, which compiled Triton rejects
    ("Expected dtype ['fp32', 'fp64'] but got fp16", on an H100; the interpreter takes it)."""
    jobs = []
    for i, (fn, tuning, suffix) in enumerate([
            (SOFTMAX["softmax"], ONE_BLOCK, "kernel"), (SOFTMAX["softmax"], LOOPED, "kernel"),
            (COLLAPSE["amax-last"][0], ONE_BLOCK, "kernel")]):
        analysis = analyze(Lambda(fn), torch.randn(3, 600))
        (cluster,) = analysis.clusters
        kernel = generate(analysis, cluster, tuning)
        jobs.append((kernel, tmp_path / str(i), (torch.randn(3, 600, dtype=run_dtype),),
                     suffix))
    assert all(compile_for_gpu(jobs).values())
