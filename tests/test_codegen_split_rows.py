"""Few wide rows split over several programs (``codegen/split_rows.py``): the rule that picks
the programs per row for a shape bucket, a launcher choosing again at a new shape, numerics
against eager under the interpreter (softmax and log_softmax with a prologue and an epilogue in
fp32 and bf16, layer_norm, rms_norm, group_norm, and a mean/amax/amin feeding the row, chunks
that do not divide the row, chunks of -inf, large-mean rows), and the two kernels compiling for
sm_90.

A small `max_block` makes rows of 4096 columns loop, and `split_min_cols` lets chunks of 1024
columns count as wide: several programs per row at interpreter-friendly sizes."""

import pytest
import torch
import torch.nn.functional as F
from codegen_harness import (
    Lambda,
    catch_launch,
    compare,
    compile_for_gpu,
    compiled_ir,
    doc_code_after,
    load_tool,
    poison_empty,
    to_device,
)

from fusion_core.codegen import Tuning, generate, load_kernel, tuning, write_kernels
from fusion_core.codegen.lower import plan
from fusion_core.codegen.reduce import splittable
from fusion_core.codegen.reference import capture_values, cluster_inputs, eager_cluster
from fusion_core.pipeline import analyze

SPLIT = Tuning(max_block=256, loop_block=256, split_min_cols=1024)

FAMILIES = {
    "softmax": lambda m, x: F.softmax(x * 0.5 + 1.0, dim=-1) * 3.0,
    "log_softmax": lambda m, x: F.log_softmax(x.float() * 2.0, dim=-1) - 1.0,
    "layer_norm": lambda m, x: F.gelu(F.layer_norm(x + 1.0, (x.shape[-1],), m.w, m.b)),
    "rms_norm": lambda m, x: F.rms_norm(x * 2.0, (x.shape[-1],), m.w) + 1.0,
    "mean": lambda m, x: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * 2.0,
}


def _model(name: str, width: int, dtype: torch.dtype):
    return Lambda(FAMILIES[name], w=torch.randn(width).to(dtype), b=torch.randn(width).to(dtype))


def _split_kind(monkeypatch, **constants):
    heuristic, config = tuning.KINDS["split"]
    monkeypatch.setattr(tuning, "HEURISTIC", heuristic)
    monkeypatch.setattr(tuning, "CONFIG", config)
    defaults = dict(LOOP_BLOCK=1024, MAX_BLOCK=8192, NUM_WARPS=2, LOOP_STEPS=4,
                    MAX_LOOP_BLOCK=8192, SPLIT_PROGRAMS=256, SPLIT_MIN_COLS=8192)
    for name, value in {**defaults, **constants}.items():
        monkeypatch.setattr(tuning, name, value)


@pytest.mark.parametrize("bucket,config", [
    ((262144, 64), (8192, 1, 16, 4)),  # 64 rows x 4 programs: 256, chunks of 65536
    ((262144, 4), (2048, 1, 8, 32)),  # few rows: more programs, down to SPLIT_MIN_COLS
    ((65536, 128), (8192, 1, 16, 2)),  # 128 rows: one program each would idle SMs...
    ((65536, 256), (8192, 1, 16, 1)),  # ...256 fill them (H200 panel: 2 programs lost 14%)
    ((16384, 64), (2048, 1, 8, 2)),  # a chunk never narrower than SPLIT_MIN_COLS
    ((8192, 4), (2048, 1, 8, 1)),  # too narrow to split
    ((262144, 1024), (8192, 1, 16, 1)),  # enough rows: the looped kernel's own pick
    ((32768, 4096), (8192, 1, 16, 1)),
])
def test_which_buckets_split_and_into_how_many_programs(monkeypatch, bucket, config):
    _split_kind(monkeypatch)
    assert tuning.HEURISTIC(bucket) == config


@pytest.mark.parametrize("candidate,bucket,splits", [
    ((4096, 8, 16), (262144, 64), 16),
    ((4096, 8, 16), (262144, 4096), 1),  # many rows: candidates do not split
    ((4096, 8, 32), (8192, 4), 2),  # each chunk keeps a whole block
    ((8192, 16, 8), (4096, 4), 1),
])
def test_candidates_split_only_where_it_can_pay(monkeypatch, candidate, bucket, splits):
    _split_kind(monkeypatch)
    assert tuning.CONFIG(bucket, candidate)[3] == splits


ROW = (2, 4096)


