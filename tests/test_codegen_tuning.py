"""Per-shape launch tuning: the bucket function, the heuristic's table, the candidates, the
choice (timed or not) and a launcher that chooses again in a new bucket but not in a known one;
every candidate configuration still computes the right result under the interpreter."""

import pytest
import torch
from codegen_harness import Lambda, to_device

from fusion_core.codegen import Tuning, generate, load_kernel, tuning, write_kernels
from fusion_core.pipeline import analyze


@pytest.mark.parametrize("n_rows,n_cols,bucket", [
    (1, 1, (1, 1)),
    (4, 16, (16, 4)),
    (3, 16, (16, 4)),  # 3 and 4 rows: one class
    (5, 16, (16, 8)),
    (5, 1000, (1024, 8)),
    (128, 65536, (65536, 128)),  # one program per row on 132 SMs...
    (256, 65536, (65536, 256)),  # ...and two: the split pick differs, so do the buckets
    (1000, 3001, (4096, 1024)),
    (4096, 32768, (32768, 4096)),
    (10**6, 8, (8, 16384)),  # past the cap: one class
])
def test_bucket_is_the_width_power_of_two_and_a_row_class(n_rows, n_cols, bucket):
    assert tuning._bucket(n_rows, n_cols) == bucket


def _kind(monkeypatch, kind, **constants):
    heuristic, config = tuning.KINDS[kind]
    monkeypatch.setattr(tuning, "HEURISTIC", heuristic)
    monkeypatch.setattr(tuning, "CONFIG", config)
    for name, value in constants.items():
        monkeypatch.setattr(tuning, name, value)


@pytest.mark.parametrize("kind,bucket,config", [
    ("flat", (1 << 20, 1), (1024, 1, 4)),
    ("flat", (128, 1), (128, 1, 4)),  # no block wider than the tensor
    ("flat", (16, 1), (128, 1, 4)),  # ...but at least 128 lanes
    ("single", (16, 16384), (16, 16, 2)),  # narrow rows packed up to MAX_ROWS
    ("single", (16, 256), (16, 2, 1)),  # few rows: fewer per program, more programs
    ("single", (16, 16), (16, 1, 1)),
    ("single", (128, 16384), (128, 16, 4)),  # PACK_ELEMENTS // width
    ("single", (1024, 16384), (1024, 1, 2)),  # wider than PACK_WIDTH: one row each
    ("single", (4096, 16384), (4096, 1, 8)),  # ~512 elements per warp
    ("single", (16384, 1024), (16384, 1, 16)),  # ...up to 16 warps: 32 values a thread
    ("looped", (65536, 4096), (8192, 1, 16)),  # MAX_LOOP_BLOCK at any row count
    ("looped", (65536, 4), (8192, 1, 16)),
    ("looped", (16384, 4096), (4096, 1, 16)),  # LOOP_STEPS steps a row; ~256 elements a warp
    ("looped", (2048, 4), (1024, 1, 4)),  # ...but never narrower than LOOP_BLOCK
    ("tiled", (8, 64), (8, 64, 4)),
    ("tiled", (4096, 4096), (32, 32, 4)),
])
def test_heuristic_table(monkeypatch, kind, bucket, config):
    # NUM_WARPS as the generator writes it: an elementwise kernel's warps, a reduction's fewest
    warps = Tuning().num_warps if kind in ("flat", "tiled") else Tuning().row_min_warps
    _kind(monkeypatch, kind, BLOCK=1024, NUM_WARPS=warps, TILE_COLS=32, LOOP_BLOCK=1024,
          PACK_WIDTH=256, PACK_ELEMENTS=2048, MAX_ROWS=16, MAX_BLOCK=8192,
          LOOP_STEPS=4, MAX_LOOP_BLOCK=8192)
    assert tuning.HEURISTIC(bucket) == config


