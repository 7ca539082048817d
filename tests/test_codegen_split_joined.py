"""Split rows in one launch (``codegen/split_rows.py``'s joined kernel): each program stores
its chunk's statistics, counts itself in its row's arrivals, waits for the row's other
programs and finishes its chunk. The candidates that take the form, numerics against eager
for every family of partials.

Under Triton's interpreter programs run one at a time, so no program finds its partners
arrived until the row's last: the earlier ones compute the missing chunks' statistics
themselves (the path a GPU takes should a partner not start), the last reads what the others
stored. On a GPU (the same tests, kernels compiled) the programs wait for each other; a test
there also takes the path without waiting (``WAIT_POLLS = 0``). The kernel compiling for sm_90:
``test_codegen_split_rows.py``'s compile test, with the other split kernels."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from codegen_harness import DEVICE, Lambda, compare
from test_codegen_split_rows import FAMILIES, NARROW, SPLIT, _launches, _load, _model, _split_kind

from fusion_core.codegen import Tuning, generate, tuning
from fusion_core.pipeline import analyze


def _joined(module, splits: int = 4, block: int = 256, warps: int = 2) -> None:
    """The loaded kernel launches in one launch at `splits` programs a row."""
    module.HEURISTIC = lambda bucket: (block, 1, warps, splits, 1)


@pytest.mark.parametrize("candidate,bucket,config", [
    ((8192, 8, 8, 1), (65536, 256), (8192, 1, 8, 8, 1)),  # a split row, in one launch
    ((8192, 8, 8), (65536, 256), (8192, 1, 8, 8)),  # the same in two kernels
    ((8192, 8, 8, 1), (8192, 256), (8192, 1, 8, 1)),  # not split: the looped kernel
    # 2048 rows: two kernels do not split (a second launch), one launch up to 4 programs
    ((8192, 8, 2), (65536, 2048), (8192, 1, 8, 1)),
    ((8192, 8, 2, 1), (65536, 2048), (8192, 1, 8, 2, 1)),
    ((8192, 8, 8, 1), (65536, 2048), (8192, 1, 8, 4, 1)),
    ((8192, 8, 8, 1), (262144, 8192), (8192, 1, 8, 1)),  # many rows: not split either
])
def test_one_launch_only_where_a_row_is_split(monkeypatch, candidate, bucket, config):
    _, config_of = tuning.KINDS["split"]
    monkeypatch.setattr(tuning, "SPLIT_PROGRAMS", 256)
    monkeypatch.setattr(tuning, "MAX_LOOP_BLOCK", 8192)
    assert config_of(bucket, candidate) == config


@pytest.mark.parametrize("most,programs,bucket,config", [
    (512, 2, (65536, 256), (8192, 1, 16, 2, 1)),  # too many rows for two kernels: one launch
    (512, 2, (65536, 512), (8192, 1, 16, 2, 1)),
    # 8 programs a row (the float32 RMSNorm's): chunks of 8192, 4096 a step, 16 warps (256
    # elements a warp, as a looped row's step)
    (256, 8, (65536, 256), (4096, 1, 16, 8, 1)),
    # fewer rows than two kernels' split would leave whole, where one launch still has
    # 4 x SPLIT_PROGRAMS programs: one launch; below that, the two kernels' split
    (256, 8, (65536, 128), (4096, 1, 16, 8, 1)),
    (256, 8, (65536, 64), (4096, 1, 16, 4)),
    (256, 8, (131072, 128), (8192, 1, 16, 2)),  # wider than measured: the two kernels' split
    (256, 2, (65536, 512), (8192, 1, 16, 1)),  # more rows than the plan's measured gain
    (512, 2, (65536, 1024), (8192, 1, 16, 1)),  # enough rows to fill the GPU
    (512, 2, (32768, 256), (8192, 1, 16, 1)),  # too narrow
    (512, 2, (65536, 128), (8192, 1, 16, 2)),  # few rows: the two kernels' split, as before
    (0, 2, (65536, 256), (8192, 1, 16, 1)),  # a plan that does not gain from it
])
def test_the_default_splits_a_norm_in_one_launch(monkeypatch, most, programs, bucket, config):
    _split_kind(monkeypatch, SPLIT_JOINED_ROWS=most, SPLIT_JOINED_PROGRAMS=programs,
                LOOP_BLOCK=Tuning().loop_block)
    assert tuning.HEURISTIC(bucket) == config


GROUP_NORM = lambda m, x: F.silu(F.group_norm(x * 2.0, 2, m.w, m.b))  # noqa: E731
MORE = {
    "group_norm": GROUP_NORM,
    "layer_norm of x.float()": lambda m, x: F.layer_norm(x.float() + 1.0, (x.shape[-1],)),
    "x - amax": lambda m, x: x - torch.amax(x * 2.0, -1, keepdim=True),
}


@pytest.mark.parametrize("name,dtype,most,programs", [
    ("rms_norm", torch.float16, 512, 4),
    ("rms_norm", torch.bfloat16, 512, 4),
    ("rms_norm", torch.float32, 256, 8),
    ("layer_norm", torch.float32, 256, 4),
    ("layer_norm", torch.bfloat16, 0, 2),  # 13% slower in one launch (choices.py)
    ("layer_norm of x.float()", torch.bfloat16, 0, 2),  # its row input is 16-bit
    ("mean", torch.bfloat16, 512, 4),  # an RMSNorm by hand, as LLaMA's (the panel's rows)
    ("mean", torch.float32, 256, 8),
    ("group_norm", torch.float32, 0, 2),  # not measured
    ("x - amax", torch.float32, 0, 2),
    ("softmax", torch.float32, 0, 2),
])
def test_which_plans_split_in_one_launch_by_default(name, dtype, most, programs):
    x = torch.randn(2, 4, 8, 70).to(dtype) if name == "group_norm" else torch.randn(2, 70).to(dtype)
    width = 4 if name == "group_norm" else 70
    model = Lambda(MORE[name], w=torch.randn(width).to(dtype), b=torch.randn(width).to(dtype)) \
        if name in MORE else _model(name, 70, dtype)
    analysis = analyze(model, x)
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster, Tuning(max_block=16, loop_block=16))
    assert 'KIND = "split"' in kernel.source
    assert f"SPLIT_JOINED_ROWS = {most}\n" in kernel.source
    assert f"SPLIT_JOINED_PROGRAMS = {programs}\n" in kernel.source


def test_the_candidates_time_both_split_forms():
    """The launcher times some configurations in one launch and some in two kernels."""
    from fusion_core.codegen.choices import CANDIDATES

    forms = {c[3:] for c in CANDIDATES["split"] if c[2] > 1}
    assert forms == {(), (1,)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "rms_norm", "mean"])
def test_joined_rows_match_eager(name, dtype, tmp_path):
    """2 x 4096: four programs a row, one launch of 8 programs, each over 1024 columns."""
    torch.manual_seed(3)
    x = torch.randn(2, 4096).to(dtype)
    module, launch, inputs, want = _load(FAMILIES[name], x, tmp_path)
    _joined(module)
    seen = _launches(module)
    got = launch(*inputs).cpu()
    assert seen == [("joined", (8,))]
    assert list(module.CHOSEN.values()) == [(256, 1, 2, 4, 1)]
    compare(got, want, f"joined {name} {dtype}")


def test_joined_group_norm_and_uneven_chunks(tmp_path):
    """group_norm's rows cross channels; 3 x 2100 columns cut in chunks of 528 (the last
    516), each ending inside a block."""
    torch.manual_seed(6)
    x = torch.randn(2, 4, 16, 128)
    module, launch, inputs, want = _load(GROUP_NORM, x, tmp_path / "gn", width=4)
    _joined(module)
    compare(launch(*inputs).cpu(), want, "joined group_norm")
    module, launch, inputs, want = _load(FAMILIES["layer_norm"], torch.randn(3, 2100),
                                         tmp_path / "uneven")
    _joined(module)
    seen = _launches(module)
    compare(launch(*inputs).cpu(), want, "joined layer_norm 2100")
    assert seen == [("joined", (12,))]


def test_joined_rows_of_minus_inf_and_large_means(tmp_path):
    """A chunk of -inf adds nothing to a softmax, a row of it is NaN as in eager; chunk means
    of `1e4 + N(0, 1)` merge to the unit variance (against float64)."""
    x = torch.randn(3, 4096)
    x[0, 1024:2048] = float("-inf")
    x[2] = float("-inf")
    model = lambda m, x: F.softmax(x * 1.0, dim=-1)  # noqa: E731
    module, launch, inputs, want = _load(model, x, tmp_path / "inf")
    _joined(module)
    compare(launch(*inputs).cpu(), want, "joined softmax of -inf")
    torch.manual_seed(8)
    x = 1e4 + torch.randn(2, 4096)
    model = lambda m, x: F.layer_norm(x * 1.0, (4096,))  # noqa: E731
    module, launch, inputs, _ = _load(model, x, tmp_path / "mean")
    _joined(module)
    got = launch(*inputs).cpu().double()
    want = F.layer_norm(x.double(), (4096,))
    eager_err = (F.layer_norm(x, (4096,)).double() - want).abs().max()
    assert (got - want).abs().max() <= max(4 * eager_err, 1e-3)


def test_a_joined_int8_amax_wraps_as_eager(tmp_path):
    fn = lambda m, x: (x - torch.amax(x * 1, -1, keepdim=True)).float()  # noqa: E731
    module, launch, inputs, want = _load(fn, NARROW[torch.int8](), tmp_path, SPLIT)
    _joined(module)
    torch.testing.assert_close(launch(*inputs).cpu(), want, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "rms_norm", "mean",
                                  "x - amax"])
def test_a_late_partners_chunk_is_computed_over_a_narrower_block(name, tmp_path):
    """The statistics a program computes for a partner not arrived step over FALLBACK_BLOCK
    columns (at most 1024: the registers of a path rarely run, ``split_rows.FALLBACK_BLOCK``),
    not the kernel's 4096. 2 x 6000 in chunks of 3008: one block of the statistics pass, three
    of the fallback's, the last partly masked. No polls (on a GPU too), so every program but
    a row's last computes its partner's chunk, in registers (stored nowhere); both rows
    match eager."""
    torch.manual_seed(9)
    module, launch, inputs, want = _load({**FAMILIES, **MORE}[name], torch.randn(2, 6000),
                                         tmp_path)
    _joined(module, splits=2, block=4096, warps=4)
    module.WAIT_POLLS = 0
    fallback_blocks = []
    jit = getattr(module, f"{module.NAME}_joined")

    class Recording:
        def __getitem__(self, grid):
            def run(*args, **kwargs):
                fallback_blocks.append(kwargs["FALLBACK_BLOCK"])
                return jit[grid](*args, **kwargs)
            return run

    setattr(module, f"{module.NAME}_joined", Recording())
    compare(launch(*inputs).cpu(), want, f"joined {name}, partners' chunks at 1024 a step")
    assert fallback_blocks == [1024]
    source = Path(module.__file__).read_text()
    assert "for col0 in range(0, _range_bound(chunk_cols), FALLBACK_BLOCK):" in source
    # only a chunk's own program writes its slot: a partner merges what its partners stored
    joined = source[source.index(f"def {module.NAME}_joined("):]
    stores = [line.strip() for line in joined.splitlines() if "tl.store(partial_ptr" in line]
    assert stores and all("+ split * " in line for line in stores), stores


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="the wait needs a GPU running programs together")
@pytest.mark.parametrize("polls", [None, 0], ids=["waiting", "computing-the-missing-chunks"])
@pytest.mark.parametrize("name", ["softmax", "layer_norm", "rms_norm"])
def test_joined_rows_on_the_gpu_at_panel_widths(name, polls, tmp_path):
    """256 rows of 65536 columns, 8 programs a row (2048 programs, more than an H100 holds
    at once): each program waits for its row's others, or (no polls) computes their chunks'
    statistics itself; both match eager. The second launch counts on the counters the first
    left (zeroed by each row's last program out). A wait
    that never saw its partners would still be right, after WAIT_POLLS polls (2**20, about a
    second) in each program: the waiting launch must take a small fraction of that."""
    import time

    torch.manual_seed(5)
    module, launch, inputs, want = _load(FAMILIES[name], torch.randn(256, 65536), tmp_path)
    _joined(module, splits=8, block=8192, warps=8)
    if polls is not None:
        module.WAIT_POLLS = polls
    seen = _launches(module)
    compare(launch(*inputs).cpu(), want, f"joined {name} 256x65536")  # compiles first
    torch.cuda.synchronize()
    started = time.perf_counter()
    got = launch(*inputs)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    compare(got.cpu(), want, f"joined {name} 256x65536, again")
    assert seen == [("joined", (2048,))] * 2
    if polls is None:  # ~60 µs on an H100; a wait that timed out: seconds
        assert elapsed < 0.1, f"{elapsed:.3f} s: the programs did not see each other arrive"


def test_the_joined_kernel_leaves_its_counters_zero(tmp_path):
    """On a GPU the launcher keeps the counters (two a row) for the next launch instead of a
    fill kernel each launch (``runtime._arrivals``): the row's last program out sets them back
    to zero. Here one set is handed to two launches in turn, as a GPU launcher would."""
    torch.manual_seed(4)
    module, launch, inputs, want = _load(FAMILIES["rms_norm"], torch.randn(3, 4096), tmp_path)
    _joined(module)
    counters = torch.zeros(2 * 3, dtype=torch.int32, device=inputs[0].device)
    handed = []
    module._arrivals = lambda count, device: handed.append(count) or counters
    for launch_no in (1, 2):
        compare(launch(*inputs).cpu(), want, f"joined rms_norm, launch {launch_no}")
        assert not counters.any().item(), counters
    assert handed == [2 * 3, 2 * 3]


def test_a_tuning_gives_either_joined_field_and_the_plan_fills_the_other():
    """`Tuning(split_joined_rows=...)` keeps the plan's programs a row, and the reverse; a
    count of programs that is no power of two of at least 2 is refused, naming the fix."""
    analysis = analyze(_model("rms_norm", 70, torch.float32), torch.randn(2, 70))
    (cluster,) = analysis.clusters

    def filled(**given):
        tuning = generate(analysis, cluster, Tuning(max_block=16, loop_block=16, **given)).tuning
        return tuning.split_joined_rows, tuning.split_joined_programs

    assert filled(split_joined_rows=1000) == (1000, 8)
    assert filled(split_joined_programs=4) == (256, 4)
    for bad in (0, 1, 3):
        with pytest.raises(ValueError, match="power of two of at least 2"):
            filled(split_joined_programs=bad)
