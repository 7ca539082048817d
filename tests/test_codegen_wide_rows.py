"""Rows wider than one block: one statistics pass per row (per-lane accumulators combined
after the loop), checked against eager PyTorch under the interpreter for every reduction
family and float dtype, at widths that are not a multiple of the block; layer_norm's
Welford statistics on large-mean rows; and the width and dtype at which rows start looping.

A tiny `max_block` forces the column loop at interpreter-friendly sizes."""

import re

import pytest
import torch
import torch.nn.functional as F
from codegen_harness import (
    Lambda,
    check_model,
    compare,
    doc_code_after,
    load_tool,
    run_kernel,
)

from fusion_core.codegen import Tuning, generate, load_kernel, nan_reduce, write_kernels
from fusion_core.codegen.reference import capture_values, cluster_inputs
from fusion_core.pipeline import analyze

BLOCK = 16
LOOP = Tuning(max_block=BLOCK, loop_block=BLOCK)  # every row wider than 16 columns loops
DTYPES = [torch.float32, torch.bfloat16, torch.float16]

FAMILIES = {
    "softmax": lambda m, x: F.softmax(x * 3.0, dim=-1),
    "log_softmax": lambda m, x: F.log_softmax(x.float() * 2.0, dim=-1),
    "layer_norm": lambda m, x: F.gelu(F.layer_norm(x + 1.0, (x.shape[-1],), m.w, m.b)),
    "rms_norm": lambda m, x: F.rms_norm(x * 2.0, (x.shape[-1],), m.w) + 1.0,
    "sum": lambda m, x: (x * m.w).sum(-1),
    "mean": lambda m, x: torch.mean(x * 2.0, dim=-1, keepdim=True) - x,
    "amax": lambda m, x: x - torch.amax(x * 2.0, dim=-1, keepdim=True),
    "amin": lambda m, x: torch.amin(x + 1.0, dim=-1) * 3.0,
}


def _rows(width: int, dtype: torch.dtype, rows: int = 3) -> torch.Tensor:
    return torch.randn(rows, width).to(dtype)


def _model(name: str, width: int, dtype: torch.dtype):
    return Lambda(FAMILIES[name], w=torch.randn(width).to(dtype),
                  b=torch.randn(width).to(dtype))


def _loops(source: str) -> list[str]:
    """The kernel's column loops, each as its body's text."""
    kernel = source[source.index("@triton.jit"):source.index("\nNAME =")]
    parts = kernel.split("for col0 in range(0, _range_bound(n_cols), BLOCK_SIZE):\n")[1:]
    return [re.split(r"\n    (?! )", part)[0] for part in parts]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("name", FAMILIES)
def test_looped_family_matches_eager(name, dtype, tmp_path):
    """70 columns: four full blocks of 16 and a tail of 6."""
    torch.manual_seed(11)
    checked = check_model(_model(name, 70, dtype), (_rows(70, dtype),), tmp_path,
                          n_clusters=1, tuning=LOOP)
    assert checked.kernels[0].looped


@pytest.mark.parametrize("name", FAMILIES)
def test_statistics_read_the_row_once_with_no_cross_lane_work_in_the_loop(name):
    """One loop for the statistics (then one that writes, unless the result is per row), and
    no block reduction inside it: the lanes are combined after the loop."""
    analysis = analyze(_model(name, 70, torch.float32), (3, 70))
    source = generate(analysis, analysis.clusters[0], LOOP).source
    loops = _loops(source)
    assert len(loops) == (1 if name in ("sum", "amin") else 2), loops
    for op in ("tl.sum(", "tl.max(", "tl.min(", *(f"{h}(" for h in nan_reduce.HELPERS)):
        assert op not in loops[0], f"{op} inside the statistics loop:\n{loops[0]}"
    # the row's blocks: kept in L2 for the write pass (where there is one), then let go
    row_load = re.search(r"v0 = tl\.load\(.*\)", loops[0]).group(0)
    assert ('evict_last' if len(loops) == 2 else 'evict_first') in row_load
    if len(loops) == 2:
        assert 'eviction_policy="evict_first"' in loops[1]
        # a row of 280 bytes: its stores take no hint (``loads.streams``)
        stores = re.findall(r"tl\.store\(.*\)", loops[1])
        assert stores and not any("eviction_policy" in s for s in stores), stores


@pytest.mark.parametrize("dtype,hinted", [(torch.float32, True), (torch.bfloat16, False)],
                         ids=["fp32-64KiB", "bf16-32KiB"])