@pytest.mark.parametrize("fn,shape,split", [
    (FAMILIES["softmax"], ROW, True),
    (FAMILIES["log_softmax"], ROW, True),
    (FAMILIES["layer_norm"], ROW, True),
    (FAMILIES["rms_norm"], ROW, True),
    (lambda m, x: F.group_norm(x * 2.0, 2), (2, 4, 8, 128), True),
    (lambda m, x: (x * 2.0).sum(-1), ROW, False),  # a per-row result
    (lambda m, x: torch.cumsum(x * 2.0, -1), ROW, False),  # a scan carries: no partials
    (lambda m, x: x - torch.amax(x * 2.0, -1, keepdim=True), ROW, True),
    (lambda m, x: torch.var(x * 2.0, -1, keepdim=True) + x, ROW, False),  # no partials
])
def test_which_reductions_may_split(fn, shape, split):
    x = torch.randn(shape)
    model = Lambda(fn, w=torch.randn(x.shape[-1]), b=torch.randn(x.shape[-1]))
    analysis = analyze(model, x)
    (cluster,) = analysis.clusters
    assert splittable(plan(analysis.graph, cluster)) == split
    kernel = generate(analysis, cluster, SPLIT)
    assert kernel.looped
    assert (f"def {kernel.name}_partials(" in kernel.source) == split
    assert (f'KIND = "{"split" if split else "looped"}"') in kernel.source


def _load(fn, x: torch.Tensor, tmp_path, tuning_=SPLIT, width: int | None = None):
    """The kernel of `fn`'s one cluster (weights `m.w`, `m.b` of `width`, by default the last
    dim's), loaded with a poisoning `torch.empty` (a workspace slot or output element never
    written reads as NaN) and the heuristic's picks (no timing, also where CUDA is); (module,
    launcher, cluster inputs, eager result on them)."""
    width = x.shape[-1] if width is None else width
    analysis = analyze(Lambda(fn, w=torch.randn(width).to(x.dtype),
                              b=torch.randn(width).to(x.dtype)), x)
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster, tuning_)
    module = load_kernel(write_kernels([kernel], tmp_path)[0])
    poison_empty(module)
    module._timing_on = lambda device: False
    values = capture_values(analysis, x)
    args = tuple(values[n] for n in cluster.inputs)
    (want,) = eager_cluster(analysis, cluster)(*args)
    return module, getattr(module, kernel.name), tuple(map(to_device, args)), want


def _launches(module) -> list[tuple[str, tuple]]:
    """Record each jit launch of the module's kernels as (suffix, grid), still running it."""
    seen = []
    for suffix in ("kernel", "partials", "finish", "joined"):
        name = f"{module.NAME}_{suffix}"
        jit = getattr(module, name)

        class Recording:
            def __getitem__(self, grid, jit=jit, suffix=suffix):
                seen.append((suffix, grid))
                return jit[grid]

        setattr(module, name, Recording())
    return seen


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_split_softmax_matches_eager(name, dtype, tmp_path):
    """2 x 4096: four programs per row, each over 1024 columns in four blocks of 256."""
    torch.manual_seed(3)
    x = torch.randn(2, 4096).to(dtype)
    fn = FAMILIES[name]
    module, launch, inputs, want = _load(fn, x, tmp_path)
    seen = _launches(module)
    got = launch(*inputs).cpu()
    assert seen == [("partials", (2, 4)), ("finish", (2, 4))]
    assert list(module.CHOSEN.values()) == [(256, 1, 2, 4)]
    compare(got, want, f"{name} {dtype}")


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
def test_split_norms_match_eager(name, tmp_path):
    torch.manual_seed(4)
    x = torch.randn(2, 4096)
    module, launch, inputs, want = _load(FAMILIES[name], x, tmp_path)
    got = launch(*inputs).cpu()
    assert list(module.CHOSEN.values())[0][3] == 4
    compare(got, want, name)


@pytest.mark.parametrize("fn", [
    FAMILIES["mean"],  # an RMSNorm by hand
    lambda m, x: x - torch.amax(x * 2.0, -1, keepdim=True),
    lambda m, x: torch.amin(x + 1.0, -1, keepdim=True) * x,
], ids=["mean", "amax", "amin"])
def test_split_collapsing_reductions_feeding_the_row_match_eager(fn, tmp_path):
    """A per-row sum, mean, max or min that per-element outputs read: each chunk's
    accumulator, merged by the combine (a mean divides by the whole row's width)."""
    torch.manual_seed(9)
    module, launch, inputs, want = _load(fn, torch.randn(2, 4096), tmp_path)
    got = launch(*inputs).cpu()
    assert list(module.CHOSEN.values())[0][3] == 4
    compare(got, want, "collapse")


