"""Broadcasts, reduction widths (non-power-of-two, column loop, packed rows) and dtypes,
each checked against eager PyTorch under Triton's interpreter."""

import re

import pytest
import torch
import torch.nn.functional as F
from codegen_harness import Lambda, catch_launch, check_model, launch_signature

from fusion_core.codegen import Tuning, generate
from fusion_core.codegen.reference import capture_values, cluster_inputs
from fusion_core.pipeline import analyze

R, C = 6, 40
LOOP = {"tuning": Tuning(max_block=64, loop_block=64)}  # rows of > 64 columns loop


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


BROADCASTS = {
    "row vector": (lambda m, x, b: (x + b) * 2, (rand(R, C), rand(C)), {}),
    "column vector": (lambda m, x, c: torch.relu(x * c) - c, (rand(R, C), rand(R, 1)), {}),
    "0-d tensor": (lambda m, x: (x * m.t) + 1, (rand(R, C),), {"t": torch.tensor(1.5)}),
    "scalar literals": (lambda m, x: (x * 2).masked_fill(x > 0.5, float("nan")) + True,
                        (rand(R, C),), {}),
    "-inf literal": (lambda m, x: torch.exp(x.masked_fill(m.mask, float("-inf")) * 2),
                     (rand(R, C),), {"mask": torch.rand(R, C) > 0.5}),
    "parameter row": (lambda m, x: torch.sigmoid(x) * m.w, (rand(R, C),), {"w": rand(C)}),
    "bool row mask": (lambda m, x: (x * 2).masked_fill(m.mask, 0.25),
                      (rand(R, C),), {"mask": torch.rand(C) > 0.5}),
    "sliced bool buffer": (lambda m, x: (x * 2).masked_fill(m.mask[:R, :C], -3.0) + 1,
                           (rand(R, C),), {"mask": torch.rand(64, 64) > 0.5}),
    # beside a contiguous operand (alone, `x.t()` is iterated in its memory order: flat)
    "transposed input": (lambda m, x, y: x.t() * 2 + y, (rand(C, R), rand(R, C)), {}),
    "middle broadcast": (lambda m, x, y: (x - y) * x, (rand(2, 3, C), rand(3, 1)), {}),
    "two broadcasts": (lambda m, x, y: torch.maximum(x, y) + 1, (rand(2, 1, C), rand(5, 1)),
                       {}),
    "diamond": (lambda m, x: (x * 2.0 + x) * torch.sigmoid(x), (rand(R, C),), {}),
}


@pytest.mark.parametrize("name", BROADCASTS)
def test_broadcast_operands(name, tmp_path):
    torch.manual_seed(0)
    fn, inputs, params = BROADCASTS[name]
    check_model(Lambda(fn, **params), inputs, tmp_path, n_clusters=1)


REDUCTIONS = {
    "softmax": lambda m, x: F.softmax(torch.tanh(x) * 3, dim=-1),
    "log_softmax": lambda m, x: F.log_softmax(x * 2, dim=-1),
    "layer_norm": lambda m, x: F.layer_norm(x + 1, (x.shape[-1],), m.w, m.b),
    "rms_norm": lambda m, x: F.rms_norm(x * 2, (x.shape[-1],), m.w),
    "sum": lambda m, x: (x * 2).sum(-1),
    "mean": lambda m, x: torch.mean(x * 2, dim=-1, keepdim=True),
    "amax": lambda m, x: x - torch.amax(x * 2, dim=-1, keepdim=True),
    "amin": lambda m, x: torch.amin(x + 1, dim=-1) * 3,
    "cumsum": lambda m, x: torch.cumsum(x * 0.5, dim=-1) - x,
}


def _reduction_model(rule, width):
    return Lambda(REDUCTIONS[rule], w=rand(width), b=rand(width))


@pytest.mark.parametrize("rule", REDUCTIONS)
@pytest.mark.parametrize("width,looped", [(300, False), (200, True)],
                         ids=["width300", "width200-loop"])
def test_reduction_widths(rule, width, looped, tmp_path):
    torch.manual_seed(width)
    checked = check_model(_reduction_model(rule, width), (rand(5, width),), tmp_path,
                          n_clusters=1, **(LOOP if looped else {}))
    kernel = checked.kernels[0]
    assert kernel.skeleton == "reduction" and kernel.looped == looped
    assert ("for col0 in range(0, _range_bound(n_cols), BLOCK_SIZE)" in kernel.source) == looped


def test_wide_rows_loop_by_default(tmp_path):
    """Rows wider than MAX_BLOCK use the column loop without being asked."""
    checked = check_model(_reduction_model("softmax", 150), (rand(3, 150),), tmp_path,
                          tuning=Tuning(max_block=128, loop_block=32))
    assert checked.kernels[0].looped