@pytest.mark.parametrize("bucket,config", [
    ((4096, 4096), (4096, 4, 16)),  # softmax(x.T) 4096x4096: 4 rows, the H100's fastest
    ((64, 32768), (64, 32, 4)),  # NCHW channels: MAX_ROWS rows, ~512 elements a warp
    ((1024, 4096), (1024, 16, 16)),
])
def test_strided_rows_pack_as_the_strided_file_says(monkeypatch, bucket, config):
    """A file whose input is strided along its rows' columns packs rows up to the strided
    constants (file_head: PACK_WIDTH the widest block, Tuning's strided_pack_elements)."""
    t = Tuning()
    _kind(monkeypatch, "single", NUM_WARPS=t.row_min_warps, PACK_WIDTH=16384,
          PACK_ELEMENTS=t.strided_pack_elements, MAX_ROWS=t.strided_max_rows, MAX_BLOCK=16384)
    assert tuning.HEURISTIC(bucket) == config


def test_looped_step_never_passes_max_block(monkeypatch):
    """A file generated with a small MAX_BLOCK (tests force the loop that way) keeps its
    steps that narrow: the rows still take several steps."""
    _kind(monkeypatch, "looped", LOOP_BLOCK=16, MAX_BLOCK=64, NUM_WARPS=4,
          LOOP_STEPS=4, MAX_LOOP_BLOCK=8192)
    assert tuning.HEURISTIC((256, 4)) == (64, 1, 2)


@pytest.mark.parametrize("kind,candidate,bucket,config", [
    ("single", (1024, 2), (8192, 16), (8192, 1, 8)),  # not 2 warps for 8192 columns
    ("single", (1024, 2), (1024, 16), (1024, 1, 2)),
    ("looped", (8192, 4), (65536, 16), (8192, 1, 8)),
])
def test_candidates_keep_at_most_32_elements_a_thread(monkeypatch, kind, candidate, bucket,
                                                      config):
    _kind(monkeypatch, kind, MAX_ROWS=16, PACK_WIDTH=256)
    assert tuning.CONFIG(bucket, candidate) == config


@pytest.mark.parametrize("kind,candidates,bucket", [
    ("flat", ((1024, 4), (2048, 8)), (1 << 20, 1)),
    ("single", ((1024, 2), (2048, 4), (4096, 8)), (16, 16384)),
    ("single", ((1024, 2), (2048, 4), (4096, 8)), (4096, 4)),
    ("looped", ((1024, 4), (4096, 16)), (65536, 64)),
    ("tiled", ((2048, 32, 4), (4096, 64, 8)), (64, 256)),
])
def test_configs_start_with_the_heuristic_and_repeat_nothing(monkeypatch, kind, candidates,
                                                            bucket):
    _kind(monkeypatch, kind, CANDIDATES=candidates, NUM_WARPS=4, PACK_ELEMENTS=2048,
          MAX_ROWS=16, PACK_WIDTH=256, LOOP_BLOCK=1024, BLOCK=1024, TILE_COLS=32)
    configs = tuning._configs(bucket)
    assert configs[0] == tuning.HEURISTIC(bucket)
    assert len(set(configs)) == len(configs) >= 2
    for block, rows, warps in configs:
        assert all(v > 0 and v & (v - 1) == 0 for v in (block, rows, warps))
        assert block * rows >= 32 * warps or warps == 1  # no warp without an element


def test_configs_name_a_candidate_that_is_not_a_power_of_two(monkeypatch):
    _kind(monkeypatch, "flat", CANDIDATES=((1024, 4), (1000, 4)))
    with pytest.raises(ValueError, match=r"CANDIDATES\[1\]\[0\] = 1000"):
        tuning._configs((1024, 1))