NARROW = {  # values that wrap when the row arithmetic stays in the dtype, as torch's does
    torch.int8: lambda: torch.randint(-128, 128, (2, 4096), dtype=torch.int8),
    torch.int16: lambda: torch.randint(-32768, 32768, (2, 4096), dtype=torch.int16),
    torch.uint8: lambda: torch.randint(0, 256, (2, 4096), dtype=torch.uint8),
}
LOOPED = Tuning(max_block=256, loop_block=256, split_min_cols=1 << 30)


@pytest.mark.parametrize("tuning_,splits", [(Tuning(), None), (LOOPED, 1), (SPLIT, 4)],
                         ids=["single", "looped", "split"])
@pytest.mark.parametrize("dtype", list(NARROW), ids=str)
def test_a_narrow_integer_amax_keeps_its_dtype_in_the_row_arithmetic(dtype, tuning_, splits,
                                                                     tmp_path):
    """Triton's tl.max/tl.min/tl.sum reduce 8- and 16-bit integers in 32 bits; torch's amax
    keeps the input's dtype, so `x - amax` wraps (int8: -74 - 126 is 56) before the float
    conversion. The reductions' results, and a split row's statistics made scalars, are cast
    back (before, every kernel kind gave -200 there)."""
    torch.manual_seed(11)
    fn = lambda m, x: (x - torch.amax(x * 1, -1, keepdim=True)).float()  # noqa: E731
    module, launch, inputs, want = _load(fn, NARROW[dtype](), tmp_path, tuning_)
    got = launch(*inputs).cpu()
    assert [c[3] if len(c) == 4 else None for c in module.CHOSEN.values()] == [splits]
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("tuning_,splits", [(Tuning(), None), (LOOPED, 1), (SPLIT, 4)],
                         ids=["single", "looped", "split"])
def test_a_bool_amin_keeps_its_dtype_in_the_row_arithmetic(tuning_, splits, tmp_path):
    """`~` of a bool is a logical not; of the (u)int32 Triton reduces bools in, a bitwise one
    (~1 is -2). Row 1 is all True: its amin is True, its output 0."""
    x = torch.rand(2, 4096) > 0.5
    x[1] = True
    fn = lambda m, x: x.float() * (~torch.amin(x & True, -1, keepdim=True)).float()  # noqa: E731
    module, launch, inputs, want = _load(fn, x, tmp_path, tuning_)
    got = launch(*inputs).cpu()
    assert [c[3] if len(c) == 4 else None for c in module.CHOSEN.values()] == [splits]
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_split_group_norm_matches_eager(tmp_path):
    """A row of group_norm is one group's channels x H x W (the kernel's own order): chunks
    cut across channels, each column reading its channel's weight and bias."""
    torch.manual_seed(6)
    x = torch.randn(2, 4, 16, 128)
    fn = lambda m, x: F.silu(F.group_norm(x * 2.0, 2, m.w, m.b))  # noqa: E731
    module, launch, inputs, want = _load(fn, x, tmp_path, width=4)
    got = launch(*inputs).cpu()
    assert list(module.CHOSEN.values())[0][3] == 4
    compare(got, want, "group_norm")


def test_chunks_that_do_not_divide_the_row(tmp_path):
    """2100 columns, four programs per row: chunks of 528 columns (2100 / 4 rounded up to a
    multiple of 16), the last one 516 wide; every chunk ends inside a block of 256."""
    torch.manual_seed(7)
    x = torch.randn(3, 2100)
    module, launch, inputs, want = _load(FAMILIES["softmax"], x, tmp_path)
    seen = _launches(module)
    got = launch(*inputs).cpu()
    assert seen == [("partials", (3, 4)), ("finish", (3, 4))]
    compare(got, want, "softmax 2100")


@pytest.mark.parametrize("name", ["softmax", "layer_norm"])
def test_programs_per_row_not_a_power_of_two(name, tmp_path):
    """Three programs per row (a configuration edited by hand, or rows too narrow for the
    configured count): the finish kernel's fourth partial slot is masked to the merge's
    identity."""
    torch.manual_seed(10)
    x = torch.randn(2, 3000)
    module, launch, inputs, want = _load(FAMILIES[name], x, tmp_path)
    launch(*inputs)  # plans this layout
    key = next(iter(module.LAUNCH_CACHE))
    _, _, out_shapes, _, args, _, _ = module.LAUNCH_CACHE[key]
    out = torch.empty(out_shapes[0], dtype=want.dtype, device=inputs[0].device)
    seen = _launches(module)
    module._launch((256, 1, 4, 3), args, *inputs, out)
    assert seen == [("partials", (2, 3)), ("finish", (2, 3))]
    compare(out.cpu(), want, f"{name} in 3 chunks")