def test_online_softmax_with_leading_all_masked_blocks(tmp_path):
    """A row whose first column blocks are all -inf (a causal mask) stays finite."""
    mask = torch.zeros(4, 200, dtype=torch.bool)
    mask[:, :150] = True  # blocks 0-1 of 64 columns fully masked, block 2 partly
    model = Lambda(lambda m, x: F.softmax(x.masked_fill(m.mask, float("-inf")), dim=-1),
                   mask=mask)
    check_model(model, (rand(4, 200),), tmp_path, n_clusters=1, **LOOP)


def test_per_row_operands_before_and_after_the_reduction(tmp_path):
    """A column vector feeds the prologue; a per-row tensor joins a collapsed result."""
    model = Lambda(lambda m, x, c, b: (x * c).sum(-1) + b)
    inputs = (rand(5, 90), rand(5, 1), rand(5))
    check_model(model, inputs, tmp_path, n_clusters=1)
    check_model(model, inputs, tmp_path / "loop", n_clusters=1, **LOOP)


def test_short_rows_pack_several_per_program(tmp_path):
    model = Lambda(lambda m, x: F.softmax(x * 2, dim=-1))
    # 2053 rows: the last program's rows are partly masked (few rows would be spread over
    # more programs, one row each: see tuning.py's `_single_heuristic`)
    x = rand(2053, 24)
    checked = check_model(model, (x,), tmp_path, n_clusters=1)
    analysis = checked.analysis
    args = cluster_inputs(analysis, analysis.clusters[0], capture_values(analysis, x))
    _, _, consts = launch_signature(checked.kernels[0], tmp_path / "sig", args)
    assert consts["ROWS_PER_PROGRAM"] == 16 and consts["BLOCK_SIZE"] == 32


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("what", ["chain", "softmax", "layer_norm", "sum", "softmax-loop",
                                  "layer_norm-loop"])
def test_half_precision(dtype, what, tmp_path):
    torch.manual_seed(3)
    fns = {
        "chain": lambda m, x: torch.sigmoid(F.gelu(x)) * 0.5 + m.w,
        "softmax": lambda m, x: F.softmax(torch.tanh(x) * 3, dim=-1),
        "layer_norm": lambda m, x: F.layer_norm(x * 2 + m.w, (C,), m.w, m.b),
        "sum": lambda m, x: (x * m.w).sum(-1, keepdim=True),
    }
    model = Lambda(fns[what.removesuffix("-loop")], w=rand(C, dtype=dtype),
                   b=rand(C, dtype=dtype))
    tuning = {"tuning": Tuning(max_block=16, loop_block=16)} if what.endswith("loop") else {}
    checked = check_model(model, (rand(R, C, dtype=dtype),), tmp_path, n_clusters=1, **tuning)
    assert checked.kernels[0].looped == what.endswith("loop")
    source = checked.kernels[0].source
    assert ".to(tl.float32)" in source  # computed in float32...
    assert f".to(tl.{str(dtype).removeprefix('torch.')})" in source  # ...stored as half


def test_int64_index_math_for_huge_tensors():
    """Past 2**31 elements the kernel switches to 64-bit offsets (shape only, no run)."""
    model = Lambda(lambda m, x: x * 2 + 1)
    big = analyze(model, (2**16, 2**15 + 1))
    small = analyze(model, (64, 64))
    assert "pid.to(tl.int64)" in generate(big, big.clusters[0]).source
    assert "pid.to(tl.int64)" not in generate(small, small.clusters[0]).source


@pytest.mark.parametrize("fn,shapes", [
    # beside a contiguous operand (alone, `x.t()` is iterated in its memory order: flat)
    (lambda m, x, y: x.t() * 2 + y, [(2**19 + 1, 4096), (4096, 2**19 + 1)]),
    (lambda m, x: F.softmax(x.t() * 2, dim=-1), [(2**19 + 1, 4096)])], ids=["tiled", "reduction"])
def test_int64_column_index_for_huge_transposed_inputs(fn, shapes):
    """`cols * row_stride` of a transposed input passes 2**31 although both fit 32 bits:
    the column block is 64-bit too (shape only, no run)."""
    big = analyze(Lambda(fn), *shapes)
    source = generate(big, big.clusters[0]).source
    assert "pid.to(tl.int64)" in source
    assert re.search(r"cols = \(.*tl\.arange\(0, BLOCK_SIZE\)\[None, :\]\)\.to\(tl\.int64\)",
                     source)


def _per_row_output(m, x):
    a = x.abs()
    s = a.sum(-1, keepdim=True)
    return s, a / s


MULTI = {"per-row output": (_per_row_output, (rand(5, 90),))}


