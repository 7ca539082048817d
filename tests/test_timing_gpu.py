"""Device-time measurement and the timing gate on a real GPU (skipped without CUDA).

Kernels are timed as CUDA-graph replays (``fusion_core/validate/devicetime.py``); the
plugin runs below measure with ``fusion_core.measure`` itself, so what they gate is what a
GPU job gates.
"""

from __future__ import annotations

import re
from statistics import median

import pytest
import torch
import yaml
from fusion_plugin_helpers import baselines, marked_test, run

import fusion_core
from fusion_core.validate import bench, devicetime
from fusion_core.validate.types import LAUNCH_BOUND

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.timing,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _l2() -> int:
    return torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size


def test_device_time_of_a_tiny_kernel_is_above_the_timer_resolution():
    x = torch.randn(4, 8, device="cuda")
    t = devicetime.device_time(lambda a: a * 2.0, devicetime.rotating([x], _l2()))
    assert len(t.samples_us) == devicetime.SAMPLES
    assert t.copies == devicetime.MAX_COPIES  # 128 bytes per call: the most copies
    assert min(t.samples_us) > t.resolution_us > 0, t
    # Host-timed, a launch alone takes ~10 µs; replayed, a 128-byte kernel takes a few.
    assert median(t.samples_us) < 10.0, t
    assert bench.regime(median(t.samples_us), 256, _l2(), t.resolution_us) != LAUNCH_BOUND