@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax], ids=["softmax", "log_softmax"])
def test_a_chunk_of_minus_inf_and_a_row_of_it(fn, tmp_path):
    """A chunk whose every value is -inf adds nothing (its partial sum is 0 at the lowest
    finite max); a row of -inf only is NaN, as in eager."""
    x = torch.randn(3, 4096)
    x[0, 1024:2048] = float("-inf")
    x[1, :3000] = float("-inf")
    x[2] = float("-inf")
    model = lambda m, x: fn(x * 1.0, dim=-1)  # noqa: E731
    module, launch, inputs, want = _load(model, x, tmp_path)
    got = launch(*inputs).cpu()
    assert list(module.CHOSEN.values())[0][3] == 4
    compare(got, want, fn.__name__)


def test_large_mean_rows_keep_their_variance_across_chunks(tmp_path):
    """`1e4 + N(0, 1)` in fp32: chunk means differ only by noise, and Chan's merge of the
    chunks' M2 keeps the unit variance (compared with float64)."""
    torch.manual_seed(8)
    x = 1e4 + torch.randn(2, 4096)
    model = lambda m, x: F.layer_norm(x * 1.0, (4096,))  # noqa: E731
    module, launch, inputs, _ = _load(model, x, tmp_path)
    got = launch(*inputs).cpu().double()
    assert list(module.CHOSEN.values())[0][3] == 4
    want = F.layer_norm(x.double(), (4096,))
    eager_err = (F.layer_norm(x, (4096,)).double() - want).abs().max()
    assert (got - want).abs().max() <= max(4 * eager_err, 1e-3)


def test_a_launcher_at_a_new_shape_picks_its_own_configuration(tmp_path):
    """One file, three buckets: 2 rows of 4096 split four ways; 20 rows (a row class of 32,
    past SPLIT_PROGRAMS = 16 here) and rows of 1000 columns (too narrow) run the looped
    kernel, each under its own bucket's pick, and all match eager."""
    fn = FAMILIES["softmax"]
    few = Tuning(max_block=256, loop_block=256, split_min_cols=1024, split_programs=16)
    module, launch, inputs, _ = _load(fn, torch.randn(2, 4096), tmp_path, few)
    seen = _launches(module)
    for shape in ((2, 4096), (20, 4096), (2, 1000), (2, 4096)):
        x = torch.randn(shape)
        torch.testing.assert_close(launch(to_device(x)).cpu(), fn(None, x))
    assert [s for s, _ in seen] == ["partials", "finish", "kernel", "kernel", "partials",
                                    "finish"]
    key = (torch.float32,), inputs[0].device
    assert module.CHOSEN == {((4096, 2), *key): (256, 1, 2, 4),
                             ((4096, 32), *key): (256, 1, 2, 1),
                             ((1024, 2), *key): (256, 1, 2, 1)}


def test_split_kernels_compile_for_sm90(tmp_path):
    """The interpreter accepts a loop bound that is a tensor and reads of tl.num_programs;
    the compiler must too: the three kernels of each partials family, in bf16 and fp32, and
    of an int8 amax (the joined kernel's wait, a loop on an atomic, and its statistics
    computed again under a runtime condition too: ``catch_launch`` gives it the GPU's
    WAIT_POLLS)."""
    jobs = []
    small = Tuning(max_block=16, loop_block=16, split_min_cols=16)
    for name in ("softmax", "layer_norm", "rms_norm", "mean"):
        for dtype in (torch.bfloat16, torch.float32):
            x = torch.randn(3, 70).to(dtype)
            analysis = analyze(_model(name, 70, dtype), x)
            (cluster,) = analysis.clusters
            kernel = generate(analysis, cluster, small)
            args = cluster_inputs(analysis, cluster, capture_values(analysis, x))
            for suffix in ("partials", "finish", "joined"):
                where = tmp_path / f"{name}-{dtype}-{suffix}".replace("torch.", "")
                jobs.append((kernel, where, args, suffix))
    # an int8 amax: its statistics cast back to int8 after each reduction (see NARROW)
    x = NARROW[torch.int8]()[:, :70]
    narrow = Lambda(lambda m, x: (x - torch.amax(x * 1, -1, keepdim=True)).float())
    analysis = analyze(narrow, x)
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster, small)
    args = cluster_inputs(analysis, cluster, capture_values(analysis, x))
    jobs += [(kernel, tmp_path / f"int8-{suffix}", args, suffix)
             for suffix in ("partials", "finish", "joined")]
    # the joined kernel at 4096 columns a step: its late partners' statistics step over
    # FALLBACK_BLOCK (1024) columns in names of their own (the interpreter takes a variable
    # changing its shape in a loop, the compiler does not)
    wide = Tuning(max_block=4096, loop_block=4096, split_min_cols=4096)
    for name in ("softmax", "log_softmax", "layer_norm", "rms_norm", "mean"):
        x = torch.randn(3, 16384)
        analysis = analyze(_model(name, 16384, x.dtype), x)
        (cluster,) = analysis.clusters
        kernel = generate(analysis, cluster, wide)
        args = cluster_inputs(analysis, cluster, capture_values(analysis, x))
        caught = catch_launch(kernel, tmp_path / f"wide-{name}-caught", args, "joined")
        assert caught["kwargs"]["BLOCK_SIZE"] == 4096, caught["kwargs"]
        assert caught["kwargs"]["FALLBACK_BLOCK"] == 1024, caught["kwargs"]
        jobs.append((kernel, tmp_path / f"wide-{name}-joined", args, "joined"))
    compiled = compile_for_gpu(jobs)
    assert len(compiled) == len(jobs) and all(compiled.values()), compiled