@pytest.mark.parametrize("name", ["softmax", "layer_norm"])
def test_a_looped_rows_last_pass_stores_with_evict_first_from_64_kib_rows(name, dtype, hinted):
    """16384 columns loop: fp32 rows (64 KiB) store their last pass with `evict_first`, the
    written blocks giving way in the L2 to the row blocks the pass re-reads; 16-bit rows (32
    KiB, measured slower hinted) store plainly."""
    analysis = analyze(_model(name, 16384, dtype), torch.empty(3, 16384, dtype=dtype))
    source = generate(analysis, analysis.clusters[0], LOOP).source
    last = _loops(source)[-1]
    stores = re.findall(r"tl\.store\(.*\)", last)
    assert stores and all(('eviction_policy="evict_first"' in s) is hinted for s in stores)


def test_a_16bit_row_with_float32_weights_stores_without_a_hint():
    """bf16 rows of 16384 columns (32 KiB) normalized with float32 weights (64 KiB, read by
    every row alike): the rows' bytes decide, and the last pass stores plainly."""
    w, b = torch.randn(16384), torch.randn(16384)
    model = Lambda(lambda m, x: (F.layer_norm(x.float(), (16384,), m.w, m.b) * 2.0).to(x.dtype),
                   w=w, b=b)
    analysis = analyze(model, torch.empty(3, 16384, dtype=torch.bfloat16))
    source = generate(analysis, analysis.clusters[0], LOOP).source
    stores = re.findall(r"tl\.store\(.*\)", _loops(source)[-1])
    assert stores and not any("eviction_policy" in s for s in stores), stores


@pytest.mark.parametrize("name", ["softmax", "layer_norm"])
def test_a_row_kept_in_one_block_stores_without_a_hint(name):
    """One block reads the row once: its stores take no eviction hint (measured 2% slower
    with one on softmax rows of 32768 fp32)."""
    analysis = analyze(_model(name, 70, torch.float32), (3, 70))
    source = generate(analysis, analysis.clusters[0]).source
    stores = [line for line in source.splitlines() if "tl.store(" in line]
    assert stores and not any("eviction_policy" in s for s in stores), stores


@pytest.mark.parametrize("width", [5, 16, 17, 47, 300], ids=lambda w: f"width{w}")
def test_widths_around_the_block(width, tmp_path):
    """Narrower than one block, exactly one, one column into the next, and 19 blocks (each
    lane's Welford count reaches 19)."""
    torch.manual_seed(width)
    for name in ("layer_norm", "softmax"):
        check_model(_model(name, width, torch.float32), (_rows(width, torch.float32),),
                    tmp_path / name, n_clusters=1, tuning=LOOP)


def _run_on(fn, x: torch.Tensor, tmp_path) -> torch.Tensor:
    """The looped kernel of `fn`'s one cluster run on `x` itself (check_model draws fresh
    random inputs; these tests need their own values)."""
    analysis = analyze(Lambda(fn, arity=1), x)
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster, LOOP)
    assert kernel.looped
    values = capture_values(analysis, x)
    (got,) = run_kernel(kernel, tmp_path, tuple(values[name] for name in cluster.inputs))
    return got


@pytest.mark.parametrize("offset", [1e4, -3e4])
def test_layer_norm_of_large_mean_rows_keeps_the_variance(offset, tmp_path):
    """Values `offset + N(0, 1)` in fp32: E[x^2] - E[x]^2 in fp32 loses the unit variance
    entirely (the inputs are chosen so that it does); Welford keeps it. Compared with the same
    normalization in float64 of the same fp32 inputs, within a few fp32 steps of the offset
    (about 1e-3 each) times rstd ~ 1."""
    torch.manual_seed(5)
    width = 300
    x = offset + torch.randn(4, width)
    naive = (x * x).mean(-1) - x.mean(-1) ** 2  # the single-pass formula in fp32
    true_var = x.double().var(-1, unbiased=False)
    assert ((naive.double() - true_var).abs() > 0.2 * true_var).any(), "input too easy"
    want = F.layer_norm(x.double(), (width,))
    got = _run_on(lambda m, x: F.layer_norm(x * 1.0, (width,)), x, tmp_path).double()
    assert (got - want).abs().max() < 1e-2
    # and as close as eager's own fp32 layer_norm is to the float64 result
    eager_err = (F.layer_norm(x, (width,)).double() - want).abs().max()
    assert (got - want).abs().max() <= max(4 * eager_err, 1e-3)