def test_rotated_copies_together_exceed_the_l2_in_distinct_memory():
    # Sized from the L2 so that about 16 copies (under MAX_COPIES) reach ROTATE_FACTOR x L2.
    x = torch.randn(max(1 << 20, devicetime.ROTATE_FACTOR * _l2() // (16 * 4)), device="cuda")
    w = torch.randn(8)  # not a CUDA tensor: shared, never copied
    sets = devicetime.rotating([x, w, 3], _l2())
    assert len(sets) * x.numel() * 4 >= devicetime.ROTATE_FACTOR * _l2()
    assert len({s[0].data_ptr() for s in sets}) == len(sets)
    assert all(s[1] is w and s[2] == 3 for s in sets)
    assert all(torch.equal(s[0], x) for s in sets)


def test_an_uncapturable_callable_raises_capture_error_and_cuda_stays_usable():
    x = torch.randn(64, device="cuda")
    with pytest.raises(devicetime.CaptureError):
        devicetime.device_time(lambda a: float(a.sum().item()), [[x]])
    t = devicetime.device_time(lambda a: a + 1.0, [[x]])  # the next capture still works
    assert min(t.samples_us) > 0


def test_interleaved_device_times_keep_the_ratio_of_two_callables():
    # 64 MiB per call: DRAM-bound, so two passes over the data take about twice one pass.
    x = torch.randn(1 << 24, device="cuda")
    sets = devicetime.rotating([x], _l2())
    one, two = devicetime.device_times(
        [(lambda a: a * 2.0, sets), (lambda a: (a * 2.0) * 3.0, sets)]
    )
    assert len(one.samples_us) == len(two.samples_us) == devicetime.SAMPLES
    assert one.copies == two.copies == len(sets)
    ratios = [b / a for a, b in zip(one.samples_us, two.samples_us, strict=True)]
    assert median(ratios) == pytest.approx(2.0, rel=0.25), (one, two)


class Tiny(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x * 2.0) + 1.0


def test_measure_reports_device_time_with_the_host_figure_beside_it():
    # 4 MiB: a few µs of device time, over twice the per-kernel floor that judging needs
    # (64 KiB sat at that line and was launch-bound on one H200, not on another).
    analysis = fusion_core.analyze(Tiny(), (1024, 1024))
    m = fusion_core.measure(analysis)
    assert m["clock"] == "device"
    (c,) = m["clusters"]
    assert len(c["kernel_us"]) == devicetime.SAMPLES and min(c["kernel_us"]) > 0
    # Taken interleaved, sample by sample: the plugin judges their per-sample ratio.
    assert len(c["eager_us"]) == len(c["kernel_us"]) and min(c["eager_us"]) > 0
    assert len(c["kernel_host_us"]) == bench.SAMPLES
    assert c["regime"] != LAUNCH_BOUND
    # At 4 MiB the Python launcher still costs more than the kernel: host time is larger.
    assert median(c["kernel_us"]) < median(c["kernel_host_us"]), c
    assert m["model"]["fused_us"] and m["model"]["fused_host_us"]


SLOWING_CONFTEST = """\
import pathlib

import fusion_core

def pytest_fusion_measure(analysis, config):
    result = fusion_core.measure(analysis)
    slow = pathlib.Path(config.rootpath, "slow.txt")
    if result and slow.exists():  # the first kernel reports `factor` times its real time
        factor = float(slow.read_text())
        first = result["clusters"][0]
        first["kernel_us"] = [t * factor for t in first["kernel_us"]]
    return result
"""

NOTHING_CONFTEST = """\
def pytest_fusion_measure(analysis, config):
    return {}  # measure nothing, even on the GPU
"""


# The plugin times the model at 32 MiB a tensor: a kernel of a few µs on any GPU, judged. At
# 2 MiB (65536×8) an H100's device time fell under the timer's resolution (launch-bound,
# never judged) where an H200's did not.
TIMED = (1 << 20, 8)


@pytest.mark.usefixtures("torch_warm")
def test_a_slowed_kernel_fails_naming_the_cluster_and_both_figures(proj):
    proj.makeconftest(SLOWING_CONFTEST)
    proj.makepyfile(test_net=marked_test(timing_inputs=[TIMED], timing_tolerance=0.25))
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    ((_, path),) = baselines(proj.path).items()
    (measured,) = yaml.safe_load(path.read_text())["measured"].values()
    assert measured["clock"] == "device"
    assert measured["inputs"] == [f"{TIMED[0]}×{TIMED[1]} float32"]
    assert measured["clusters"][0]["kernel_host_us"]
    run(proj).assert_outcomes(passed=1)  # the same kernel passes
    (proj.path / "slow.txt").write_text("2.0")
    r = run(proj)
    r.assert_outcomes(failed=1)
    # Only the kernel's samples are doubled, its eager ops' are not: judged relative to them.
    r.stdout.fnmatch_lines(
        [
            "*`mul → relu → add` at model.py:10-12 is slower on NVIDIA* sm_* relative to its "
            "eager ops: speedup *× → *× (* → * of eager's time, +*%; kernel median * → * µs, "
            "eager * → * µs; tolerance 25%, p=*)"
        ]
    )
    said = next(x for x in r.outlines if "is slower on" in x)
    before, after = map(float, re.search(r"kernel median ([\d.]+) → ([\d.]+) µs", said).groups())
    assert after / before == pytest.approx(2.0, rel=0.25), said
    fast, slow = map(float, re.search(r"speedup ([\d.]+)× → ([\d.]+)×", said).groups())
    assert fast / slow == pytest.approx(2.0, rel=0.25), said
    r = run(proj, "-o", "fusion_timing_reference=absolute")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(
        [
            "*`mul → relu → add` at model.py:10-12 is slower on NVIDIA* sm_*: "
            "median * µs → * µs (+*%, tolerance 25%, p=*)"
        ]
    )


@pytest.mark.usefixtures("torch_warm")
def test_required_timings_fail_a_gpu_run_whose_baselines_lack_this_gpu(proj):
    # Timed at TIMED: the analysis shape's kernels are launch-bound, never judged, and the
    # last run below must judge one.
    proj.makepyfile(test_net=marked_test(timing_inputs=[TIMED], timing_tolerance=0.5))
    proj.makeconftest(NOTHING_CONFTEST)
    run(proj, "--fusion-update-baselines").assert_outcomes(passed=1)
    (proj.path / "conftest.py").unlink()  # from now on the plugin measures on the GPU
    name = torch.cuda.get_device_name()
    r = run(proj, "-o", "fusion_require_timings=true")
    r.assert_outcomes(passed=1)
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    r.stdout.fnmatch_lines(
        [
            f"ERROR: no timing judged on {name}: 1 test has no baseline for "
            "this GPU (record with `--fusion-update-baselines=new`)"
        ]
    )
    r = run(proj, "--fusion-update-baselines=new")
    r.stdout.fnmatch_lines(["measured fusion_baselines/*.yaml (test_net.py::test_net)"])
    r = run(proj, "--fusion-require-timings", "--fusion-report")
    assert r.ret == pytest.ExitCode.OK, r.stdout.str()[-4000:]
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*timings checked on NVIDIA*"])