FINISH_CONFIGS = [
    ("layer_norm", 4096, 8, 8),  # the H200 panel's 256 x 65536 fp32: 587 us, unsplit 60
    ("layer_norm", 8192, 16, 8),  # ...2219 us
    ("layer_norm", 2048, 8, 32),
    ("softmax", 4096, 8, 8),
    ("rms_norm", 4096, 8, 8),
    ("mean", 4096, 8, 8),
]


@pytest.fixture(scope="module")
def finish_ir(tmp_path_factory) -> dict[tuple, dict]:
    """Each FINISH_CONFIGS finish kernel compiled for sm_90, all in one compiler process (its
    start, importing torch and Triton, costs more than a compile): config -> its TTGIR."""
    jobs = []
    for name, block, warps, splits in FINISH_CONFIGS:
        x = torch.randn(2, 65536)
        analysis = analyze(_model(name, 65536, x.dtype), x)
        (cluster,) = analysis.clusters
        kernel = generate(analysis, cluster)
        args = cluster_inputs(analysis, cluster, capture_values(analysis, x))
        consts = {"BLOCK_SIZE": block, "ROWS_PER_PROGRAM": 1, "SPLITS_BLOCK": splits}
        jobs.append((kernel, tmp_path_factory.mktemp(name), args, "finish", consts, warps))
    found = compiled_ir(jobs)
    assert len(found) == len(jobs)
    return dict(zip(FINISH_CONFIGS, found, strict=True))


@pytest.mark.parametrize("name,block,warps,splits", FINISH_CONFIGS)
def test_finish_kernel_reads_its_row_statistics_as_scalars_for_sm90(name, block, warps,
                                                                     splits, finish_ir):
    """Compiled for sm_90 at a configuration the candidates give 256 x 65536 fp32 rows, the
    finish kernel's last pass broadcasts each merged statistic from a scalar, and converts no
    column block between layouts. Broadcast from [1, 1] blocks in the partials' layout,
    Triton 3.6 converted layer_norm's mean and rstd at [1, BLOCK_SIZE] through shared memory,
    every thread storing all BLOCK_SIZE values (2048 st.shared.v4 a thread at 4096)."""
    found = finish_ir[name, block, warps, splits]
    ir = found["ttgir"]
    assert f"tensor<1x{block}xf32" in ir  # the column block is there...
    assert "scf.for" in ir
    wide = [line for line in ir.splitlines() if f"tensor<1x{block}x" in line]
    broadcasts = [line for line in wide if "tt.broadcast" in line and "tensor<1x1xf32" in line]
    assert not broadcasts, broadcasts  # ...no statistic broadcast to it from [1, 1]...
    converts = [line for line in wide if "ttg.convert_layout" in line]
    assert not converts, converts  # ...and none of its blocks converted


def test_readme_shows_the_split_kernels_the_generator_writes():
    """docs/kernels.md's split-row kernels are the real output of
    `tools/wide_row_kernel.py --split` (rerun it and paste its output when the generator's text
    changes)."""
    block = doc_code_after("docs/kernels.md", "`python tools/wide_row_kernel.py --split` prints")
    assert block == load_tool("wide_row_kernel").split_text()
    assert "def cluster0_partials(" in block and "def cluster0_finish(" in block