def test_online_softmax_rescales_as_the_max_moves_along_the_row(tmp_path):
    """Each lane's max rises block after block (an increasing ramp) in one row and falls in
    another; values span 60 in the exponent, so a missed or doubled rescale shows."""
    ramp = torch.linspace(-30.0, 30.0, 150)
    x = torch.stack([ramp, ramp.flip(0), ramp[torch.randperm(150)]])
    for fn in (F.softmax, F.log_softmax):
        got = _run_on(lambda m, x, fn=fn: fn(x * 1.0, dim=-1), x, tmp_path / fn.__name__)
        compare(got, fn(x, dim=-1), fn.__name__)


@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax_rows_with_lanes_that_see_only_minus_inf(fn, tmp_path):
    """A lane whose every value is -inf (masked columns 0, 16, 32, ... and a causal-style
    masked prefix) keeps a zero sum: no inf - inf. A row of -inf only is NaN, as in eager."""
    mask = torch.zeros(4, 70, dtype=torch.bool)
    mask[:, ::BLOCK] = True
    mask[1, :40] = True
    mask[3] = True
    model = Lambda(lambda m, x: fn(x.masked_fill(m.mask, float("-inf")), dim=-1), mask=mask)
    check_model(model, (_rows(70, torch.float32, rows=4),), tmp_path, n_clusters=1,
                tuning=LOOP)


@pytest.mark.parametrize("dtype,width,looped", [
    (torch.float32, 16384, False),
    (torch.float32, 16385, True),
    (torch.bfloat16, 16384, False),  # computed in fp32: the same registers as fp32
    (torch.float16, 16385, True),
    (torch.float64, 8192, False),
    (torch.float64, 8193, True),
])
def test_rows_stay_in_one_block_up_to_a_width_set_by_the_element_size(dtype, width, looped):
    """log_softmax: softmax's block holds twice as many (test_codegen_one_row_block.py)."""
    model = Lambda(lambda m, x: F.log_softmax(x * 2.0, dim=-1), arity=1)
    analysis = analyze(model, torch.empty(2, width, dtype=dtype))
    kernel = generate(analysis, analysis.clusters[0])
    assert kernel.looped == looped
    assert kernel.tuning.max_block == (8192 if dtype == torch.float64 else 16384)
    assert f"MAX_BLOCK = {kernel.tuning.max_block}" in kernel.source


@pytest.mark.parametrize("norm,dtype,width,looped", [
    ("layer_norm", torch.bfloat16, 16384, True),  # the row and its deviations: 113 registers
    ("layer_norm", torch.float16, 16384, True),
    ("layer_norm", torch.bfloat16, 8192, False),
    ("layer_norm", torch.float32, 16384, False),  # fp32: one block measured faster
    ("rms_norm", torch.bfloat16, 16384, False),  # not centered: one block at 94% of a copy
])
def test_a_16_bit_layer_norm_loops_past_8192_columns(norm, dtype, width, looped):
    fn = getattr(F, norm)
    model = Lambda(lambda m, x: fn(x * 2.0, (x.shape[-1],)), arity=1)
    analysis = analyze(model, torch.empty(2, width, dtype=dtype))
    kernel = generate(analysis, analysis.clusters[0])
    assert kernel.looped == looped
    assert kernel.tuning.max_block == 16384  # what one block holds, the file's MAX_BLOCK
    assert kernel.tuning.loop_above == (8192 if norm == "layer_norm" and dtype != torch.float32
                                        else None)


def test_a_16_bit_layer_norm_generated_narrow_still_runs_wider_rows_in_one_block(tmp_path):
    """Looping sooner is a speed choice at generation: a weightless layer norm generated at
    64 columns (one block) still runs rows of 16384, as wide as one block holds."""
    model = Lambda(lambda m, x: F.layer_norm(x * 2.0, (x.shape[-1],)), arity=1)
    analysis = analyze(model, torch.empty(2, 64, dtype=torch.bfloat16))
    kernel = generate(analysis, analysis.clusters[0])
    assert not kernel.looped and "MAX_BLOCK = 16384" in kernel.source
    x = torch.randn(2, 16384, dtype=torch.bfloat16)
    (got,) = run_kernel(kernel, tmp_path, (x,))
    want = F.layer_norm(x.float() * 2.0, (16384,))
    torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)