@pytest.mark.parametrize("looped", [False, True], ids=["single", "loop"])
@pytest.mark.parametrize("name", MULTI)
def test_multi_output_clusters(name, looped, tmp_path):
    """Several results leave one kernel; one of them has one value per row."""
    fn, inputs = MULTI[name]
    checked = check_model(Lambda(fn), inputs, tmp_path, **(LOOP if looped else {}))
    assert any(len(c.outputs) == 2 for c in checked.analysis.clusters), [
        (c.chain, c.outputs) for c in checked.analysis.clusters]


def test_cross_row_broadcast_is_a_lowering_error(monkeypatch):
    """`x.sum(-1) + x` on a square x pairs row i's sum with column i: no row kernel does that.

    The shapes check rejects that group; without it the lowering check's dry run does, and
    lowering keeps its own guard, tested without both."""
    from fusion_core import pipeline
    from fusion_core.codegen import LoweringError

    fn = Lambda(lambda m, x: x.sum(-1) + x)
    assert analyze(fn, (8, 8)).clusters == ()
    checks = pipeline.CHECKS
    monkeypatch.setattr(pipeline, "CHECKS", tuple(c for c in checks if c[0] != "shapes"))
    rejected = analyze(fn, (8, 8))
    assert rejected.clusters == ()
    assert [r.check for r in rejected.rejections] == ["lowering"]
    assert "per-row result" in rejected.rejections[0].reason
    monkeypatch.setattr(pipeline, "CHECKS", tuple(c for c in checks if c[0] != "shapes")[:-1])
    analysis = analyze(fn, (8, 8))
    assert [c.ops for c in analysis.clusters] == [("sum", "add")]
    with pytest.raises(LoweringError, match="per-row result"):
        generate(analysis, analysis.clusters[0])


ONE_ROW = {
    "0-d chain": (lambda m, x: torch.sigmoid(x) * 2, (torch.tensor(0.7),)),
    "1-d softmax": (lambda m, x: F.softmax(x * 2, -1), (rand(7),)),
    "1-d layer_norm": (lambda m, x: F.layer_norm(x * 2, (7,)), (rand(7),)),
    "1-d sum to 0-d": (lambda m, x: (x * 2).sum(-1), (rand(7),)),
    "1-d minus its max": (lambda m, x: x - (x * 2).amax(-1), (rand(7),)),
    "width-1 rows": (lambda m, x: F.softmax(x * 2, -1), (rand(3, 1),)),
}


@pytest.mark.parametrize("looped", [False, True], ids=["single", "loop"])
@pytest.mark.parametrize("name", ONE_ROW)
def test_degenerate_shapes(name, looped, tmp_path):
    """0-d and 1-d iteration shapes, a single row, rows of width 1."""
    fn, inputs = ONE_ROW[name]
    tuning = {"tuning": Tuning(max_block=2, loop_block=2)} if looped else {}
    check_model(Lambda(fn), inputs, tmp_path, n_clusters=1, **tuning)


@pytest.mark.parametrize("looped", [False, True], ids=["single", "loop"])
def test_cumsum_of_a_bool_mask_counts_in_int64(looped, tmp_path):
    # transformers' packed-sequence ids: `(position_diff != 1).cumsum(-1)`.
    ids = torch.randint(0, 3, (4, 150))
    checked = check_model(Lambda(lambda m, x: (x != 1).cumsum(-1) - 1), (ids,), tmp_path,
                          n_clusters=1, **(LOOP if looped else {}))
    assert checked.kernels[0].looped == looped
    assert "tl.cumsum" in checked.kernels[0].source


TILED = {  # elementwise clusters whose flat index would need `offs // span` on the last axis
    "transposed input": True, "middle broadcast": False, "two broadcasts": True,
    "sliced bool buffer": True, "row vector": False, "column vector": False,
    "0-d tensor": False, "diamond": False,
}


@pytest.mark.parametrize("name", TILED)
def test_tiled_skeleton_only_where_a_flat_index_needs_divisions(name, tmp_path):
    fn, inputs, params = BROADCASTS[name]
    model = Lambda(fn, **params)
    analysis = analyze(model, *[tuple(t.shape) for t in inputs])
    source = generate(analysis, analysis.clusters[0]).source
    # a permuted read's programs take column blocks first (emit.tile_order), the rest rows first
    tiled = any(f"cols = {block} * BLOCK_SIZE" in source for block in ("tl.program_id(1)",
                                                                         "col_block"))
    assert tiled == TILED[name]
    assert ("offs = pid * BLOCK_SIZE" in source) != TILED[name]
    # Square tiles only when an input is contiguous along the rows (a transposed view).
    assert ("TILE_COLS = 64" in source) == (name == "transposed input")


@pytest.mark.parametrize("tuning", [Tuning(), Tuning(tile_elements=64, tile_cols=16)],
                         ids=["default", "small-tiles"])