def test_timing_is_off_on_cpu_under_the_interpreter_and_when_the_user_says(monkeypatch):
    cuda = torch.device("cuda")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setenv("FUSION_ADVISOR_AUTOTUNE", "0")
    assert not tuning._timing_on(cuda)
    monkeypatch.setenv("FUSION_ADVISOR_AUTOTUNE", "1")
    assert not tuning._timing_on(torch.device("cpu"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not tuning._timing_on(cuda)


def test_choose_keeps_the_fastest_when_timing_and_the_heuristic_otherwise(monkeypatch):
    monkeypatch.setattr(tuning, "CHOSEN", {})
    configs = ((64, 1, 4), (128, 1, 4), (256, 1, 8))
    speed = {(64, 1, 4): 3.0, (128, 1, 4): 1.0, (256, 1, 8): 2.0}
    timed = []
    monkeypatch.setattr(tuning, "_time", lambda run, c: timed.append(c) or speed[c])
    monkeypatch.setattr(tuning, "_timing_on", lambda device: True)
    a, b = _key(1024, 128), _key(1024, 256)
    assert tuning._choose(a, configs, None, torch.device("cpu")) == (128, 1, 4)
    assert timed == list(configs) and tuning.CHOSEN == {a: (128, 1, 4)}
    monkeypatch.setattr(tuning, "_timing_on", lambda device: False)
    assert tuning._choose(b, configs, None, torch.device("cpu")) == (64, 1, 4)
    assert len(timed) == 3 and tuning.CHOSEN[b] == (64, 1, 4)


def _key(width: int, rows: int) -> tuple:
    """A tuning key of this bucket (the disk cache is off in tests: no file is read)."""
    return ((width, rows), (torch.float32,), torch.device("cpu"))


def test_a_bucket_of_at_most_tune_min_elements_takes_the_heuristic_untimed(monkeypatch):
    """64K elements or fewer: one wave of programs whatever the configuration, so nothing is
    compiled and timed; one element more and the candidates are timed."""
    monkeypatch.setattr(tuning, "CHOSEN", {})
    configs = ((64, 1, 4), (128, 1, 4))
    timed = []
    monkeypatch.setattr(tuning, "_time", lambda run, c: timed.append(c) or {
        (64, 1, 4): 2.0, (128, 1, 4): 1.0}[c])
    monkeypatch.setattr(tuning, "_timing_on", lambda device: True)
    assert tuning.TUNE_MIN_ELEMENTS == 65536
    for small in (_key(1, 65536), _key(4096, 16), _key(16, 4096)):
        assert tuning._choose(small, configs, None, torch.device("cpu")) == (64, 1, 4)
    assert timed == [] and set(tuning.CHOSEN.values()) == {(64, 1, 4)}
    assert tuning._choose(_key(4096, 32), configs, None, torch.device("cpu")) == (128, 1, 4)
    assert timed == list(configs)


def _softmax(m, x):
    return torch.softmax(x * 2.0, dim=-1)


def _module(fn, example, tmp_path, **gen_kwargs):
    analysis = analyze(Lambda(fn, 1), example)
    (cluster,) = analysis.clusters
    kernel = generate(analysis, cluster, **gen_kwargs)
    module = load_kernel(write_kernels([kernel], tmp_path)[0])
    return module, getattr(module, kernel.name)


def test_a_new_bucket_chooses_again_and_a_known_one_does_not(tmp_path):
    module, launch = _module(_softmax, torch.randn(4, 16), tmp_path)
    module._timing_on = lambda device: False  # the heuristic's picks, also where CUDA is
    module._direct = lambda *a: None  # every call through `_launch`, also where CUDA is
    chooses, launches = [], []
    real_choose, real_launch = module._choose, module._launch
    module._choose = lambda key, *a: chooses.append(key) or real_choose(key, *a)
    module._launch = lambda config, *a: launches.append(config) or real_launch(config, *a)
    for shape in ((4, 16), (3, 16), (4, 16), (4, 40), (64, 16), (3, 16)):
        x = torch.randn(shape)
        torch.testing.assert_close(launch(to_device(x)).cpu(), _softmax(None, x))
    buckets = [key[0] for key in chooses]
    assert buckets == [(16, 4), (64, 4), (16, 64)]
    assert len(module.LAUNCH_CACHE) == 4 and len(module.CHOSEN) == 3
    # Without timing, each bucket launches with the heuristic's pick for it.
    assert launches[3] == module.HEURISTIC((64, 4)) == (64, 1, 2)
    assert launches[4] == module.HEURISTIC((16, 64)) == (16, 1, 1)


def test_a_timed_choice_is_what_the_launcher_then_uses(tmp_path):
    """With the timer faked (no CUDA here): the bucket's slowest-looking configurations lose,
    the one timed fastest launches, and the next bucket is timed on its own configurations."""
    module, launch = _module(_softmax, torch.randn(4, 16), tmp_path)
    timed, launches = [], []
    real_launch = module._launch
    module._timing_on = lambda device: True
    module.TUNE_MIN_ELEMENTS = 0  # these buckets are small enough to go untimed
    module._direct = lambda *a: None  # on CUDA, warm calls would skip `_launch`
    module._time = lambda run, c: timed.append(c) or -c[1] * 100 - c[2]  # most rows, warps
    module._launch = lambda config, *a: launches.append(config) or real_launch(config, *a)
    for shape in ((64, 16), (64, 16), (64, 64)):
        x = torch.randn(shape)
        torch.testing.assert_close(launch(to_device(x)).cpu(), _softmax(None, x))
    first, second = module._configs((16, 64)), module._configs((64, 64))
    assert timed == [*first, *second] and first != second
    assert launches == [max(first, key=lambda c: (c[1], c[2]))] * 2 + [
        max(second, key=lambda c: (c[1], c[2]))]


def _outer(m, x):
    """`x` (N, 1, C) beside its (1, N, C) transpose: each broadcast along a middle dim, so
    the kernel tiles (a transposed input alone is iterated in its memory order, flat)."""
    return torch.relu(x * 2.0 * x.transpose(0, 1))


def _softmax_t(m, x):
    """A softmax over x.T's rows: x's columns, strided in memory (rows packed per program)."""
    return torch.softmax(x.transpose(0, 1) * 2.0, dim=-1)


@pytest.mark.parametrize("fn,example,shapes,gen_kwargs", [
    (lambda m, x: torch.sigmoid(x * 2.0) + 1.0, (5, 7), [(5, 7), (3, 300)], {}),
    (_outer, (2, 1, 5), [(2, 1, 5), (3, 1, 40)], {}),
    (_softmax, (4, 16), [(4, 16), (9, 5), (2, 100)], {}),
    (_softmax_t, (16, 12), [(16, 12), (40, 9)], {}),
    (lambda m, x: (x * 2.0).sum(-1), (3, 40), [(3, 40), (2, 70)],
     {"tuning": Tuning(max_block=16, loop_block=16)}),  # rows loop over column blocks
    # ...and may be split over several programs each (chunks of at least 16 columns)
    (lambda m, x: torch.log_softmax(x, dim=-1) * 2.0, (3, 40), [(3, 40), (2, 70)],
     {"tuning": Tuning(max_block=16, loop_block=16, split_min_cols=16)}),
], ids=["flat", "tiled", "single", "single-strided", "looped", "split"])
def test_every_candidate_computes_the_same_result(fn, example, shapes, gen_kwargs, tmp_path):
    """What the timing may pick on CUDA: each configuration of each bucket, run under the
    interpreter (or on the device) against eager."""
    torch.manual_seed(0)
    module, launch = _module(fn, torch.randn(example), tmp_path, **gen_kwargs)
    kinds = {"tiled": fn is _outer,
             "split": gen_kwargs and gen_kwargs["tuning"].split_min_cols == 16,
             "looped": gen_kwargs, "single": fn in (_softmax, _softmax_t), "flat": True}
    assert module.KIND == next(k for k, v in kinds.items() if v)
    # strided rows also time the wide packs (choices.CANDIDATES["single-strided"])
    assert ((32768, 32) in module.CANDIDATES) == (fn is _softmax_t)
    for shape in shapes:
        x = torch.randn(shape)
        # the strided case's cluster starts after the transpose: it takes x.T's view
        arg = to_device(x).transpose(0, 1) if fn is _softmax_t else to_device(x)
        want = fn(None, x)
        torch.testing.assert_close(launch(arg).cpu(), want)  # plans this layout
        key = (arg.shape, arg.stride(), arg.dtype, arg.device)
        plan, seen = module.LAUNCH_CACHE[key], (arg,)
        if len(plan) == 2:  # (seats, plan): the kernel reads `x` through views too
            (_, plan), seen = plan, module._views(arg)
        copies, _, out_shapes, out_strides, args, _, configs = plan
        assert not copies and len(configs) >= 2
        if module.KIND == "split":  # the rows are split in some, not in others
            assert {c[3] for c in configs} > {1}, configs
        for config in configs:
            out = torch.empty_strided(out_shapes[0], out_strides[0], dtype=want.dtype,
                                      device=arg.device)  # eager's layout, as planned
            module._launch(config, args, *seen, out)
            torch.testing.assert_close(out.cpu(), want, msg=f"{shape} {config}")


@pytest.mark.parametrize("kind", sorted(tuning.KINDS))
def test_helpers_source_holds_only_its_kinds_heuristic(kind):
    text = tuning.source(kind)
    called = {fn.__name__ for fn in tuning.KIND_HELPERS.get(kind, ())}  # a split row's loop
    for other, (heuristic, config) in tuning.KINDS.items():
        for fn in (heuristic, config):
            assert (f"def {fn.__name__}(" in text) == (other == kind or fn.__name__ in called)
    assert text.rstrip().endswith(f"HEURISTIC, CONFIG = _{kind}_heuristic, _{kind}_config")


def test_one_uncapturable_candidate_makes_every_candidate_timed_as_launched(monkeypatch):
    """Replay times and launched times are not compared with each other."""
    calls = []

    def fake_time(run, config, replay=True):
        calls.append((config, replay))
        if replay:
            return None if config == "b" else 1.0
        return {"a": 3.0, "b": 1.0, "c": 2.0}[config]

    monkeypatch.setattr(tuning, "_time", fake_time)
    monkeypatch.setattr(tuning, "_timing_on", lambda device: True)
    monkeypatch.setattr(tuning, "_cache_identity", lambda device: None)
    monkeypatch.setattr(tuning, "_cache_path", lambda identity: None)
    monkeypatch.setattr(tuning, "CHOSEN", {})
    key = _key(4096, 1024)
    assert tuning._choose(key, ("a", "b", "c"), None, torch.device("cpu")) == "b"
    assert [replay for _, replay in calls] == [True] * 3 + [False] * 3
    assert tuning.CHOSEN == {key: "b"}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_candidate_is_timed_without_the_host_time_between_its_launches():
    import time

    x = torch.zeros(1024, device="cuda")

    def run(config):  # two launches with 2 ms of host work between them
        x.add_(1.0)
        time.sleep(0.002)
        x.add_(1.0)

    assert tuning._time(run, None) < 0.5  # milliseconds: the two adds, not the sleep


@pytest.mark.parametrize("dtype,elements", [(torch.float32, 16384), (torch.float64, 8192)])
def test_strided_rows_never_pack_more_than_the_file_keeps_in_one_block(dtype, elements):
    """The strided pack (Tuning.strided_pack_elements) is capped by the widest block the file
    keeps whole: fp64 rows hold 8192 values a block (one_block.py's register budget)."""
    analysis = analyze(Lambda(_softmax_t), torch.empty(16, 12, dtype=dtype))
    source = generate(analysis, analysis.clusters[0]).source
    assert "many rows per program" in source  # the strided file's constants
    assert f"PACK_ELEMENTS = {elements} " in source
    widest = int(source.split("MAX_BLOCK = ")[1].split()[0])
    assert elements <= widest