def test_an_int64_accumulator_counts_as_eight_bytes():
    """cumsum of a bool mask reads one byte a column but accumulates in int64."""
    model = Lambda(lambda m, x: (x != 1).cumsum(-1) - 1, arity=1)
    analysis = analyze(model, torch.randint(0, 3, (2, 8193)))
    kernel = generate(analysis, analysis.clusters[0])
    assert kernel.looped and kernel.tuning.max_block == 8192


def test_a_given_max_block_wins_over_the_element_size():
    analysis = analyze(_model("softmax", 70, torch.float32), (3, 70))
    assert generate(analysis, analysis.clusters[0], Tuning(max_block=64)).looped
    assert not generate(analysis, analysis.clusters[0]).looped


def test_many_rows_keep_their_own_lane_state(tmp_path):
    """Several programs of several rows: row masks and per-lane state do not leak between
    rows (65 rows, one of them constant: variance 0)."""
    torch.manual_seed(2)
    x = torch.randn(65, 37)
    x[7] = 2.5
    model = Lambda(lambda m, x: F.layer_norm(x * 2.0, (37,)), arity=1)
    checked = check_model(model, (x,), tmp_path, n_clusters=1, tuning=LOOP)
    assert checked.kernels[0].looped


def test_looped_kernels_compile_for_sm90(tmp_path):
    """The interpreter accepts what the compiler may not (types of loop-carried per-lane
    state, the Welford step's int divisor): every family, looped, in bf16 and fp64."""
    from codegen_harness import compile_for_gpu

    jobs = []
    for name in FAMILIES:
        for dtype in (torch.bfloat16, torch.float64):
            x = _rows(70, dtype)
            analysis = analyze(_model(name, 70, dtype), x)
            (cluster,) = analysis.clusters
            kernel = generate(analysis, cluster, LOOP)
            assert kernel.looped
            args = cluster_inputs(analysis, cluster, capture_values(analysis, x))
            jobs.append((kernel, tmp_path / f"{name}-{dtype}".replace("torch.", ""), args))
    compiled = compile_for_gpu(jobs)
    assert len(compiled) == len(jobs) and all(compiled.values()), compiled


def test_readme_shows_the_wide_row_kernel_the_generator_writes():
    """docs/kernels.md's wide-row kernel is the real output of tools/wide_row_kernel.py (rerun it
    and paste its output when the generator's text changes)."""
    block = doc_code_after("docs/kernels.md", "`python tools/wide_row_kernel.py` prints")
    assert block == load_tool("wide_row_kernel").kernel_text()


@pytest.mark.parametrize("name, dtype, weights, step", [
    ("layer_norm", torch.float32, torch.float32, 4096),
    ("rms_norm", torch.float32, torch.float32, 4096),
    ("mean", torch.float32, torch.float32, 4096),  # a norm spelled out: stats, then each element
    ("layer_norm", torch.bfloat16, torch.float32, 8192),  # 16-bit rows, a shared fp32 weight
    ("rms_norm", torch.float16, torch.float16, 8192),
    ("softmax", torch.float32, torch.float32, 8192),
    ("sum", torch.float32, torch.float32, 8192),  # one value a row: no second pass
], ids=lambda v: str(v).removeprefix("torch."))
def test_a_float32_norms_looped_row_steps_16_kib_by_default(name, dtype, weights, step, tmp_path):
    """The default column step of a looped row (the heuristic's MAX_LOOP_BLOCK): 4096 columns
    for float32 rows a norm reads twice (5% faster than 8192 on an H100 at 65536 columns),
    8192 for 16-bit rows and for softmax; a 65536-wide bucket of 256 rows starts at that
    step, and a split row's chunks (128 rows, 2 programs each) at 8192 whatever the rows."""
    model = Lambda(FAMILIES[name], w=torch.randn(64).to(weights), b=torch.randn(64).to(weights))
    analysis = analyze(model, _rows(64, dtype))
    kernel = generate(analysis, analysis.clusters[0], Tuning(max_block=32, loop_block=16))
    assert kernel.looped and kernel.tuning.max_loop_block == step
    module = load_kernel(write_kernels([kernel], tmp_path)[0])
    assert module.MAX_LOOP_BLOCK == step
    module.MAX_BLOCK = module.SPLIT_MIN_COLS = 65536 // 2  # as a file made for wide rows
    assert module.HEURISTIC((65536, 256))[0] == step
    if module.KIND == "split":
        assert module.HEURISTIC((65536, 128)) == (8192, 1, 16, 2)