def test_tiled_kernel_masks_row_and_column_tails(tuning, tmp_path):
    """A transposed 70x5 input: 5 rows of 70 columns; tiles leave partial blocks on both axes."""
    torch.manual_seed(5)
    # beside a contiguous `y` (alone, `x.t()` is iterated in its memory order: flat)
    model = Lambda(lambda m, x, c, y: torch.sigmoid(x.t() * 2) + c * y)
    inputs = (rand(70, 5), rand(5, 1), rand(5, 70))
    checked = check_model(model, inputs, tmp_path, n_clusters=1, tuning=tuning)
    analysis = checked.analysis
    args = cluster_inputs(analysis, analysis.clusters[0], capture_values(analysis, *inputs))
    launch = catch_launch(checked.kernels[0], tmp_path / "sig", args)
    block, rows = launch["kwargs"]["BLOCK_SIZE"], launch["kwargs"]["ROWS_PER_PROGRAM"]
    assert block == tuning.tile_cols and 70 % block and rows * block <= tuning.tile_elements
    assert 5 % rows or tuning.tile_elements // block > 5  # a partial row block, or rows capped at 8
    assert launch["grid"] == (-(-5 // rows), -(-70 // block))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tiled_kernel_half_precision_two_outputs(dtype, tmp_path):
    """Rotary-style `q * cos + rot * sin` on a transposed view, with an escaping product."""
    torch.manual_seed(6)

    def fn(m, q, rot):
        a = q.transpose(1, 2) * m.cos
        return a, a + rot * m.sin

    model = Lambda(fn, cos=rand(6, 40, dtype=dtype), sin=rand(6, 40, dtype=dtype))
    checked = check_model(model, (rand(2, 6, 3, 40, dtype=dtype), rand(2, 3, 6, 40,
                                                                        dtype=dtype)),
                          tmp_path, n_clusters=1)
    source = checked.kernels[0].source
    assert "cols = tl.program_id(1) * BLOCK_SIZE" in source
    assert len(checked.analysis.clusters[0].outputs) == 2


@pytest.mark.parametrize("name", [n for n, tiled in TILED.items() if tiled])
def test_flat_kernel_for_tiled_clusters_still_matches(name, tmp_path):
    """`generate(tiled=False)` (what benchmarks compare the tiles against) stays correct."""
    fn, inputs, params = BROADCASTS[name]
    checked = check_model(Lambda(fn, **params), inputs, tmp_path, n_clusters=1, tiled=False)
    assert not checked.kernels[0].tiled and "offs = pid * BLOCK_SIZE" in checked.kernels[0].source


@pytest.mark.parametrize("looped", [False, True], ids=["single", "loop"])
def test_reduction_reads_a_trailing_block_broadcast_over_leading_dims(looped, tmp_path):
    """A (3, C) bias over (2, 3, C) rows: indexed by a per-row remainder, then `cols`."""
    torch.manual_seed(7)
    model = Lambda(lambda m, x: F.softmax(x + m.bias, dim=-1), bias=rand(3, 90))
    checked = check_model(model, (rand(2, 3, 90),), tmp_path, n_clusters=1,
                          **(LOOP if looped else {}))
    assert "(rows % rspan1) * n_cols + cols" in checked.kernels[0].source


INT64_CASES = {
    "flat": (lambda m, x: torch.sigmoid(x) * 2, (rand(R, C),), {}),
    "tiled": (lambda m, x, y: x.t() * 2 + y, (rand(C, R), rand(R, C)), {}),
    "reduction": (lambda m, x: F.softmax(x.t() * 2, dim=-1), (rand(C, R),), {}),
    "reduction-loop": (lambda m, x: F.softmax(x.t() * 2, dim=-1), (rand(90, R),), LOOP),
}


@pytest.mark.parametrize("name", INT64_CASES)
def test_int64_index_math_runs(name, tmp_path, monkeypatch):
    """The 64-bit index variants (normally only past 2**31 elements) at a small size."""
    from fusion_core.codegen import lower

    monkeypatch.setattr(lower, "needs_int64", lambda domain, inputs: True)
    fn, inputs, kwargs = INT64_CASES[name]
    checked = check_model(Lambda(fn), inputs, tmp_path, n_clusters=1, **kwargs)
    assert "pid.to(tl.int64)" in checked.kernels[0].source


def test_strided_slice_alone_keeps_wide_tiles(tmp_path):
    """`x[..., ::2]` steps through memory along the last axis but is not contiguous along
    the rows either: square tiles would not help it, so tiles stay row-wide."""
    model = Lambda(lambda m, x, y: torch.relu(x[..., ::2] + y))
    inputs = (rand(2, 3, 2 * C), rand(2, 1, C))  # y's middle broadcast makes it tiled
    checked = check_model(model, inputs, tmp_path, n_clusters=1)
    source = checked.kernels[0].source
    assert checked.kernels[0].tiled and "TILE_COLS = 1024" in source
